"""Packing the small variables a compiled function only reads into one buffer per dtype.

JAX's dispatch costs a fraction of a microsecond per argument array (about 0.5 µs on CPU), so a
function that reads a thousand small variables spends most of each call passing them. A
:class:`ReadPack` passes those values as one buffer per dtype instead; the buffers are rebuilt
(one compiled concatenation) only when one of the values has been replaced in the store since
the pack was built, and the traced function slices the values back out, exactly. The store stays
the one authoritative copy: a pack is a cache of some of its values, held by one function.

Only values that gain from it are packed: dense, single-device (not placed by a distribution:
those keep their layouts), not weakly typed, at most :data:`PACK_LIMIT_BYTES` each, and only
when a function reads at least :data:`MIN_PACKED` of them (fewer are passed one by one, with
no packer to compile).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jaxkeras.graph import ARRAY_TYPE

PACK_LIMIT_BYTES = 16 * 1024
"""The largest value packed (a rebuilt pack copies its values; larger ones are passed alone)."""

MIN_PACKED = 16
"""The fewest packable values worth a pack."""


def getter(names: Sequence[str]) -> Callable[[Mapping[str, Any]], tuple]:
    """A function of a dict returning the tuple of its values at ``names`` (in C, per call).

    Args:
        names: the keys, in order.

    Returns:
        ``get(values) -> tuple``.
    """
    if not names:
        return lambda values: ()
    pick = operator.itemgetter(*names)
    if len(names) == 1:
        return lambda values: (pick(values),)
    return pick


def _packable(value: Any) -> bool:
    return (
        type(value) is ARRAY_TYPE
        and not value.committed
        and not value.weak_type
        and value.nbytes <= PACK_LIMIT_BYTES
    )


class ReadPack:
    """How a function passes the values of the variables it only reads.

    Build one with :meth:`plan`. Its arguments are the values of :attr:`singles`, one by one,
    then one buffer per dtype holding the values of the packed variables.

    Args:
        singles: names of the variables passed one by one.
        groups: for each buffer, the ``(name, shape, size)`` of the variables in it, in order.

    Attributes:
        singles: as given.
        n_args: how many arguments the values take.
    """

    def __init__(self, singles: list[str], groups: list[list[tuple[str, tuple, int]]]) -> None:
        self.singles = singles
        self._groups = groups
        self.n_args = len(singles) + len(groups)
        self._get_packed = getter([name for group in groups for name, _, _ in group])
        self._packer = jax.jit(self._pack)
        self._cache: tuple[tuple, tuple] | None = None  # (the packed values, the buffers)

    @classmethod
    def plan(cls, names: Sequence[str], values: Mapping[str, Any]) -> ReadPack | None:
        """Decides which of the variables ``names`` to pack, from their stored ``values``.

        Args:
            names: the variables a function only reads.
            values: the store's values (a variable keeps its shape, dtype and layout).

        Returns:
            A :class:`ReadPack`, or ``None`` when fewer than :data:`MIN_PACKED` are worth it.
        """
        packable = [n for n in names if _packable(values.get(n))]
        if len(packable) < MIN_PACKED:
            return None
        by_dtype: dict[Any, list[tuple[str, tuple, int]]] = {}
        for name in packable:
            value = values[name]
            by_dtype.setdefault(value.dtype, []).append((name, value.shape, value.size))
        chosen = set(packable)
        return cls([n for n in names if n not in chosen], list(by_dtype.values()))

    def args(self, get_others: Callable[[Mapping[str, Any]], tuple]) -> Callable[..., tuple]:
        """A function of the store's values returning ``get_others(values)``, then this pack's
        arguments (call it holding the store's lock).

        Args:
            get_others: what comes first (e.g. the updated variables' values, then the
                singles'), from :func:`getter`.

        Returns:
            ``args(values) -> tuple``.
        """
        get_packed = self._get_packed

        def args(values: Mapping[str, Any]) -> tuple:
            packed = get_packed(values)
            cache = self._cache
            if cache is None or not all(map(operator.is_, packed, cache[0])):
                cache = self._cache = (packed, self._packer(*packed))
            return (*get_others(values), *cache[1])

        return args

    def _pack(self, *values: Any) -> tuple:
        flat = iter(values)
        return tuple(
            jnp.concatenate([jnp.ravel(next(flat)) for _ in group]) for group in self._groups
        )

    def unpack(self, args: Sequence[Any]) -> list[tuple[str, Any]]:
        """Inside a trace: the variables' values from this pack's arguments.

        Args:
            args: the values of :attr:`singles`, then the buffers.

        Returns:
            ``(name, value)`` pairs for every variable of the pack.
        """
        n = len(self.singles)
        pairs = list(zip(self.singles, args[:n]))
        for buffer, group in zip(args[n:], self._groups):
            offset = 0
            for name, shape, size in group:
                pairs.append((name, buffer[offset : offset + size].reshape(shape)))
                offset += size
        return pairs

    def release(self) -> None:
        """Drops the buffers (and the values they were built from)."""
        self._cache = None
