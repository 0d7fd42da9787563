"""Keras 2.3.1 on jaxkeras against TF-Keras 2.x: epoch times, start-up, a ConvLSTM2D step.

Both sides build the same models with the same Keras API. The digits convnet and LSTM train
on scikit-learn's digits: the time per epoch after the first, and the time from building a
model to the end of its first epoch (build + compile + 1 epoch) -- for jaxkeras in a process
with an empty persistent compilation cache (cold) and in a second one that finds it filled
(warm); these start-up figures are repeated (cold, warm and TF-Keras processes interleaved)
and reported as median ratios. The conv_lstm example's model (ConvLSTM2D(40) +
BatchNormalization + Conv3D) times ``train_on_batch`` in every round's processes: its step
ratio pairs each round's jaxkeras steps with that round's TF-Keras steps.
TF-Keras needs TensorFlow, whose Keras 3 dependency conflicts with Keras 2.3.1, so it runs in
its own environment: ``make bench`` creates ``.venv-bench`` (the ``bench`` extra;
``$BENCH_TF_PYTHON`` names another interpreter with it). Run ``python
benchmarks/bench_keras2.py [--quick]`` for both sides and the ratios, or ``--side
jaxkeras|tf_keras`` for one side (prints JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import Row, json_of_process, markdown_table, ratio_row

ROOT = Path(__file__).resolve().parent.parent
EPOCHS = 6
BATCH = 32
CONVLSTM_FULL = (10, 15, 40)  # batch, frames, side: the conv_lstm example
CONVLSTM_QUICK = (2, 15, 20)
# jaxkeras with its opt-in CPU memory reuse (jaxkeras/_xla/cpu_memory.py; off by default, when
# glibc's malloc maps a compiled call's temporaries afresh on every call)
REUSE = {"JAXKERAS_REUSE_CPU_MEMORY": "1"}
FIRST_EPOCH_ROUNDS = 3  # processes of each kind for the start-up figures (1 with --quick)


def _keras(side: str):
    if side == "jaxkeras":
        os.environ["KERAS_BACKEND"] = "jaxkeras"
        import keras
    else:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        import tf_keras as keras
    return keras


def _build(keras, name: str):
    """A fresh model: the digits convnet or LSTM, or the conv_lstm example's model."""
    layers = keras.layers
    if name == "convnet":
        return keras.models.Sequential(
            [
                layers.Conv2D(32, 3, padding="same", activation="relu", input_shape=(8, 8, 1)),
                layers.MaxPooling2D(),
                layers.Conv2D(64, 3, padding="same", activation="relu"),
                layers.MaxPooling2D(),
                layers.Flatten(),
                layers.Dense(10, activation="softmax"),
            ]
        )
    if name == "lstm":
        return keras.models.Sequential(
            [layers.LSTM(64, input_shape=(8, 8)), layers.Dense(10, activation="softmax")]
        )
    return keras.models.Sequential(  # Keras's conv_lstm example, its first layer
        [
            layers.ConvLSTM2D(
                40, (3, 3), padding="same", return_sequences=True, input_shape=(None, None, None, 1)
            ),
            layers.BatchNormalization(),
            layers.Conv3D(1, (3, 3, 3), activation="sigmoid", padding="same"),
        ]
    )


SHAPES = {"convnet": (8, 8, 1), "lstm": (8, 8)}


def digits_side(keras, epochs: int) -> dict:
    """Trains the digits models; per model the epoch times, the time from building the model
    to the end of its first epoch (build + compile + 1 epoch) and the final accuracy."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")
    y = np.eye(10, dtype="float32")[digits.target]

    class EpochTimer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.ends.append(time.perf_counter())
            self.times.append(self.ends[-1] - self.start)

    results = {}
    for name, shape in SHAPES.items():
        timer = EpochTimer()
        timer.times, timer.ends = [], []
        started = time.perf_counter()
        model = _build(keras, name)
        model.compile(keras.optimizers.Adam(), "categorical_crossentropy", metrics=["accuracy"])
        history = model.fit(
            x.reshape((-1, *shape)),
            y,
            epochs=epochs,
            batch_size=BATCH,
            verbose=0,
            callbacks=[timer],
        )
        results[name] = {
            "epochs_s": timer.times,
            "first_s": timer.ends[0] - started,
            "accuracy": float(history.history["accuracy"][-1]),
            "traces": getattr(model.train_function, "trace_count", None),
        }
    return results


def convlstm_side(keras, size: tuple[int, int, int], steps: int) -> dict:
    """``train_on_batch`` of the conv_lstm model on ``size`` = (batch, frames, side): the
    first step's time (compiles) and each later step's, in wall-clock and in CPU seconds (all
    the process's threads: less disturbed by other processes on a shared machine), and the
    minor page faults of each later step (memory touched for the first time)."""
    batch, frames, side = size
    rng = np.random.default_rng(0)
    x = rng.random((batch, frames, side, side, 1)).astype("float32")
    y = (rng.random((batch, frames, side, side, 1)) > 0.5).astype("float32")
    model = _build(keras, "convlstm")
    model.compile(loss="binary_crossentropy", optimizer="adadelta")
    times, cpu, faults = [], [], []
    for _ in range(steps + 1):
        start, start_cpu, start_faults = time.perf_counter(), time.process_time(), _faults()
        model.train_on_batch(x, y)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        faults.append(_faults() - start_faults)
    return {
        "first_s": times[0],
        "steps_s": times[1:],
        "steps_cpu_s": cpu[1:],
        "steps_faults": faults[1:],
    }


def _faults() -> int:
    """The process's minor page faults so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def run_side(side: str, epochs: int, convlstm: tuple[int, int, int], steps: int) -> dict:
    """Runs every model on one side (``'jaxkeras'`` or ``'tf_keras'``); the ConvLSTM model
    only when ``steps`` is positive."""
    keras = _keras(side)
    results = digits_side(keras, epochs)
    if steps > 0:
        results["convlstm"] = convlstm_side(keras, convlstm, steps)
    return results


def _side_in_subprocess(side: str, python: Path, args: list[str], env: dict) -> dict | None:
    """Runs one side in a fresh process (its own interpreter); ``None`` when unavailable."""
    if not python.exists():
        print(f"{side}: {python} is missing (make bench creates it)", file=sys.stderr)
        return None
    try:
        return json_of_process([python, __file__, "--side", side, *args], env)
    except RuntimeError as err:
        print(f"{side}: {err}", file=sys.stderr)
        return None


def main(quick: bool = False) -> list[Row]:
    """Runs jaxkeras twice (an empty persistent compilation cache, then the filled one) and
    TF-Keras once, each in its own process.

    Args:
        quick: fewer epochs and steps, and the conv_lstm model at a reduced size.

    Returns:
        The rows of the results table.
    """
    epochs, steps = (3, 2) if quick else (EPOCHS, 3)
    size = CONVLSTM_QUICK if quick else CONVLSTM_FULL
    home = os.environ.get("KERAS_HOME", str(ROOT / ".venv" / "kh"))
    ours = Path(sys.executable)  # the interpreter running the benchmark (make bench PY=...)
    theirs = Path(os.environ.get("BENCH_TF_PYTHON", ROOT / ".venv-bench" / "bin" / "python"))
    rounds = []  # (cold, warm, TF-Keras) results, the first round with every epoch
    for r in range(1 if quick else FIRST_EPOCH_ROUNDS):
        args = ["--epochs", str(epochs if r == 0 else 1), "--steps", str(steps)]
        args += ["--convlstm", *map(str, size)]
        with tempfile.TemporaryDirectory() as cache:
            env = {"KERAS_HOME": home, "JAXKERAS_COMPILATION_CACHE": cache}
            cold = _side_in_subprocess("jaxkeras", ours, args, env)
            warm = _side_in_subprocess("jaxkeras", ours, args, env)
        tf = _side_in_subprocess("tf_keras", theirs, args, {})
        if not (cold and warm and tf):
            raise RuntimeError("bench_keras2: a side failed (see above)")
        rounds.append((cold, warm, tf))
    tuned = None  # the ConvLSTM model again, jaxkeras with memory reuse
    if not quick:
        args = ["--epochs", "1", "--steps", str(steps), "--convlstm", *map(str, size)]
        tuned = (
            _side_in_subprocess("jaxkeras", ours, args, {"KERAS_HOME": home, **REUSE}),
            _side_in_subprocess("tf_keras", theirs, args, {}),
        )
        if not all(tuned):
            raise RuntimeError("bench_keras2: a side failed (see above)")
    cold, _, theirs = rounds[0]
    rows = []
    for name in SHAPES:
        a, b = cold[name], theirs[name]
        firsts = [[side[name]["first_s"] for side in sides] for sides in rounds]
        note = f"TF-Keras 2.x; accuracy {a['accuracy']:.3f} vs {b['accuracy']:.3f}"
        rows.append(
            ratio_row(
                f"Keras 2.3.1 digits {name}: epoch (after the first; batch {BATCH})",
                a["epochs_s"][1:],
                b["epochs_s"][1:],
                None,
                note + f"; train function compiled {a['traces']}x",
            )
        )
        rows.append(
            ratio_row(
                f"digits {name}: build + compile + first epoch, cold",
                [c for c, _, _ in firsts],
                [t for _, _, t in firsts],
                1.5,
                "empty persistent compilation cache vs TF-Keras",
            )
        )
        rows.append(
            ratio_row(
                f"digits {name}: build + compile + first epoch, warm",
                [m for _, m, _ in firsts],
                [t for _, _, t in firsts],
                1.0,
                "second process, persistent compilation cache on (asked for) vs TF-Keras",
            )
        )
    # each round: both jaxkeras processes' steps, each against that round's TF-Keras steps
    keys = ("steps_s", "steps_cpu_s", "steps_faults")
    ours_both = {
        k: [v for c, w, _ in rounds for v in c["convlstm"][k] + w["convlstm"][k]] for k in keys
    }
    theirs_twice = {k: [v for _, _, t in rounds for v in t["convlstm"][k] * 2] for k in keys}
    label = "batch {}, {} frames of {}x{}".format(*size, size[-1])
    rows.append(
        ratio_row(
            f"Keras 2.3.1 `ConvLSTM2D`(40) + BatchNorm + Conv3D train step, {label}",
            ours_both["steps_cpu_s"],
            theirs_twice["steps_cpu_s"],
            1.0,
            "the conv_lstm example's model vs TF-Keras; CPU time, all threads "
            + _step_note(ours_both, theirs_twice)
            + ("" if size == CONVLSTM_FULL else "; reduced size (quick)"),
        )
    )
    if tuned:
        rows.append(
            ratio_row(
                f"same, jaxkeras with `{_assignments(REUSE)}`",
                tuned[0]["convlstm"]["steps_cpu_s"],
                tuned[1]["convlstm"]["steps_cpu_s"],
                None,
                "memory reuse on (opt-in): a call reuses the block the last one freed; CPU time "
                + _step_note(*(side["convlstm"] for side in tuned)),
            )
        )
    rows.append(
        ratio_row(
            f"`ConvLSTM2D` model: first `train_on_batch` (compiles), {label}, cold / warm",
            [side["convlstm"]["first_s"] for c, w, _ in rounds for side in (c, w)],
            [t["convlstm"]["first_s"] for _, _, t in rounds for _ in range(2)],
            None,
            "empty, then filled persistent compilation cache vs TF-Keras",
        )
    )
    return rows


def _assignments(env: dict) -> str:
    """``env`` as shell assignments: ``NAME=value ...``."""
    return " ".join(f"{name}={value}" for name, value in env.items())


def _step_note(ours: dict, theirs: dict) -> str:
    """The wall-clock times and page faults of both sides' ConvLSTM steps (medians)."""
    return "(wall: {:.2f} s vs {:.2f} s; minor page faults per step: {:,.0f} vs {:,.0f})".format(
        *(
            float(np.median(side[key]))
            for key in ("steps_s", "steps_faults")
            for side in (ours, theirs)
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--side", choices=["jaxkeras", "tf_keras"])
    parser.add_argument("--quick", action="store_true", help="fewer epochs, smaller ConvLSTM")
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--steps", type=int, default=3, help="timed ConvLSTM steps")
    parser.add_argument("--convlstm", type=int, nargs=3, default=CONVLSTM_FULL)
    cli = parser.parse_args()
    if cli.side:
        print(json.dumps(run_side(cli.side, cli.epochs, tuple(cli.convlstm), cli.steps)))
    else:
        print(markdown_table(main(cli.quick)))
