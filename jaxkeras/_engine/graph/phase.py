"""Learning-phase nodes: the feedable phase placeholder and the switch that picks a branch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jaxkeras._engine.graph.base import Node, static_shape
from jaxkeras._engine.graph.context import Context
from jaxkeras._engine.graph.dtypes import dtype_of
from jaxkeras._engine.graph.nodes import Tensor
from jaxkeras._engine.graph.runtime import PHASE


class LearningPhase(Tensor):
    """The learning-phase placeholder: fed with 0 or 1, else the context's default."""

    _kind = "keras_learning_phase"

    def __init__(self) -> None:
        super().__init__((), "bool", "keras_learning_phase")

    def _compute(self, ctx: Context, memo: dict) -> Any:
        return ctx.learning_phase


class PhaseSwitch(Tensor):
    """``x`` in the training phase, ``alt`` in the test phase, chosen when the graph is traced.

    Only the branch taken is computed. It carries Keras's ``_uses_learning_phase``.

    Args:
        x: the training value (symbolic or concrete).
        alt: the test value.
    """

    _kind = "in_train_phase"

    def __init__(self, x: Any, alt: Any) -> None:
        xs, alts = static_shape(x), static_shape(alt)
        if xs is not None and alts is not None and len(xs) == len(alts):
            shape = tuple(a if a == b else None for a, b in zip(xs, alts))
        else:
            shape = xs
        super().__init__(shape, dtype_of(x), uses_learning_phase=True)
        self._x, self._alt = x, alt
        self._has_placeholder = any(isinstance(v, Node) and v._has_placeholder for v in (x, alt))

    def _inputs(self) -> Sequence[Node]:
        return tuple(v for v in (self._x, self._alt) if isinstance(v, Node))

    def _choice(self, ctx: Context) -> Any:
        return self._x if ctx.learning_phase else self._alt

    def _deps(self, ctx: Context) -> Sequence[Node]:
        choice = self._choice(ctx)
        return (choice,) if isinstance(choice, Node) else ()

    def _compute(self, ctx: Context, memo: dict) -> Any:
        choice = self._choice(ctx)
        return memo[choice] if isinstance(choice, Node) else choice


def reset_learning_phase() -> None:
    """Unsets the learning phase and makes a new placeholder for it (``clear_session``)."""
    PHASE.value = None
    PHASE.placeholder = LearningPhase()


reset_learning_phase()
