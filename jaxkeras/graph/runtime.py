"""The graph layer's mutable state, in three named objects, and the interface to the store.

- :data:`NODE_IDS` numbers nodes (their names), process-wide.
- :data:`THREAD` holds each thread's own stacks: the active evaluation contexts and the
  control-dependency substitutions. Threads never see each other's.
- :data:`PHASE` is the learning phase set by ``K.set_learning_phase`` (process-wide, as in
  Keras 2) and the learning-phase placeholder.

Variable values and random keys come from the state store, which registers itself once through
:func:`install_state_source`; the graph layer knows it only through the :class:`StateSource`
protocol, never by importing it.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Protocol


class StateSource(Protocol):
    """What the graph layer needs from the state store."""

    def read(self, name: str) -> Any:
        """Returns the stored value of the variable called ``name``."""

    def draw_key(self, seed: int, node: Any = None) -> Any:
        """Returns the key of the next run of a random op with ``seed``.

        Args:
            seed: the op's seed.
            node: the op's node, whose runs the store counts (its numbers depend only on its
                seed and how often it has run); ``None`` for an op run at once, which gets a
                key never handed out before.
        """


class _Installed:
    source: StateSource | None = None


def install_state_source(source: StateSource) -> None:
    """Makes ``source`` the store that contexts read variables and keys from (state.py, once).

    Args:
        source: an object implementing :class:`StateSource`.
    """
    _Installed.source = source


def state_source() -> StateSource:
    """Returns the installed :class:`StateSource`.

    Raises:
        RuntimeError: if none was installed (jaxkeras.state was not imported).
    """
    if _Installed.source is None:
        raise RuntimeError("no variable store is installed: import jaxkeras, not jaxkeras.graph")
    return _Installed.source


class _NodeIds:
    """Process-wide node numbering (``next`` on ``itertools.count`` is atomic)."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def next(self) -> int:
        """Returns a fresh id."""
        return next(self._counter)


class _ThreadStacks(threading.local):
    """Each thread's active contexts and control-dependency substitutions."""

    def __init__(self) -> None:
        self.contexts: list[Any] = []
        self.substitutions: list[dict] = []


class _Phase:
    """The learning phase set by ``set_learning_phase`` (``None``: unset, so graphs get the
    placeholder) and the placeholder itself (made by :mod:`jaxkeras.graph.phase`)."""

    def __init__(self) -> None:
        self.value: int | None = None
        self.placeholder: Any = None

    def default(self) -> int:
        """The phase graphs run in when nothing feeds the placeholder: the set one, else 0."""
        return self.value or 0


NODE_IDS = _NodeIds()
THREAD = _ThreadStacks()
PHASE = _Phase()
