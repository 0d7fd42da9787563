"""Profiling: :func:`trace` records what jaxkeras's compiled functions run, for TensorBoard's
profile plugin or Perfetto.

The profile reads well with no extra work: each ``K.function`` compiles to ``jit(<name>)``
(Keras 2's ``jit(train_function)``, ``jit(predict_function)``, ``jit(test_function)``) and
each op's operations carry the ``K.name_scope`` it was built in and its op name
(``dense_1/dot``, and ``transpose(jvp(dense_1/dot))`` for its gradient), as a Keras layer
builds its ops in a scope of its name. The same names are in the HLO:
``f.lower(inputs).as_text(debug_info=True)``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import jax

__all__ = ["trace"]


@contextlib.contextmanager
def trace(logdir: str | os.PathLike, create_perfetto_trace: bool = False) -> Iterator[str]:
    """A context that records a profile of everything JAX runs in it into ``logdir``.

    A thin wrapper around ``jax.profiler.trace``: the profile is written when the context
    exits, under ``logdir/plugins/profile/<run>/``, where ``tensorboard --logdir logdir``
    (with the ``tensorboard-plugin-profile`` package) shows it; with
    ``create_perfetto_trace=True`` a ``perfetto_trace.json.gz`` for https://ui.perfetto.dev
    is written beside it. Call the function once before the context, so that compiling it is
    not in the profile.

    Args:
        logdir: the directory to write into (made if missing).
        create_perfetto_trace: also write a trace file Perfetto opens.

    Yields:
        ``logdir``, as a string.

    Raises:
        TypeError: for a ``logdir`` that is not a path.

    Example:
        >>> import os, tempfile
        >>> from jaxkeras import profiler
        >>> x = K.placeholder((None, 3))
        >>> f = K.function([x], [K.sum(x)], name="total")
        >>> _ = f([np.ones((2, 3))])
        >>> with profiler.trace(tempfile.mkdtemp()) as logdir:
        ...     _ = f([np.ones((2, 3))])
        >>> os.path.isdir(os.path.join(logdir, "plugins", "profile"))
        True
    """
    if not isinstance(logdir, (str, os.PathLike)):
        raise TypeError(f"trace: logdir must be a path, got {logdir!r}")
    logdir = os.fspath(logdir)
    with jax.profiler.trace(logdir, create_perfetto_trace=create_perfetto_trace):
        yield logdir
