# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The bodies of ``notify_format`` (``_notify_format.py``): their limits, their text, and each POSTed to a stand-in of
its service on 127.0.0.1 (tests/integration/notify_receivers.py, written from the services' docs) that takes it,
while it refuses today's JSON event. Nothing talks to anything but 127.0.0.1."""

from __future__ import annotations

import json
import re
import typing as t
import urllib.error
import urllib.request

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.trainops.pct_launch.plugins.module_utils import _job_notify
from ansible_collections.trainops.pct_launch.plugins.module_utils._notify_format import FORMATS, encode, request, summary
from tests.integration.notify_receivers import decoded, receiver

ZWSP = "\u200b"
STARTED = {"event": "started", "session_name": "train", "host": "ct200", "attempt": 1, "attempts": 1, "time": "2026-12-01T09:00:00Z",
           "started_at": "2026-12-01T09:00:00Z", "exit_status": None, "end_state": None, "cause": None, "reason": None,
           "log_path": "/workspace/train.log", "log_tail": []}
TAIL = ([f"step {number} loss=0.{number:03d} ünïcödé ✓ 日本語 🚀" for number in range(190)]
        + ["```", "`````` five and more", "@everyone <b>&amp; </b> *bold* _it_ [link](http://x)", "tab\there bell\a esc\x1b[31mred\x1b[0m nul\x00",
           "cr\rprogress 10%\rprogress 100%", "del\x7f c1\x85 surrogate \udcff", "x" * 3000, "- a list? 1. no", "last line ```"])
FAILED = dict(STARTED, event="failed", attempt=3, attempts=3, exit_status=1, end_state="failed", cause="python_exception",
              reason="Traceback (most recent call last):\n  File \"train.py\" ...\nValueError: <bad> & ``` " + "why " * 2000, log_tail=TAIL)
LOST = dict(STARTED, event="lost", attempt=2, attempts=2, exit_status=None, end_state="lost", cause="lost",
            reason="the container stopped while the job ran (pct stop, a crash or a power loss)", log_tail="one\ntwo\n")
BARE: dict[str, t.Any] = {"event": None, "log_tail": None}
EVENTS = {"started": STARTED, "failed": FAILED, "lost": LOST, "bare": BARE}
LIMITS = {"discord": 2000, "mattermost": 16383, "gotify": 8000}
MARKDOWN = ("slack", "discord", "mattermost", "gotify")
FIELD = {"discord": "content", "mattermost": "text", "gotify": "message"}  # the text of the message


def _units(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def shown(fmt: str, body: bytes) -> str:
    """The text a person sees of ``body`` (zero-width spaces removed, Slack's escapes undone)."""
    if fmt == "ntfy":
        return body.decode("utf-8")
    message = json.loads(body)
    if fmt == "slack":
        text = "\n".join(block["text"]["text"] for block in message["blocks"])
        text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    elif fmt == "teams":
        text = "\n".join(block["text"] for block in message["attachments"][0]["content"]["body"])
    else:
        text = message[FIELD[fmt]]
    return text.replace(ZWSP, "")


def check_limits(fmt: str, body: bytes, headers: dict[str, str]) -> None:
    """What each service documents of the request: its content type, its fields, their lengths."""
    if fmt == "ntfy":
        assert headers["Content-Type"] == "text/plain; charset=utf-8"
        assert len(body) <= 4096
        for value in headers.values():
            value.encode("latin-1")
        return
    assert headers == {"Content-Type": "application/json"}
    message = json.loads(body.decode("utf-8"))
    if fmt == "slack":
        assert message["text"].strip() and 1 <= len(message["blocks"]) <= 50
        assert all(block["type"] == "section" and 1 <= _units(block["text"]["text"]) <= 3000 for block in message["blocks"])
    elif fmt == "teams":
        assert len(body) <= 28000 and message["type"] == "message"
        (attachment,) = message["attachments"]
        assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
        assert attachment["content"]["type"] == "AdaptiveCard" and attachment["content"]["version"] == "1.2"
    elif fmt in LIMITS:
        assert 1 <= _units(shown(fmt, body)) <= _units(message[FIELD[fmt]]) <= LIMITS[fmt]


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """POST ``body`` with urllib (no proxy): the status and the answer."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, data=body, headers=headers, method="POST"), timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


def test_formats() -> None:
    assert FORMATS == ("json", "slack", "discord", "mattermost", "teams", "gotify", "ntfy")
    with pytest.raises(ValueError, match="Invalid notify_format 'xml': use one of json, slack"):
        request("xml", STARTED)


@pytest.mark.parametrize("event", [STARTED, FAILED, LOST, BARE, {"time": float("nan"), "odd": {1, 2}, 3: b"\xff", "tail": ["\udcff"]}],
                         ids=["started", "failed", "lost", "bare", "not_json"])
def test_json_is_the_event_itself_as_notify_command_reads_it(event: dict[str, t.Any]) -> None:
    body, headers = request("json", event)
    assert (body, headers) == (encode(event), {"Content-Type": "application/json"})
    parsed = json.loads(body.decode("utf-8"))  # valid UTF-8 JSON whatever the values
    assert set(parsed) == {str(key) for key in event}
    if event is not BARE and all(isinstance(value, (str, int, list, type(None))) for value in event.values()):
        assert parsed == event


def test_json_values_json_cannot_hold_become_their_str() -> None:
    assert encode({"odd": {1}, "tail": ["\udcff", "ok \u00e9"]}) == b'{"odd": "{1}", "tail": ["\\udcff", "ok \xc3\xa9"]}'
    assert json.loads(encode({"time": float("nan"), "n": 1})) == {"time": "nan", "n": "1"}  # NaN: every value its str()


def test_summary() -> None:
    assert summary(STARTED) == "ct200 train: started (attempt 1)"
    assert summary(LOST) == "ct200 train: lost (attempt 2): the container stopped while the job ran (pct stop, a crash or a power loss)"
    assert summary(BARE) == summary({}) == "? ?: ?"
    assert summary(dict(FAILED, reason=None)) == "ct200 train: failed (attempt 3): exit status 1"
    line = summary(FAILED)
    assert line.startswith('ct200 train: failed (attempt 3): Traceback (most recent call last):   File "train.py" ...')
    assert line.endswith("\u2026") and len(line) <= 500 and line.isprintable()


@pytest.mark.parametrize("fmt", FORMATS[1:])
@pytest.mark.parametrize("name", EVENTS)
def test_each_format_within_its_limits_summary_first(fmt: str, name: str) -> None:
    event = EVENTS[name]
    body, headers = request(fmt, event)
    check_limits(fmt, body, headers)
    text = shown(fmt, body)
    assert text.startswith(summary(event)), text[:200]
    assert all(char in "\n\t" or char.isprintable() for char in text), "no control character, no lone surrogate"


@pytest.mark.parametrize("fmt", FORMATS[1:])
def test_the_newest_log_lines_are_kept(fmt: str) -> None:
    text = shown(fmt, request(fmt, FAILED)[0])
    assert text.endswith("last line ```" + ("\n```" if fmt in MARKDOWN else "")), "the newest line last"
    counts = re.findall("\u2026 ([0-9]+) earlier lines left out", text)
    left_out = int(counts[0]) if counts else 0  # Mattermost takes them all
    assert TAIL[left_out] in text and (not left_out or TAIL[left_out - 1] not in text), left_out
    assert (fmt, bool(left_out)) != ("discord", False)
    assert "\u2026" + "x" * 499 + "\n" in text, "a long line keeps its end"


@pytest.mark.parametrize("fmt", MARKDOWN)
@pytest.mark.parametrize("name", EVENTS)
def test_a_log_line_cannot_close_the_code_block(fmt: str, name: str) -> None:
    message = json.loads(request(fmt, EVENTS[name])[0])
    if fmt == "slack":
        text = "\n".join(block["text"]["text"] for block in message["blocks"])
    else:
        text = message[FIELD[fmt]]
    runs = re.findall("`{2,}", text)
    assert runs == (["```", "```"] if EVENTS[name]["log_tail"] else []), "the block's fences, no other backticks side by side"


def test_slack_escapes_and_discord_pings_nobody() -> None:
    slack = json.loads(request("slack", FAILED)[0])
    assert "<" not in json.dumps(slack["blocks"]) and "&lt;b&gt;&amp;amp;" in slack["blocks"][1]["text"]["text"]
    assert slack["text"] == slack["blocks"][0]["text"]["text"]
    assert json.loads(request("discord", FAILED)[0])["allowed_mentions"] == {"parse": []}


def test_teams_lines_are_paragraphs_in_monospace() -> None:
    card = json.loads(request("teams", LOST)[0])["attachments"][0]["content"]
    assert card["body"] == [{"type": "TextBlock", "text": summary(LOST), "wrap": True, "weight": "Bolder"},
                            {"type": "TextBlock", "text": "one\n\ntwo", "wrap": True, "fontType": "Monospace"}]


def test_gotify_markdown_and_priority() -> None:
    failed, started = (json.loads(request("gotify", event)[0]) for event in (FAILED, STARTED))
    assert failed["title"] == "ct200 train: failed" and failed["priority"] == 8 and started["priority"] == 5
    assert failed["extras"] == {"client::display": {"contentType": "text/markdown"}}
    assert started["message"] == summary(STARTED)


def test_ntfy_headers() -> None:
    body, headers = request("ntfy", dict(LOST, host="sërvér-✓", session_name="日本語" * 30))
    assert body.decode("utf-8").startswith(summary(dict(LOST, host="sërvér-✓", session_name="日本語" * 30)) + "\n\none\ntwo")
    assert headers["X-Tags"] == "question,lost" and headers["X-Priority"] == "high"
    title = headers["X-Title"]
    title.encode("ascii")
    assert all(word.startswith("=?UTF-8?B?") and len(word) <= 75 for word in title.split(" "))
    assert decoded(title) == "sërvér-✓ " + "日本語" * 30 + ": lost"
    with receiver("ntfy") as (url, _received):
        status, answer = post(url, body, headers)
    assert status == 200 and json.loads(answer)["title"] == decoded(title), "http.client sends it, ntfy decodes it"
    assert request("ntfy", STARTED)[1] == {"Content-Type": "text/plain; charset=utf-8", "X-Title": "ct200 train: started",
                                           "X-Tags": "arrow_forward,started", "X-Priority": "default"}


@settings(max_examples=60)
@given(st.dictionaries(st.sampled_from(["event", "host", "session_name", "attempt", "reason", "exit_status"]), st.one_of(st.none(), st.text(), st.integers())),
       st.lists(st.text(), max_size=300))
def test_any_event_fits(fields: dict[str, t.Any], tail: list[str]) -> None:
    event = dict(fields, log_tail=tail)
    for fmt in FORMATS[1:]:
        body, headers = request(fmt, event)
        check_limits(fmt, body, headers)
        assert shown(fmt, body).startswith(summary(event))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", EVENTS)
def test_the_service_takes_its_format(fmt: str, name: str) -> None:
    body, headers = request(fmt, EVENTS[name])
    with receiver(fmt) as (url, received):
        status, answer = post(url, body, headers)
    assert 200 <= status < 300, (status, answer)
    assert [request_["body"] for request_ in received] == [body]


@pytest.mark.parametrize(("fmt", "status", "answer"), [
    ("slack", 400, b"no_text"),
    ("discord", 400, {"message": "Cannot send an empty message", "code": 50006}),
    ("mattermost", 400, "web.incoming_webhook.text.app_error"),
    ("teams", 400, b"The execution of template action 'Send_each_adaptive_card' failed"),
    ("gotify", 400, "Field 'message' is required"),
])
def test_the_service_refuses_the_json_event(fmt: str, status: int, answer: t.Any) -> None:
    with receiver(fmt) as (url, received):
        got = post(url, *request("json", LOST))
    assert got[0] == status and not received
    if isinstance(answer, bytes):
        assert got[1].startswith(answer)
    elif isinstance(answer, dict):
        assert json.loads(got[1]) == answer
    else:
        assert answer in got[1].decode()


@pytest.mark.parametrize(("fmt", "body", "headers", "status", "answer"), [
    ("slack", b"payload", {}, 400, b"invalid_payload"),
    ("slack", json.dumps({"text": " "}).encode(), {}, 400, b"missing_text_or_fallback_or_attachments"),
    ("slack", json.dumps({"text": "t", "blocks": [{"type": "divider"}] * 51}).encode(), {}, 400, b"invalid_blocks"),
    ("slack", json.dumps({"blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}]}).encode(), {}, 400, b"invalid_blocks"),
    ("discord", json.dumps({"content": "x" * 2001}).encode(), {}, 400, b'{"code": 50035, "message": "Invalid Form Body"'),
    ("discord", json.dumps({"content": "x" * 2000}).encode(), {}, 204, b""),
    ("mattermost", json.dumps({"text": "x" * 16384}).encode(), {}, 400, b'{"id": "web.incoming_webhook.text.length.app_error"'),
    ("teams", json.dumps({"type": "message", "attachments": [{"contentType": "application/json", "content": {}}]}).encode(), {}, 400,
     b"The specified Teams flowbot adaptive card request is missing or invalid"),
    ("teams", b" " * 28001, {}, 413, b"Request Entity too large"),
    ("gotify", json.dumps({"message": "m"}).encode(), {"X-Gotify-Key": "wrong"}, 200, b'{"id": 1, "appid": 1, "message": "m"'),
    ("ntfy", "ü".encode() * 2049, {}, 400, b'{"code": 40014'),
    ("ntfy", b"\xff", {}, 400, b'{"code": 40014'),
    ("ntfy", b"m", {"X-Priority": "6"}, 400, b'{"code": 40007'),
    ("ntfy", b"m", {"Title": "=?UTF-8?B?w7w=?=", "Priority": "urgent"}, 200,
     b'{"id": "1", "event": "message", "topic": "trainops_alerts", "message": "m", "title": "\\u00fc"}'),
])
def test_the_receivers_follow_the_docs(fmt: str, body: bytes, headers: dict[str, str], status: int, answer: bytes) -> None:
    with receiver(fmt) as (url, _received):
        got = post(url, body, dict(headers, **{"Content-Type": "application/json"}))
    assert got[0] == status and got[1].startswith(answer), got


def test_gotify_needs_its_token() -> None:
    with receiver("gotify") as (url, received):
        got = post(url.split("?", 1)[0], json.dumps({"message": "m"}).encode(), {"Content-Type": "application/json"})
        bearer = post(url.split("?", 1)[0], json.dumps({"message": "m"}).encode(), {"Authorization": "Bearer AppT0ken.gotify"})
    assert got[0] == 401 and json.loads(got[1])["error"] == "Unauthorized" and bearer[0] == 200 and len(received) == 1


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_notifier_posts_each_format_its_service_takes(fmt: str, tmp_path: t.Any) -> None:
    """The supervisor's Notifier with ``notify_format``: the receiver of that service takes every event, and
    notify.log stays empty; a notify_command still reads the event as JSON."""
    out = tmp_path / "command.json"
    with receiver(fmt) as (url, received):
        notifier = _job_notify.Notifier({"notify_url": url, "notify_format": fmt, "notify_command": ["sh", "-c", f"cat > {out}"],
                                         "notify_states": list(_job_notify.STATES)}, str(tmp_path))
        for event in (STARTED, FAILED, LOST):
            notifier.send(event)
        notifier.close(30)
    log = (tmp_path / "notify.log").read_text(encoding="utf-8") if (tmp_path / "notify.log").exists() else ""
    assert len(received) == 3 and log == "", (log, received)  # the command's output goes there too: it has none
    assert json.loads(out.read_text(encoding="utf-8"))["event"] == LOST["event"]


def test_a_body_the_service_refuses_is_a_line_in_notify_log(tmp_path: t.Any) -> None:
    with receiver("slack") as (url, received):
        notifier = _job_notify.Notifier({"notify_url": url, "notify_format": "json", "notify_states": ["failed"]}, str(tmp_path))
        notifier.send(FAILED)
        notifier.close(30)
    assert received == []
    line = (tmp_path / "notify.log").read_text(encoding="utf-8")
    assert " notify_url failed failed: HTTP status 400" in line and url not in line, line
