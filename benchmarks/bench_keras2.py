"""Epoch time of the digits convnet and LSTM: Keras 2.3.1 on jaxkeras vs TF-Keras 2.x.

Both sides build the same models with the same Keras API and train them on scikit-learn's
digits; the time per epoch is the median over the epochs after the first (which compiles).
TF-Keras needs TensorFlow, whose Keras 3 dependency conflicts with Keras 2.3.1, so it runs in
its own environment: ``make bench`` creates ``.venv-bench`` with ``tensorflow-cpu`` and
``tf_keras``. Run ``python benchmarks/bench_keras2.py`` for both sides and the ratios, or
``--side jaxkeras|tf_keras`` for one side (prints JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
EPOCHS = 6
BATCH = 32


def _keras(side: str):
    if side == "jaxkeras":
        os.environ["KERAS_BACKEND"] = "jaxkeras"
        import keras
    else:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        import tf_keras as keras
    return keras


def _models(keras):
    layers = keras.layers
    convnet = keras.models.Sequential(
        [
            layers.Conv2D(32, 3, padding="same", activation="relu", input_shape=(8, 8, 1)),
            layers.MaxPooling2D(),
            layers.Conv2D(64, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(),
            layers.Flatten(),
            layers.Dense(10, activation="softmax"),
        ]
    )
    lstm = keras.models.Sequential(
        [
            layers.LSTM(64, input_shape=(8, 8)),
            layers.Dense(10, activation="softmax"),
        ]
    )
    return {"convnet": (convnet, (8, 8, 1)), "lstm": (lstm, (8, 8))}


def run_side(side: str) -> dict:
    """Trains both models on one side; returns seconds per epoch and final accuracy."""
    keras = _keras(side)
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")
    y = np.eye(10, dtype="float32")[digits.target]

    class EpochTimer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.times.append(time.perf_counter() - self.start)

    results = {}
    for name, (model, shape) in _models(keras).items():
        model.compile(keras.optimizers.Adam(), "categorical_crossentropy", metrics=["accuracy"])
        timer = EpochTimer()
        timer.times = []
        history = model.fit(
            x.reshape((-1, *shape)),
            y,
            epochs=EPOCHS,
            batch_size=BATCH,
            verbose=0,
            callbacks=[timer],
        )
        results[name] = {
            "epoch_s": float(np.median(timer.times[1:])),
            "first_epoch_s": timer.times[0],
            "accuracy": float(history.history["accuracy"][-1]),
        }
    return results


def _side_in_subprocess(side: str, python: Path) -> dict | None:
    if not python.exists():
        return None
    env = dict(os.environ, KERAS_HOME=os.environ.get("KERAS_HOME", str(ROOT / ".venv" / "kh")))
    out = subprocess.run(
        [str(python), __file__, "--side", side], capture_output=True, text=True, env=env
    )
    if out.returncode != 0:
        print(f"{side} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--side", choices=["jaxkeras", "tf_keras"])
    args = parser.parse_args()
    if args.side:
        print(json.dumps(run_side(args.side)))
        return
    ours = _side_in_subprocess("jaxkeras", ROOT / ".venv" / "bin" / "python")
    theirs = _side_in_subprocess("tf_keras", ROOT / ".venv-bench" / "bin" / "python")
    print(f"digits, batch {BATCH}, median epoch time after the first of {EPOCHS}")
    print(f"{'model':>8} {'jaxkeras':>10} {'tf_keras':>10} {'ratio':>6}   (first epoch; accuracy)")
    for name in ("convnet", "lstm"):
        a = ours[name] if ours else None
        b = theirs[name] if theirs else None
        ratio = f"{a['epoch_s'] / b['epoch_s']:6.2f}" if a and b else "   n/a"
        cols = [f"{r['epoch_s'] * 1e3:8.1f}ms" if r else "       n/a" for r in (a, b)]
        extra = "; ".join(f"{r['first_epoch_s']:.2f}s {r['accuracy']:.3f}" for r in (a, b) if r)
        print(f"{name:>8} {cols[0]:>10} {cols[1]:>10} {ratio}   ({extra})")


if __name__ == "__main__":
    main()
