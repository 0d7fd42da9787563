"""Keras-2/TF1 session objects: ``clear_session`` (the one reset path), sessions, mode switches.

jaxkeras has no sessions and one mode: variables live in the store and functions compile
themselves. These names exist so that Keras-2 code runs unchanged.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping
from typing import Any

from jaxkeras import state
from jaxkeras._engine import graph
from jaxkeras._engine.ahead import plan_batch_sizes
from jaxkeras.function import eval_with_feeds, release_compiled


def clear_session() -> None:
    """Resets the session state: ``get_uid`` counters, the learning phase, the shape cache,
    the announced batch sizes, and the compiled executables of every ``K.function``.

    This is the one reset path of jaxkeras's global state. Variables still in use stay valid
    and keep their values; functions keep working (they compile again on their next call).
    Unreachable ones (Keras models hold theirs in reference cycles) are garbage-collected now,
    so their values leave the store and their names are free again.
    """
    state.reset_uids()
    graph.reset()
    plan_batch_sizes(())
    release_compiled()
    gc.collect()


class Session:
    """A stand-in for a TF1 session: ``run`` evaluates tensors with feeds."""

    def run(self, fetches: Any, feed_dict: Mapping[Any, Any] | None = None) -> Any:
        """Evaluates ``fetches`` (a tensor, a variable, an update or a list of them).

        Args:
            fetches: what to evaluate.
            feed_dict: placeholder -> value.

        Returns:
            NumPy values in the structure of ``fetches``.
        """
        return eval_with_feeds(fetches, feed_dict or {})

    def close(self) -> None:
        """Does nothing (nothing to release)."""


class _Current:
    session: Any = None


def get_session() -> Session:
    """Returns the session object (see :class:`Session`; kept for Keras-2 code).

    Returns:
        The session set by :func:`set_session`, else a default :class:`Session`.
    """
    if _Current.session is None:
        _Current.session = Session()
    return _Current.session


def set_session(session: Any) -> None:
    """Sets the object :func:`get_session` returns; it changes nothing else.

    Args:
        session: any object (kept for Keras-2 code that sets a TF session).
    """
    _Current.session = session


def manual_variable_initialization(value: bool) -> None:
    """Accepts the flag and does nothing: a jaxkeras variable holds its value from creation.

    Args:
        value: True for manual initialization (as Keras-2 code passes it).
    """


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
