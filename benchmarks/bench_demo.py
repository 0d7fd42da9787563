"""The digits demo (``make demo``) as benchmark rows: what a new user's first run shows.

``examples/digits_demo.py --json`` runs in a fresh process per round, as ``make demo`` runs it:
logistic regression and an MLP on scikit-learn's digits, each trained by ``K.function`` and by
the same SGD step hand-written with ``jax.jit`` and ``jax.grad`` on the same batches, and by
TF-Keras's ``train_on_batch`` in a process of its own where ``tf_keras`` is installed. Every step
is timed by the wall clock, the first from the model's build.

Rows per model: the first step (build + compile + first step) and the steady step (median of
the last half) against hand-written JAX and TF-Keras, and the longest step after the first
against the steady one and against hand-written JAX's longest (goal ≤ 2x each: no stall when
a second tier takes over). Run
``python benchmarks/bench_demo.py [--quick]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from common import Row, json_of_process, markdown_table, ratio_row, time_text

DEMO = Path(__file__).resolve().parent.parent / "examples" / "digits_demo.py"
MODELS = ("logreg", "mlp")


def rounds_of_demo(rounds: int) -> list[dict]:
    """The demo's figures, one fresh process per round."""
    return [json_of_process([sys.executable, DEMO, "--json"]) for _ in range(rounds)]


def model_rows(name: str, runs: list[dict]) -> list[Row]:
    """The rows of one model over the rounds ``runs``."""

    def figures(side: str, key: str) -> list[float]:
        return [run[name][side][key] for run in runs]

    note = f"digits demo, {len(runs)} fresh processes; wall clock; SGD, batch 64, 30 epochs"
    rows = [
        ratio_row(
            f"digits demo {name}: first step (build + compile + step) vs hand-written JAX",
            figures("jaxkeras", "first"),
            figures("hand_written", "first"),
            1.0,
            note + "; the hand-written program's epochs alternate with jaxkeras's in one process",
        ),
        ratio_row(
            f"digits demo {name}: steady step vs hand-written JAX",
            figures("jaxkeras", "steady"),
            figures("hand_written", "steady"),
            1.1,
            note + "; median of the last half of the steps, epochs alternating",
        ),
    ]
    if all(run[name]["tf_keras"] for run in runs):
        for key, label in (("first", "first step"), ("steady", "steady step")):
            rows.append(
                ratio_row(
                    f"digits demo {name}: {label} vs TF-Keras",
                    figures("jaxkeras", key),
                    figures("tf_keras", key),
                    1.0,
                    note + "; TF-Keras `train_on_batch` in its own process",
                )
            )
    longest, steady = figures("jaxkeras", "longest"), figures("jaxkeras", "steady")
    hand = [
        a / b for a, b in zip(figures("hand_written", "longest"), figures("hand_written", "steady"))
    ]
    rows.append(
        ratio_row(
            f"digits demo {name}: longest later step vs steady step",
            longest,
            steady,
            2.0,
            f"jaxkeras; hand-written JAX's own: {np.median(hand):.2f} ({min(hand):.2f}-"
            f"{max(hand):.2f}); time beyond twice the steady step, whole run: jaxkeras "
            f"{time_text(float(np.median(figures('jaxkeras', 'lost'))))}, hand-written "
            f"{time_text(float(np.median(figures('hand_written', 'lost'))))} (medians)",
        )
    )
    rows.append(
        ratio_row(
            f"digits demo {name}: longest later step vs hand-written JAX's",
            longest,
            figures("hand_written", "longest"),
            2.0,
            "what jaxkeras adds to the machine's own pauses (a step of 100 µs or so meets "
            "scheduler and collector pauses several times its length in any program)",
        )
    )
    return rows


def main(quick: bool = False) -> list[Row]:
    """Runs the demo and returns its rows.

    Args:
        quick: one round instead of three.

    Returns:
        The rows of the results table.
    """
    runs = rounds_of_demo(1 if quick else 3)
    return [row for name in MODELS for row in model_rows(name, runs)]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round")
    print(markdown_table(main(parser.parse_args().quick)))
