"""Runs every benchmark and prints ONE markdown table of ratios; writes it to RESULTS.md.

Each benchmark module (``bench_*.py`` beside this file) plugs in through ``main(quick)``,
which returns a list of ``common.Row``; each runs in a fresh process (its own JAX start-up, so
that no module's JAX flags or compiled state reach another). Every row is a ratio of jaxkeras
against a reference measured in the same run (interleaved repetitions; median with min-max).
The results file's hand-kept section ("## Design measurements (by hand)", at its end) is
carried over unchanged.

Run: ``python benchmarks/run_all.py [--quick] [--only NAME ...] [--output FILE]``
(``make bench`` / ``make bench-quick``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from common import Row, json_of_process, markdown_table

HERE = Path(__file__).resolve().parent
MODULES = [
    "bench_overhead",
    "bench_lstm",
    "bench_steps",
    "bench_conv",
    "bench_keras2",
    "bench_keras3",
    "bench_zoo",
    "bench_cold",
    "bench_decode",
    "bench_demo",
    "bench_mixed",
    "bench_multistep",
    "bench_checkpoint",
    "bench_threads",
]
HAND_KEPT = "## Design measurements (by hand)"
"""The heading of the results file's hand-kept section: it and everything after it survive a
rerun (see :func:`results_text`)."""


def machine() -> str:
    """A line describing this machine and the software measured."""
    import jax

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores visible, {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}, jax {jax.__version__} on "
        f"{jax.devices()[0].device_kind}"
    )


def commit() -> str:
    """The checked-out commit (with ``+dirty`` when the tree has changes)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=HERE, capture_output=True, text=True, check=False
        ).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def results_text(generated: str, old: Path) -> str:
    """``generated``, followed by the hand-kept section of the results file at ``old``: its
    :data:`HAND_KEPT` heading line and everything after it, unchanged (nothing when the file
    or the heading is missing)."""
    try:
        lines = old.read_text(encoding="utf-8").splitlines(keepends=True)
    except OSError:
        return generated
    for i, line in enumerate(lines):
        if line.rstrip() == HAND_KEPT:
            kept = "".join(lines[i:])
            return generated.rstrip("\n") + "\n\n" + kept.rstrip("\n") + "\n"
    return generated


def run_module(name: str, quick: bool) -> list[Row] | None:
    """Runs ``name.main(quick)`` in a fresh process; its rows, or ``None`` when it failed."""
    command = [sys.executable, __file__, "--module", name] + (["--quick"] if quick else [])
    try:
        rows = json_of_process(command, quiet=False)  # its progress and errors show
    except RuntimeError:
        return None
    return [Row(**row) for row in rows]


def main() -> None:
    """Runs the benchmarks, prints the table and writes the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    parser.add_argument("--only", nargs="*", default=None, help="module names to run")
    parser.add_argument("--output", default=str(HERE / "RESULTS.md"), help="results file")
    parser.add_argument("--module", help=argparse.SUPPRESS)  # in the child: run one, print JSON
    args = parser.parse_args()
    if args.module:
        rows = importlib.import_module(args.module).main(quick=args.quick)
        print(json.dumps([dataclasses.asdict(row) for row in rows]))
        return
    rows, failed, started = [], [], time.perf_counter()
    for name in args.only or MODULES:
        if not (HERE / f"{name}.py").exists():
            continue
        print(f"running {name} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        found = run_module(name, args.quick)  # a broken one must not lose the others' figures
        if found is None:
            failed.append(name)
        rows += found or []
        print(f"  {name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    table = markdown_table(rows)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = [
        "# Benchmark results",
        "",
        f"- date: {now}; commit: {commit()}; mode: {'quick' if args.quick else 'full'}",
        f"- machine: {machine()}",
        f"- total time: {time.perf_counter() - started:.0f} s"
        + (f"; FAILED: {', '.join(failed)}" if failed else ""),
        "- ratio: jaxkeras over the reference (lower is better), one per interleaved "
        "repetition; median (min-max). Regenerate with `make bench` (`make bench-quick`).",
        "",
    ]
    text = "\n".join(header) + "\n" + table + "\n"
    print(text)
    output = Path(args.output)
    output.write_text(results_text(text, output), encoding="utf-8")


if __name__ == "__main__":
    main()
