"""Evaluation contexts: where a graph gets variable values, random keys and the learning phase."""

from __future__ import annotations

from typing import Any

import jax
from jax.extend.core import get_opaque_trace_state

from jaxkeras._engine.graph.base import ARRAY_TYPE
from jaxkeras._engine.graph.keys import node_key
from jaxkeras._engine.graph.runtime import PHASE, THREAD, state_source

TOP_LEVEL_TRACE = get_opaque_trace_state()
"""The trace state outside any ``jax.jit``/``vmap``/``grad``."""


class _PublicTraceState:
    """Where JAX's internal trace state is not found: the same test, through the public API."""

    @property
    def value(self) -> Any:
        """``_OUTSIDE`` at the top level, else ``None``."""
        return _OUTSIDE if get_opaque_trace_state() == TOP_LEVEL_TRACE else None


def _trace_state() -> tuple[Any, Any]:
    """JAX's thread-local trace reference (which ``get_opaque_trace_state()`` wraps), and its
    value outside any trace.

    ``get_opaque_trace_state() == TOP_LEVEL_TRACE`` costs about half a microsecond, as much as
    all the rest of an eager op's dispatch; reading the state it wraps costs a tenth. That state
    is internal to JAX, so it is used only if it holds what the public function wraps; else a
    stand-in that asks the public function.
    """
    reference = getattr(TOP_LEVEL_TRACE, "_trace_ref", None)
    try:
        from jax._src.core import trace_state
    except ImportError:
        trace_state = None
    if reference is not None and getattr(trace_state, "value", None) is reference:
        return trace_state, reference
    return _PublicTraceState(), _OUTSIDE


_OUTSIDE = object()
TRACE, TOP_LEVEL = _trace_state()
"""``TRACE.value is TOP_LEVEL`` when this thread runs outside any ``jax.jit``/``vmap``/``grad``
(the op decorator asks on every eager call, so it is as cheap as JAX allows)."""


def at_top_level() -> bool:
    """Returns whether this thread runs outside any ``jax.jit``/``vmap``/``grad`` trace."""
    return TRACE.value is TOP_LEVEL


class Context:
    """Where a graph is evaluated: variable values, a random key and the learning phase.

    Args:
        state: variable name -> value; variables missing from it read the store.
        rng: the key random nodes derive theirs from (:func:`node_key`); ``None`` draws keys
            from the store, each node's from its seed and how often it has run.
        learning_phase: 0 or 1 (static); ``None`` means the global default.
        scope: True for a user-facing state scope, in which ops on variables run at once and
            updates are applied at once.
        keys: random node -> its key (a compiled function's, derived once per call).
        policy: the dtype policy products follow here (:mod:`jaxkeras.mixed_precision`);
            ``None`` for the one in effect when they are evaluated.
    """

    def __init__(
        self,
        state: dict[str, Any] | None = None,
        rng: Any = None,
        learning_phase: int | None = None,
        scope: bool = False,
        keys: dict | None = None,
        policy: Any = None,
    ) -> None:
        self.state: dict[str, Any] = {} if state is None else state
        self.policy = policy
        self.loss_scale: Any = None  # jmp's DynamicLossScale while a train step scales its loss
        # (node, all-finite flag) per node evaluated, when a function checks numerics
        self.numerics: list | None = None
        self._rng = rng
        self._keys: dict = {} if keys is None else keys
        self._learning_phase = learning_phase
        self.scope = scope
        self.trace_state = get_opaque_trace_state()

    def read(self, variable: Any) -> Any:
        """Returns the value of ``variable`` in this context.

        Args:
            variable: a variable (anything with a ``name``).

        Returns:
            Its value here, else its stored value.
        """
        name = variable.name
        if name in self.state:
            return self.state[name]
        return state_source().read(name)

    def write(self, variable: Any, value: Any) -> None:
        """Sets the value of ``variable`` in this context (updates inside a scope).

        Args:
            variable: a variable.
            value: its new value.

        Raises:
            ValueError: when ``value`` is a tracer of a trace this context was not opened in.
        """
        if isinstance(value, jax.core.Tracer) and get_opaque_trace_state() != self.trace_state:
            raise ValueError(
                f"Updating variable {variable.name!r} here would leak a JAX tracer out of the "
                "jax.jit/vmap/grad trace it belongs to, because the state scope was opened "
                "outside that trace. Open the scope inside the traced function instead: "
                "`def step(values): with K.state_scope(values) as s: ...; return s.values`."
            )
        self.state[variable.name] = value

    @property
    def learning_phase(self) -> int:
        """The learning phase (0 = test, 1 = train) graphs see in this context."""
        if self._learning_phase is not None:
            return self._learning_phase
        return PHASE.default()

    def key(self, seed: int, node: Any = None) -> jax.Array:
        """Returns the random key of an op with ``seed`` (of ``node``) in this evaluation.

        The same node gets the same key throughout one evaluation (gradient replays included).

        Args:
            seed: the op's seed.
            node: the op's node, or ``None`` for an op run at once.

        Returns:
            A JAX key (raw ``uint32[2]`` data).
        """
        key = self._keys.get(node) if node is not None else None
        if key is None:
            if self._rng is not None:
                key = node_key(self._rng, seed)
            else:
                key = jax.numpy.asarray(state_source().draw_key(seed, node))
            if node is not None and get_opaque_trace_state() == self.trace_state:
                self._keys[node] = key  # not from inside a loop body's trace: it would leak
        return key

    def __enter__(self) -> Context:
        THREAD.contexts.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        THREAD.contexts.pop()


def active_context() -> Context | None:
    """Returns this thread's innermost active context, or ``None``."""
    contexts = THREAD.contexts
    return contexts[-1] if contexts else None


def plain_eager(*values: Any) -> bool:
    """Whether ``values`` are all ``jax.Array`` s and this thread runs outside any trace and any
    graph evaluation: where an op's public function may call the ``jax.numpy`` code its body
    would run, skipping the op decorator's tests and the evaluation's dtype policy (float32's
    there: :func:`jaxkeras.mixed_precision.evaluation_policy`).

    Args:
        *values: the op's array arguments.

    Returns:
        ``True`` when the op runs now on arrays, with float32's policy.
    """
    for value in values:
        if type(value) is not ARRAY_TYPE:
            return False
    return TRACE.value is TOP_LEVEL and not THREAD.contexts


def active_scope() -> Context | None:
    """Returns this thread's innermost active user-facing state scope, or ``None``."""
    ctx = active_context()
    return ctx if ctx is not None and ctx.scope else None
