"""Checkpoints: what an asynchronous save (``jaxkeras.checkpoint.CheckpointManager``) costs the
training loop.

The model is an MLP of ``LAYERS`` square ``WIDTH`` x ``WIDTH`` float32 layers trained by SGD
with momentum written in ``K`` ops, one ``K.function`` step per call (its state, weights and
velocities, is what a save writes). Two rows:

- the wall-clock time of a train step while a save is being written in the background,
  against a step with no save in flight (the same function, rounds interleaved). Each round
  times a few steps alone, then starts a save and times the steps that begin while it is
  still being written. The write runs on the process's other threads, so on a machine with
  few cores it competes with the step for them;
- how long ``save()`` blocks the loop when asynchronous (a snapshot of the state, and Orbax's
  transfer of it to the host) against a synchronous save (``asynchronous=False``: written
  and finalized before it returns).

Wall-clock time: the save's work happens on other threads, which the CPU clock of
``common.step_clock`` would count against the step.

Run: ``python benchmarks/bench_checkpoint.py [--quick]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable

import numpy as np
from common import Row, markdown_table, ratio_row

import jaxkeras as K
from jaxkeras.checkpoint import CheckpointManager

LAYERS, WIDTH, BATCH = 4, 512, 128
LR, MOMENTUM = 0.01, 0.9


def train_step() -> tuple[Callable[[], None], int]:
    """A compiled SGD-with-momentum step of the MLP, as a function of no arguments, and the
    bytes of the state it updates (what a save writes)."""
    rng = np.random.default_rng(0)
    x, t = K.placeholder((BATCH, WIDTH)), K.placeholder((BATCH, WIDTH))
    weights = [
        K.variable(rng.normal(0, WIDTH**-0.5, (WIDTH, WIDTH)), name=f"dense_{i}/kernel")
        for i in range(LAYERS)
    ]
    velocities = [K.zeros((WIDTH, WIDTH), name=f"dense_{i}/velocity") for i in range(LAYERS)]
    h = x
    for w in weights:
        h = K.tanh(K.dot(h, w))
    loss = K.mean(K.square(h - t))
    updates = []
    for w, v, g in zip(weights, velocities, K.gradients(loss, weights)):
        new_v = MOMENTUM * v - LR * g
        updates += [K.update(v, new_v), K.update_add(w, new_v)]
    f = K.function([x, t], [loss], updates=updates)
    feed = [rng.normal(size=(BATCH, WIDTH)).astype("float32") for _ in range(2)]
    return (lambda: f(feed)), 2 * LAYERS * WIDTH * WIDTH * 4


def step_row(step: Callable[[], None], folder: str, rounds: int, alone: int) -> Row:
    """Seconds per step with a save in flight, and with none, one figure of each per round.

    Args:
        step: the train step.
        folder: where the manager writes.
        rounds: how many rounds.
        alone: steps timed with no save in flight, per round.

    Returns:
        The row.
    """
    busy, idle = [], []
    with CheckpointManager(folder, max_to_keep=2) as manager:
        manager.save(0)  # Orbax's threads started, its first-save set-up done
        manager.wait()
        for r in range(1, rounds + 1):
            start = time.perf_counter()
            for _ in range(alone):
                step()
            idle.append((time.perf_counter() - start) / alone)
            manager.save(r)
            count, start = 0, time.perf_counter()
            while manager.is_saving():
                step()
                count += 1
            elapsed = time.perf_counter() - start
            manager.wait()
            if count:  # (a save written before the first step began has no figure)
                busy.append(elapsed / count)
            else:
                idle.pop()
    return ratio_row(
        "train step with an async checkpoint save in flight",
        busy,
        idle,
        note=(
            f"MLP {LAYERS}x{WIDTH}x{WIDTH}, batch {BATCH}, SGD+momentum state "
            f"{2 * LAYERS * WIDTH * WIDTH * 4 / 2**20:.0f} MiB; reference: the same step with "
            "no save in flight; wall clock"
        ),
    )


def blocking_row(step: Callable[[], None], folder: str, rounds: int, state_bytes: int) -> Row:
    """Seconds ``save()`` blocks the caller, asynchronous against synchronous.

    Args:
        step: the train step (run between saves, so each save sees new values).
        folder: where the two managers write.
        rounds: how many saves of each.
        state_bytes: the bytes saved, for the note.

    Returns:
        The row.
    """
    times: dict[bool, list[float]] = {True: [], False: []}
    with (
        CheckpointManager(f"{folder}/async", max_to_keep=2) as background,
        CheckpointManager(f"{folder}/sync", max_to_keep=2, asynchronous=False) as foreground,
    ):
        for r in range(rounds + 1):  # round 0: set-up, not timed
            order = [(True, background), (False, foreground)]
            for asynchronous, manager in order[::-1] if r % 2 else order:  # interleaved
                step()
                start = time.perf_counter()
                manager.save(r)
                if r:
                    times[asynchronous].append(time.perf_counter() - start)
                manager.wait()
    return ratio_row(
        "CheckpointManager.save() blocking time, asynchronous",
        times[True],
        times[False],
        note=f"{state_bytes / 2**20:.0f} MiB of state; reference: asynchronous=False (written "
        "and finalized before it returns)",
    )


def main(quick: bool = False) -> list[Row]:
    """The rows of the results table.

    Args:
        quick: fewer rounds.

    Returns:
        Rows of the results table.
    """
    rounds = 5 if quick else 15
    step, state_bytes = train_step()
    for _ in range(3):  # compiled, warm
        step()
    with tempfile.TemporaryDirectory(prefix="bench_checkpoint_") as folder:
        return [
            step_row(step, f"{folder}/steps", rounds, alone=5),
            blocking_row(step, f"{folder}/blocking", rounds, state_bytes),
        ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    print(markdown_table(main(parser.parse_args().quick)))
