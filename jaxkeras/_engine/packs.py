"""Packs: small variables of one dtype laid end to end in one flat buffer of the store.

A compiled function passes each array argument through JAX's dispatch, and makes a new array
of each result, so a call's cost grows with the number of variables it reads and, more
steeply, with the number it updates (donated in, new value out). A :class:`Pack` makes that
cost per pack instead: a function takes the buffer, slices its variables out inside the
computation and returns the buffer anew, its updated variables' new values in their places
(one concatenation, into the donated buffer). A call that reads or updates many small
variables then costs about what one with a few did (the "``K.function`` call, N variables
updated/read" and "per-call cost per variable" rows of ``benchmarks/RESULTS.md``).

Which variables share a pack is decided once, by the store (``Store.settle``): the first
compiled function that uses a variable settles its place, packing its variables whose place
no function has decided yet, those it updates apart from those it only reads. A place never
changes after, so a function's layout (:class:`StateLayout`) and compiled code stay valid
whatever other functions are made and called later.

A pack is either *packed* (its :attr:`Pack.buffer` holds its members' values; the store's
loose values do not) or *loose* (``buffer`` is ``None``; the members' values are loose in the
store again). Writing a member from outside a compiled function loosens its pack (see
``Store.write``); a function that uses the pack packs it again before its next call. Its
members and their places never change, so nothing compiles again. Reading a member slices
every member out of the buffer at once, and keeps those slices until the buffer changes
(:meth:`Pack.views`). Only the store sets a pack's buffer (:meth:`Pack.form`,
:meth:`Pack.set_buffer`).

Only small dense values on the default device are packed (:func:`packable`): a large one is
better updated in place, and a value a distribution placed keeps its own sharding.
"""

from __future__ import annotations

import functools
import math
import operator
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxkeras._engine import graph

PACK_BYTES = 4096
"""The largest value packed, in bytes. A call that updates a pack writes the whole buffer
anew and copies it into the donated one (XLA cannot write a buffer in place while reading
other parts of it), where a loose variable is updated in place: the copy costs more the
larger the variable, while the dispatch a pack saves costs the same for every variable, and
on CPU the two meet at about this size (compare the "per-call cost per variable updated"
row of ``benchmarks/RESULTS.md`` with the time to copy 4 KiB). So biases, normalization
statistics, optimizer scalars and small kernels are packed, and large kernels stay loose (a
step's peak memory grows by twice its small updated variables' size)."""


def packable(value: Any) -> bool:
    """Whether a stored value may join a pack: a dense ``jax.Array`` of at most
    :data:`PACK_BYTES` that JAX may place (not committed to devices by a distribution), in a
    single-process run.

    Args:
        value: a stored value.

    Returns:
        ``True`` when it may be packed.
    """
    return (
        isinstance(value, jax.Array)
        and value.nbytes <= PACK_BYTES
        and not graph.is_bcoo(value)
        and not value.committed
        and jax.process_count() == 1
    )


class Pack:
    """Variables of one dtype in one flat buffer (see the module docstring).

    Args:
        names: the members' names, in buffer order.
        shapes: their shapes.
        dtype: their dtype.

    Attributes:
        names: the members' names.
        shapes: their shapes.
        dtype: their dtype (a ``numpy.dtype``).
        buffer: the flat buffer, or ``None`` while the pack is loose.
    """

    def __init__(self, names: Sequence[str], shapes: Sequence[tuple], dtype: Any) -> None:
        self.names = tuple(names)
        self.shapes = tuple(tuple(int(d) for d in s) for s in shapes)
        self.dtype = np.dtype(dtype)
        offsets = _offsets(self.shapes)
        self._places = {n: (o, s) for n, o, s in zip(self.names, offsets, self.shapes)}
        self.buffer: jax.Array | None = None
        self._views: dict[str, jax.Array] | None = None
        self._views_of: jax.Array | None = None  # the buffer they were sliced from
        self._views_lock = threading.Lock()

    def __repr__(self) -> str:
        state = "loose" if self.buffer is None else "packed"
        return f"<Pack of {len(self.names)} {self.dtype.name} variables, {state}>"

    def form(self, values: Sequence[Any]) -> None:
        """Packs the members' values (in :attr:`names` order) into a new buffer.

        Args:
            values: one array per member, of its shape and of the pack's dtype.
        """
        # (on the host: small values, and nothing to compile for each new set of shapes)
        flat = [np.asarray(v, self.dtype).reshape(-1) for v in values]
        self.set_buffer(jax.device_put(np.concatenate(flat)))

    def set_buffer(self, buffer: jax.Array | None) -> None:
        """Makes ``buffer`` the pack's values (``None``: the pack is loose), dropping the views
        of the old one."""
        self.buffer, self._views, self._views_of = buffer, None, None

    def views(self) -> dict[str, jax.Array]:
        """Returns each member's current value: new arrays, sliced from the buffer by one
        compiled call at the first read after the buffer changed, then kept until it changes."""
        buffer = self.buffer
        with self._views_lock:
            if self._views is None or self._views_of is not buffer:
                with jax.ensure_compile_time_eval():  # concrete even when read in a trace
                    parts = _sliced(self.shapes, buffer)
                self._views, self._views_of = dict(zip(self.names, parts)), buffer
            return self._views

    def unpack(self, buffer: Any, names: Sequence[str]) -> dict[str, Any]:
        """Inside a trace: the values of the members ``names``, sliced from ``buffer``."""
        return {n: _slice(buffer, *self._places[n]) for n in names}

    def repacked(self, buffer: Any, new: Mapping[str, Any]) -> Any:
        """Inside a trace: ``buffer`` with the members in ``new`` overwritten by their values.

        One concatenation of every member (a chain of ``dynamic_update_slice`` runs faster, but
        XLA's compile time grows steeply with its length: a thousand members would compile for
        longer than many calls take)."""
        parts = [new[n] if n in new else _slice(buffer, *self._places[n]) for n in self.names]
        return jnp.concatenate([p.reshape(-1) for p in parts])


def _slice(buffer: Any, offset: int, shape: tuple) -> Any:
    return lax.slice(buffer, (offset,), (offset + math.prod(shape),)).reshape(shape)


@functools.partial(jax.jit, static_argnums=0)
def _sliced(layout: tuple, buffer: Any) -> tuple:
    # a slice is never the buffer itself, so a view outlives the buffer's donation
    return tuple(_slice(buffer, o, s) for o, s in zip(_offsets(layout), layout))


def _offsets(shapes: Sequence[tuple]) -> list[int]:
    """Where each of values of ``shapes`` starts, laid end to end."""
    return np.cumsum([0, *(math.prod(s) for s in shapes[:-1])]).tolist()


class StateLayout:
    """How a compiled function takes the store's values and gives back new ones.

    Its state arguments are, in order: the buffers of the packs holding variables it updates
    (donated), those of the packs holding only variables it reads, its loose variables that it
    updates (donated), and its loose variables that it reads. Its new state is the updated
    packs' buffers, then the loose updated variables' values.

    A layout is a description, and writes nothing: a call picks its arguments from the store
    through it (:meth:`args`), the store commits the call's new state by it
    (``Store.commit``), and :meth:`state` and :meth:`new_state` map both inside the trace. It
    stays valid for the function's life, since no variable's place changes
    (``Store.settle``).

    Args:
        updated: names of the variables the function updates.
        kept: names of the variables it only reads.
        packs: variable name -> pack, for the packed variables (``Store.packs``).

    Attributes:
        packs: the packs it uses, those it updates first.
        updated_packs: the packs it updates (the first of :attr:`packs`).
        loose_updated: the loose variables it updates.
        donated: the indices of the state arguments it may donate.
        n_args: the number of state arguments.
    """

    def __init__(self, updated: Sequence[str], kept: Sequence[str], packs: Mapping[str, Pack]):
        self.updated_packs = list(dict.fromkeys(packs[n] for n in updated if n in packs))
        read = dict.fromkeys(packs[n] for n in kept if n in packs)
        self.packs = self.updated_packs + [p for p in read if p not in self.updated_packs]
        self.loose_updated = [n for n in updated if n not in packs]
        self._loose = self.loose_updated + [n for n in kept if n not in packs]
        n_packs, n_up = len(self.packs), len(self.loose_updated)
        self.donated = (*range(len(self.updated_packs)), *range(n_packs, n_packs + n_up))
        self.n_args = n_packs + len(self._loose)
        # A pack keeps the places of its dead members, whose names new variables may reuse:
        # a member is a name the pack still holds.
        wanted, written = {*updated, *kept}, set(updated)
        self._members = [
            [n for n in p.names if n in wanted and packs.get(n) is p] for p in self.packs
        ]
        self._written = [
            [n for n in p.names if n in written and packs.get(n) is p] for p in self.updated_packs
        ]
        self._pick = getter(self._loose)

    def args(self, values: Mapping[str, Any]) -> tuple | None:
        """Returns the state arguments of a call, given the store's loose ``values``; ``None``
        when a pack is loose (``Store.repack`` packs it again) or a loose variable has no
        value."""
        try:
            if not self.packs:
                return self._pick(values)
            buffers = [p.buffer for p in self.packs]
            if _NONE in map(type, buffers):  # (not "None in buffers", which compares arrays)
                return None
            return (*buffers, *self._pick(values))
        except KeyError:
            return None

    def state(self, args: Sequence[Any]) -> dict[str, Any]:
        """Inside a trace: the variables' values, by name, from the state arguments."""
        state = dict(zip(self._loose, args[len(self.packs) :]))
        for pack, buffer, names in zip(self.packs, args, self._members):
            state.update(pack.unpack(buffer, names))
        return state

    def new_state(self, args: Sequence[Any], new: Mapping[str, Any]) -> list:
        """Inside a trace: the new state (see the class docstring), from the state arguments and
        the updated variables' new values, by name."""
        buffers = [
            pack.repacked(buffer, {n: new[n] for n in names})
            for pack, buffer, names in zip(self.updated_packs, args, self._written)
        ]
        return [*buffers, *(new[n] for n in self.loose_updated)]


_NONE = type(None)


def getter(names: Sequence[str]) -> Any:
    """A function of a dict returning the tuple of its values at ``names`` (in C, per call)."""
    if not names:
        return lambda values: ()
    pick = operator.itemgetter(*names)
    if len(names) == 1:
        return lambda values: (pick(values),)
    return pick
