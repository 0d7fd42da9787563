"""The accelerator check: one table of what matters on a GPU, in one run of a few minutes.

``make gpu-check`` runs it on the machine's default JAX platform and writes
``benchmarks/RESULTS-gpu.md``:

- the train steps of ``bench_steps.py`` (an MLP and a convnet, ``K.function`` against
  hand-written ``jax.jit``), at the batch sizes that keep an accelerator busy;
- the mixed-precision rows of ``bench_mixed.py`` (each policy against float32 and against
  hand-written JAX with the same casts);
- the multi-step rows of ``bench_multistep.py``;
- what a call costs around the device's work (``bench_overhead.py``): a tiny ``K.function``
  and eager ops against ``jax.jit`` and ``jax.numpy``, and the cost per variable of a call;
- a Keras 2.3.1 model's ``fit`` on jaxkeras (the digits convnet of ``bench_keras2.py``, in its
  own process): its first epoch (build, compile, one epoch) and a later epoch.

On a CPU (``JAX_PLATFORMS=cpu``) it runs the same at the CPU's sizes; ``--quick`` (fewer
repetitions, what ``make test`` runs so that the script cannot rot) keeps it to a few minutes
there too. Run: ``python benchmarks/gpu_check.py [--quick] [--output FILE]``.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

import bench_cold
import bench_mixed
import bench_multistep
import bench_overhead
import bench_steps
import jax
from common import Row, json_of_process, markdown_table, time_text

HERE = Path(__file__).resolve().parent
COLD_MODEL = "MobileNet"  # the zoo model of the cold-start rows: a family whose first step is quick


def keras_fit_row(epochs: int) -> Row:
    """Keras 2.3.1's ``fit`` of the digits convnet on jaxkeras, in a fresh process: a later
    epoch's time over the first epoch's (build + compile + one epoch).

    :func:`main` runs it first, before this process has started JAX's backend: the fit then has
    the GPU to itself, and its process takes the GPU's memory as any JAX program does.
    """
    command = [sys.executable, HERE / "bench_keras2.py", "--side", "jaxkeras"]
    command += ["--epochs", str(epochs), "--steps", "0"]
    convnet = json_of_process(command, {"KERAS_BACKEND": "jaxkeras"})["convnet"]
    later = sorted(convnet["epochs_s"][1:])[len(convnet["epochs_s"][1:]) // 2]
    return Row(
        figure="Keras 2.3.1 digits convnet `fit`: a later epoch vs the first (with its compile)",
        ours=time_text(later),
        reference=time_text(convnet["first_s"]),
        ratios=[later / convnet["first_s"]],
        note=f"accuracy {convnet['accuracy']:.3f}; train function compiled "
        f"{convnet['traces']}x; batch 32",
    )


def cold_rows(processes: int = 3) -> list[Row]:
    """The cold start on the default platform, ``processes`` fresh processes each: the digits
    convnet's first epoch (build, compile and one epoch of Keras 2.3.1's ``fit``) and a zoo
    model's build and first train step (``bench_cold``, with JAX's trace, lowering and compile
    times), as the slowest over the quickest process, the spread's figures in the note."""
    convnet, zoo = [], []
    for _ in range(processes):
        command = [sys.executable, HERE / "bench_keras2.py", "--side", "jaxkeras"]
        command += ["--epochs", "1", "--steps", "0"]
        convnet.append(json_of_process(command, {"KERAS_BACKEND": "jaxkeras"})["convnet"])
        zoo.append(bench_cold.side_in_process("jaxkeras", COLD_MODEL, 3, platforms=None))
    firsts = sorted(c["first_s"] for c in convnet)
    totals = sorted(z["build_s"] + z["first_s"] for z in zoo)
    middle = sorted(zoo, key=lambda z: z["build_s"] + z["first_s"])[processes // 2]
    spread = [
        ("Keras 2.3.1 digits convnet `fit`: build + compile + first epoch", firsts, ""),
        (
            f"{COLD_MODEL} (Keras 2.3.1): build + first train step",
            totals,
            "; median process: " + bench_cold.breakdown(middle),
        ),
    ]
    return [
        Row(
            figure=f"cold start, {processes} fresh processes: {what}, slowest vs quickest",
            ours=time_text(times[-1]),
            reference=time_text(times[0]),
            ratios=[times[-1] / times[0]],
            note="min / median / max "
            + " / ".join(time_text(t) for t in (times[0], times[len(times) // 2], times[-1]))
            + extra,
        )
        for what, times, extra in spread
    ]


def main(quick: bool = False) -> list[Row]:
    """Every row of the check.

    Args:
        quick: fewer repetitions and epochs.

    Returns:
        The rows.
    """
    fit = keras_fit_row(2 if quick else 4)  # first: see there
    cold = cold_rows(1 if quick else 3)  # fresh processes too, before this one takes the GPU
    rows = bench_steps.main(quick)
    rows += bench_mixed.main(quick)
    rows += bench_multistep.main(quick)
    rows += bench_overhead.call_rows(quick)
    rows.append(fit)
    return rows + cold


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--output", help="write the table there too")
    cli = parser.parse_args()
    started = time.perf_counter()
    table = markdown_table(main(cli.quick))
    devices = ", ".join(sorted({d.device_kind for d in jax.devices()}))
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = (
        "# Accelerator check (`make gpu-check`)\n\n"
        f"- date: {now}; JAX {jax.__version__} on {jax.default_backend()} ({devices}); "
        f"mode: {'quick' if cli.quick else 'full'}; {time.perf_counter() - started:.0f} s\n\n"
        + table
        + "\n"
    )
    print(text)
    if cli.output:
        Path(cli.output).write_text(text, encoding="utf-8")
