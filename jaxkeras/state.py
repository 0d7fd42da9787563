"""Variables and the state store; updates; state scopes; the learning phase; uids and sessions.

Variable values live in one :class:`Store`. Ops on a :class:`Variable` are lazy (recorded), so a
graph always sees the value the variable has when it runs. Updates (``update``, ``update_add``,
...) are values returned by compiled functions and committed to the store after the call.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse

from jaxkeras import config, graph
from jaxkeras.graph import Context, Symbolic, Tensor, standardize_dtype

# ---------------------------------------------------------------------------------------------
# the store


class Store:
    """The one authoritative copy of every variable's value, and the random-number state.

    Attributes:
        values: variable name -> ``jax.Array``.
        seed: the base seed of every random key.
        counter: how many keys have been handed out (one per compiled call or eager draw).
    """

    def __init__(self, seed: int = 0) -> None:
        self.values: dict[str, jax.Array] = {}
        self.seed = seed
        self.counter = 0

    def unique_name(self, name: str) -> str:
        """Returns ``name``, or ``name_N`` with the smallest N no live variable uses."""
        unique, n = name, 0
        while unique in self.values:
            n += 1
            unique = f"{name}_{n}"
        return unique

    def next_key(self) -> np.ndarray:
        """Returns fresh raw key data (two uint32) for one call; never the same twice."""
        self.counter += 1
        return np.array([self.seed & 0xFFFFFFFF, self.counter & 0xFFFFFFFF], dtype=np.uint32)

    def drop(self, name: str) -> None:
        """Forgets a variable's value (called when the variable is garbage-collected)."""
        self.values.pop(name, None)


_store = Store()


def store() -> Store:
    """Returns the process-wide store."""
    return _store


def set_random_seed(seed: int) -> None:
    """Restarts random-number generation from ``seed`` (a jaxkeras addition to the Keras API).

    After it, a program that builds the same graphs and makes the same calls draws the same
    numbers (initial weights included), whatever ran before.

    Args:
        seed: a non-negative int.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"set_random_seed: seed must be a non-negative int, got {seed!r}")
    _store.seed = int(seed)
    _store.counter = 0
    graph.reset_salts()


def _copy_to_device(value: Any, dtype: str) -> Any:
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
    return jnp.array(np.asarray(value), dtype=dtype, copy=True)


def to_numpy(value: Any) -> np.ndarray:
    """A NumPy copy of a value; sparse values come out dense."""
    return np.array(value.todense() if graph.is_bcoo(value) else value, copy=True)


# ---------------------------------------------------------------------------------------------
# uids and name scopes

_uids: dict[str, int] = defaultdict(int)
_name_scopes: list[str] = []


def get_uid(prefix: str = "") -> int:
    """Returns a per-prefix counter: 1 on the first call with ``prefix``, then 2, 3, ...

    Args:
        prefix: the name the counter belongs to.

    Returns:
        An int.
    """
    _uids[prefix] += 1
    return _uids[prefix]


def reset_uids() -> None:
    """Resets every :func:`get_uid` counter."""
    _uids.clear()


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
    _name_scopes.append(name)
    try:
        yield "/".join(_name_scopes)
    finally:
        _name_scopes.pop()


def scoped_name(name: str) -> str:
    """Returns ``name`` with the active name scopes as prefix."""
    return "/".join([*_name_scopes, name])


# ---------------------------------------------------------------------------------------------
# variables


class Variable(Symbolic):
    """A handle to a value held by the store.

    Ops on a variable are recorded lazily and read its value when they run. Attributes may be
    set freely (Keras sets ``_keras_shape``, ``_uses_learning_phase``, ...).

    Attributes:
        name: unique name (the key of its value in the store and in state dicts).
        constraint: a function applied by optimizers after each update, or ``None``.
        trainable: whether optimizers should train it.
    """

    _kind = "variable"

    def __init__(
        self, value: jax.Array, name: str, constraint: Callable | None, trainable: bool
    ) -> None:
        self.name = name
        self._shape = tuple(value.shape)
        self._dtype = value.dtype.name
        if graph.is_bcoo(value):
            self._sparse = True
            self._nse = value.nse
        self.constraint = constraint
        self.trainable = trainable
        _store.values[name] = value
        weakref.finalize(self, _store.drop, name)

    def _store_read(self) -> jax.Array:
        try:
            return _store.values[self.name]
        except KeyError:
            raise ValueError(f"variable {self.name!r} has no value in the store") from None

    def _compute(self, ctx: Context, memo: dict) -> Any:
        return ctx.read(self)

    def value(self) -> Any:
        """Returns the current value (a ``jax.Array``; the scope's value inside a state scope)."""
        scope = graph.active_scope()
        return scope.read(self) if scope is not None else self._store_read()

    def eval(self) -> np.ndarray:
        """Returns a NumPy copy of the current value."""
        return get_value(self)

    numpy = eval

    def __repr__(self) -> str:
        try:
            body = np.array2string(np.asarray(self._store_read()), threshold=20, edgeitems=2)
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
        array([[2., 4.], [6., 8.]], dtype=float32)
    """
    dtype = standardize_dtype(dtype or config.floatx())
    if constraint is not None and not callable(constraint):
        raise TypeError(f"variable: constraint must be callable, got {constraint!r}")
    data = _copy_to_device(_value_of(value), dtype)
    full = _store.unique_name(scoped_name(name or "variable"))
    return Variable(data, full, constraint, trainable)


def _check_variable(x: Any, fn: str, arg: str = "x") -> Variable:
    if not isinstance(x, Variable):
        raise TypeError(f"{fn}: {arg} must be a variable (from K.variable), got {x!r}")
    return x


def get_value(x: Any) -> np.ndarray:
    """Returns a NumPy copy of the value of a variable (or of any tensor without placeholders).

    Args:
        x: a variable, tensor or array.

    Returns:
        A ``numpy.ndarray`` that shares no memory with the store.
    """
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
    return [get_value(x) for x in xs]


def _checked_value(x: Variable, value: Any, fn: str) -> Any:
    value = _value_of(value)
    if not (isinstance(value, jax.core.Tracer) or hasattr(value, "tocoo") or graph.is_bcoo(value)):
        value = np.asarray(value)
    if tuple(value.shape) != x.shape:
        raise ValueError(
            f"{fn}: value of shape {tuple(value.shape)} does not fit variable {x.name!r} "
            f"of shape {x.shape}"
        )
    if x._sparse and isinstance(value, np.ndarray):
        value = sparse.BCOO.fromdense(value)  # a sparse variable stays sparse
    return _copy_to_device(value, x.dtype)


def set_value(x: Variable, value: Any) -> None:
    """Writes ``value`` into variable ``x`` now.

    Args:
        x: a variable.
        value: an array of the variable's shape (cast to its dtype).

    Raises:
        ValueError: when the shapes differ; the store is left unchanged.
    """
    _check_variable(x, "set_value")
    _store.values[x.name] = _checked_value(x, value, "set_value")


def batch_set_value(tuples: Sequence[tuple[Variable, Any]]) -> None:
    """Writes several variables at once; all values are checked before any is written.

    Args:
        tuples: ``(variable, value)`` pairs.
    """
    checked = []
    for pair in tuples:
        x, value = pair
        _check_variable(x, "batch_set_value")
        checked.append((x.name, _checked_value(x, value, "batch_set_value")))
    for name, data in checked:
        _store.values[name] = data


def count_params(x: Any) -> int:
    """Returns the number of scalars in a variable or tensor of static shape.

    Args:
        x: a variable or tensor.

    Returns:
        An int.
    """
    shape = x.shape if isinstance(x, Symbolic) else np.shape(x)
    if shape is None or None in shape:
        raise ValueError(f"count_params: {x!r} has a dimension of unknown size")
    return int(np.prod(shape, dtype=np.int64))


# ---------------------------------------------------------------------------------------------
# updates


class Update:
    """A pending update of a variable: where it runs, the variable gets ``value``.

    Run it with ``K.eval(update)`` (once), or pass it in ``K.function(..., updates=[...])``
    (on every call).
    """

    def __init__(self, variable: Variable, value: Any) -> None:
        self.variable = variable
        self.value = value

    def __iter__(self):
        return iter((self.variable, self.value))

    def __repr__(self) -> str:
        return (
            f"<pending update of variable {self.variable.name!r}: run it with "
            "K.eval(update) or K.function(inputs, outputs, updates=[update])>"
        )


_frozen_message: list[str] = []


@contextlib.contextmanager
def forbid_updates(reason: str) -> Iterator[None]:
    """A context in which creating an update raises ``ValueError(reason)`` (rnn step tracing)."""
    _frozen_message.append(reason)
    try:
        yield
    finally:
        _frozen_message.pop()


def update(x: Variable, new_x: Any) -> Any:
    """Sets variable ``x`` to ``new_x`` where the update is run.

    Inside a state scope the update applies at once, to the scope.

    Args:
        x: a variable.
        new_x: a value (tensor or array) of the variable's shape.

    Returns:
        A pending :class:`Update`; inside a state scope, the new value.
    """
    _check_variable(x, "update")
    if _frozen_message:
        raise ValueError(_frozen_message[-1])
    new_shape = new_x.shape if isinstance(new_x, Symbolic) else np.shape(new_x)
    if new_shape is not None and (
        len(new_shape) != len(x.shape)
        or any(a is not None and a != b for a, b in zip(new_shape, x.shape))
    ):
        raise ValueError(
            f"update: new value of shape {tuple(new_shape)} does not fit variable {x.name!r} "
            f"of shape {x.shape}"
        )
    scope = graph.active_scope()
    if scope is not None:
        value = jnp.asarray(_value_of(new_x), dtype=x.dtype)
        scope.write(x, value)
        return value
    return Update(x, new_x)


def update_add(x: Variable, increment: Any) -> Any:
    """Adds ``increment`` to variable ``x`` where the update is run (see :func:`update`).

    Args:
        x: a variable.
        increment: a value broadcastable to it.

    Returns:
        A pending :class:`Update` (inside a state scope, the new value).
    """
    _check_variable(x, "update_add")
    return update(x, x + increment)


def update_sub(x: Variable, decrement: Any) -> Any:
    """Subtracts ``decrement`` from variable ``x`` where the update is run (see :func:`update`).

    Args:
        x: a variable.
        decrement: a value broadcastable to it.

    Returns:
        A pending :class:`Update` (inside a state scope, the new value).
    """
    _check_variable(x, "update_sub")
    return update(x, x - decrement)


def moving_average_update(x: Variable, value: Any, momentum: float) -> Any:
    """Moves variable ``x`` towards ``value``: ``x - (x - value) * (1 - momentum)``.

    Args:
        x: a variable.
        value: the new observation, of the variable's shape.
        momentum: the weight of the old value.

    Returns:
        A pending :class:`Update` (inside a state scope, the new value).
    """
    _check_variable(x, "moving_average_update")
    return update(x, x - (x - value) * (1.0 - momentum))


def normalize_updates(updates: Sequence[Any] | None) -> list[tuple[Variable, Any]]:
    """Turns a list of updates and ``(variable, value)`` pairs into pairs; one per variable.

    Raises:
        TypeError: for an entry that is neither.
        ValueError: when two updates target one variable.
    """
    pairs: list[tuple[Variable, Any]] = []
    for entry in updates or []:
        if (
            isinstance(entry, (list, tuple))
            and len(entry) == 2
            and not isinstance(entry[0], (list, tuple))
        ):
            target, value = entry
        elif isinstance(entry, Update):
            target, value = entry.variable, entry.value
        elif isinstance(entry, (list, tuple)):
            pairs.extend(normalize_updates(entry))
            continue
        else:
            raise TypeError(
                f"updates: expected K.update(...) results or (variable, value) pairs, got {entry!r}"
            )
        _check_variable(target, "updates", "update target")
        pairs.append((target, value))
    seen: set[str] = set()
    for target, _ in pairs:
        if target.name in seen:
            raise ValueError(
                f"updates: variable {target.name!r} is updated twice in one function; "
                "combine the two updates into one"
            )
        seen.add(target.name)
    return pairs


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
        >>> @jax.jit
        ... def step(values, x):
        ...     with K.state_scope(values) as scope:
        ...         K.update_add(counter, K.sum(x))
        ...     return scope.values
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
        A dict variable name -> ``jax.Array``.
    """
    if variables is None:
        names = list(_store.values)
    else:
        names = [v.name if isinstance(v, Variable) else v for v in variables]
    return {n: jnp.array(_store.values[n], copy=True) for n in names}


def set_state(values: Mapping[str, Any]) -> None:
    """Writes a state dict (as returned by a pure function or a scope) into the store.

    Args:
        values: variable name -> value; every name must be a live variable, and each value
            must keep its variable's shape. Nothing is written if any entry is invalid.
    """
    checked = {}
    for name, value in values.items():
        if name not in _store.values:
            raise ValueError(f"set_state: no live variable is named {name!r}")
        old = _store.values[name]
        if tuple(np.shape(value)) != tuple(old.shape):
            raise ValueError(
                f"set_state: value of shape {np.shape(value)} does not fit "
                f"variable {name!r} of shape {tuple(old.shape)}"
            )
        checked[name] = _copy_to_device(value, old.dtype.name)
    _store.values.update(checked)


# ---------------------------------------------------------------------------------------------
# learning phase

_phase: dict[str, Any] = {"value": None, "placeholder": graph.LearningPhase()}


def learning_phase() -> Any:
    """Returns the learning phase: the value set by :func:`set_learning_phase`, else a tensor.

    The tensor is a placeholder (0 = test, 1 = train) that ``K.function`` may list among its
    inputs; when it is not fed, graphs run in the test phase (0).

    Returns:
        0 or 1, or the learning-phase tensor.
    """
    value = _phase["value"]
    return _phase["placeholder"] if value is None else value


def set_learning_phase(value: int) -> None:
    """Fixes the learning phase for graphs built from now on.

    Args:
        value: 0 (test) or 1 (train).

    Raises:
        ValueError: for any other value.
    """
    if value not in (0, 1) or isinstance(value, float):
        raise ValueError(f"set_learning_phase: expected 0 or 1, got {value!r}")
    _phase["value"] = int(value)


@contextlib.contextmanager
def learning_phase_scope(value: int) -> Iterator[None]:
    """A context in which the learning phase is fixed to ``value``.

    Args:
        value: 0 or 1.
    """
    if value not in (0, 1):
        raise ValueError(f"learning_phase_scope: expected 0 or 1, got {value!r}")
    previous = _phase["value"]
    _phase["value"] = int(value)
    try:
        yield
    finally:
        _phase["value"] = previous


def _default_phase() -> int:
    return _phase["value"] or 0


class PhaseSwitch(Tensor):
    """``x`` in the training phase, ``alt`` in the test phase, chosen when the graph is traced."""

    _kind = "in_train_phase"
    _uses_learning_phase = True

    def __init__(self, x: Any, alt: Any) -> None:
        xs, alts = _static_shape(x), _static_shape(alt)
        if xs is not None and alts is not None and len(xs) == len(alts):
            shape = tuple(a if a == b else None for a, b in zip(xs, alts))
        else:
            shape = xs
        super().__init__(shape, graph.dtype_of(x))
        self._x, self._alt = x, alt
        self._has_placeholder = any(
            isinstance(v, Symbolic) and v._has_placeholder for v in (x, alt)
        )

    def _inputs(self):
        return tuple(v for v in (self._x, self._alt) if isinstance(v, Symbolic))

    def _choice(self, ctx: Context) -> Any:
        return self._x if ctx.learning_phase else self._alt

    def _deps(self, ctx):
        choice = self._choice(ctx)
        return (choice,) if isinstance(choice, Symbolic) else ()

    def _compute(self, ctx, memo):
        choice = self._choice(ctx)
        return memo[choice] if isinstance(choice, Symbolic) else choice


def _static_shape(x: Any) -> tuple | None:
    return x.shape if isinstance(x, Symbolic) else tuple(np.shape(x))


_where = graph.op(lambda c, x, alt: jnp.where(c, x, alt), name="switch_phase")


def in_train_phase(x: Any, alt: Any, training: Any = None) -> Any:
    """Selects ``x`` in the training phase and ``alt`` otherwise.

    With the learning-phase tensor the choice is made when the graph is traced (each compiled
    function has one version per phase, and the branch not taken is not computed).

    Args:
        x: what to return in training (a value or a callable returning one).
        alt: what to return otherwise (likewise).
        training: 0/1/bool, a boolean tensor, or ``None`` for :func:`learning_phase`.

    Returns:
        ``x`` or ``alt``, or a tensor choosing between them.
    """
    if training is None:
        training = learning_phase()
    if isinstance(training, graph.LearningPhase):
        scope = graph.active_scope()
        if scope is not None:
            training = scope.learning_phase
        else:
            x = x() if callable(x) else x
            alt = alt() if callable(alt) else alt
            if x is alt:
                return x
            return PhaseSwitch(x, alt)
    if isinstance(training, (Symbolic, jax.core.Tracer)):
        x = x() if callable(x) else x
        alt = alt() if callable(alt) else alt
        return _where(training, x, alt)
    if bool(training):
        return x() if callable(x) else x
    return alt() if callable(alt) else alt


def in_test_phase(x: Any, alt: Any, training: Any = None) -> Any:
    """Selects ``x`` in the test phase and ``alt`` otherwise (see :func:`in_train_phase`).

    Args:
        x: what to return at test time (a value or a callable).
        alt: what to return in training (likewise).
        training: 0/1/bool, a boolean tensor, or ``None`` for :func:`learning_phase`.

    Returns:
        ``x`` or ``alt``, or a tensor choosing between them.
    """
    return in_train_phase(alt, x, training=training)


# ---------------------------------------------------------------------------------------------
# sessions and bookkeeping

_manual_init: dict[str, bool] = {"value": False}


class Session:
    """A compatibility stand-in for a TF1 session: ``run`` evaluates tensors with feeds.

    jaxkeras has no sessions: variables live in the store and functions compile themselves.
    """

    def run(self, fetches: Any, feed_dict: Mapping[Any, Any] | None = None) -> Any:
        """Evaluates ``fetches`` (a tensor, a variable, an update or a list of them).

        Args:
            fetches: what to evaluate.
            feed_dict: placeholder -> value.

        Returns:
            NumPy values in the structure of ``fetches``.
        """
        from jaxkeras.function import eval_with_feeds

        return eval_with_feeds(fetches, feed_dict or {})

    def close(self) -> None:
        """Does nothing (nothing to release)."""


_session: dict[str, Any] = {"current": None}


def get_session() -> Session:
    """Returns the session object (see :class:`Session`; kept for Keras-2 code).

    Returns:
        The session set by :func:`set_session`, else a default :class:`Session`.
    """
    if _session["current"] is None:
        _session["current"] = Session()
    return _session["current"]


def set_session(session: Any) -> None:
    """Sets the object :func:`get_session` returns; it changes nothing else.

    Args:
        session: any object (kept for Keras-2 code that sets a TF session).
    """
    _session["current"] = session


def manual_variable_initialization(value: bool) -> None:
    """Records the flag; jaxkeras variables always hold their initial value from creation.

    Args:
        value: True for manual initialization (as Keras-2 code passes it).
    """
    _manual_init["value"] = bool(value)


def clear_session() -> None:
    """Resets uids, the learning phase and the shape cache.

    Variables created before stay valid and keep their values (each value is freed when its
    variable is garbage-collected); compiled functions keep working.
    """
    reset_uids()
    _phase["value"] = None
    _phase["placeholder"] = graph.LearningPhase()
    graph.clear_caches()


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


@contextlib.contextmanager
def control_dependencies(control_inputs: Any) -> Iterator[None]:
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
    """
    graph.push_substitutions(_update_targets(control_inputs))
    try:
        yield
    finally:
        graph.pop_substitutions()


def symbolic(func: Callable) -> Callable:
    """Decorator kept for Keras-2 code: returns ``func`` unchanged.

    jaxkeras has one mode: ops on concrete arrays run at once; ops on placeholders and
    variables build a graph that ``K.function`` compiles.

    Args:
        func: a function.

    Returns:
        ``func``.
    """
    return func


def eager(func: Callable) -> Callable:
    """Decorator kept for Keras-2 code: returns ``func`` unchanged (see :func:`symbolic`).

    Args:
        func: a function.

    Returns:
        ``func``.
    """
    return func


graph.set_provider("rng", lambda: jnp.asarray(_store.next_key()))
graph.set_provider("learning_phase", _default_phase)
