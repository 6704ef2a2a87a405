#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""A multi-node rendezvous, Python standard library only: proves the variables launch.yml sets.

Each container of a job launched with ``job_multinode: true`` runs this with MASTER_ADDR,
MASTER_PORT, NODE_RANK and NNODES in its environment, as torchrun's nodes would. Rank 0 listens
on MASTER_ADDR:MASTER_PORT; every other rank connects (retrying until the deadline) and sends its
rank; when all NNODES ranks are in, rank 0 answers each with the full world. Every rank then prints

    rank 2 of 4: world [0, 1, 2, 3]

and exits 0. On a timeout or an inconsistent world it prints ``rendezvous: <reason>`` on stderr
and exits 1; a missing or invalid variable exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

PROTOCOL = "trainops-rendezvous-1"


class RendezvousError(Exception):
    """The rendezvous failed: the message says why."""


def env_int(name: str, minimum: int) -> int:
    """An integer environment variable, at least ``minimum``."""
    raw = os.environ.get(name)
    if raw is None:
        raise ValueError(f"{name} is not set: launch with job_multinode: true (playbooks/launch.yml)")
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ValueError(f"{name}={value} is below {minimum}")
    return value


def say(text: str) -> None:
    """A line on stdout, at once (the log is the proof that the job runs)."""
    print(text, flush=True)


def send(conn: socket.socket, message: dict[str, object]) -> None:
    """Send one JSON line."""
    conn.sendall(json.dumps(message).encode("utf-8") + b"\n")


def receive(conn: socket.socket, deadline: float) -> dict[str, object]:
    """Read one JSON line before the deadline."""
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise RendezvousError("timed out waiting for a message")
        conn.settimeout(left)
        try:
            chunk = conn.recv(4096)
        except socket.timeout:
            raise RendezvousError("timed out waiting for a message") from None
        if not chunk:
            raise RendezvousError("the other side closed the connection without a message")
        data += chunk
        if len(data) > 65536:
            raise RendezvousError("message too long")
    try:
        message = json.loads(data.decode("utf-8"))
    except ValueError:
        raise RendezvousError(f"not a rendezvous message: {data[:200]!r}") from None
    if not isinstance(message, dict) or message.get("protocol") != PROTOCOL:
        raise RendezvousError(f"not a rendezvous message: {data[:200]!r}")
    return message


def serve(bind: str, port: int, nnodes: int, deadline: float) -> list[int]:
    """Rank 0: collect every other rank, then answer each with the world."""
    peers: dict[int, socket.socket] = {}
    with socket.create_server((bind, port), reuse_port=False) as server:
        try:
            while len(peers) < nnodes - 1:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(1, nnodes)) - set(peers))
                    raise RendezvousError(f"timed out on {bind}:{port}: ranks {missing} never connected")
                server.settimeout(left)
                try:
                    conn, address = server.accept()
                except socket.timeout:
                    continue
                try:
                    hello = receive(conn, min(deadline, time.monotonic() + 10))
                except RendezvousError as err:
                    say(f"rank 0: ignored a connection from {address[0]}: {err}")
                    conn.close()
                    continue
                rank, their_nnodes = hello.get("rank"), hello.get("nnodes")
                problem = ""
                if their_nnodes != nnodes:
                    problem = f"rank {rank} has NNODES={their_nnodes}, rank 0 has NNODES={nnodes}"
                elif not isinstance(rank, int) or not 1 <= rank < nnodes:
                    problem = f"rank {rank!r} is not in 1..{nnodes - 1}"
                elif rank in peers:
                    problem = f"rank {rank} joined twice: NODE_RANK is not unique"
                if problem:
                    send(conn, {"protocol": PROTOCOL, "error": problem})
                    conn.close()
                    raise RendezvousError(problem)
                peers[int(rank)] = conn
                say(f"rank 0: rank {rank} joined from {address[0]} ({len(peers) + 1} of {nnodes})")
            world = sorted([0, *peers])
            for conn in peers.values():
                send(conn, {"protocol": PROTOCOL, "world": world})
            return world
        except RendezvousError as err:
            for conn in peers.values():
                try:
                    send(conn, {"protocol": PROTOCOL, "error": str(err)})
                except OSError:
                    pass
            raise
        finally:
            for conn in peers.values():
                conn.close()


def join(addr: str, port: int, rank: int, nnodes: int, deadline: float) -> list[int]:
    """Any other rank: connect to rank 0 (retrying until the deadline), send the rank, read the world."""
    attempts = 0
    last_error = "no attempt"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RendezvousError(f"could not reach rank 0 at {addr}:{port} after {attempts} attempts: {last_error}")
        attempts += 1
        try:
            conn = socket.create_connection((addr, port), timeout=min(5.0, left))
        except OSError as err:
            last_error = str(err)
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
            continue
        with conn:
            send(conn, {"protocol": PROTOCOL, "rank": rank, "nnodes": nnodes})
            answer = receive(conn, deadline)
        if "error" in answer:
            raise RendezvousError(f"rank 0 refused: {answer['error']}")
        world = answer.get("world")
        if not isinstance(world, list) or world != list(range(nnodes)):
            raise RendezvousError(f"rank 0 sent an inconsistent world: {world!r}")
        return world


def main(argv: list[str] | None = None) -> int:
    """Run the rendezvous for this rank."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds until the rendezvous gives up (120)")
    parser.add_argument("--bind", default=None, help="address rank 0 listens on (default: MASTER_ADDR)")
    args = parser.parse_args(argv)
    try:
        addr = os.environ.get("MASTER_ADDR", "")
        if not addr:
            raise ValueError("MASTER_ADDR is not set: launch with job_multinode: true (playbooks/launch.yml)")
        port = env_int("MASTER_PORT", 1)
        nnodes = env_int("NNODES", 1)
        rank = env_int("NODE_RANK", 0)
        if rank >= nnodes:
            raise ValueError(f"NODE_RANK={rank} is not below NNODES={nnodes}")
    except ValueError as err:
        print(f"rendezvous: {err}", file=sys.stderr, flush=True)
        return 2
    deadline = time.monotonic() + args.timeout
    say(f"rank {rank} of {nnodes}: rendezvous at {addr}:{port} (WORLD_SIZE={os.environ.get('WORLD_SIZE', '?')}, "
        f"NPROC_PER_NODE={os.environ.get('NPROC_PER_NODE', '?')})")
    try:
        if rank == 0:
            world = serve(args.bind or addr, port, nnodes, deadline)
        else:
            world = join(addr, port, rank, nnodes, deadline)
    except (RendezvousError, OSError) as err:
        print(f"rendezvous: rank {rank} of {nnodes}: {err}", file=sys.stderr, flush=True)
        return 1
    say(f"rank {rank} of {nnodes}: world {world}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
