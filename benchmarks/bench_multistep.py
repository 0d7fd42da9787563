"""Multi-step calls: a tiny MLP's time per step at ``steps_per_call`` 1, 8 and 32.

A small step is dominated by what surrounds it (the Python call, feeding, dispatch, waiting for
the outputs); ``K.function(..., steps_per_call=n)`` runs ``n`` steps in one compiled
``lax.scan`` (``jaxkeras/function.py``), so that cost is paid once per ``n`` steps. The
reference is the same step with ``steps_per_call=1``; both take the same batches (the
multi-step one stacked) and return NumPy losses.

Run: ``python benchmarks/bench_multistep.py [--quick]``.
"""

from __future__ import annotations

import argparse

import numpy as np
from common import Row, interleaved, markdown_table, ratio_row

import jaxkeras as K

BATCH, WIDTH = 32, 64


def _mlp_step(steps: int):
    """An MLP (64-64-10) SGD step compiled for ``steps`` steps per call."""
    rng = np.random.default_rng(0)
    x, t = K.placeholder((None, WIDTH)), K.placeholder((None, 10))
    w1 = K.variable(rng.normal(0, WIDTH**-0.5, (WIDTH, WIDTH)).astype("float32"))
    w2 = K.variable(rng.normal(0, WIDTH**-0.5, (WIDTH, 10)).astype("float32"))
    logits = K.dot(K.relu(K.dot(x, w1)), w2)
    loss = K.mean(K.categorical_crossentropy(t, logits, from_logits=True))
    grads = K.gradients(loss, [w1, w2])
    updates = [K.update_sub(w, 0.01 * g) for w, g in zip([w1, w2], grads)]
    return K.function([x, t], [loss], updates=updates, steps_per_call=steps)


def main(quick: bool = False) -> list[Row]:
    """Time per step at 8 and 32 steps per call against 1.

    Args:
        quick: fewer repetitions.

    Returns:
        Two rows of the results table.
    """
    rng = np.random.default_rng(1)
    n_max = 32
    xs = rng.standard_normal((n_max, BATCH, WIDTH)).astype("float32")
    ts = np.eye(10, dtype="float32")[rng.integers(0, 10, (n_max, BATCH))]
    functions = {n: _mlp_step(n) for n in (1, 8, 32)}

    def run(n: int):
        f = functions[n]
        if n == 1:
            return lambda: [f([x, t]) for x, t in zip(xs, ts)]
        return lambda: [f([xs[i : i + n], ts[i : i + n]]) for i in range(0, n_max, n)]

    times = interleaved({n: run(n) for n in functions}, rounds=5 if quick else 15, warmup=2)
    per_step = {n: [t / n_max for t in times[n]] for n in functions}
    return [
        ratio_row(
            f"tiny MLP ({WIDTH}-{WIDTH}-10, batch {BATCH}) step at `steps_per_call={n}` vs 1",
            per_step[n],
            per_step[1],
            None,
            f"time per step over {n_max} steps, wall-clock: what a call costs around its step",
        )
        for n in (8, 32)
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    print(markdown_table(main(parser.parse_args().quick)))
