"""Keras 2.3.1 on jaxkeras against Keras 3 on JAX: the train step of an MLP and of an LSTM.

The comparison issue 31 set its goal by: the same model built with each Keras's API, trained
with ``train_on_batch`` (SGD, categorical crossentropy) on the same batch, after enough steps
for jaxkeras to be on its optimized compile (:mod:`jaxkeras.tiers`) and for Keras 3 to have
compiled its train function. Each side runs in its own process -- Keras 3 needs the bench
environment (``make bench`` creates ``.venv-bench``; ``$BENCH_TF_PYTHON`` names another
interpreter with Keras 3 and JAX), Keras 2.3.1 the project's -- and the processes alternate,
``ROUNDS`` of each. A process reports the median CPU time (all its threads) of its timed steps;
the ratio pairs each round's two processes.

- MLP: 784-512-512-10 (relu, softmax), batch 128.
- LSTM: 100 steps of 32 features, 128 units, then a 10-way softmax; batch 64.

Run: ``python benchmarks/bench_keras3.py [--quick]``, or ``--side jaxkeras|keras3`` for one
side (prints JSON).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from common import Row, json_of_process, markdown_table, on_optimized_tier, ratio_row

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = 3
WARMUP = 20  # Keras 3's steps before timing (jaxkeras's run until its optimized compile)
MODELS = {"mlp": ((128, 784), 10), "lstm": ((64, 100, 32), 10)}


def _keras(side: str):
    os.environ["KERAS_BACKEND"] = "jaxkeras" if side == "jaxkeras" else "jax"
    import keras

    return keras


def _model(keras, name: str, input_shape: tuple):
    layers = keras.layers
    if name == "mlp":
        body = [
            layers.Dense(512, activation="relu"),
            layers.Dense(512, activation="relu"),
            layers.Dense(10, activation="softmax"),
        ]
    else:
        body = [layers.LSTM(128), layers.Dense(10, activation="softmax")]
    inputs = keras.layers.Input(shape=input_shape[1:])
    outputs = inputs
    for layer in body:
        outputs = layer(outputs)
    model = keras.models.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="categorical_crossentropy")
    return model


def run_side(side: str, steps: int) -> dict:
    """Times ``train_on_batch`` of each model on one side.

    Args:
        side: ``'jaxkeras'`` or ``'keras3'``.
        steps: timed steps per model.

    Returns:
        Model name -> ``{"step_s": median CPU seconds of a step, "loss": the last loss}``.

    Raises:
        AssertionError: when jaxkeras's train function does not reach its optimized compile.
    """
    keras = _keras(side)
    results = {}
    for name, (shape, classes) in MODELS.items():
        rng = np.random.default_rng(0)
        x = rng.normal(size=shape).astype("float32")
        y = np.eye(classes, dtype="float32")[rng.integers(0, classes, shape[0])]
        model = _model(keras, name, shape)
        for _ in range(WARMUP):
            model.train_on_batch(x, y)
        if side == "jaxkeras":
            step = functools.partial(model.train_on_batch, x, y)
            tier = on_optimized_tier(model.train_function, step)
            assert tier == "optimized tier", tier
        times = []
        for _ in range(steps):
            start = time.process_time()
            loss = model.train_on_batch(x, y)
            times.append(time.process_time() - start)
        results[name] = {"step_s": float(np.median(times)), "loss": float(np.ravel(loss)[0])}
    return results


def main(quick: bool = False) -> list[Row]:
    """Alternates the two sides' processes and pairs their step times.

    Args:
        quick: one round and fewer steps.

    Returns:
        The rows of the results table (none when Keras 3's environment is missing).
    """
    steps = 30 if quick else 100
    ours = Path(sys.executable)  # the interpreter running the benchmark (make bench PY=...)
    theirs = Path(os.environ.get("BENCH_TF_PYTHON", ROOT / ".venv-bench" / "bin" / "python"))
    if not theirs.exists():
        print(f"keras3: {theirs} is missing (make bench creates it)", file=sys.stderr)
        return []
    command = [__file__, "--side", "{side}", "--steps", str(steps)]
    rounds = []
    for _ in range(1 if quick else ROUNDS):
        pair = {}
        for side, python in (("jaxkeras", ours), ("keras3", theirs)):
            args = [python, *(part.format(side=side) for part in command)]
            pair[side] = json_of_process(args, {"TF_CPP_MIN_LOG_LEVEL": "3"})
        rounds.append(pair)
    rows = []
    for name, what in (
        ("mlp", "MLP (784-512-512-10, batch 128)"),
        ("lstm", "LSTM (64x100x32, 128 units)"),
    ):
        rows.append(
            ratio_row(
                f"{what} `train_on_batch`: Keras 2.3.1 on jaxkeras vs Keras 3 on JAX",
                [r["jaxkeras"][name]["step_s"] for r in rounds],
                [r["keras3"][name]["step_s"] for r in rounds],
                1.0,
                "cpu time, median step of each process, processes alternated; SGD; "
                "jaxkeras on its optimized compile",
            )
        )
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round, fewer steps")
    parser.add_argument("--side", choices=["jaxkeras", "keras3"], help="run one side only")
    parser.add_argument("--steps", type=int, default=100, help="timed steps per model")
    cli = parser.parse_args()
    if cli.side:
        print(json.dumps(run_side(cli.side, cli.steps)))
    else:
        print(markdown_table(main(cli.quick)))
