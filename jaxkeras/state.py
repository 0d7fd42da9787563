"""Variables, the state store that holds their values, updates, and state scopes.

Variable values live in one :class:`Store` (:data:`STORE`), which the graph layer reads through
its ``StateSource`` protocol. Ops on a :class:`Variable` are lazy (recorded), so a graph always
sees the value the variable has when it runs. Updates (``update``, ``update_add``, ...) are
pending until run: compiled functions return new values and commit them after the call.

Mutable state here: :data:`STORE` (values and random-number state) and :data:`NAMES`
(``get_uid`` counters; each thread's name scopes and bans on creating updates).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from threading import get_ident
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils, sparse

from jaxkeras._engine import graph
from jaxkeras._engine.graph import DISTRIBUTION, Context, Symbolic, VariableNode
from jaxkeras._engine.packs import Pack, packable
from jaxkeras.checks import check_dtype, check_fits, check_seed, check_variable

# ---------------------------------------------------------------------------------------------
# the store


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


class Store:
    """The one authoritative copy of every variable's value, and the random-number state.

    Implements the graph layer's ``StateSource`` protocol (:meth:`read`, :meth:`draw_key`).
    Threads share it: :attr:`lock` is held shared to read values (and to start a computation
    on them) and exclusively to write them, so no thread sees a torn or donated buffer and no
    update is lost.

    Values are *loose* (one array per variable, in :attr:`values`) or *packed* (sliced from a
    :class:`~jaxkeras._engine.packs.Pack`'s buffer, which compiled functions take as one argument);
    :meth:`read`, :meth:`names` and :meth:`write` see both alike.

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
        self._rng_lock = threading.Lock()

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

    def write(self, values: Mapping[str, Any]) -> None:
        """Stores new values, by variable name (hold :attr:`lock` exclusively); the pack of a
        packed variable among them is loosened first.

        Args:
            values: variable name -> its new value, placed as it is to be stored.
        """
        for name in values:
            pack = self.packs.get(name)
            if pack is not None and pack.buffer is not None:
                self.loosen(pack)
        self.values.update(values)

    def loosen(self, pack: Pack) -> None:
        """Makes a packed pack's live members loose values again (hold :attr:`lock`
        exclusively)."""
        views = pack.views()
        self.values.update((n, views[n]) for n in pack.names if self.packs.get(n) is pack)
        pack.set_buffer(None)

    def pack(self, names: Sequence[str]) -> None:
        """Packs the packable loose values among ``names``: one new pack per dtype, of two
        values or more (hold :attr:`lock` exclusively). Values already in a pack stay in theirs.

        A value alone stays loose: a pack of one would save no argument, and XLA copies a
        reshaped buffer it updates in place.

        Args:
            names: names of live variables.
        """
        groups = defaultdict(list)
        for name in names:
            value = self.values.get(name)
            if name not in self.packs and packable(value):
                groups[value.dtype].append(name)
        for dtype, members in groups.items():
            if len(members) < 2:
                continue
            pack = Pack(members, [self.values[n].shape for n in members], dtype)
            pack.form([self.values.pop(n) for n in members])
            self.packs.update(dict.fromkeys(members, pack))

    def repack(self, pack: Pack) -> None:
        """Packs a loose pack's members again, in their old places (hold :attr:`lock`
        exclusively); the places of variables deleted since are zeros."""
        pack.form(
            [
                self.values.pop(n) if self.packs.get(n) is pack else np.zeros(s, pack.dtype)
                for n, s in zip(pack.names, pack.shapes)
            ]
        )

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
        """Counts ``count`` runs of each of ``nodes`` (a multi-step call's); returns the table a
        compiled function derives their keys from: ``[base, seed_1, run_1, ..., seed_n,
        run_n]`` (runs before it).

        The seeds travel as runtime arguments, not constants, so that the same graph built
        with other seeds (Keras draws an unseeded op's from NumPy) compiles to the same
        program, which JAX's compilation cache can share across processes.
        """
        with self._rng_lock:
            table = [self.seed]
            for node in nodes:
                run = self._runs_of(node)
                table += (node._seed & 0xFFFFFFFF, run & 0xFFFFFFFF)
                self.runs[node] = run + count
        return np.asarray(table, dtype=np.uint32)

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

    def drop(self, name: str) -> None:
        """Forgets a variable's value (called when the variable is garbage-collected; a packed
        one's place in its pack stays unused)."""
        self.values.pop(name, None)
        self.packs.pop(name, None)


STORE = Store()
graph.install_state_source(STORE)


def store() -> Store:
    """Returns the process-wide store."""
    return STORE


def set_random_seed(seed: int) -> None:
    """Restarts random-number generation from ``seed`` (a jaxkeras addition to the Keras API).

    It seeds NumPy's global random state too, where random ops built without a seed take
    theirs (as in both Keras 2 backends), and restarts every random op's run count. After it,
    a program that builds the same graphs and makes the same calls draws the same numbers
    (initial weights included), whatever ran before.

    Args:
        seed: an int in ``[0, 2**32)``.

    Raises:
        TypeError: when ``seed`` is not an int.
        ValueError: when it is out of range.
    """
    seed = check_seed("set_random_seed", seed)
    if seed >= 2**32:
        raise ValueError(f"set_random_seed: seed must be < 2**32, got {seed!r}")
    np.random.seed(seed)
    STORE.set_rng_state({"seed": seed, "draws": 0, "runs": []})


def _copy_to_device(value: Any, dtype: str, fn: str = "variable") -> Any:
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
    array = _as_array(value, fn)
    if array.dtype.kind in "USO":  # strings, objects: no number to store
        raise TypeError(f"{fn}: value must hold numbers, got dtype {array.dtype}: {value!r}")
    # A fresh NumPy copy, put on the device: unlike jnp.array(..., copy=True) this compiles
    # nothing (jnp.array compiles a conversion per shape, ~50 ms each on CPU, at every new
    # variable shape of a model). Casts of NaN or out-of-range values are as undefined as XLA's.
    with np.errstate(invalid="ignore", over="ignore"):
        return jax.device_put(np.array(array, dtype=jnp.dtype(dtype)))


def _as_array(value: Any, fn: str) -> np.ndarray:
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as err:  # ragged nested lists
        raise TypeError(f"{fn}: value cannot be read as an array ({err}): {value!r}") from None


def _device_copy(value: Any) -> Any:
    """A copy of a stored value on the same devices, with the same sharding."""
    if graph.is_bcoo(value):
        return _copy_to_device(value, value.dtype)
    return jnp.array(value, copy=True)


def _placed(name: str, value: Any) -> Any:
    """A new variable's value, on the devices the distribution in effect gives it."""
    distribution = DISTRIBUTION.current()
    if distribution is None or graph.is_bcoo(value):
        return value
    sharding = distribution.variable_layout(name, tuple(value.shape))
    return value if sharding is None else jax.device_put(value, sharding)


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


# ---------------------------------------------------------------------------------------------
# uids and name scopes


class _Names(threading.local):
    """Per-thread name scopes and bans on creating updates (the uid counters are shared)."""

    uids: dict[str, int] = defaultdict(int)

    def __init__(self) -> None:
        self.scopes: list[str] = []
        self.update_bans: list[str] = []


NAMES = _Names()


def get_uid(prefix: str = "") -> int:
    """Returns a per-prefix counter: 1 on the first call with ``prefix``, then 2, 3, ...

    Args:
        prefix: the name the counter belongs to.

    Returns:
        An int.
    """
    NAMES.uids[prefix] += 1
    return NAMES.uids[prefix]


def reset_uids() -> None:
    """Resets every :func:`get_uid` counter."""
    NAMES.uids.clear()


@contextlib.contextmanager
def name_scope(name: str) -> Iterator[str]:
    """A context in which new variables and placeholders get ``name/`` as a name prefix.

    Args:
        name: the scope name.

    Yields:
        The full prefix.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name_scope: name must be a non-empty string, got {name!r}")
    NAMES.scopes.append(name)
    try:
        yield "/".join(NAMES.scopes)
    finally:
        NAMES.scopes.pop()


def scoped_name(name: str) -> str:
    """Returns ``name`` with the active name scopes as prefix."""
    return "/".join([*NAMES.scopes, name])


# Recorded ops read the active K.name_scope as a prefix ("block/dense_1/"), so that compiled
# code names their operations after it (see jaxkeras._engine.graph.interpret.evaluate).
graph.install_name_scopes(functools.partial(scoped_name, ""))


# ---------------------------------------------------------------------------------------------
# variables


class Variable(VariableNode):
    """A handle to a value held by the store.

    Ops on a variable are recorded lazily and read its value when they run. Attributes may be
    set freely (Keras sets ``_keras_shape``, ``_uses_learning_phase``, ...).

    Args:
        value: its initial value (already a device copy of the right dtype).
        name: its unique name (the key of its value in the store and in state dicts).
        constraint: a function applied by optimizers after each update, or ``None``.
        trainable: whether optimizers should train it.
    """

    def __init__(
        self, value: jax.Array, name: str, constraint: Callable | None, trainable: bool
    ) -> None:
        is_sparse = graph.is_bcoo(value)
        nse = value.nse if is_sparse else 1
        super().__init__(name, value.shape, value.dtype.name, sparse=is_sparse, nse=nse)
        self.constraint = constraint
        self.trainable = trainable
        STORE.values[name] = value  # under STORE.lock (see variable())
        weakref.finalize(self, STORE.drop, name)

    def value(self) -> Any:
        """Returns the current value (a ``jax.Array``; the scope's value inside a state scope)."""
        scope = graph.active_scope()
        return scope.read(self) if scope is not None else STORE.read(self.name)

    def eval(self) -> np.ndarray:
        """Returns a NumPy copy of the current value."""
        return get_value(self)

    numpy = eval

    def __repr__(self) -> str:
        try:
            body = np.array2string(np.asarray(STORE.read(self.name)), threshold=20, edgeitems=2)
        except ValueError:
            body = "<deleted>"
        sep = "\n" if "\n" in body else ""
        return (
            f"<jaxkeras.Variable {self.name!r} shape={self._shape} dtype={self._dtype} "
            f"value={sep}{body}>"
        )


def _value_of(x: Any) -> Any:
    """Evaluates symbolic values now (in the active scope, else against the store)."""
    return graph.evaluate_now(x) if isinstance(x, Symbolic) else x


def variable(
    value: Any,
    dtype: Any = None,
    name: str | None = None,
    constraint: Callable | None = None,
    trainable: bool = True,
) -> Variable:
    """Creates a variable holding a copy of ``value``.

    Args:
        value: an array, nested list, scalar, tensor or variable.
        dtype: its dtype; default :func:`floatx`.
        name: a name (made unique, prefixed by active name scopes).
        constraint: a projection function optimizers apply after updates.
        trainable: whether it is trained.

    Returns:
        A :class:`Variable`.

    Example:
        >>> v = K.variable([[1, 2], [3, 4]], name="w")
        >>> K.eval(v * 2)
        array([[2., 4.],
               [6., 8.]], dtype=float32)
    """
    dtype = check_dtype("variable", dtype)
    if constraint is not None and not callable(constraint):
        raise TypeError(f"variable: constraint must be callable, got {constraint!r}")
    data = _copy_to_device(_value_of(value), dtype)
    with STORE.lock.write():
        full = STORE.unique_name(scoped_name(name or "variable"))
        return Variable(_placed(full, data), full, constraint, trainable)


def get_value(x: Any) -> np.ndarray:
    """Returns a NumPy copy of the value of a variable (or of any tensor without placeholders).

    Args:
        x: a variable, tensor or array.

    Returns:
        A ``numpy.ndarray`` that shares no memory with the store.
    """
    with STORE.lock.read():
        if isinstance(x, Variable):
            return to_numpy(x.value())
        return to_numpy(_value_of(x))


def batch_get_value(xs: Sequence[Any]) -> list[np.ndarray]:
    """Returns :func:`get_value` of each of ``xs``.

    Args:
        xs: variables or tensors.

    Returns:
        A list of NumPy arrays.
    """
    with STORE.lock.read():
        return [get_value(x) for x in xs]


def _checked_value(x: Variable, value: Any, fn: str) -> Any:
    value = _value_of(value)
    if not (isinstance(value, jax.core.Tracer) or hasattr(value, "tocoo") or graph.is_bcoo(value)):
        value = _as_array(value, fn)
    check_fits(fn, "value", tuple(value.shape), x)
    if x._sparse and isinstance(value, np.ndarray):
        value = sparse.BCOO.fromdense(value)  # a sparse variable stays sparse
    # (a packed value is not in ``values``, and was not placed: it has no layout to keep)
    return place_like(_copy_to_device(value, x.dtype, fn), STORE.values.get(x.name))


def set_value(x: Variable, value: Any) -> None:
    """Writes ``value`` into variable ``x`` now.

    Args:
        x: a variable.
        value: an array of the variable's shape (cast to its dtype).

    Raises:
        TypeError: when ``x`` is not a variable.
        ValueError: when the shapes differ; the store is left unchanged.
    """
    check_variable("set_value", "x", x)
    data = _checked_value(x, value, "set_value")
    with STORE.lock.write():
        STORE.write({x.name: data})


def batch_set_value(tuples: Sequence[tuple[Variable, Any]]) -> None:
    """Writes several variables at once; all values are checked before any is written.

    Args:
        tuples: ``(variable, value)`` pairs.
    """
    checked = []
    for x, value in tuples:
        check_variable("batch_set_value", "x", x)
        checked.append((x.name, _checked_value(x, value, "batch_set_value")))
    with STORE.lock.write():
        STORE.write(dict(checked))


def count_params(x: Any) -> int:
    """Returns the number of scalars in a variable or tensor of static shape.

    Args:
        x: a variable or tensor.

    Returns:
        An int.
    """
    shape = graph.static_shape(x)
    if shape is None or None in shape:
        raise ValueError(f"count_params: {x!r} has a dimension of unknown size")
    return int(np.prod(shape, dtype=np.int64))


# ---------------------------------------------------------------------------------------------
# updates


class Update:
    """A pending update of a variable: an assignment, or an increment.

    Run it with ``K.eval(update)`` (once), or pass it in ``K.function(..., updates=[...])``
    (on every call). Several updates of one variable run together compose (see
    :func:`compose_updates`).

    Args:
        variable: the variable it updates (kept as an attribute, as are the others).
        value: the variable's new value when the update runs alone.
        increment: what it adds to the variable (``update_add``, ``update_sub``,
            ``moving_average_update``), or ``None`` for an assignment (``update``).
    """

    def __init__(self, variable: Variable, value: Any, increment: Any = None) -> None:
        self.variable = variable
        self.value = value
        self.increment = increment

    @property
    def payload(self) -> Any:
        """What the update computes from the state before it runs: the increment, or the new
        value of an assignment."""
        return self.value if self.increment is None else self.increment

    def __iter__(self):
        return iter((self.variable, self.value))

    def __repr__(self) -> str:
        return (
            f"<pending update of variable {self.variable.name!r}: run it with "
            "K.eval(update) or K.function(inputs, outputs, updates=[update])>"
        )


@contextlib.contextmanager
def forbid_updates(reason: str) -> Iterator[None]:
    """A context in which creating an update in this thread raises ``ValueError(reason)``.

    Args:
        reason: the message (rnn step tracing says why and what to do instead).
    """
    NAMES.update_bans.append(reason)
    try:
        yield
    finally:
        NAMES.update_bans.pop()


def _make_update(fn: str, x: Any, new_x: Any, increment: Any = None) -> Any:
    if NAMES.update_bans:
        raise ValueError(NAMES.update_bans[-1])
    check_fits(fn, "new value", graph.static_shape(new_x), x)
    scope = graph.active_scope()
    if scope is not None:
        value = jnp.asarray(_value_of(new_x), dtype=x.dtype)
        scope.write(x, value)
        return value
    return Update(x, new_x, increment)


def update(x: Variable, new_x: Any) -> Any:
    """Sets variable ``x`` to ``new_x`` where the update is run.

    Inside a state scope the update applies at once, to the scope.

    Args:
        x: a variable.
        new_x: a value (tensor or array) of the variable's shape.

    Returns:
        A pending :class:`Update`; inside a state scope, the new value.
    """
    check_variable("update", "x", x)
    return _make_update("update", x, new_x)


def update_add(x: Variable, increment: Any) -> Any:
    """Adds ``increment`` to variable ``x`` where the update is run (see :func:`update`).

    Args:
        x: a variable.
        increment: a value broadcastable to it.

    Returns:
        A pending :class:`Update` (inside a state scope, the new value).
    """
    check_variable("update_add", "x", x)
    return _make_update("update_add", x, x + increment, increment)


def update_sub(x: Variable, decrement: Any) -> Any:
    """Subtracts ``decrement`` from variable ``x`` where the update is run (see :func:`update`).

    Args:
        x: a variable.
        decrement: a value broadcastable to it.

    Returns:
        A pending :class:`Update` (inside a state scope, the new value).
    """
    check_variable("update_sub", "x", x)
    return _make_update("update_sub", x, x - decrement, -decrement)


def moving_average_update(x: Variable, value: Any, momentum: float) -> Any:
    """Moves variable ``x`` towards ``value``: ``x - (x - value) * (1 - momentum)``.

    Args:
        x: a variable.
        value: the new observation, of the variable's shape.
        momentum: the weight of the old value.

    Returns:
        A pending :class:`Update` (inside a state scope, the new value).
    """
    check_variable("moving_average_update", "x", x)
    step = (x - value) * (1.0 - momentum)
    return _make_update("moving_average_update", x, x - step, -step)


def normalize_updates(updates: Sequence[Any] | None) -> list[Update]:
    """Turns (nested lists of) updates and ``(variable, value)`` pairs into a flat list.

    A pair is an assignment. Several entries may update one variable (see
    :func:`compose_updates`).

    Raises:
        TypeError: for an entry that is neither.
    """
    result: list[Update] = []
    for entry in updates or []:
        if isinstance(entry, Update):
            result.append(entry)
        elif (
            isinstance(entry, (list, tuple))
            and len(entry) == 2
            and not isinstance(entry[0], (list, tuple, Update))
        ):
            target, value = entry
            check_variable("updates", "update target", target)
            result.append(Update(target, value))
        elif isinstance(entry, (list, tuple)):
            result.extend(normalize_updates(entry))
        else:
            raise TypeError(
                f"updates: expected K.update(...) results or (variable, value) pairs, got {entry!r}"
            )
    return result


def compose_updates(
    updates: Sequence[Update], payloads: Sequence[Any], read: Callable[[Variable], Any]
) -> tuple[dict[str, Any], list[Any]]:
    """Composes updates run together, as TF's assign ops do.

    Every payload is computed from the state before the updates; increments add up in list
    order, and an assignment replaces what came before it.

    Args:
        updates: the updates, in order.
        payloads: the value of each one's :attr:`Update.payload`, computed from that state.
        read: the value of a variable in that state.

    Returns:
        ``(new_values, after)``: variable name -> final value (cast to the variable's dtype),
        and each update's variable's value right after it.

    Raises:
        ValueError: naming the variable when a value does not keep its shape.
    """
    new: dict[str, Any] = {}
    after = []
    for update_, payload in zip(updates, payloads):
        target = update_.variable
        if update_.increment is None:
            value = payload
        else:
            value = (new[target.name] if target.name in new else read(target)) + payload
        value = jnp.asarray(value, dtype=target.dtype)
        if value.shape != target.shape:
            check_fits("update", "new value", value.shape, target)
        new[target.name] = value
        after.append(value)
    return new, after


def _update_targets(control_inputs: Any) -> dict:
    targets: dict = {}
    if isinstance(control_inputs, Update):
        targets[control_inputs.variable] = control_inputs.value
    elif isinstance(control_inputs, (list, tuple)):
        if len(control_inputs) == 2 and isinstance(control_inputs[0], Variable):
            targets[control_inputs[0]] = control_inputs[1]
        else:
            for entry in control_inputs:
                targets.update(_update_targets(entry))
    return targets


def control_dependencies(control_inputs: Any) -> contextlib.AbstractContextManager:
    """A context in which new ops see the variables as they are after ``control_inputs``.

    Inside it, an op that reads a variable updated by one of the pending updates in
    ``control_inputs`` reads the update's new value instead, as TF's control dependencies make
    it read the variable after the update. (The new value is computed from the state before the
    call, like every value of a compiled function; the update itself still runs only where it is
    run.) Entries that are not updates are accepted and ignored: jaxkeras orders computation by
    data dependence.

    Args:
        control_inputs: updates, ``(variable, value)`` pairs, lists of them, other ops, or
            ``None``.

    Returns:
        A context manager.
    """
    return graph.substituting(_update_targets(control_inputs))


# ---------------------------------------------------------------------------------------------
# state scope


class state_scope(Context):
    """A context for functional code: variables read ``values``, updates write the scope.

    Inside it, ops on variables run at once on the scope's values (so they work inside your own
    ``jax.jit``, ``jax.vmap`` and ``jax.grad``), and ``K.update``/``update_add``/... apply at
    once to the scope. ``scope.values`` is the new state when the block ends.

    Args:
        values: variable (or variable name) -> value; variables not in it read the store.
        rng: a JAX key for random ops inside the scope (pass a fresh one per step under jit;
            without one, keys are drawn from the store when the scope is traced).
        learning_phase: 0 or 1 for ``in_train_phase``/``dropout`` inside the scope.

    Example:
        >>> counter = K.variable(0.0)
        >>> @jax.jit
        ... def step(values, x):
        ...     with K.state_scope(values) as scope:
        ...         K.update_add(counter, K.sum(x))
        ...     return scope.values
        >>> step(K.get_state([counter]), np.ones(3))[counter.name]
        Array(3., dtype=float32)
    """

    def __init__(
        self,
        values: Mapping[Any, Any] | None = None,
        rng: Any = None,
        learning_phase: int | None = None,
    ) -> None:
        state = {}
        for key, value in (values or {}).items():
            state[key.name if isinstance(key, Variable) else str(key)] = value
        if learning_phase is not None and learning_phase not in (0, 1):
            raise ValueError(f"state_scope: learning_phase must be 0 or 1, got {learning_phase!r}")
        super().__init__(state, rng, learning_phase, scope=True)

    @property
    def values(self) -> dict[str, Any]:
        """The scope's state: variable name -> value (after the updates made inside)."""
        return dict(self.state)


def get_state(variables: Sequence[Variable | str] | None = None) -> dict[str, jax.Array]:
    """Returns a copy of the current values, by name, to pass to state scopes or pure functions.

    Args:
        variables: the variables (or their names) to include; default all live ones.

    Returns:
        A dict variable name -> ``jax.Array``, each on the devices (with the sharding) of the
        stored value.
    """
    with STORE.lock.read():
        if variables is None:
            names = STORE.names()
        else:
            names = [v.name if isinstance(v, Variable) else v for v in variables]
        return {n: _device_copy(STORE.read(n)) for n in names}


def set_state(values: Mapping[str, Any]) -> None:
    """Writes a state dict (as returned by a pure function or a scope) into the store.

    Args:
        values: variable name -> value; every name must be a live variable, and each value
            must keep its variable's shape. Nothing is written if any entry is invalid.
    """
    with STORE.lock.write():
        checked = {}
        for name, value in values.items():
            if not STORE.has(name):
                raise ValueError(f"set_state: no live variable is named {name!r}")
            old = STORE.read(name)
            if tuple(np.shape(value)) != tuple(old.shape):
                raise ValueError(
                    f"set_state: value of shape {np.shape(value)} does not fit "
                    f"variable {name!r} of shape {tuple(old.shape)}"
                )
            checked[name] = place_like(_copy_to_device(value, old.dtype.name), old)
        STORE.write(checked)
