"""What every benchmark module shares: interleaved timing and the rows of the results table.

Each module's ``main(quick)`` returns a list of :class:`Row`; ``benchmarks/run_all.py`` prints
them as one markdown table. A row compares jaxkeras with a reference measured in the same run
(calls of the two interleaved, so that load from other processes falls on both alike): its
ratio is jaxkeras' time (or bytes) over the reference's, one ratio per repetition, reported as
the median with the minimum and maximum.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Row:
    """One figure of the results table.

    Attributes:
        figure: what is measured.
        ours: jaxkeras' median, formatted with its unit.
        reference: the reference's median, formatted.
        ratios: one ratio (ours over reference) per repetition.
        goal: the largest acceptable median ratio, or ``None`` where there is no goal.
        note: what the reference is, sizes, caveats.
        verdict: overrides :meth:`met` where the goal is not a ratio (e.g. µs per variable).
    """

    figure: str
    ours: str
    reference: str
    ratios: Sequence[float]
    goal: float | None = None
    note: str = ""
    verdict: str | None = None

    @property
    def ratio(self) -> float:
        """The median ratio."""
        return float(np.median(self.ratios))

    def met(self) -> str:
        """``'yes'``/``'no'`` against the goal, ``''`` without one."""
        if self.verdict is not None:
            return self.verdict
        if self.goal is None:
            return ""
        return "yes" if self.ratio <= self.goal else "**no**"

    def cells(self) -> list[str]:
        """The row's markdown cells."""
        low, high = min(self.ratios), max(self.ratios)
        spread = f" ({low:.2f}-{high:.2f})" if len(self.ratios) > 1 else ""
        goal = "" if self.goal is None else f"≤ {self.goal:g}x"
        return [
            self.figure,
            self.ours,
            self.reference,
            f"{self.ratio:.2f}{spread}",
            goal,
            self.met(),
            self.note,
        ]


HEADER = ["figure", "jaxkeras", "reference", "ratio: median (min-max)", "goal", "met", "note"]


def markdown_table(rows: Sequence[Row]) -> str:
    """The rows as one markdown table.

    Args:
        rows: the rows.

    Returns:
        The table's text.
    """
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines)


def interleaved(
    fns: dict[str, Callable[[], Any]],
    rounds: int,
    number: int = 1,
    warmup: int = 2,
    clock: str = "wall",
) -> dict[str, list[float]]:
    """Seconds per call of each function, one figure per round, calls interleaved.

    Each round times ``number`` calls of every function, in an order shuffled anew each round
    (seeded, so a run repeats). Not rotated: in a rotation each function always follows the
    same one, and on the process's CPU clock a function timed just after an XLA:CPU product
    is charged for the CPU time its worker threads spend after it (eager ``K.mean`` right
    after ``jnp.dot``: 1.39-1.48x ``jnp.mean`` rotated, 1.11-1.14x shuffled; 2026-12-07).

    Args:
        fns: name -> a function of no arguments (it must wait for its result).
        rounds: how many repetitions.
        number: calls per function per round.
        warmup: untimed calls of each function first (compilation).
        clock: ``'wall'`` (``time.perf_counter_ns``) or ``'cpu'`` (``time.process_time_ns``:
            the CPU time of all the process's threads, which load from other processes on a
            shared machine disturbs less).

    Returns:
        name -> one time per round, in seconds per call.
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    now = {"wall": time.perf_counter_ns, "cpu": time.process_time_ns}[clock]
    names = list(fns)
    times: dict[str, list[float]] = {name: [] for name in names}
    order = random.Random(0)
    for _ in range(rounds):
        for name in order.sample(names, len(names)):
            fn = fns[name]
            start = now()
            for _ in range(number):
                fn()
            times[name].append((now() - start) / number / 1e9)
    return times


def json_of_process(
    command: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    base: Mapping[str, str] | None = None,
    quiet: bool = True,
) -> Any:
    """Runs ``command`` in a fresh process and returns the JSON value its last output line holds.

    A benchmark's other side (TF-Keras, Keras 2.3.1, a cold interpreter) runs this way, in its
    own interpreter, and prints its results as one JSON line last.

    Args:
        command: the program and its arguments.
        env: variables set over the environment ``base``.
        base: the environment to start from (default: this process's).
        quiet: capture the process's error output (shown only when it fails); ``False`` lets it
            through, for progress messages.

    Returns:
        The parsed JSON value.

    Raises:
        RuntimeError: the process failed; the message ends with its last error output.
    """
    out = subprocess.run(
        [str(part) for part in command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if quiet else None,
        text=True,
        env=dict(os.environ if base is None else base, **(env or {})),
        check=False,
    )
    if out.returncode != 0:
        tail = (out.stderr or "")[-3000:]
        raise RuntimeError(f"{' '.join(map(str, command[:3]))} ... failed:\n{tail}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def on_optimized_tier(f: Any, call: Callable[[], Any]) -> str:
    """Calls ``call`` (a call of the ``K.function`` ``f``) until ``f`` runs its optimized
    compile (``jaxkeras/tiers.py``: the quick compile first, XLA's default options from a later
    call), so that a timing set against hand-written ``jax.jit`` compares the same options and
    no background compile competes with it.

    Args:
        f: the ``K.function``.
        call: one call of it.

    Returns:
        Which compile the later calls run, for a row's note: ``'optimized tier'``, or
        ``'only compile'`` where tiering is off or has no second tier here.
    """
    from jaxkeras import tiers

    for _ in range(tiers.CALLS_BEFORE_OPTIMIZING + 1):  # the optimized tier compiles ...
        call()
    f.wait_optimized()  # ... and the next call takes it
    call()
    optimized = f.compiler_options == tiers.optimized_options()
    return "optimized tier" if optimized and tiers.has_second_tier() else "only compile"


def on_cpu() -> bool:
    """Whether JAX runs on the CPU here (not on an accelerator), which sets the benchmarks'
    sizes, clock and tolerances.

    Returns:
        ``True`` on the CPU.
    """
    import jax

    return jax.default_backend() == "cpu"


def step_clock() -> str:
    """The clock for timing compiled steps: CPU time when JAX runs on the CPU (load from other
    processes disturbs it less), wall-clock on an accelerator (the host's CPU time says nothing
    of the device's work).

    Returns:
        ``'cpu'`` or ``'wall'``, for :func:`interleaved`.
    """
    return "cpu" if on_cpu() else "wall"


def agreement_rtol(cpu_rtol: float) -> float:
    """The relative tolerance for checking that jaxkeras and its reference compute the same:
    ``cpu_rtol`` on the CPU; on an accelerator at least 1e-2, since JAX's default precision lets
    float32 products there run in TF32 (10-bit mantissas), where summation order shows.

    Args:
        cpu_rtol: the tolerance on the CPU.

    Returns:
        The tolerance for the platform JAX runs on.
    """
    return cpu_rtol if on_cpu() else max(cpu_rtol, 1e-2)


def time_text(seconds: float) -> str:
    """A duration with a readable unit (µs, ms or s)."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def ratio_row(
    figure: str,
    ours: Sequence[float],
    reference: Sequence[float],
    goal: float | None = None,
    note: str = "",
) -> Row:
    """A row from per-round times of jaxkeras and its reference (paired by round).

    Args:
        figure: what is measured.
        ours: jaxkeras' seconds, one per round.
        reference: the reference's seconds, one per round.
        goal: the largest acceptable median ratio.
        note: what the reference is.

    Returns:
        The :class:`Row`.
    """
    ratios = [a / b for a, b in zip(ours, reference)]
    return Row(
        figure,
        time_text(float(np.median(ours))),
        time_text(float(np.median(reference))),
        ratios,
        goal,
        note,
    )
