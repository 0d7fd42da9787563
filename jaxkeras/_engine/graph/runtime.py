"""The graph layer's mutable state, in four named objects, and the interface to the store.

- :data:`NODE_IDS` numbers nodes (their names), process-wide.
- :data:`THREAD` holds each thread's own stacks: the active evaluation contexts and the
  control-dependency substitutions. Threads never see each other's.
- :data:`PHASE` is the learning phase set by ``K.set_learning_phase`` (process-wide, as in
  Keras 2) and the learning-phase placeholder.
- :data:`DISTRIBUTION` is the distribution in effect (``jaxkeras.distribution`` sets it; the
  store and compiled functions ask it where values go, through the :class:`Distributor`
  protocol). It is a user setting, like the floatx: ``clear_session`` leaves it.

Variable values and random keys come from the state store, which registers itself once through
:func:`install_state_source`; the graph layer knows it only through the :class:`StateSource`
protocol, never by importing it.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator, Sequence
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
        raise RuntimeError(
            "no variable store is installed: import jaxkeras, not jaxkeras._engine.graph"
        )
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
    placeholder) and the placeholder itself (made by :mod:`jaxkeras._engine.graph.phase`)."""

    def __init__(self) -> None:
        self.value: int | None = None
        self.placeholder: Any = None

    def default(self) -> int:
        """The phase graphs run in when nothing feeds the placeholder: the set one, else 0."""
        return self.value or 0


NODE_IDS = _NodeIds()
THREAD = _ThreadStacks()
PHASE = _Phase()


class Distributor(Protocol):
    """What the store and compiled functions ask the distribution in effect."""

    def variable_layout(self, name: str, shape: tuple[int, ...]) -> Any:
        """Returns the ``jax.sharding.Sharding`` of a new variable, or ``None`` (one device).

        Args:
            name: the variable's unique name.
            shape: its shape.
        """

    def place_feeds(self, feeds: Sequence[Any]) -> list[Any]:
        """Returns the feeds of one call of a compiled function, placed on the devices.

        Args:
            feeds: the checked feeds (NumPy or JAX arrays, or sparse values).
        """

    def output_layout(self) -> Any:
        """Returns the sharding compiled functions give their outputs (``None``: XLA's
        choice)."""


class _Scopes(threading.local):
    """Each thread's stack of distribution scopes."""

    def __init__(self) -> None:
        self.stack: list[Distributor] = []


class _Distribution:
    """The distribution in effect: this thread's innermost scope, else the process-wide one.

    Attributes:
        active: whether a distribution may be in effect in some thread (a process-wide one
            is set, or a scope is open); when False, :meth:`current` is ``None`` everywhere.
    """

    def __init__(self) -> None:
        self._default: Distributor | None = None
        self._scopes = _Scopes()
        self._open = 0  # scopes open in any thread
        self._open_lock = threading.Lock()
        self.active = False

    @property
    def default(self) -> Distributor | None:
        """The process-wide distribution (``None``: one device)."""
        return self._default

    @default.setter
    def default(self, distributor: Distributor | None) -> None:
        with self._open_lock:
            self._default = distributor
            self.active = bool(self._open) or distributor is not None

    def current(self) -> Distributor | None:
        """Returns the distribution in effect in this thread (``None``: one device)."""
        stack = self._scopes.stack
        return stack[-1] if stack else self._default

    @contextlib.contextmanager
    def scoped(self, distributor: Distributor) -> Iterator[None]:
        """A context in which ``distributor`` is in effect in this thread.

        Args:
            distributor: the distribution.
        """
        stack = self._scopes.stack
        self._count_open(1)
        stack.append(distributor)
        try:
            yield
        finally:
            stack.pop()
            self._count_open(-1)

    def _count_open(self, step: int) -> None:
        with self._open_lock:
            self._open += step
            self.active = bool(self._open) or self._default is not None


DISTRIBUTION = _Distribution()
