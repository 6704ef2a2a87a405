# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""A small, real training job: logistic regression by gradient descent with numpy.

It prints ``step N loss X`` lines, flushed, so a launcher can watch its log.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def make_data(rng: np.random.Generator, samples: int, features: int) -> tuple[np.ndarray, np.ndarray]:
    """Two separable Gaussian blobs."""
    weights = rng.normal(size=features)
    inputs = rng.normal(size=(samples, features))
    labels = (inputs @ weights + 0.1 * rng.normal(size=samples) > 0).astype(float)
    return inputs, labels


def train(steps: int, sleep: float, learning_rate: float, seed: int) -> float:
    """Fit the model; print the loss every step; return the final loss."""
    rng = np.random.default_rng(seed)
    inputs, labels = make_data(rng, 2048, 16)
    weights = np.zeros(inputs.shape[1])
    loss = float("nan")
    for step in range(1, steps + 1):
        probs = 1.0 / (1.0 + np.exp(-(inputs @ weights)))
        loss = float(-np.mean(labels * np.log(probs + 1e-12) + (1 - labels) * np.log(1 - probs + 1e-12)))
        weights -= learning_rate * inputs.T @ (probs - labels) / len(labels)
        print(f"step {step} loss {loss:.6f}", flush=True)
        if sleep:
            time.sleep(sleep)
    return loss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to pause between steps")
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"training: numpy {np.__version__}, {args.steps} steps", flush=True)
    final = train(args.steps, args.sleep, args.lr, args.seed)
    print(f"done: final loss {final:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
