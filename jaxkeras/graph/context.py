"""Evaluation contexts: where a graph gets variable values, random keys and the learning phase."""

from __future__ import annotations

from typing import Any

import jax
from jax.extend.core import get_opaque_trace_state

from jaxkeras.graph.runtime import PHASE, THREAD, state_source

TOP_LEVEL_TRACE = get_opaque_trace_state()
"""The trace state outside any ``jax.jit``/``vmap``/``grad``."""


class Context:
    """Where a graph is evaluated: variable values, a random key and the learning phase.

    Args:
        state: variable name -> value; variables missing from it read the store.
        rng: the key random nodes derive theirs from; ``None`` draws one from the store on use.
        learning_phase: 0 or 1 (static); ``None`` means the global default.
        scope: True for a user-facing state scope, in which ops on variables run at once and
            updates are applied at once.
    """

    def __init__(
        self,
        state: dict[str, Any] | None = None,
        rng: Any = None,
        learning_phase: int | None = None,
        scope: bool = False,
    ) -> None:
        self.state: dict[str, Any] = {} if state is None else state
        self._rng = rng
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

    def key(self, salt: int) -> jax.Array:
        """Returns the random key of the node with this salt, for this evaluation.

        Args:
            salt: the node's salt.

        Returns:
            A JAX key.
        """
        if self._rng is None:
            self._rng = jax.numpy.asarray(state_source().next_key())
        return jax.random.fold_in(self._rng, salt)

    def __enter__(self) -> Context:
        THREAD.contexts.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        THREAD.contexts.pop()


def active_context() -> Context | None:
    """Returns this thread's innermost active context, or ``None``."""
    contexts = THREAD.contexts
    return contexts[-1] if contexts else None


def active_scope() -> Context | None:
    """Returns this thread's innermost active user-facing state scope, or ``None``."""
    ctx = active_context()
    return ctx if ctx is not None and ctx.scope else None
