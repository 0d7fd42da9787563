"""Threads: throughput of a compiled K.function called from 4 threads against 1 thread.

A function without updates only reads the variable store, so calls from several threads run
concurrently (they share the store's lock); a function with updates holds the lock exclusively
from reading the state to committing it, so its calls take turns (and lose no update). The
work per call is a moderately sized matmul, ``tanh(x @ w)`` with ``x`` of shape (128, 512) and
``w`` of shape (512, 512), so that a call is not all Python overhead. Each variant runs for
``--seconds`` after a warm-up call; the script prints calls per second and the ratio
(4 threads / 1 thread) as rows of the results table (``benchmarks/run_all.py``, which runs it
in its own process). XLA runs each call on one core here (``XLA_FLAGS`` gets
``--xla_cpu_multi_thread_eigen=false`` before JAX starts, unless a program started it first),
so the ratio shows what the store's lock lets run at once: ideally ``min(4, cores)`` for the
read-only function and 1 for the updating one.

Run: ``python benchmarks/bench_threads.py [--seconds S]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

SINGLE_THREADED_XLA = "--xla_cpu_multi_thread_eigen=false"
if SINGLE_THREADED_XLA not in os.environ.get("XLA_FLAGS", ""):  # read when JAX starts its CPU
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {SINGLE_THREADED_XLA}".strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402
from common import Row, markdown_table  # noqa: E402

import jaxkeras as K  # noqa: E402

BATCH, WIDTH = 128, 512


def make_functions() -> tuple[K.Function, K.Function, np.ndarray, K.Variable]:
    """The read-only function, the updating one, a feed, and the updated counter."""
    rng = np.random.default_rng(0)
    w = K.variable(rng.normal(0, 0.05, (WIDTH, WIDTH)), name="w")
    calls = K.variable(0.0, name="calls")
    x = K.placeholder((BATCH, WIDTH))
    y = K.sum(K.tanh(K.dot(x, w)))
    read_only = K.function([x], [y])
    updating = K.function([x], [y], updates=[K.update_add(calls, 1.0)])
    feed = rng.normal(size=(BATCH, WIDTH)).astype(np.float32)
    return read_only, updating, feed, calls


def throughput(f: K.Function, feed: np.ndarray, threads: int, seconds: float) -> tuple[float, int]:
    """Calls per second of ``f([feed])`` from ``threads`` threads for ``seconds``.

    Returns:
        ``(calls per second, total calls)``.
    """
    counts = [0] * threads
    start = threading.Barrier(threads + 1)
    deadline = [0.0]

    def work(i: int) -> None:
        start.wait()
        n = 0
        while time.perf_counter() < deadline[0]:
            f([feed])
            n += 1
        counts[i] = n

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    began = time.perf_counter()
    deadline[0] = began + seconds
    start.wait()
    for t in workers:
        t.join()
    elapsed = time.perf_counter() - began
    return sum(counts) / elapsed, sum(counts)


def main(quick: bool = False, seconds: float | None = None) -> list[Row]:
    """Runs the benchmark and prints it.

    Args:
        quick: shorter runs (1.5 s per variant instead of 3).
        seconds: the time per variant, overriding ``quick``.

    Returns:
        Rows of the results table (``benchmarks/run_all.py``): 4-thread over 1-thread
        throughput, higher is better.
    """
    seconds = seconds or (1.5 if quick else 3.0)
    read_only, updating, feed, calls = make_functions()
    for f in (read_only, updating):
        f([feed])  # compile outside the timings
    print(
        f"jax {jax.__version__} on {jax.devices()[0].device_kind} ({os.cpu_count()} cores); "
        f"tanh(x @ w), x {BATCH}x{WIDTH}, w {WIDTH}x{WIDTH}; {seconds:g} s per variant; "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}",
        file=sys.stderr,
    )
    rows = []
    for label, f, goal in [
        ("read-only K.function", read_only, "> 1 (calls run concurrently), up to min(4, cores)"),
        ("K.function with updates", updating, "about 1 (calls take turns)"),
    ]:
        before = float(K.get_value(calls))
        one, n_one = throughput(f, feed, 1, seconds)
        four, n_four = throughput(f, feed, 4, seconds)
        if f is updating:  # every call's update was committed
            assert float(K.get_value(calls)) - before == n_one + n_four
        rows.append(
            Row(
                f"threads: {label}, 4 threads vs 1 (throughput)",
                f"{four:.1f} calls/s",
                f"{one:.1f} calls/s",
                [four / one],
                note=f"throughput ratio, higher is better; expected {goal}",
            )
        )
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time per variant")
    print(markdown_table(main(seconds=parser.parse_args().seconds)))
