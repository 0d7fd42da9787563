"""The store: the one authoritative copy of every variable's value, and its only writer.

Variable values live in one :class:`Store` (:data:`STORE`), which the graph layer reads through
its ``StateSource`` protocol and every writer goes through (:meth:`Store.add` for a new
variable, :meth:`Store.write` for values set from outside a compiled function,
:meth:`Store.commit` for the new state a compiled call returns). It also decides, once per
variable, where the value lives: loose (an array of its own) or in a
:class:`~jaxkeras._engine.packs.Pack` (:meth:`Store.settle`).

Engine-internal: :mod:`jaxkeras.state` is the public face (variables, ``get_value``/
``set_value``, updates, state scopes, seeds). Mutable state here: :data:`STORE` (values, packs
and random-number state).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from threading import get_ident
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils, sparse

from jaxkeras._engine import graph
from jaxkeras._engine.graph import DISTRIBUTION
from jaxkeras._engine.packs import Pack, StateLayout, packable

# ---------------------------------------------------------------------------------------------
# the lock


class RWLock:
    """A readers-writer lock: many readers at once, or one writer (reentrant for its thread).

    ``with lock.read():`` holds it shared, ``with lock.write():`` exclusively. A writer holds a
    gate that new readers pass through, then waits for the readers inside to leave, so writers
    do not starve; a thread that already reads may read again, and the writer's thread may read.

    The readers inside are a list of thread ids, one entry per shared hold: appending and
    removing are atomic under the GIL, so an uncontended hold costs no lock but the gate.
    """

    def __init__(self) -> None:
        self._gate = threading.Lock()
        self._drained = threading.Condition(threading.Lock())
        self._inside: list[int] = []
        self._waiting = False  # a writer waits for the readers inside to leave
        self._writer: int | None = None
        self._depth = 0
        self._shared = _Held(self.acquire_read, self.release_read)
        self._exclusive = _Held(self.acquire_write, self.release_write)

    def read(self) -> _Held:
        """Returns the context manager that holds the lock shared."""
        return self._shared

    def write(self) -> _Held:
        """Returns the context manager that holds the lock exclusively (raises
        ``RuntimeError`` on entry when this thread holds it shared: it would wait for itself)."""
        return self._exclusive

    def acquire_read(self) -> None:
        """Holds the lock shared (prefer ``with lock.read():``; a hot path may pair this with
        :meth:`release_read` in ``try``/``finally``)."""
        me = get_ident()
        if me in self._inside or self._writer == me:  # a waiting writer must not block it
            self._inside.append(me)
        else:
            with self._gate:
                self._inside.append(me)

    def release_read(self) -> None:
        """Releases a shared hold."""
        self._inside.remove(get_ident())
        if self._waiting:  # read after the removal: a writer that saw this reader is told
            with self._drained:
                self._drained.notify_all()

    def acquire_write(self) -> None:
        """Holds the lock exclusively (see :meth:`write`)."""
        me = get_ident()
        if self._writer == me:
            self._depth += 1  # holds beyond the first
            return
        if not self._gate.acquire(False):  # another writer, or a reader passing the gate
            self._refuse_reader(me)
            self._gate.acquire()
        if self._inside:  # holding the gate, only readers already inside can be counted
            try:
                self._refuse_reader(me)
            except RuntimeError:
                self._gate.release()
                raise
            with self._drained:
                self._waiting = True  # set before looking, so a leaving reader notifies
                while self._inside:
                    self._drained.wait()
                self._waiting = False
        self._writer = me

    def _refuse_reader(self, me: int) -> None:
        if me in self._inside:
            raise RuntimeError("a thread that reads the variable store cannot write it")

    def release_write(self) -> None:
        """Releases an exclusive hold."""
        if self._depth:
            self._depth -= 1
        else:
            self._writer = None
            self._gate.release()


class _Held:
    """A reusable context manager calling ``acquire`` on entry and ``release`` on exit."""

    __slots__ = ("_acquire", "_release")

    def __init__(self, acquire: Callable[[], None], release: Callable[[], None]) -> None:
        self._acquire, self._release = acquire, release

    def __enter__(self) -> None:
        self._acquire()

    def __exit__(self, *exc: Any) -> None:
        self._release()


# ---------------------------------------------------------------------------------------------
# the store


class Store:
    """The one authoritative copy of every variable's value, and the random-number state.

    Implements the graph layer's ``StateSource`` protocol (:meth:`read`, :meth:`draw_key`).
    Threads share it: :attr:`lock` is held shared to read values (and to start a computation
    on them) and exclusively to write them, so no thread sees a torn or donated buffer and no
    update is lost.

    It is the only writer of values, through one family of methods (each called holding
    :attr:`lock` exclusively): :meth:`add` stores a new variable's value, :meth:`write` values
    set from outside a compiled function (``set_value``, ``set_state``, ``K.eval`` of an update,
    a restored checkpoint), :meth:`commit` the new state a compiled call returned, and
    :meth:`drop` forgets a dead variable's.

    Values are *loose* (one array per variable, in :attr:`values`) or *packed* (sliced from a
    :class:`~jaxkeras._engine.packs.Pack`'s buffer, which compiled functions take as one argument);
    :meth:`read`, :meth:`names` and :meth:`write` see both alike. Where a variable's value lives
    is decided once, by :meth:`settle`, and never changes after (see there); a compiled function
    gets its state layout (:meth:`layout`) and the arguments of a call that finds a pack
    loosened (:meth:`state_args`) from the store.

    Attributes:
        values: variable name -> ``jax.Array``, for the loose values.
        packs: variable name -> the pack it belongs to (for the variable's life, packed or not).
        lock: the :class:`RWLock` guarding ``values`` and the packs.
        seed: the global seed every random key derives from (``K.set_random_seed``).
        runs: random node -> how many times it has run (weakly keyed).
        restored_runs: seed -> runs, from a restored checkpoint, for nodes not yet run since.
        draws: how many keys were drawn for ops run at once (outside any graph).
    """

    def __init__(self, seed: int = 0) -> None:
        self.values: dict[str, jax.Array] = {}
        self.packs: dict[str, Pack] = {}
        self.lock = RWLock()
        self.seed = seed
        self.runs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.restored_runs: dict[int, int] = {}
        self.draws = 0
        self._settled: set[str] = set()  # the variables whose place is decided
        self._rng_lock = threading.Lock()

    # reading -----------------------------------------------------------------------------------

    def read(self, name: str) -> jax.Array:
        """Returns the stored value of the variable called ``name``.

        Raises:
            ValueError: when no live variable has that name.
        """
        try:
            return self.values[name]
        except KeyError:
            pack = self.packs.get(name)
            if pack is not None and pack.buffer is not None:
                return pack.views()[name]
            raise ValueError(f"variable {name!r} has no value in the store") from None

    def has(self, name: str) -> bool:
        """Whether a live variable is called ``name``."""
        return name in self.values or name in self.packs

    def names(self) -> list[str]:
        """Returns the names of the live variables."""
        return [*self.values, *(n for n, p in self.packs.items() if p.buffer is not None)]

    # writing: the only writer of values ----------------------------------------------------------

    def add(self, name: str, value: Any) -> None:
        """Stores a new variable's value (hold :attr:`lock` exclusively). It is loose until a
        compiled function first uses the variable (:meth:`settle`).

        Args:
            name: the variable's unique name (:meth:`unique_name`).
            value: its value, a device copy the store owns, placed as it is to be stored.
        """
        self.values[name] = value

    def write(self, values: Mapping[str, Any]) -> None:
        """Stores new values, by variable name, from outside a compiled function (hold
        :attr:`lock` exclusively); the pack of a packed variable among them is loosened first
        (the next call of a function that uses it packs it again, in the same places).

        Args:
            values: variable name -> its new value, placed as it is to be stored.
        """
        for name in values:
            pack = self.packs.get(name)
            if pack is not None and pack.buffer is not None:
                self.loosen(pack)
        self.values.update(values)

    def commit(self, layout: StateLayout, results: Sequence[Any], start: int) -> None:
        """Stores the new state a compiled call returned, ``results[start:]`` (hold :attr:`lock`
        exclusively): the buffers of the packs it updates, then its loose updated variables'
        values, in the order ``layout`` gives them (:class:`~jaxkeras._engine.packs.StateLayout`).

        Args:
            layout: the function's state layout.
            results: what its compiled call returned (outputs first).
            start: where the new state starts in ``results``.
        """
        packs = layout.updated_packs
        n = len(packs)
        if n:
            for pack, buffer in zip(packs, results[start : start + n]):
                pack.set_buffer(buffer)
        loose = layout.loose_updated
        if len(loose) == 1:  # (the common case, without the zip)
            self.values[loose[0]] = results[start + n]
        elif loose:
            self.values.update(zip(loose, results[start + n :]))

    def drop(self, name: str) -> None:
        """Forgets a variable's value and place (called when the variable is garbage-collected;
        a packed one's place in its pack stays unused, and a new variable may take its name)."""
        self.values.pop(name, None)
        self.packs.pop(name, None)
        self._settled.discard(name)

    # where values live --------------------------------------------------------------------------

    def settle(self, names: Sequence[str]) -> None:
        """Decides, for good, where those of ``names`` whose place is not decided yet live (hold
        :attr:`lock` exclusively): the packable ones (:func:`~jaxkeras._engine.packs.packable`)
        in one new pack per dtype, of two values or more; the others loose.

        A compiled function settles its variables when it first lays out its state
        (:meth:`layout`), those it updates apart from those it only reads (so a pack it
        donates holds nothing it only reads). A variable's place never changes after: a
        function that uses it later lays out its state around that place, and no function's
        layout (nor its compiled code) is made out of date by another's. A value alone stays
        loose: a pack of one would save no argument, and XLA copies a reshaped buffer it
        updates in place.

        Args:
            names: names of live variables.
        """
        groups = defaultdict(list)
        for name in names:
            if name in self._settled:
                continue
            self._settled.add(name)
            value = self.values.get(name)
            if packable(value):
                groups[value.dtype].append(name)
        for dtype, members in groups.items():
            if len(members) < 2:
                continue
            pack = Pack(members, [self.values[n].shape for n in members], dtype)
            pack.form([self.values.pop(n) for n in members])
            self.packs.update(dict.fromkeys(members, pack))

    def layout(self, updated: Sequence[str], kept: Sequence[str]) -> StateLayout:
        """Returns a compiled function's state layout, settling its variables' places first
        (hold :attr:`lock` exclusively): those it updates apart from those it only reads.

        Args:
            updated: names of the variables the function updates.
            kept: names of the variables it only reads.
        """
        self.settle(updated)
        self.settle(kept)
        return StateLayout(updated, kept, self.packs)

    def state_args(self, layout: StateLayout) -> tuple | None:
        """Returns the state arguments of a call laid out as ``layout`` (hold :attr:`lock`
        exclusively), packing again first the packs that writes loosened since."""
        for pack in layout.packs:
            if pack.buffer is None:
                self.repack(pack)
        return layout.args(self.values)

    def loosen(self, pack: Pack) -> None:
        """Makes a packed pack's live members loose values again (hold :attr:`lock`
        exclusively); they keep their places in it (:meth:`repack`)."""
        views = pack.views()
        self.values.update((n, views[n]) for n in pack.names if self.packs.get(n) is pack)
        pack.set_buffer(None)

    def repack(self, pack: Pack) -> None:
        """Packs a loose pack's members again, in their old places (hold :attr:`lock`
        exclusively); the places of variables deleted since are zeros."""
        pack.form(
            [
                self.values.pop(n) if self.packs.get(n) is pack else np.zeros(s, pack.dtype)
                for n, s in zip(pack.names, pack.shapes)
            ]
        )

    # names and random numbers -----------------------------------------------------------------

    def unique_name(self, name: str) -> str:
        """Returns ``name``, or ``name_N`` with the smallest N no live variable uses."""
        unique, n = name, 0
        while self.has(unique):
            n += 1
            unique = f"{name}_{n}"
        return unique

    def draw_key(self, seed: int, node: Any = None) -> jax.Array:
        """Returns the key of the next run of a random op (see ``graph.StateSource``).

        A node's key depends only on the global seed, its seed and how often it has run; an op
        run at once (``node=None``) gets a key from a separate stream that never repeats.
        """
        with self._rng_lock:
            if node is None:
                self.draws += 1
                run = 0x80000000 | (self.draws & 0x7FFFFFFF)
            else:
                run = self._runs_of(node)
                self.runs[node] = run + 1
            base = self.seed
        return graph.eager_key(base, seed, run)

    def take_runs(self, nodes: Sequence[Any], count: int = 1) -> np.ndarray:
        """Counts ``count`` runs of each of ``nodes`` (a multi-step call's); returns the run
        table a compiled function derives their keys from (``graph.run_table``: the global
        seed, then each op's seed and its runs before this call).
        """
        with self._rng_lock:
            entries = []
            for node in nodes:
                run = self._runs_of(node)
                entries.append((node._seed, run))
                self.runs[node] = run + count
        return graph.run_table(self.seed, entries)

    def next_runs(self, nodes: Sequence[Any]) -> list[int]:
        """Returns how many times each of ``nodes`` has run (counting nothing)."""
        with self._rng_lock:
            return [self._runs_of(node) for node in nodes]

    def _runs_of(self, node: Any) -> int:
        run = self.runs.get(node)
        return self.restored_runs.get(node._seed, 0) if run is None else run

    def rng_state(self) -> dict[str, Any]:
        """Returns the random-number state: the global seed, the draw count, and each seed's
        run count (the largest among live nodes sharing it)."""
        with self._rng_lock:
            runs = dict(self.restored_runs)
            for node, count in list(self.runs.items()):
                runs[node._seed] = max(count, runs.get(node._seed, 0))
            return {"seed": self.seed, "draws": self.draws, "runs": sorted(runs.items())}

    def set_rng_state(self, state: Mapping[str, Any]) -> None:
        """Restores a state from :meth:`rng_state`: live random nodes and those built later
        continue from their seed's run count."""
        runs = {int(seed): int(count) for seed, count in state["runs"]}
        with self._rng_lock:
            self.seed, self.draws = int(state["seed"]), int(state["draws"])
            self.restored_runs = runs
            for node in list(self.runs.keys()):
                self.runs[node] = runs.get(node._seed, 0)


STORE = Store()
graph.install_state_source(STORE)


def store() -> Store:
    """Returns the process-wide store."""
    return STORE


# ---------------------------------------------------------------------------------------------
# values: copies on the device, and where they are placed


def _concrete(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Runs ``fn`` with JAX's operations evaluated at once, also while a ``jax.jit`` is being
    traced (``jax.ensure_compile_time_eval``): the store holds concrete arrays only, and a
    variable made or read inside a traced function (a Keras layer built, an optimizer's state
    made, in a ``K.state_scope`` under ``jax.jit``) would otherwise put a tracer there, where
    the next use outside the trace fails."""

    @functools.wraps(fn)
    def concrete(*args: Any, **kwargs: Any) -> Any:
        with jax.ensure_compile_time_eval():
            return fn(*args, **kwargs)

    return concrete


@_concrete
def copy_to_device(value: Any, dtype: str, fn: str = "variable") -> Any:
    """A fresh device copy of ``value`` in ``dtype``, for the store to own (SciPy sparse and
    BCOO values stay sparse).

    Args:
        value: an array, nested list, scalar or sparse value.
        dtype: the dtype to store.
        fn: the public function writing it, for error messages.

    Raises:
        ValueError: for a traced value (inside ``jax.jit``: use a state scope).
        TypeError: for a value that holds no numbers or cannot be read as an array.
    """
    if isinstance(value, jax.core.Tracer):
        raise ValueError(
            "cannot write a traced value into the variable store: inside jax.jit/vmap/grad, "
            "use K.state_scope(values) and K.update(...) so that new values are returned "
            "instead of written"
        )
    if hasattr(value, "tocoo"):  # SciPy sparse: kept sparse
        value = sparse.BCOO.from_scipy_sparse(value)
    if graph.is_bcoo(value):
        parts = (jnp.array(value.data, dtype=dtype, copy=True), jnp.array(value.indices, copy=True))
        return sparse.BCOO(parts, shape=value.shape)
    array = as_array(value, fn)
    if array.dtype.kind in "USO":  # strings, objects: no number to store
        raise TypeError(f"{fn}: value must hold numbers, got dtype {array.dtype}: {value!r}")
    # A fresh NumPy copy, put on the device: unlike jnp.array(..., copy=True) this compiles
    # nothing (jnp.array compiles a conversion per shape, so a model would compile one per
    # variable shape). Casts of NaN or out-of-range values are as undefined as XLA's.
    with np.errstate(invalid="ignore", over="ignore"):
        return jax.device_put(np.array(array, dtype=jnp.dtype(dtype)))


def as_array(value: Any, fn: str) -> np.ndarray:
    """``value`` as a NumPy array; ``TypeError`` naming ``fn`` for ragged nested lists."""
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as err:  # ragged nested lists
        raise TypeError(f"{fn}: value cannot be read as an array ({err}): {value!r}") from None


@_concrete
def device_copy(value: Any) -> Any:
    """A copy of a stored value on the same devices, with the same sharding."""
    if graph.is_bcoo(value):
        return copy_to_device(value, value.dtype)
    return jnp.array(value, copy=True)


@_concrete
def placed(name: str, value: Any) -> Any:
    """A new variable's value, on the devices the distribution in effect gives it."""
    distribution = DISTRIBUTION.current()
    if distribution is None or graph.is_bcoo(value):
        return value
    sharding = distribution.variable_layout(name, tuple(value.shape))
    return value if sharding is None else jax.device_put(value, sharding)


@_concrete
def place_like(value: Any, old: Any) -> Any:
    """Puts a new value of a variable where its old value lives (a variable keeps the layout
    it was given when it was made: see ``jaxkeras.distribution``).

    Args:
        value: the new value (a device copy the store owns).
        old: the stored value it replaces, or ``None``.

    Returns:
        ``value``, moved to the sharding of ``old`` when ``old`` was placed explicitly.
    """
    layout = stored_layout(old)
    return value if layout is None or graph.is_bcoo(value) else jax.device_put(value, layout)


def stored_layout(value: Any) -> Any:
    """Where a stored value lives, if it was placed explicitly (by a distribution).

    Args:
        value: a stored value (or ``None``).

    Returns:
        Its ``jax.sharding.Sharding`` when it is committed to devices, else ``None`` (a value
        on the default device, which JAX may move).
    """
    if isinstance(value, jax.Array) and value.committed:
        return value.sharding
    return None


def to_numpy(value: Any) -> np.ndarray:
    """A NumPy copy of a value; sparse values come out dense. A value split over several
    processes' devices is gathered from them (every process must ask for it at once)."""
    if isinstance(value, sparse.BCOO):
        value = value.todense()
    if isinstance(value, jax.Array) and not (
        value.is_fully_addressable or value.is_fully_replicated
    ):
        return np.array(multihost_utils.process_allgather(value, tiled=True))
    return np.array(value)
