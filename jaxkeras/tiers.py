"""Tiered compilation: a ``K.function`` starts on a quick compile and moves to an optimized one.

On CPU, ``K.function`` compiles with options that make XLA compile quickly (its classic fusion
emitters, LLVM's optimization level 1, as many LLVM modules as cores; see
:func:`jaxkeras._xla.options.compiler_options`), which costs some speed in the compiled fusions
(an MLP's train step, measured by hand: ``benchmarks/RESULTS.md``, "Design measurements (by
hand)", "tiered compilation"). With tiered compilation (on
by default), a function's first compile is the quick one; once it has been called
:data:`CALLS_BEFORE_OPTIMIZING` times (so that a short run, a notebook cell, a first epoch of
a few dozen batches, pays nothing more), a background thread compiles the same program again
with XLA's own fusion emitters, optimization level and module count (the options that choose
kernels stay: :func:`optimized_options`), for that call's shapes and for the other batch
sizes announced to :func:`jaxkeras._engine.ahead.plan_batch_sizes`; :data:`CALLS_BEFORE_OPTIMIZING`
calls later the function moves to the optimized executable (waiting for it, should it not
be ready): always at the same call, so that a run computes the same numbers however long the
compile took (``f.wait_optimized()`` waits and moves at once).
Nothing is traced again (JAX shares the trace between both compilations), and a failed
background compile changes nothing (the quick executable stays). A persistent compilation
cache, when one is enabled (:mod:`jaxkeras.process`), stores both, so a later process finds
the optimized executable compiled when its turn comes.

The two tiers run the same computation; their results can differ in the last bits where the
optimizer reorders floating-point work (``benchmarks/RESULTS.md``, ``tests/test_tiers.py``).
``f.compiler_options`` names the options of the executable in use, so that
``jax.jit(f.pure, compiler_options=f.compiler_options)`` computes what ``f`` does.

Switch it off with ``JAXKERAS_TIERED_COMPILATION=0`` or :func:`set_tiered_compilation`
(``False``): functions then keep the quick compile. Other backends compile with XLA's
defaults from the start and have one tier.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import jax

from jaxkeras._engine.ahead import planned_specs
from jaxkeras._engine.graph import DISTRIBUTION
from jaxkeras._xla import options
from jaxkeras.config import env_switch

__all__ = [
    "CALLS_BEFORE_OPTIMIZING",
    "ENV_VAR",
    "optimized_options",
    "set_tiered_compilation",
    "tiered",
]

ENV_VAR = "JAXKERAS_TIERED_COMPILATION"
CALLS_BEFORE_OPTIMIZING = 64
"""How many calls of a function (per learning phase and dtype policy) run the quick compile
before the optimized one starts compiling."""
_SWITCH: list[bool | None] = [None]  # None: as the environment says (on unless "0")
# the options that only make compiling quicker: the optimized tier leaves them to XLA
_QUICK_ONLY = (options.CPU_FUSION_FLAG, options.CPU_LEVEL_FLAG, options.CPU_SPLIT_FLAG)


def set_tiered_compilation(on: bool) -> None:
    """Turns tiered compilation on or off for the functions compiled from now on.

    Args:
        on: whether a function's quick compile is followed by an optimized one.
    """
    _SWITCH[0] = bool(on)


def tiered() -> bool:
    """Whether tiered compilation is on (:func:`set_tiered_compilation`, else
    ``$JAXKERAS_TIERED_COMPILATION``, else on).

    Returns:
        ``True`` when a quick compile is followed by an optimized one.
    """
    if _SWITCH[0] is not None:
        return _SWITCH[0]
    return env_switch(ENV_VAR) is not False


def optimized_options() -> dict[str, Any] | None:
    """The options of the optimized tier: ``K.function``'s without those that only make
    compiling quicker.

    Returns:
        The options (``None`` for XLA's defaults).
    """
    quick = options.compiler_options()
    if quick is None:
        return None
    kept = {k: v for k, v in quick.items() if k not in _QUICK_ONLY}
    return kept or None


def has_second_tier() -> bool:
    """Whether the optimized tier differs from the quick one here (and is on).

    Returns:
        ``True`` when functions should start the optimized compile.
    """
    return tiered() and optimized_options() != options.compiler_options()


def compile_optimized(
    run: Callable[..., Any],
    donated: tuple[int, ...],
    args: tuple,
    n_feeds: int,
    done: Callable[[Any], None],
) -> threading.Thread | None:
    """Starts compiling ``run`` with :func:`optimized_options` in a background thread, for the
    shapes of ``args`` and the other planned batch sizes; calls ``done(jitted)`` when all
    compiled.

    Args:
        run: the traced function (the quick tier's ``jax.jit`` wraps the same).
        donated: its donated argument indices.
        args: the first call's flat arguments, the feeds last.
        n_feeds: how many of ``args`` are feeds.
        done: receives the optimized ``jax.jit`` object.

    Returns:
        The started thread, or ``None`` when the arguments cannot be described for lowering.
    """
    jobs = planned_specs(args, n_feeds)
    if not jobs:
        return None
    jitted = jax.jit(run, donate_argnums=donated, compiler_options=optimized_options())
    where = DISTRIBUTION.current()  # the thread lowers in the caller's distribution scope

    def work() -> None:
        scope = contextlib.nullcontext() if where is None else DISTRIBUTION.scoped(where)
        try:
            with scope:
                for job in jobs:
                    jitted.lower(*job).compile()
        except Exception:  # the quick tier stays; a call with these shapes raises it
            return
        done(jitted)

    # not a daemon: the interpreter waits for it at exit (killing a thread inside an XLA
    # compile aborts the process)
    thread = threading.Thread(target=work, name="jaxkeras-optimized-compile")
    thread.start()
    return thread
