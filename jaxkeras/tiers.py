"""Tiered compilation: when ``K.function`` compiles a program once, and when a quick compile
comes first and an optimized one follows in the background.

On CPU, ``K.function`` compiles with options that make XLA compile quickly (its classic fusion
emitters, LLVM's optimization level 1, as many LLVM modules as cores; see
:func:`jaxkeras._xla.options.compiler_options`). Measured against XLA's own options, they
compile as quickly or quicker and run as fast: the train steps of an MLP, the digits convnet
and LSTM, a 12-conv residual net, Keras's cifar10 convnet, ``keras.applications`` MobileNet,
MobileNetV2, NASNetMobile and DenseNet121 (``benchmarks/RESULTS.md``, "Design measurements
(by hand)", "tiered compilation" and "the move"). A compile at LLVM's level 0 is several
times quicker still, but its fusions run unoptimized (DenseNet121's and ResNet50V2's steps
1.8x the optimized one's), so an executable at level 0 is a bridge: its signature moves to an
optimized compile made in the background. While that compile runs, it shares the cores
with training: on a 2-core machine a 90 us step took up to 5 ms, a DenseNet121 step up
to 550 ms ("the move").

So the modes (:func:`set_tiered_compilation`, ``$JAXKERAS_TIERED_COMPILATION``):

- ``"steady"`` (the default): a function's first signature (learning phase, dtype policy and
  feed shapes) compiles once, at level 1, and keeps that executable: no step after the first
  is slower than the steady step, and the same program computes the same bits in every run.
  A shape first seen later (a decode one token longer per call) compiles at level 0, which is
  several times quicker to compile (``"many shapes"``): a shape seen once runs about as often
  as it is compiled, and one called :data:`CALLS_BEFORE_OPTIMIZING` times moves to an
  optimized compile as in ``"never_wait"``. In a large program (:data:`LARGE_PROGRAM`), a
  later shape compiles at level 1 too, and keeps it.
- ``"never_wait"``: the quickest first step. A large program whose work is mostly in
  convolutions and matrix products (:func:`quick_plan`: a ``keras.applications`` ResNet's or
  DenseNet's train step) compiles its first signature at level 0, in about half the time of
  level 1 on a small machine, and starts its optimized compile at its second call; a small
  program at level 1, moving after :data:`CALLS_BEFORE_OPTIMIZING` calls. A signature moves at
  the first call after its optimized executable is ready: training never stops for the
  compile, but runs slower until the move, and the call at which it moves depends on how long
  the compile took, so two runs agree to rounding, not bit for bit (the tiers round
  differently in the last bits: LLVM's levels contract multiply-adds differently, the fusion
  emitters vectorize differently). A large program at level 1 keeps its one compile.
- ``"reproducible"``: as ``"never_wait"``, but a signature moves at a fixed call,
  :data:`CALLS_BEFORE_OPTIMIZING` calls after its compile started, waiting for it there should
  it not be ready: the same numbers in every run, at the price of that wait.
- off (``False``, ``"0"``): every signature compiles once, at level 1, bit for bit the same in
  every run, also across a restart from a checkpoint (a new process counts its calls from 0,
  so in the modes that move, it moves at another step than an uninterrupted run).

Before a move, the optimized executable runs once in the background on zeros (an XLA:CPU
executable's first run sets it up), unless the program calls Python back. ``f.wait_optimized()``
waits and moves at once. Nothing is traced again (JAX shares the trace between both
compilations), and a failed background compile changes nothing (the quick executable stays).
A persistent compilation cache, when one is enabled (:mod:`jaxkeras.process`), stores both,
so a later process finds the optimized executable compiled when its turn comes.

``f.compiler_options`` names the options of the executable in use, so that
``jax.jit(f.pure, compiler_options=f.compiler_options)`` computes what ``f`` does, bit for bit.
Other backends compile with XLA's defaults from the start and have one tier.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxkeras._engine.ahead import batch_of, planned_specs
from jaxkeras._engine.graph import DISTRIBUTION
from jaxkeras._engine.symbolic import SymbolicSizes
from jaxkeras._xla import options
from jaxkeras.config import env_switch

__all__ = [
    "CALLS_BEFORE_OPTIMIZING",
    "ENV_VAR",
    "LARGE_PROGRAM",
    "MODES",
    "Plan",
    "mode",
    "optimized_options",
    "set_tiered_compilation",
    "tiered",
]

ENV_VAR = "JAXKERAS_TIERED_COMPILATION"
CALLS_BEFORE_OPTIMIZING = 16
"""How many calls of a function (per learning phase, dtype policy and feed shapes) run the
quick compile before the optimized one starts compiling (and, in the ``"reproducible"``
mode, how many more before the function moves to it)."""
LARGE_PROGRAM = 3000
"""The number of operations (JAX equations, counted into loop bodies and calls) from which a
program's quick compile may be at LLVM's level 0 instead of 1, and from which one at level 1
has no optimized tier (:func:`quick_plan`)."""
FUSED_PER_FLOP = 0.2
"""The most elements of XLA's own operations per floating-point operation of matrix products
and convolutions for which a large program's quick compile is at LLVM's level 0: DenseNet121's
train step has 0.10 (at level 0 its step takes 1.8x the optimized tier's, until it moves),
MobileNet's 0.36 (at level 0 its step took about 2x level 1's: ``benchmarks/RESULTS.md``,
"Design measurements (by hand)", "first step")."""
MODES = ("steady", "never_wait", "reproducible")
"""The modes of tiered compilation (the default first): which executables move to an optimized
compile, and when."""
_SWITCH: list[str | None] = [None]  # None: as the environment says
_LEVEL_FLAG = options.CPU_LEVEL_FLAG
# the options that only make compiling quicker: the optimized tier leaves them to XLA
_QUICK_ONLY = (options.CPU_FUSION_FLAG, options.CPU_LEVEL_FLAG, options.CPU_SPLIT_FLAG)
_OFF = "off"


def set_tiered_compilation(on: bool | str) -> None:
    """Turns tiered compilation on or off, or picks its mode, for the functions compiled from
    now on.

    Args:
        on: ``True`` or ``"steady"`` (the default: a function's first signature compiles once;
            a later shape compiles quickly, and moves to an optimized compile once it is
            ready), ``"never_wait"`` (every signature starts on a quick compile, and moves once
            the optimized one is ready), ``"reproducible"`` (as ``"never_wait"``, moving at a
            fixed call, waiting for it there if need be), or ``False`` (every signature
            compiles once).

    Raises:
        ValueError: for any other value.
    """
    if on is True or on is False:
        _SWITCH[0] = MODES[0] if on else _OFF
    elif on in MODES:
        _SWITCH[0] = on
    else:
        raise ValueError(
            f"set_tiered_compilation: on must be True, False or one of {MODES}, got {on!r}"
        )


def mode() -> str:
    """The mode of tiered compilation: :func:`set_tiered_compilation`'s, else
    ``$JAXKERAS_TIERED_COMPILATION``'s (a yes or no word, or a mode's name; a yes word, empty
    or unset: ``"steady"``).

    Returns:
        ``"steady"``, ``"never_wait"``, ``"reproducible"`` or ``"off"``.

    Raises:
        ValueError: naming the variable and its value when it is none of those.
    """
    if _SWITCH[0] is not None:
        return _SWITCH[0]
    said = os.environ.get(ENV_VAR, "").strip().lower()
    if said in MODES:
        return said
    return _OFF if env_switch(ENV_VAR) is False else MODES[0]


def tiered() -> bool:
    """Whether tiered compilation is on (:func:`mode` is not ``"off"``).

    Returns:
        ``True`` when some executables (a later shape's, in the default mode) are quick
        compiles followed by an optimized one.
    """
    return mode() != _OFF


def program_size(jaxpr: Any) -> int:
    """The number of equations of ``jaxpr``, counting those of the jaxprs it holds (loop
    bodies, branches, nested calls).

    Args:
        jaxpr: a ``jax.core.Jaxpr`` or ``ClosedJaxpr``.

    Returns:
        The count.
    """
    totals = [0, 0.0, 0.0]
    _measure(jaxpr, totals)
    return totals[0]


def _measure(jaxpr: Any, totals: list, times: int = 1) -> None:
    """Adds ``jaxpr``'s size and work to ``totals`` (one walk): its equations, those of the
    jaxprs it holds included; the floating-point operations of its matrix products and
    convolutions (library calls on CPU); the elements its other operations read or write
    (XLA's own fusions). The work is counted ``times`` (a loop's length), the equations once."""
    for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
        totals[0] += 1
        inner = [
            p
            for value in eqn.params.values()
            for p in (value if isinstance(value, (list, tuple)) else (value,))
            if hasattr(p, "eqns") or hasattr(getattr(p, "jaxpr", None), "eqns")
        ]
        if inner:
            repeat = times * int(eqn.params.get("length", 1))
            for p in inner:
                _measure(p, totals, repeat)
            continue
        out = sum(math.prod(getattr(v.aval, "shape", ())) for v in eqn.outvars)
        name = eqn.primitive.name
        if name == "dot_general":
            (contracted, _), _ = eqn.params["dimension_numbers"]
            depth = math.prod(eqn.invars[0].aval.shape[d] for d in contracted)
            totals[1] += times * 2 * out * depth
        elif name == "conv_general_dilated":
            kernel = eqn.invars[1].aval.shape
            per_output = math.prod(kernel) // kernel[eqn.params["dimension_numbers"].rhs_spec[0]]
            totals[1] += times * 2 * out * per_output
        else:
            read = sum(
                math.prod(getattr(getattr(v, "aval", None), "shape", ())) for v in eqn.invars
            )
            totals[2] += times * max(out, read)


class Plan(NamedTuple):
    """How a program compiles (:func:`quick_plan`).

    Attributes:
        level: LLVM's level of its first signature's compile (0 or 1).
        moves: whether that signature moves to an optimized compile (a level-0 one does).
        later: whether a shape seen later compiles at level 0, and moves.
    """

    level: int
    moves: bool
    later: bool


def quick_plan(jaxpr: Any) -> Plan:
    """How ``jaxpr`` is compiled in the :func:`mode` in effect (see the module's docstring).

    In the ``"steady"`` mode, its first signature compiles once at level 1; a later shape of a
    small program (under :data:`LARGE_PROGRAM` operations) at level 0, then moves. In the
    ``"never_wait"`` and ``"reproducible"`` modes, a large program whose work is mostly in
    matrix products and convolutions (at most :data:`FUSED_PER_FLOP` elements of XLA's own
    operations per floating-point operation of those) compiles at level 0, in about half the
    time of level 1, and moves, as a small program at level 1 does; another large program
    compiles at level 1 and keeps that compile: the optimized one would take as long again,
    on the cores training runs on, for no speed (measured by hand: ``benchmarks/RESULTS.md``,
    "Design measurements (by hand)", "the move").

    Args:
        jaxpr: the traced program.

    Returns:
        The :class:`Plan`.
    """
    totals = [0, 0.0, 0.0]
    _measure(jaxpr, totals)
    equations, flops, elements = totals
    large = equations >= LARGE_PROGRAM
    if mode() == MODES[0]:
        return Plan(1, False, not large)
    level = 0 if large and elements <= FUSED_PER_FLOP * flops else 1
    moves = not large or level == 0
    return Plan(level, moves, moves)


def quick_options(level: int) -> dict[str, Any] | None:
    """The options of the quick tier at LLVM's ``level`` (:func:`quick_plan`):
    ``K.function``'s, the level changed unless ``XLA_FLAGS`` sets it.

    Args:
        level: 0 or 1.

    Returns:
        The options (``None`` for XLA's defaults).
    """
    quick = options.compiler_options()
    if quick is None or options.CPU_LEVEL_FLAG not in quick:
        return quick
    return {**quick, options.CPU_LEVEL_FLAG: level}


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


class Quick:
    """A compiled program's quick tier (per function, learning phase and dtype policy): the
    executable its first signature runs, and the one for the signatures that come later.

    Args:
        run: the traced function.
        donated: its donated argument indices.
        options: the first signature's options (:func:`quick_options` at the level
            :func:`quick_plan` chose).
        compiled: the ``jax.jit`` of ``run`` with ``options``.
        warm_up: whether an optimized executable runs once in the background before the move
            (:class:`Upgrade`): for a program on the CPU that calls no Python back.
        moves: whether the first signature moves to an optimized compile (:attr:`Plan.moves`);
            the later ones do.

    Attributes:
        planned: the other batch sizes ``compiled`` compiles ahead of their calls
            (:class:`jaxkeras._engine.ahead.Ahead`).
        moves: the argument of that name.
        bridge: whether the first signature compiled at LLVM's level 0 (:func:`quick_plan`):
            a bridge to the optimized tier, whose compile then starts at the second call.
        symbolic: the later signatures' export with symbolic sizes
            (:class:`jaxkeras._engine.symbolic.SymbolicSizes`).
    """

    def __init__(
        self,
        run: Callable[..., Any],
        donated: tuple[int, ...],
        options: Any,
        compiled: Any,
        warm_up: bool = False,
        moves: bool = True,
    ) -> None:
        self.run, self.donated, self.warm_up, self.moves = run, donated, warm_up, moves
        self._first = (compiled, options)
        self.bridge = (options or {}).get(_LEVEL_FLAG) == 0
        self._later: tuple[Any, Any] | None = None
        self.symbolic = SymbolicSizes(run, donated)
        self._signatures = 0
        self.planned: frozenset[int] = frozenset()

    def first(self, quick: tuple[Any, Any]) -> bool:
        """Whether ``quick`` (from :meth:`executable`) is the first signature's executable.

        Args:
            quick: an executable and its options.

        Returns:
            ``True`` for the first signature's (and the batch sizes compiled ahead with it).
        """
        return quick is self._first

    def final(self, quick: tuple[Any, Any]) -> bool:
        """Whether ``quick`` (from :meth:`executable`) stays its signature's executable: the
        first signature's when it does not move.

        Args:
            quick: an executable and its options.

        Returns:
            ``True`` when no optimized compile follows it.
        """
        return not self.moves and quick is self._first

    def executable(self, args: Sequence[Any], n_feeds: int) -> tuple[Any, Any]:
        """The quick executable of a new signature and its options: the first signature's
        for the first one and for the batch sizes compiled ahead with it (:attr:`planned`);
        for each later one (a function called with a shape it has not seen: a decode one
        token longer per call), LLVM's level 0, which compiles several times quicker
        (``benchmarks/RESULTS.md``, "Design measurements (by hand)", "many shapes"): a shape
        seen once runs about as often as it is compiled, and one called
        :data:`CALLS_BEFORE_OPTIMIZING` times gets the optimized compile. From the third
        signature on, the later ones are compiled from one trace of the program with their
        changing sizes as symbols, where it can be exported so
        (:mod:`jaxkeras._engine.symbolic`).

        Args:
            args: the call's flat arguments, its feeds last.
            n_feeds: how many of them are feeds.

        Returns:
            The ``jax.jit`` (or the signature's compiled executable) and its options.
        """
        self._signatures += 1
        if self._signatures == 1 or batch_of(args[len(args) - n_feeds :]) in self.planned:
            self.symbolic.saw(args)
            return self._first
        if self._later is None:
            options = quick_options(0)
            if options == self._first[1]:
                self._later = self._first
            else:
                jitted = jax.jit(self.run, donate_argnums=self.donated, compiler_options=options)
                self._later = (jitted, options)
        compiled = self.symbolic.compiled(args, self._later[1])
        return self._later if compiled is None else (compiled, self._later[1])


def _run_once(compiled: Any, specs: tuple) -> None:
    """Runs ``compiled`` once on zeros of ``specs``' shapes and dtypes, its results dropped.

    An XLA:CPU executable's first run sets itself up (about 200 ms more than its later runs for
    a ``keras.applications`` MobileNet's train step: ``benchmarks/RESULTS.md``, "Design
    measurements (by hand)", "the move"), and a later run in another thread is as quick as
    any: run here, in the background, that first run is not the training loop's first call on
    the optimized tier. Not done for a weak-typed argument (zeros would not match it). An
    uncommitted array's zeros are uncommitted too, so that a jitted function's call on them
    and on the array compile once."""
    zeros = []
    for spec in specs:
        if isinstance(spec, np.ndarray):
            zeros.append(np.zeros_like(spec))
        elif spec.weak_type:
            return
        else:
            host = np.zeros(spec.shape, spec.dtype)
            committed = getattr(spec, "committed", True)
            zeros.append(jax.device_put(host, spec.sharding if committed else None))
    jax.block_until_ready(compiled(*zeros))


def set_up(compiled: Any, args: tuple) -> None:
    """Compiles ``compiled`` for ``args`` and runs it once on zeros of their shapes (see
    :func:`_run_once`), so that the call on ``args`` is the executable's second run.

    An XLA:CPU executable's first two runs are its slowest: for the digits demo's logistic
    regression (an 80 µs step) the second step took 0.36-0.70 ms, its longest, against
    0.21-0.29 ms set up this way, about what hand-written JAX's second step takes
    (``benchmarks/RESULTS.md``, "Design measurements (by hand)", "the move").
    :func:`jaxkeras.function` does it on the first call of a small program's first signature
    on CPU, where a run costs about one step: well under a millisecond of a first step of a
    fifth of a second. Not for a program that calls Python back (its prints would show) or
    loops on values (a ``while`` loop, which zeros might not end).

    Args:
        compiled: the jitted function, not compiled yet for ``args``' shapes.
        args: the first call's flat arguments; nothing is run unless all are concrete arrays.
    """
    arrays = (np.ndarray, jax.Array)
    if all(isinstance(a, arrays) and not isinstance(a, jax.core.Tracer) for a in args):
        _run_once(compiled, args)


class Upgrade:
    """One compiled program's way to its optimized executable (per function, learning phase,
    dtype policy and the shapes of its feeds): a countdown of calls, then a background
    compile, then the move.

    Args:
        tier: the program's quick tier (its traced function and donated arguments).
        quick: the quick executable the signature runs until it moves, and its options
            (:meth:`Quick.executable`).

    Attributes:
        countdown: calls left before the compile starts (the function counts it down; below
            zero, calls since it started).
        reproducible: whether the move waits for a fixed call (the ``"reproducible"`` mode
            when the program was compiled).
        jobs: the argument specs the compile is for, once started: the starting call's,
            then the other planned batch sizes' (:func:`jaxkeras._engine.ahead.planned_specs`).
        quick: the argument of that name.
    """

    def __init__(self, tier: Quick, quick: tuple[Any, Any]) -> None:
        self._run = tier.run
        self._donated = tier.donated
        self._warm_up = tier.warm_up
        self.quick = quick
        # a level-0 first compile is a bridge: its steps run slower until the move (DenseNet121
        # and ResNet50V2 1.8x: benchmarks/RESULTS.md, "the move"), so the move comes early
        bridge = tier.bridge and tier.first(quick)
        self.countdown = 1 if bridge else CALLS_BEFORE_OPTIMIZING
        self.reproducible = mode() == "reproducible"
        self._thread: threading.Thread | None = None
        self._jitted: Any = None
        self.jobs: list[tuple] = []

    @property
    def started(self) -> bool:
        """Whether the optimized compile has started (or could not: nothing to wait for)."""
        return self.countdown <= 0

    def start(self, args: tuple, n_feeds: int) -> None:
        """Starts compiling with :func:`optimized_options` in a background thread, for the
        shapes of ``args`` and the other planned batch sizes.

        Args:
            args: a call's flat arguments, the feeds last.
            n_feeds: how many of ``args`` are feeds.
        """
        jobs = self.jobs = planned_specs(args, n_feeds)
        if not jobs:  # the arguments cannot be described for lowering: no second tier
            return
        jitted = jax.jit(
            self._run, donate_argnums=self._donated, compiler_options=optimized_options()
        )
        where = DISTRIBUTION.current()  # the thread lowers in the caller's distribution scope
        warm_up = self._warm_up

        def work() -> None:
            scope = contextlib.nullcontext() if where is None else DISTRIBUTION.scoped(where)
            try:
                with scope:
                    for job in jobs:
                        compiled = jitted.lower(*job).compile()
                        if warm_up:
                            _run_once(compiled, job)
            except Exception:  # the quick tier stays; a call with these shapes raises it
                return
            self._jitted = jitted

        # not a daemon: the interpreter waits for it at exit (killing a thread inside an XLA
        # compile aborts the process)
        thread = threading.Thread(target=work, name="jaxkeras-optimized-compile")
        thread.start()
        self._thread = thread  # (started: calls in other threads may join it now)

    def due(self) -> bool:
        """Whether the call now counted should move to the optimized executable: once it is
        ready (or failed), or in the ``"reproducible"`` mode at the fixed call
        :data:`CALLS_BEFORE_OPTIMIZING` calls after the compile started, ready or not.

        Returns:
            ``True`` to move now (:meth:`result` then waits for the executable if need be).
        """
        if self.reproducible:
            return self.countdown <= -CALLS_BEFORE_OPTIMIZING
        return self._thread is None or not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        """Waits for the compile in flight.

        Args:
            timeout: the most seconds to wait (``None``: as long as it takes).

        Returns:
            Whether it has ended.
        """
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def result(self) -> Any:
        """Waits for the compile and returns the optimized ``jax.jit`` (``None`` when it failed
        or never started)."""
        self.wait()
        return self._jitted
