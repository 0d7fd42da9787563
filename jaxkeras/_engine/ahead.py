"""Compiling ahead: the other batch sizes of a loop, while the first one compiles.

A training loop over ``n`` samples in batches of ``b`` feeds two shapes: ``b`` and, unless
``b`` divides ``n``, the last batch's ``n % b``. XLA compiles each shape on its own, and the
second compile used to wait until the end of the first epoch. A loop that announces its batch
sizes (:func:`plan_batch_sizes`; Keras 2's fit, evaluate and predict loops do, see
:mod:`jaxkeras.keras2`) lets a ``K.function`` compiled for one of them compile the others in a
background thread, at the same time: XLA's compiler runs without Python's lock, so the two
compiles overlap on two cores. The background compile is the one the later call would have
made (JAX reuses it: same trace, same executable); it changes no state, and an error in it is
dropped, to be raised by the call that meets it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable
from typing import Any

import jax
import numpy as np

from jaxkeras._engine.graph.base import is_int
from jaxkeras._engine.graph.runtime import DISTRIBUTION

__all__ = ["Ahead", "batch_of", "plan_batch_sizes", "planned_batch_sizes"]

_plan: dict[str, frozenset[int]] = {"sizes": frozenset()}


def plan_batch_sizes(sizes: Iterable[int]) -> None:
    """Announces the batch sizes the functions called next will be fed, replacing the last
    announcement.

    Args:
        sizes: positive ints, e.g. ``{32, 5}`` for 1,797 samples in batches of 32.

    Raises:
        ValueError: for a size that is not a positive int.
    """
    sizes = list(sizes)
    if not all(is_int(s) and s >= 1 for s in sizes):
        raise ValueError(f"plan_batch_sizes: sizes must be positive ints, got {sizes!r}")
    _plan["sizes"] = frozenset(map(int, sizes))


def planned_batch_sizes() -> frozenset[int]:
    """Returns the batch sizes last announced by :func:`plan_batch_sizes`."""
    return _plan["sizes"]


def batch_of(feeds: Iterable[Any]) -> int | None:
    """The leading size of the first feed with one (``None`` when no feed is an array)."""
    for feed in feeds:
        shape = getattr(feed, "shape", ())
        if shape:
            return shape[0]
    return None


def _spec(value: Any, batch: int | None = None) -> Any:
    """What lowering for ``value`` needs, with its leading size replaced by ``batch``; ``None``
    for a value that is not a plain array. A NumPy array stays one (small: a batch of zeros),
    so that the background trace and the later call look up the same compiled executable."""
    shape = value.shape if batch is None else (batch, *value.shape[1:])
    if isinstance(value, np.ndarray):
        return value if batch is None else np.zeros(shape, value.dtype)
    if isinstance(value, jax.Array):
        sharding = value.sharding if value.committed else None
        return jax.ShapeDtypeStruct(
            shape, value.dtype, sharding=sharding, weak_type=value.weak_type
        )
    return None


def planned_specs(args: tuple, n_feeds: int) -> list[tuple]:
    """What lowering a function needs for its first call's arguments (the feeds last) and for
    each other planned batch size: one tuple of argument specs per batch size.

    Args:
        args: the first call's flat arguments.
        n_feeds: how many of ``args`` are feeds.

    Returns:
        The first call's specs, then one per other planned size; empty when an argument is not
        a plain array.
    """
    fixed, feeds = args[: len(args) - n_feeds], args[len(args) - n_feeds :]
    batch = batch_of(feeds)
    plan = planned_batch_sizes()
    sizes = sorted(plan.difference((batch,))) if batch in plan else []
    jobs = []
    for size in [None, *sizes]:
        fed = [
            _spec(f, size if size is not None and f.shape[:1] == (batch,) else None) for f in feeds
        ]
        jobs.append((*(_spec(a) for a in fixed), *fed))
    return [] if any(s is None for job in jobs for s in job) else jobs


class Ahead:
    """The other planned batch sizes of a function's first call, compiled in the background
    by :meth:`compile_beside`.

    Args:
        compiled: the function's ``jax.jit`` object.
        args: the flat arguments of its first call, the feeds last.
        n_feeds: how many of ``args`` are feeds.
    """

    def __init__(self, compiled: Any, args: tuple, n_feeds: int) -> None:
        self._compiled, self._args, self._n_feeds = compiled, args, n_feeds
        fixed, feeds = args[: len(args) - n_feeds], args[len(args) - n_feeds :]
        batch = batch_of(feeds)
        plan = planned_batch_sizes()
        self.sizes = plan.difference((batch,)) if batch in plan else frozenset()
        specs = [_spec(a) for a in fixed]
        jobs = []
        if all(s is not None for s in specs):
            for size in sorted(self.sizes):
                fed = [_spec(f, size if f.shape[:1] == (batch,) else None) for f in feeds]
                if all(f is not None for f in fed):
                    jobs.append((*specs, *fed))
        if not jobs:  # nothing planned, or no plain arrays to lower for
            self.sizes, self._thread = frozenset(), None
            return
        # the thread traces in the caller's distribution scope (scopes are per thread)
        where = DISTRIBUTION.current()
        self._thread = threading.Thread(target=_compile_all, args=(compiled, jobs, where))

    def compile_beside(self) -> None:
        """Compiles the first call's size, and the other sizes in the background: that thread
        starts once the first size is lowered (tracing and lowering hold Python's lock, XLA's
        compile does not). The first call then finds its executable compiled.

        Raises:
            Whatever tracing, lowering or compiling the first call raises (what it would).
        """
        lowered = self._compiled.lower(*self._args)
        self._args = None  # the state's buffers: not to be held beyond the first call
        if self._thread is not None:
            self._thread.start()
        lowered.compile()

    def wait(self, args: list) -> bool:
        """Waits for the background compiles when a call's arguments (the feeds last) have one
        of their batch sizes.

        Returns:
            Whether the background work is over (the caller may then drop this object).
        """
        if self._thread is None:
            return True
        if batch_of(args[len(args) - self._n_feeds :]) in self.sizes:
            self._thread.join()
        return not self._thread.is_alive()


def _compile_all(compiled: Any, jobs: list[tuple], where: Any) -> None:
    scope = contextlib.nullcontext() if where is None else DISTRIBUTION.scoped(where)
    with scope:
        for args in jobs:
            # an error here is dropped: the call with these shapes raises it, if it comes
            with contextlib.suppress(Exception):
                compiled.lower(*args).compile()
