"""Per-call overhead of ``K.function`` and of eager ops, against plain JAX with the same contract.

Five figures, each a ratio measured in one run with the calls of both sides interleaved (CPU
time of the process, steadier than wall time on a shared machine; wall-clock time when JAX runs
on an accelerator):

1. a tiny compiled function (a 4x4 dot and one update, NumPy in, NumPy out) against a
   ``jax.jit`` function that donates the state the same way and converts the same;
2. eager ``K.sum(K.square(x) + 1)`` on a ``jax.Array`` against the same ``jax.numpy`` code,
   and other common eager ops (``K.dot``, ``K.mean(axis=-1)``, ``K.relu``, ``K.concatenate``,
   ``K.clip``, ``K.cast``, ``K.softmax``, ``K.categorical_crossentropy``) likewise, so that the
   figure is not one expression's;
3. a function with 10, 100 and 1,000 variables (each updated) against ``jax.jit`` on a list of
   as many donated arrays, and the cost per variable (the slope from 10 to 1,000);
4. the same for a predict-like function that reads 10, 100 and 1,000 variables and updates none,
   against ``jax.jit`` on a list of as many arrays;
5. the memory a compiled train step needs (XLA's buffer assignment: arguments + outputs -
   donated aliases + temporaries) against the hand-written step with the state donated;
6. the cold-start cost of eager random draws: a fresh process drawing a small model's initial
   weights (``K.random_uniform``, as Keras's ``glorot_uniform`` does, one seeded draw per
   weight) against the same draws written with ``jax.random.uniform`` by hand (wall-clock,
   separate processes, the import not counted).

Run: ``python benchmarks/bench_overhead.py [--quick]``, or through ``benchmarks/run_all.py``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import operator
import os
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from common import Row, interleaved, json_of_process, markdown_table, ratio_row, step_clock

import jaxkeras as K


def _settled(f, call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` (a call of ``K.function`` ``f``) once ``f`` runs its optimized tier: the
    background compile would otherwise land in the timed rounds (the clock is the process's
    CPU time, all threads), and the tiers' executables differ."""
    for _ in range(K.tiers.CALLS_BEFORE_OPTIMIZING + 1):
        call()
    f.wait_optimized()
    call()
    return call


def call_overhead(rounds: int, number: int) -> Row:
    """A 4x4 dot plus one update: ``K.function`` against ``jax.jit`` with donation."""
    x = K.placeholder((4, 4))
    w = K.variable(np.eye(4, dtype=np.float32))
    f = K.function([x], [K.dot(x, w)], updates=[K.update_add(w, x)])

    @functools.partial(jax.jit, donate_argnums=0)
    def step(w, x):
        return w + x, x @ w

    state = {"w": jnp.eye(4, dtype=jnp.float32)}

    def by_hand(value):
        state["w"], out = step(state["w"], np.asarray(value, np.float32))
        return [np.array(out)]

    value = np.full((4, 4), 0.5, np.float32)
    ours = _settled(f, lambda: f([value]))
    times = interleaved(
        {"K": ours, "jax": lambda: by_hand(value)}, rounds, number, clock=step_clock()
    )
    return ratio_row(
        "tiny `K.function` call (4x4 dot + 1 update, NumPy in/out)",
        times["K"],
        times["jax"],
        1.3,
        "vs `jax.jit`, same contract and donation",
    )


def _eager_pairs() -> list[tuple[str, Callable, Callable]]:
    """(figure, jaxkeras call, the same ``jax.numpy`` call) for common eager ops on 8x8 arrays.

    Each reference is the ``jax.numpy`` code the op runs (for ``K.relu``, its body: a select,
    not ``jax.nn.relu``, whose custom derivative makes it slower than both), called eagerly as
    a user would: ops of several calls (clip, softmax, crossentropy) run compiled as one."""
    rng = np.random.default_rng(0)
    x, y = (jnp.asarray(rng.normal(size=(8, 8)), jnp.float32) for _ in range(2))
    p = jnp.asarray(rng.uniform(0.1, 1.0, size=(8, 8)), jnp.float32)
    t = jax.nn.one_hot(jnp.arange(8) % 3, 8)
    pairs = [
        (
            "`K.sum(K.square(x) + 1)`",
            lambda: K.sum(K.square(x) + 1),
            lambda: jnp.sum(jnp.square(x) + 1),
        ),
        ("`K.dot(x, y)`", lambda: K.dot(x, y), lambda: jnp.dot(x, y)),
        ("`K.mean(x, axis=-1)`", lambda: K.mean(x, axis=-1), lambda: jnp.mean(x, axis=-1)),
        ("`K.relu(x)`", lambda: K.relu(x), lambda: jnp.where(x > 0.0, x, 0)),
        (
            "`K.concatenate([x, y])`",
            lambda: K.concatenate([x, y]),
            lambda: jnp.concatenate([x, y], axis=-1),
        ),
        ("`K.clip(x, -0.5, 0.5)`", lambda: K.clip(x, -0.5, 0.5), lambda: jnp.clip(x, -0.5, 0.5)),
        ("`K.cast(x, 'float16')`", lambda: K.cast(x, "float16"), lambda: x.astype(jnp.float16)),
        ("`K.softmax(x)`", lambda: K.softmax(x), lambda: jax.nn.softmax(x, axis=-1)),
        (
            "`K.categorical_crossentropy(t, p)`",
            lambda: K.categorical_crossentropy(t, p),
            lambda: (
                -jnp.sum(t * jnp.log(jnp.clip(p / p.sum(-1, keepdims=True), 1e-7, 1 - 1e-7)), -1)
            ),
        ),
    ]
    for _, ours, theirs in pairs:
        np.testing.assert_allclose(ours(), theirs(), rtol=1e-6)
    return pairs


def eager_overhead(rounds: int, number: int) -> list[Row]:
    """Eager ops on a ``jax.Array`` against the same ``jax.numpy`` code, one row per op."""
    pairs = _eager_pairs()
    fns = {}
    for i, (_, ours, theirs) in enumerate(pairs):
        fns[f"K{i}"] = lambda f=ours: f().block_until_ready()
        fns[f"jnp{i}"] = lambda f=theirs: f().block_until_ready()
    times = interleaved(fns, rounds, number, clock=step_clock())
    return [
        ratio_row(
            f"eager {figure}, 8x8 `jax.Array`",
            times[f"K{i}"],
            times[f"jnp{i}"],
            1.1,
            "vs the same `jax.numpy`",
        )
        for i, (figure, _, _) in enumerate(pairs)
    ]


def _many_variables(n: int):
    """``K.function`` and a ``jax.jit`` step over ``n`` variables, each incremented."""
    variables = [K.variable(np.zeros(4, np.float32)) for _ in range(n)]
    f = K.function([], [variables[0]], updates=[K.update_add(v, 1.0) for v in variables])

    @functools.partial(jax.jit, donate_argnums=0)
    def step(values):
        return [v + 1.0 for v in values], values[0]

    state = {"v": [jnp.zeros(4, jnp.float32) for _ in range(n)]}

    def by_hand():
        state["v"], out = step(state["v"])
        return [np.array(out)]

    return _settled(f, lambda: f([])), by_hand


def _many_reads(n: int):
    """A predict-like ``K.function`` reading ``n`` variables (updating none) and the same
    ``jax.jit`` function on a list of as many arrays, both fed and returning NumPy."""
    variables = [K.variable(np.full(4, i, np.float32)) for i in range(n)]
    x = K.placeholder((4,))
    f = K.function([x], [functools.reduce(operator.add, variables, x)])

    @jax.jit
    def predict(values, x):
        return functools.reduce(operator.add, values, x)

    values = [jnp.full(4, i, jnp.float32) for i in range(n)]
    feed = np.ones(4, np.float32)
    np.testing.assert_array_equal(f([feed])[0], np.array(predict(values, feed)))
    ours = _settled(f, lambda: f([feed]))
    return ours, (lambda: [np.array(predict(values, np.asarray(feed, np.float32)))])


def _scaling(make, what: str, reference: str, rounds: int, number: int) -> list[Row]:
    """Per-call cost of ``make(n)``'s two callables for 10, 100 and 1,000 variables, and the
    cost per variable (the slope from 10 to 1,000)."""
    counts = (10, 100, 1000)
    fns = {}
    for n in counts:
        fns[f"K{n}"], fns[f"jax{n}"] = make(n)
    times = interleaved(fns, rounds, number, clock=step_clock())
    rows = [
        ratio_row(
            f"`K.function` call, {n} variables {what}",
            times[f"K{n}"],
            times[f"jax{n}"],
            None,
            reference,
        )
        for n in counts
    ]
    span = counts[-1] - counts[0]
    ours = [(b - a) / span for a, b in zip(times["K10"], times["K1000"])]
    ref = [(b - a) / span for a, b in zip(times["jax10"], times["jax1000"])]
    slope, ref_slope = float(np.median(ours)) * 1e6, float(np.median(ref)) * 1e6
    rows.append(
        Row(
            f"per-call cost per variable {what} (slope 10 → 1,000)",
            f"{slope:.2f} µs",
            f"{ref_slope:.2f} µs",
            [a / b for a, b in zip(ours, ref)],
            note="goal: linear, ≤ 0.5 µs per variable (jaxkeras' slope)",
            verdict="yes" if slope <= 0.5 else "**no**",
        )
    )
    return rows


def variable_scaling(rounds: int, number: int) -> list[Row]:
    """Per-call cost with 10, 100 and 1,000 variables updated, and the cost per variable."""
    return _scaling(_many_variables, "updated", "vs `jax.jit` on a donated list", rounds, number)


def read_scaling(rounds: int, number: int) -> list[Row]:
    """Per-call cost with 10, 100 and 1,000 variables read (none updated), and the cost per
    variable."""
    return _scaling(_many_reads, "read", "vs `jax.jit` on a list", rounds, number)


def _peak_bytes(compiled) -> int:
    """Arguments + outputs - donated aliases + temporaries of a compiled executable."""
    m = compiled.memory_analysis()
    return (
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        - m.alias_size_in_bytes
        + m.temp_size_in_bytes
    )


def train_step_memory() -> Row:
    """XLA's buffer sizes of an MLP SGD step: ``K.function`` against hand-written, donated."""
    rng = np.random.default_rng(0)
    sizes = [256, 512, 512, 512, 10]
    weights = [rng.normal(0, 0.05, (a, b)).astype(np.float32) for a, b in itertools.pairwise(sizes)]
    batch = 128
    xv = rng.normal(size=(batch, sizes[0])).astype(np.float32)
    yv = rng.normal(size=(batch, sizes[-1])).astype(np.float32)

    def forward(ws, x, dot, tanh):
        for w in ws[:-1]:
            x = tanh(dot(x, w))
        return dot(x, ws[-1])

    vs = [K.variable(w) for w in weights]
    x, y = K.placeholder((batch, sizes[0])), K.placeholder((batch, sizes[-1]))
    loss = K.mean(K.square(forward(vs, x, K.dot, K.tanh) - y))
    grads = K.gradients(loss, vs)
    f = K.function([x, y], [loss], updates=[K.update(v, v - 0.01 * g) for v, g in zip(vs, grads)])
    f([xv, yv])
    ours = _peak_bytes(f.lower([xv, yv]).compile())

    def hand_loss(ws, x, y):
        return jnp.mean(jnp.square(forward(ws, x, jnp.dot, jnp.tanh) - y))

    @functools.partial(jax.jit, donate_argnums=0)
    def step(ws, x, y):
        loss, grads = jax.value_and_grad(hand_loss)(ws, x, y)
        return [w - 0.01 * g for w, g in zip(ws, grads)], loss

    theirs = _peak_bytes(step.lower([jnp.asarray(w) for w in weights], xv, yv).compile())
    return Row(
        "train step memory (MLP 256-512-512-512-10, batch 128, SGD)",
        f"{ours / 2**20:.2f} MiB",
        f"{theirs / 2**20:.2f} MiB",
        [ours / theirs],
        1.05,
        "vs hand-written `jax.jit`, state donated; XLA buffer assignment",
    )


# The weight shapes of a small Keras convnet (benchmarks/bench_keras2.py's digits convnet and a
# wider one): kernels and dense layers, each drawn from its own glorot bounds.
_WEIGHT_SHAPES = [(3, 3, 1, 32), (3, 3, 32, 64), (3, 3, 64, 64), (1024, 128), (128, 10)]

_COLD_DRAWS = """
import json, sys, time
import numpy as np
side = sys.argv[1]
shapes = json.loads(sys.argv[2])
if side == "K":
    import jaxkeras as K
else:
    import jax
start = time.perf_counter()
for i, shape in enumerate(shapes):
    limit = float(np.sqrt(6 / (np.prod(shape[:-1]) + shape[-1])))
    if side == "K":
        np.asarray(K.random_uniform(tuple(shape), -limit, limit, seed=i))
    else:
        key = jax.random.fold_in(jax.random.PRNGKey(0), i)
        np.asarray(jax.random.uniform(key, tuple(shape), minval=-limit, maxval=limit))
print(json.dumps(time.perf_counter() - start))
"""


def _cold_draw_seconds(side: str) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXKERAS_")}
    command = [sys.executable, "-c", _COLD_DRAWS, side, json.dumps(_WEIGHT_SHAPES)]
    return json_of_process(command, base=env)


def cold_weight_draws(rounds: int) -> Row:
    """A fresh process drawing a small model's initial weights: ``K.random_uniform`` against
    ``jax.random.uniform`` (each side compiles its generator; jaxkeras one bucketed size)."""
    ours, theirs = [], []
    for r in range(rounds):
        for side in ("K", "jax") if r % 2 == 0 else ("jax", "K"):
            (ours if side == "K" else theirs).append(_cold_draw_seconds(side))
    return ratio_row(
        f"cold start: a fresh process draws {len(_WEIGHT_SHAPES)} initial weights",
        ours,
        theirs,
        None,
        "`K.random_uniform` (bucketed eager draws, one compiled generator) vs "
        "`jax.random.uniform` per shape; wall-clock after the import, separate processes",
    )


def _rounds(quick: bool) -> int:
    """Timed rounds of each figure."""
    return 9 if quick else 21


def call_rows(quick: bool = False) -> list[Row]:
    """Figures 1-3: a tiny function's call, eager ops and a call's cost per updated variable
    (what ``make gpu-check`` reports of this module).

    Args:
        quick: fewer repetitions.

    Returns:
        Their rows.
    """
    rounds = _rounds(quick)
    rows = [
        call_overhead(rounds, 300 if quick else 1000),
        *eager_overhead(rounds, 100 if quick else 300),
    ]
    return rows + variable_scaling(rounds, 20 if quick else 50)


def main(quick: bool = False) -> list[Row]:
    """Measures every figure of this module.

    Args:
        quick: fewer repetitions.

    Returns:
        The rows of the results table.
    """
    rows = call_rows(quick)
    rows += read_scaling(_rounds(quick), 20 if quick else 50)
    rows.append(train_step_memory())
    rows.append(cold_weight_draws(3 if quick else 7))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    print(markdown_table(main(parser.parse_args().quick)))
