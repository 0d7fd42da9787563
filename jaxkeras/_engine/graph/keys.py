"""Random keys: how a random op's key derives from the global seed, its seed and its run.

One derivation (``fold_in`` twice from ``PRNGKey(base)``) serves eager draws, ``f.pure`` and
compiled calls, so all three draw the same numbers for the same run.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxkeras._xla.options import compiled_helper


def call_key(base: Any, run: Any) -> jax.Array:
    """The key a random op draws from in its run ``run`` under the global seed ``base``: the
    ``rng`` that ``f.pure`` would be given for that run (``fold_in(PRNGKey(base), run)``).

    Args:
        base: the global seed (``K.set_random_seed``).
        run: how many times the op has run before.

    Returns:
        A JAX key (raw ``uint32[2]`` data).
    """
    return jax.random.fold_in(jax.random.PRNGKey(base), run)


def node_key(rng: Any, seed: Any) -> jax.Array:
    """The key of a random op with ``seed`` in an evaluation given the key ``rng``.

    The one place a node's key is made from a call's key: ``f.pure``, state scopes, compiled
    calls and eager draws all use it, so they draw the same numbers from the same key.

    Args:
        rng: the evaluation's key.
        seed: the op's seed (any int: its low 32 bits are used; or a traced ``uint32``).

    Returns:
        A JAX key (raw ``uint32[2]`` data).
    """
    if isinstance(seed, (int, np.integer)):
        seed = int(seed) & 0xFFFFFFFF
    return jax.random.fold_in(rng, seed)


def derive_key(base: Any, seed: Any, run: Any) -> jax.Array:
    """The key of run ``run`` of a random op with ``seed``, under the global seed ``base``:
    ``node_key(call_key(base, run), seed)``.

    Used eagerly and inside compiled functions (where all three are traced), so both draw the
    same numbers for the same run.

    Args:
        base: the global seed (``K.set_random_seed``).
        seed: the op's seed.
        run: how many times the op has run before.

    Returns:
        A JAX key (raw ``uint32[2]`` data).
    """
    return node_key(call_key(base, run), seed)


def _key_of_table(table: jax.Array) -> jax.Array:
    """:func:`derive_key` on ``uint32[3]`` ``(base, seed, run)``."""
    return derive_key(table[0], table[1], table[2])


def eager_key(base: int, seed: int, run: int) -> jax.Array:
    """``derive_key(base, seed, run)`` for Python ints, as one call of one compiled function
    (op by op it would compile three small computations in a fresh process).

    Args:
        base: the global seed, in ``[0, 2**32)``.
        seed: the op's seed (any int; its low 32 bits are used, as in :func:`derive_key`).
        run: how many times the op has run before, in ``[0, 2**32)``.

    Returns:
        A JAX key (raw ``uint32[2]`` data, or the size of another implementation's keys).
    """
    compiled = compiled_helper(_key_of_table)
    return compiled(np.array([base, seed & _MASK, run & _MASK], dtype=np.uint32))


_MASK = 0xFFFFFFFF


# The run table: what a compiled function's random ops derive their keys from, one runtime
# uint32 argument ``[base, seed_1, run_1, ..., seed_n, run_n]`` (the seeds travel as values,
# not constants, so that the same graph built with other seeds compiles to the same program,
# which JAX's compilation cache can share across processes). Built by the store
# (``Store.take_runs``), read inside the trace (:func:`table_keys`), advanced per step of a
# multi-step call (:func:`advanced_runs`) and sized for lowering (:func:`empty_run_table`): here
# only.


def run_table(base: int, entries: Any) -> np.ndarray:
    """The run table of a call.

    Args:
        base: the global seed.
        entries: ``(seed, run)`` per random op, in the function's order (any ints: their low 32
            bits are used).

    Returns:
        A ``uint32`` array of ``1 + 2 * len(entries)`` values.
    """
    table = [base & _MASK]
    for seed, run in entries:
        table += (seed & _MASK, run & _MASK)
    return np.asarray(table, dtype=np.uint32)


def empty_run_table(count: int) -> np.ndarray:
    """A run table of ``count`` random ops with every entry 0 (to lower a function for).

    Args:
        count: the number of random ops.

    Returns:
        A ``uint32`` array of :func:`run_table`'s size.
    """
    return np.zeros(1 + 2 * count, np.uint32)


def table_keys(table: Any, count: int) -> list[jax.Array]:
    """The keys of the ``count`` random ops of a run table, in order (inside a trace: the table
    is a traced argument).

    Args:
        table: a :func:`run_table` (or its tracer).
        count: the number of random ops.

    Returns:
        One key per op: :func:`derive_key` of the base, its seed and its run.
    """
    return [derive_key(table[0], table[2 * i + 1], table[2 * i + 2]) for i in range(count)]


def advanced_runs(table: Any, steps: Any) -> Any:
    """``table`` with every op's run ``steps`` later (step ``steps`` of a multi-step call
    counts its runs after the earlier steps', as separate calls count them).

    Args:
        table: a traced :func:`run_table`.
        steps: a traced ``uint32`` count.

    Returns:
        The advanced table.
    """
    return table.at[2::2].add(steps.astype(table.dtype))
