"""Variables, updates, state scopes, name scopes and seeds: the public face of the store.

Variable values live in the engine's store (:mod:`jaxkeras._engine.store`), the one writer of
them, which the graph layer reads through its ``StateSource`` protocol. Ops on a
:class:`Variable` are lazy (recorded), so a graph always sees the value the variable has when
it runs. Updates (``update``, ``update_add``, ...) are pending until run: compiled functions
return new values and the store commits them after the call.

Mutable state here: :data:`NAMES` (``get_uid`` counters; each thread's name scopes and bans on
creating updates).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse

from jaxkeras._engine import graph
from jaxkeras._engine.graph import Context, Symbolic, VariableNode
from jaxkeras._engine.store import (
    STORE,
    as_array,
    copy_to_device,
    device_copy,
    place_like,
    placed,
    to_numpy,
)
from jaxkeras._engine.store import store as store  # (re-exported: ``state.store()``)
from jaxkeras._ops.math import cast
from jaxkeras.checks import check_dtype, check_fits, check_seed, check_variable

# ---------------------------------------------------------------------------------------------
# seeds


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
        STORE.add(name, value)  # under STORE.lock (see variable())
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
    data = copy_to_device(_value_of(value), dtype)
    with STORE.lock.write():
        full = STORE.unique_name(scoped_name(name or "variable"))
        return Variable(placed(full, data), full, constraint, trainable)


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
        value = as_array(value, fn)
    check_fits(fn, "value", tuple(value.shape), x)
    if x._sparse and isinstance(value, np.ndarray):
        value = sparse.BCOO.fromdense(value)  # a sparse variable stays sparse
    # (a packed value is not in ``values``, and was not placed: it has no layout to keep)
    return place_like(copy_to_device(value, x.dtype, fn), STORE.values.get(x.name))


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


def _in_dtype_of(x: Variable, value: Any) -> Any:
    """``value`` in variable ``x``'s dtype; a Python number stays one (it takes ``x``'s dtype)."""
    if type(value) in (int, float) or getattr(value, "dtype", None) == x.dtype:
        return value
    return cast(value, x.dtype)


def moving_average_update(x: Variable, value: Any, momentum: float) -> Any:
    """Moves variable ``x`` towards ``value``: ``x - (x - value) * (1 - momentum)``.

    Computed in the variable's dtype, as TF-Keras does: ``value`` and ``momentum`` are cast to
    it (a float16 moving mean takes a float32 batch mean).

    Args:
        x: a floating-point variable.
        value: the new observation, of the variable's shape.
        momentum: the weight of the old value (a number or a scalar tensor).

    Returns:
        A pending :class:`Update` (inside a state scope, the new value).

    Raises:
        TypeError: when ``x`` is an integer or boolean variable: a moving average does not fit
            in one (TF-Keras casts ``momentum`` to the variable's dtype, where 0.9 becomes 0, so
            its "average" of an int variable is an assignment of ``value``).
    """
    check_variable("moving_average_update", "x", x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(
            f"moving_average_update: x must be a floating-point variable, got {x.name!r} of "
            f"dtype {x.dtype}; keep the average in a float variable "
            f"(K.variable(..., dtype=K.floatx())) and K.cast it where integers are needed"
        )
    value, momentum = _in_dtype_of(x, value), _in_dtype_of(x, momentum)
    step = (x - value) * (1 - momentum)
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
        return {n: device_copy(STORE.read(n)) for n in names}


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
            checked[name] = place_like(copy_to_device(value, old.dtype.name), old)
        STORE.write(checked)
