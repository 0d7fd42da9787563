"""Cold start: a ``keras.applications`` model's build and first train step, and what it went to.

For each family's first model (``bench_zoo``'s), each side runs in a fresh process (no
persistent compilation cache), the sides alternating their order per round:

- jaxkeras (Keras 2.3.1, ``KERAS_BACKEND=jaxkeras``): the import of Keras, the build
  (``keras.applications``'s builder and ``model.compile``), and the first ``train_on_batch``,
  broken down by JAX's own timers (``jax.monitoring``'s trace, jaxpr-to-MLIR and backend-compile
  durations) and by XLA:CPU's (its ``cpu_compiler`` timers, read from the process's log with
  ``TF_CPP_VMODULE=cpu_compiler=1``: the HLO passes and the code generation of the train
  function), the rest of the first step being the first run and Keras's own work; then
  :data:`STEPS` more steps, for the steady step and the longest (a tier move that made
  training wait would show there: ``jaxkeras.tiers``);
- TF-Keras 2.x (``tf_keras.applications``, or Keras-Applications 1.0.8's builder given
  TF-Keras's modules where it lacks the model) and Keras 3 on JAX (``keras.applications``),
  both from ``.venv-bench``: the same build and first step, and the steps after.

Rows: build + first train step against TF-Keras (goal ≤ 1x) and against Keras 3 on JAX (goal
≤ 0.5x), the breakdown in the note; and the longest later step over the steady step (goal ≤
2x: no step waits for a compile). Run ``python benchmarks/bench_cold.py [--quick] [--models A
B ...]``, or ``--side jaxkeras|tf_keras|keras3 --model NAME`` for one side (prints JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from bench_zoo import BATCH, CLASSES, ZOO, build
from common import Row, markdown_table, ratio_row, time_text

ROOT = Path(__file__).resolve().parent.parent
STEPS = 40  # train_on_batch calls after the first (jaxkeras: at least)
MOST_STEPS = 300  # jaxkeras steps on until its move to the optimized tier, at most this many
AFTER_MOVE = 20  # and this many after it (its steady step is their median)
FAMILY_FIRST = [
    "VGG16",
    "ResNet50",
    "ResNet50V2",
    "ResNeXt50",
    "InceptionV3",
    "InceptionResNetV2",
    "Xception",
    "MobileNet",
    "MobileNetV2",
    "DenseNet121",
    "NASNetMobile",
]
QUICK = ["MobileNet", "DenseNet121"]
SIDES = ("jaxkeras", "tf_keras", "keras3")
# XLA:CPU's timers of a compile (cpu_compiler.cc), for the module named in brackets
_TRAIN = r"\[jit_train_function\]"
_XLA_TIMERS = {
    "hlo_passes_s": re.compile(rf"Running HLO passes on {_TRAIN}.*? time: (\S+) (\w+)"),
    "codegen_s": re.compile(rf"Compiling {_TRAIN} for CPU using JIT time: (\S+) (\w+)"),
}
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0}
_JAX_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
    "/jax/core/compile/backend_compile_duration": "compile_s",
}


def _keras(side: str):
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0" if side == "jaxkeras" else "3"
    if side == "tf_keras":
        import tf_keras as keras
    else:
        os.environ["KERAS_BACKEND"] = "jaxkeras" if side == "jaxkeras" else "jax"
        import keras
    return keras


def _model(keras, side: str, name: str):
    """The model, built the way a user of ``side`` builds it (``None``: that Keras lacks it)."""
    if side == "jaxkeras":
        return build(keras, name, side)[0]
    _, module, builder, side_length = ZOO[name]
    kwargs = {"weights": None, "input_shape": (side_length, side_length, 3), "classes": CLASSES}
    if name == "MobileNet":
        kwargs["dropout"] = 0.0
    if hasattr(keras.applications, builder):
        return getattr(keras.applications, builder)(**kwargs)
    if side == "keras3":
        return None
    import importlib

    ours = getattr(importlib.import_module(f"keras_applications.{module}"), builder)
    modules = {"backend": keras.backend, "layers": keras.layers, "models": keras.models}
    return ours(**kwargs, **modules, utils=keras.utils)


def run_side(side: str, name: str, steps: int) -> dict:
    """One side's cold start for model ``name``, in this (fresh) process.

    Returns:
        Seconds: ``import_s``, ``build_s``, ``first_s`` (the first train step), the later
        steps' ``longest_s`` and steady ``steady_s`` (jaxkeras, given at least :data:`STEPS`
        steps: on past its move to the optimized tier, ``moved_at`` steps after the first, the
        median step after it, ``quick_s`` the median before; else the median of the last
        half); for jaxkeras also JAX's ``trace_s``, ``lower_s`` and ``compile_s`` during the
        first step.
    """
    started = time.perf_counter()
    keras = _keras(side)
    imported = time.perf_counter()
    durations: dict[str, float] = {}
    if side == "jaxkeras":
        import jax

        def listen(event: str, seconds: float, **_: object) -> None:
            key = _JAX_EVENTS.get(event)
            if key is not None and "first_step" in durations:
                durations[key] = durations.get(key, 0.0) + seconds

        jax.monitoring.register_event_duration_secs_listener(listen)
    np.random.seed(0)
    model = _model(keras, side, name)
    if model is None:
        return {"missing": True}
    model.compile(keras.optimizers.SGD(learning_rate=0.001), "categorical_crossentropy")
    built = time.perf_counter()
    side_length = ZOO[name][3]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, side_length, side_length, 3)).astype("float32")
    y = np.eye(CLASSES, dtype="float32")[rng.integers(0, CLASSES, BATCH)]
    durations["first_step"] = 1.0
    start = time.perf_counter()
    model.train_on_batch(x, y)
    first = time.perf_counter() - start
    durations.pop("first_step")
    times, moved_at = [], None
    past_the_move = side == "jaxkeras" and steps >= STEPS  # (not the quick run's few steps)
    while len(times) < steps or (past_the_move and _running_on(moved_at, times)):
        start = time.perf_counter()
        float(np.asarray(model.train_on_batch(x, y)).ravel()[0])
        times.append(time.perf_counter() - start)
        if moved_at is None and side == "jaxkeras" and _moved(model):
            moved_at = len(times)
        if past_the_move and moved_at is None and model.train_function.settled:
            past_the_move = False  # compiled once: no move to wait for
    after = times[moved_at:] if moved_at is not None else times[len(times) // 2 :]
    return {
        "import_s": imported - started,
        "build_s": built - imported,
        "first_s": first,
        "steady_s": float(np.median(after)),
        "longest_s": max(times),
        "moved_at": moved_at,
        "settled": side == "jaxkeras" and moved_at is None and model.train_function.settled,
        "quick_s": float(np.median(times[: moved_at or len(times)])),
        **durations,
    }


def _moved(model) -> bool:
    """Whether jaxkeras's train function runs its optimized executable (``jaxkeras.tiers``)."""
    from jaxkeras import tiers

    return model.train_function.compiler_options == tiers.optimized_options()


def _running_on(moved_at: int | None, times: list[float]) -> bool:
    """Whether jaxkeras's steps go on: until :data:`AFTER_MOVE` steps after the move to the
    optimized tier, at most :data:`MOST_STEPS` in all."""
    if len(times) >= MOST_STEPS:
        return False
    return moved_at is None or len(times) < moved_at + AFTER_MOVE


def _xla_timers(log: str) -> dict[str, float]:
    """XLA:CPU's first timers of the train function's compile in a process's log."""
    found = {}
    for key, pattern in _XLA_TIMERS.items():
        match = pattern.search(log)
        if match:
            found[key] = float(match.group(1)) * _UNITS[match.group(2)]
    return found


def side_in_process(side: str, name: str, steps: int, platforms: str | None = "cpu") -> dict:
    """Runs :func:`run_side` in a fresh process of the side's interpreter.

    Args:
        side: one of :data:`SIDES`.
        name: a model of ``bench_zoo.ZOO``.
        steps: the later steps.
        platforms: ``JAX_PLATFORMS`` for the process (``None``: JAX's default platform).

    Returns:
        :func:`run_side`'s figures, with XLA:CPU's timers where its log has them.

    Raises:
        RuntimeError: the process failed (its error output's end in the message).
    """
    ours = Path(sys.executable)  # the interpreter running the benchmark (make bench PY=...)
    theirs = Path(os.environ.get("BENCH_TF_PYTHON", ROOT / ".venv-bench" / "bin" / "python"))
    python = ours if side == "jaxkeras" else theirs
    if not python.exists():
        raise RuntimeError(f"bench_cold: {python} is missing (make bench creates it)")
    env = dict(os.environ)
    if platforms is not None:
        env["JAX_PLATFORMS"] = platforms
    if side == "jaxkeras":
        env["TF_CPP_VMODULE"] = "cpu_compiler=1,gpu_compiler=1"
    command = [python, __file__, "--side", side, "--model", name, "--steps", str(steps)]
    out = subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, env=env, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"bench_cold {side} {name} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result.update(_xla_timers(out.stderr))
    return result


def breakdown(result: dict) -> str:
    """The note's text: where jaxkeras's build and first step went."""
    parts = [f"build {result['build_s']:.1f} s"]
    for key, label in (("trace_s", "trace"), ("lower_s", "lower")):
        parts.append(f"{label} {result.get(key, 0.0):.1f} s")
    compile_text = f"XLA compile {result.get('compile_s', 0.0):.1f} s"
    if "hlo_passes_s" in result and "codegen_s" in result:
        compile_text += (
            f" (HLO passes {result['hlo_passes_s']:.1f}, codegen {result['codegen_s']:.1f})"
        )
    parts.append(compile_text)
    spent = sum(result.get(k, 0.0) for k in ("trace_s", "lower_s", "compile_s"))
    parts.append(f"first run and Keras {max(result['first_s'] - spent, 0.0):.1f} s")
    return ", ".join(parts)


def _moves(ours: list[dict]) -> str:
    """The stall row's note: where the train function moved to its optimized tier."""
    moved = [o["moved_at"] for o in ours if o.get("moved_at") is not None]
    if not moved and all(o.get("settled") for o in ours):
        return "compiled once (no second tier): the steady step is the median of the last half"
    if not moved:
        return (
            f"still on the quick tier after {MOST_STEPS} steps (its optimized compile not "
            "done): the steady step is the median of the last half"
        )
    quick = float(np.median([o["quick_s"] for o in ours]))
    return (
        f"moved to the optimized tier after step {moved[0]} (quick tier's median step "
        f"{time_text(quick)}); the steady step is the median of the {AFTER_MOVE} after the move"
    )


def main(quick: bool = False, names: list[str] | None = None, rounds: int = 1) -> list[Row]:
    """Times each model's cold start on every side, alternating their order per round.

    Args:
        quick: only :data:`QUICK`, with fewer later steps.
        names: the models (default: :data:`FAMILY_FIRST`, or :data:`QUICK`).
        rounds: fresh processes per side and model.

    Returns:
        Per model: build + first step against TF-Keras and against Keras 3, and the longest
        later step against the steady one.
    """
    names = names or (QUICK if quick else FAMILY_FIRST)
    steps = 12 if quick else STEPS
    rows = []
    for name in names:
        results: dict[str, list[dict]] = {side: [] for side in SIDES}
        for r in range(rounds):
            for side in SIDES[r % 3 :] + SIDES[: r % 3]:
                results[side].append(side_in_process(side, name, steps))
        ours = results["jaxkeras"]
        total = [o["build_s"] + o["first_s"] for o in ours]
        print(f"{name}: {json.dumps(results)}", file=sys.stderr)
        note = f"fresh processes, no compilation cache; jaxkeras: {breakdown(ours[0])}"
        for side, label, goal in (("tf_keras", "TF-Keras", 1.0), ("keras3", "Keras 3 on JAX", 0.5)):
            theirs = [t for t in results[side] if not t.get("missing")]
            if not theirs:
                continue
            reference = [t["build_s"] + t["first_s"] for t in theirs]
            rows.append(
                ratio_row(
                    f"cold {name}: build + first train step vs {label}",
                    total[: len(reference)],
                    reference,
                    goal,
                    note + f"; {label}: build {theirs[0]['build_s']:.1f} s, first step "
                    f"{theirs[0]['first_s']:.1f} s",
                )
            )
        longest = [o["longest_s"] for o in ours]
        steady = [o["steady_s"] for o in ours]
        rows.append(
            ratio_row(
                f"cold {name}: longest later step vs steady step",
                longest,
                steady,
                2.0,
                f"jaxkeras, {_moves(ours)}",
            )
        )
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--models", nargs="*")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--side", choices=SIDES)
    parser.add_argument("--model")
    parser.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(run_side(args.side, args.model, args.steps)))
    else:
        print(markdown_table(main(args.quick, args.models, args.rounds)))
