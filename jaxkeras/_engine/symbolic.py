"""Later shapes traced once: a program exported with symbolic sizes, lowered per new shape.

A function called with a new shape each time (an autoregressive decode whose sequences grow by
one token per call, its batch shrinking as sequences end) traces its graph and lowers it to
MLIR once per shape, before XLA compiles it. Neither depends on the sizes that change: the
program is the same for every length. :class:`SymbolicSizes` traces it once with those sizes
as symbols (``jax.export`` with symbolic shapes) and then lowers that export for each new
shape, which takes a fraction of a trace and a lowering (``benchmarks/RESULTS.md``, "Design
measurements (by hand)", "many shapes"). XLA compiles each shape as before, and the compiled
program computes what the shape's own trace would (tested bit for bit).

Only the sizes seen to change are symbols, and sizes that have changed together (a batch
shared by the inputs and targets) are one symbol. A program that cannot be exported so (a
Python branch on a size, a callback, a sharded argument) is traced per shape, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

FROM_SIGNATURE = 3
"""The first signature (counting a function's first) that the export serves. A function
called with two shapes (a smaller last batch) traces each, as before: the export would cost
it a trace and a lowering of its own. A third shape shows a function that takes many."""


class SymbolicSizes:
    """One function's program (one learning phase and dtype policy) exported with the sizes
    that change between its signatures as symbols, and compiled per new signature from that.

    Args:
        run: the traced function (flat arguments to a flat tuple).
        donated: its donated argument indices.
    """

    def __init__(self, run: Callable[..., Any], donated: tuple[int, ...]) -> None:
        self._run, self._donated = run, donated
        self._seen: dict[tuple, None] = {}  # every signature's argument shapes, in order
        self._groups: tuple | None = None  # the symbols of the export in hand
        self._call: Any = None  # the jitted call of that export
        self._failed = False  # the program cannot be exported with symbolic sizes
        self._unknown: frozenset[tuple[int, int]] = frozenset()

    def plan(self, unknown: frozenset[tuple[int, int]], exportable: bool = True) -> None:
        """Says what the program is known to be before any export is tried.

        Args:
            unknown: the places ``(argument, axis)`` whose sizes may change from call to call
                (its inputs' unknown batch sizes). The export takes them as symbols before they
                have changed, so that a size that changes later (a batch that shrinks after
                many calls whose lengths grew) needs no export of its own. Where the program
                cannot be exported so, only the sizes that did change are symbols.
            exportable: ``False`` for a program that calls Python back, which ``jax.export``
                does not take: each shape is then traced, with no export tried.
        """
        self._unknown = unknown
        self._failed = not exportable

    def saw(self, args: Sequence[Any]) -> None:
        """Counts a signature that runs an executable of its own (the first one's, or one
        compiled ahead with it).

        Args:
            args: the call's flat arguments.
        """
        self._seen[tuple(np.shape(a) for a in args)] = None

    def compiled(self, args: Sequence[Any], options: Any) -> Any | None:
        """The executable for a new signature, compiled from the export, or ``None`` where the
        caller traces it itself (before :data:`FROM_SIGNATURE`, or when the program or this
        signature cannot be served).

        Args:
            args: the call's flat arguments (concrete arrays).
            options: XLA's options for its compile (the same for every call).

        Returns:
            A ``jax.stages.Compiled`` for ``args``' signature, or ``None``.
        """
        self.saw(args)
        if self._failed or len(self._seen) < FROM_SIGNATURE or not all(map(_plain, args)):
            return None
        signatures = list(self._seen)
        groups = _symbol_groups(signatures, self._unknown)
        if groups is None:
            return None
        if groups != self._groups:  # a size changed that the export holds fixed: export anew
            self._call = self._exported(args, groups, options)
            if self._call is None and self._unknown:
                self._unknown = frozenset()  # (a program that reads an unknown size as a number)
                fewer = _symbol_groups(signatures, self._unknown)
                if fewer != groups:
                    groups = fewer
                    self._call = self._exported(args, groups, options)
            self._groups = groups
            if self._call is None:
                self._failed = True
                return None
        try:
            return self._call.lower(*args).compile()
        except Exception:  # e.g. a size the program needs to be even: trace this one itself
            return None

    def _exported(self, args: Sequence[Any], groups: tuple, options: Any) -> Any | None:
        """``jax.jit`` of the call of ``run`` exported with a symbol per group of positions,
        or ``None`` when ``run`` cannot be exported so."""
        symbols = jax.export.symbolic_shape(", ".join(f"d{k}" for k in range(len(groups))))
        where = {place: symbols[k] for k, places in enumerate(groups) for place in places}
        specs = [
            jax.ShapeDtypeStruct(
                tuple(where.get((i, j), size) for j, size in enumerate(np.shape(a))),
                a.dtype,
                weak_type=getattr(a, "weak_type", False),
            )
            for i, a in enumerate(args)
        ]
        try:
            exported = jax.export.export(jax.jit(self._run))(*specs)
        except Exception:  # a size used as a Python number, a callback, ...
            return None
        return jax.jit(exported.call, donate_argnums=self._donated, compiler_options=options)


def _plain(value: Any) -> bool:
    """Whether ``value`` is an argument the export takes: an array on one device, not a
    tracer."""
    if isinstance(value, np.ndarray):
        return True
    return (
        isinstance(value, jax.Array)
        and not isinstance(value, jax.core.Tracer)
        and len(value.sharding.device_set) == 1
    )


def _symbol_groups(signatures: list[tuple], unknown: frozenset) -> tuple | None:
    """The places ``(argument, axis)`` whose sizes differ between ``signatures`` or are
    ``unknown``, grouped by the sizes they took (places that always had equal sizes share a
    symbol), ordered; ``None`` when an argument's rank changed (no export serves both)."""
    first = signatures[0]
    if any(len(s) != len(first) or list(map(len, s)) != list(map(len, first)) for s in signatures):
        return None
    by_sizes: dict[tuple, list] = {}
    for i, shape in enumerate(first):
        for j in range(len(shape)):
            sizes = tuple(s[i][j] for s in signatures)
            if len(set(sizes)) > 1 or (i, j) in unknown:
                by_sizes.setdefault(sizes, []).append((i, j))
    return tuple(tuple(places) for places in by_sizes.values())
