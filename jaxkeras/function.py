"""Compiled graphs: ``K.function`` (one jit-compiled pure function per graph), ``K.gradients``
and ``K.eval``.

A :class:`Function` lowers its graph to one pure function and calls its ``jax.jit``
compilation with positional lists: the values of the variables it updates (donated), those it
only reads, a table of random-run counts, and the feeds. Calls that update variables hold the
store's lock exclusively from reading the state to committing the new one; calls that only
read hold it shared, so they run concurrently. A call does as little as it can in Python (JAX's
own dispatch is most of a small call): what can be decided when the function is built is
decided then.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import sparse

from jaxkeras import mixed_precision, tiers
from jaxkeras._engine import graph
from jaxkeras._engine.ahead import Ahead, planned_batch_sizes
from jaxkeras._engine.graph import (
    ARRAY_TYPE,
    DISTRIBUTION,
    PHASE,
    Context,
    GradNode,
    LearningPhase,
    Placeholder,
    Symbolic,
    advanced_runs,
    call_key,
    empty_run_table,
    evaluate,
    op,
    table_keys,
    topological_order,
)
from jaxkeras._engine.graph.context import TOP_LEVEL, TRACE
from jaxkeras._engine.graph.interpret import evaluate_in_slices
from jaxkeras._engine.packs import StateLayout
from jaxkeras._engine.store import STORE, place_like, stored_layout, to_numpy
from jaxkeras._ops.spatial import lowered_for
from jaxkeras._xla import cpu_memory
from jaxkeras._xla.options import compiler_options
from jaxkeras.checks import described
from jaxkeras.state import (
    Update,
    Variable,
    compose_updates,
    get_state,
    normalize_updates,
)

_FUNCTIONS: weakref.WeakSet = weakref.WeakSet()


class _Input:
    """How one input of a function is fed: its placeholder, NumPy dtype and static shape."""

    def __init__(self, tensor: Any, steps: int = 1, reshaped: list[int] | None = None) -> None:
        self.tensor = tensor
        # counts the calls at which a feed's shape changed (shared by a function's inputs)
        self._reshaped = [0] if reshaped is None else reshaped
        self.name = tensor.name
        self.dtype = np.dtype(tensor.dtype)
        # a multi-step function's feeds stack one value per step along a new first axis
        stacked = steps > 1 and tensor.shape is not None
        self.shape = (steps, *tensor.shape) if stacked else tensor.shape
        self.sparse = isinstance(tensor, Placeholder) and tensor._sparse
        self._fits: tuple | None = None  # the last shape that passed the check
        self._borrowed = jax.default_backend() == "cpu"  # large NumPy feeds handed over aligned

    def feed(self, value: Any) -> Any:
        """Returns ``value`` as an array of this input's dtype, checked against its shape
        (a large NumPy array at an address XLA borrows: :func:`cpu_memory.borrowable`).

        Raises:
            TypeError: when it cannot be cast to the dtype.
            ValueError: when its shape does not fit, or a cast to an integer type would turn
                NaN or infinity into garbage.
        """
        if type(value) in _ARRAY_TYPES and value.dtype is self.dtype and value.shape == self._fits:
            array = value  # never for a sparse input: its _fits stays None
        elif self.sparse:
            return to_sparse_value(value, self.tensor.dtype)
        else:
            array = self._checked(value)
        if self._borrowed and type(array) is np.ndarray and array.nbytes > _BORROWED_BYTES:
            return cpu_memory.borrowable(array)
        return array

    def _checked(self, value: Any) -> Any:
        """``value`` cast to this input's dtype and checked against its shape (see feed)."""
        if isinstance(value, (np.ndarray, jax.Array)) and value.dtype == self.dtype:
            array = value
        else:
            array = self._cast(value)
        shape, expected = array.shape, self.shape
        if expected is not None and (
            len(shape) != len(expected)
            or any(e is not None and e != a for e, a in zip(expected, shape))
        ):
            raise ValueError(
                f"feed for {self.name!r} has shape {tuple(shape)}, but {self.name!r} "
                f"has shape {expected}"
            )
        if shape != self._fits:
            self._reshaped[0] += 1
        self._fits = shape
        return array

    def _cast(self, value: Any) -> np.ndarray:
        try:
            source = np.asarray(value)
        except (TypeError, ValueError) as err:
            raise TypeError(f"feed for {self.name!r} cannot be read as an array: {err}") from None
        lossy = source.dtype.kind == "f" and self.dtype.kind in "iub"
        if lossy and not np.all(np.isfinite(source)):
            raise ValueError(
                f"feed for {self.name!r} holds NaN or infinity, which has no value of its dtype "
                f"{self.dtype.name}"
            )
        try:
            return source.astype(self.dtype, copy=False)
        except (TypeError, ValueError) as err:
            raise TypeError(
                f"feed for {self.name!r} cannot be cast to {self.dtype.name}: {err}"
            ) from None


class Function:
    """A compiled graph: call it with a list of input values (see :func:`function`).

    Args:
        inputs: the placeholders (or tensors) it is fed, in order.
        outputs: a tensor or a list of tensors.
        updates: ``K.update*`` results or ``(variable, new_value)`` pairs, run on every call.
        name: a name for the function, which its compiled code carries (``jit(name)``).
        micro_batches: how many micro-batches each call splits its feeds into, one computed
            at a time (gradient accumulation; see :func:`function`).
        steps_per_call: how many steps one call runs (feeds stacked; see :func:`function`).
        device_outputs: return the outputs as ``jax.Array`` s, without waiting for them.
        check_numerics: raise, naming the first node, when a value is NaN or infinite.

    Attributes:
        inputs: the input tensors, in feed order.
        outputs: the output tensors.
        updates: the :class:`Update` s committed after each call.
        name: the name given, or ``None``.
        micro_batches: the number of micro-batches of a call.
        steps_per_call: the number of steps of a call.
        variable_names: names of the variables the graph reads or updates (its state).
        trace_count: how many times the graph has been traced (compiled).

    Raises:
        TypeError: for inputs that are not tensors, a ``name`` that is not a string, or a
            ``micro_batches`` or ``steps_per_call`` that is not an int.
        ValueError: for a ``micro_batches`` or ``steps_per_call`` below 1, a ``micro_batches``
            above 1 for a function fed nothing, or a ``steps_per_call`` above 1 with a sparse
            input.
    """

    def __init__(
        self,
        inputs: Sequence[Any],
        outputs: Any,
        updates: Sequence[Any] | None = None,
        name: str | None = None,
        micro_batches: int = 1,
        steps_per_call: int = 1,
        device_outputs: bool = False,
        check_numerics: bool = False,
    ) -> None:
        if not isinstance(inputs, (list, tuple)):
            raise TypeError(f"function: inputs must be a list of tensors, got {inputs!r}")
        for x in inputs:
            if not isinstance(x, graph.Tensor):
                raise TypeError(f"function: every input must be a placeholder or tensor, got {x!r}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"function: name must be a string or None, got {name!r}")
        for arg, count in (("micro_batches", micro_batches), ("steps_per_call", steps_per_call)):
            if not isinstance(count, (int, np.integer)) or isinstance(count, bool):
                raise TypeError(f"function: {arg} must be an int, got {count!r}")
            if count < 1:
                raise ValueError(f"function: {arg} must be at least 1, got {count}")
        self.name = name
        self.micro_batches = int(micro_batches)
        self.steps_per_call = int(steps_per_call)
        self._device_outputs = bool(device_outputs)
        self.check_numerics = bool(check_numerics)
        if self.check_numerics and (self.micro_batches > 1 or self.steps_per_call > 1):
            raise ValueError(
                "function: check_numerics=True checks one step's values; it cannot be combined "
                f"with micro_batches={micro_batches} or steps_per_call={steps_per_call}"
            )
        self._watched: dict[Any, list] = {}  # per compile key: the nodes checked, in order
        self.inputs = list(inputs)
        self._single = not isinstance(outputs, (list, tuple))
        self.outputs = [outputs] if self._single else list(outputs)
        self.updates = normalize_updates(updates)
        self._feed_inputs = [x for x in self.inputs if not isinstance(x, LearningPhase)]
        if self.micro_batches > 1 and not self._feed_inputs:
            raise ValueError(
                f"function: micro_batches={micro_batches} splits the feeds, but the function "
                "is fed none"
            )
        steps = self.steps_per_call
        self._reshaped = [0]  # how often a feed's shape changed (see _compiled_for)
        self._feeders = [
            None if isinstance(x, LearningPhase) else _Input(x, steps, self._reshaped)
            for x in self.inputs
        ]
        sparse_fed = [f.name for f in self._feeders if f is not None and f.sparse]
        # the executable of the last call's signature once it moved, valid while no dense
        # feed changes shape (a sparse feed's number of entries is not tracked: none then)
        self._steady: tuple | None = None
        self._shapes_tracked = not sparse_fed
        if steps > 1 and sparse_fed:
            raise ValueError(
                f"function: steps_per_call={steps} stacks the feeds, which sparse inputs "
                f"{sparse_fed} cannot be"
            )
        phases = [i for i, x in enumerate(self.inputs) if isinstance(x, LearningPhase)]
        self._phase_at = phases[-1] if phases else None
        self._plain = not phases  # every input is fed a value to check
        roots = self.outputs + [u.payload for u in self.updates]
        nodes = topological_order(roots, None, dict.fromkeys(self._feed_inputs))
        read = {n.name for n in nodes if isinstance(n, Variable)}
        self._updated = list(dict.fromkeys(u.variable.name for u in self.updates))
        self._kept = sorted(read.difference(self._updated))
        self.variable_names = sorted(read.union(self._updated))
        self._layout: StateLayout | None = None  # made by the first call (see _state_args)
        self._scalars = any(not s for s in map(graph.static_shape, self.outputs))
        self._grad_nodes = [n for n in nodes if isinstance(n, GradNode)]
        # a train step (gradients taken for updates) scales its loss under mixed_float16
        self._trains = bool(self._grad_nodes and self.updates)
        self._loss_scale: tuple[str, ...] = ()  # its variables' names, once it has
        self._random = graph.random_nodes(roots)
        self._n_outputs = len(self.outputs)
        self._n_inputs = len(self.inputs)
        # How an output becomes NumPy: a copy, unless a trace finds sparse outputs or the
        # outputs may span several processes (then ``to_numpy`` densifies or gathers).
        self._convert: Any = np.array
        self.trace_count = 0
        self._compiled: dict[int, Any] = {}
        # whether the graph calls back into Python: then its calls donate nothing and wait for
        # their results before the store takes them (see _compile)
        self._calls_back = False
        # tiered compilation (jaxkeras.tiers), per key and feed shapes (a signature): the
        # traced function, donation and quick options of each key compiled with a second
        # tier; each signature's way to its optimized executable until a call takes it; then
        # that executable and its options (or at once the quick ones, where they are final);
        # the options of the executable run last
        self._quick: dict[Any, tiers.Quick] = {}
        self._to_optimize: dict[tuple, tiers.Upgrade] = {}
        self._optimized: dict[tuple, tuple[Any, Any]] = {}
        self._options: dict[str, Any] | None = compiler_options()
        self._ahead: Ahead | None = None  # the other planned batch sizes, compiling
        _FUNCTIONS.add(self)

    # the pure function -------------------------------------------------------------------------

    def _evaluate(self, ctx: Context, feeds: Sequence[Any]) -> tuple[list, dict]:
        memo = dict(zip(self._feed_inputs, feeds))
        # Gradient nodes first: their replay computes the loss and its ancestors once, for
        # the gradients and for the outputs that share them.
        payloads = [u.payload for u in self.updates]
        if self._loss_scale and ctx.policy.loss_scaling:
            ctx.loss_scale = mixed_precision.scaling_of(ctx.state)
        if self.micro_batches == 1:
            values = evaluate(self._grad_nodes + self.outputs + payloads, ctx, memo)
        else:
            wrt = [(node, node._xs) for node in self._grad_nodes]
            values = evaluate_in_slices(
                wrt, self.outputs + payloads, ctx, memo, self.micro_batches, self._random
            )
        gradients, values = values[: len(self._grad_nodes)], values[len(self._grad_nodes) :]
        n_out = len(self.outputs)
        new, _ = compose_updates(self.updates, values[n_out:], ctx.read)
        if ctx.loss_scale is not None:
            new = mixed_precision.skip_unless_finite(ctx.loss_scale, gradients, new, ctx.state)
        else:  # a policy without loss scaling keeps the scale
            new.update((name, ctx.state[name]) for name in self._loss_scale)
        return values[:n_out], new

    def _starts_scaling(self, policy: Any) -> bool:
        """Whether this is a train step that runs under a loss-scaling ``policy`` for the
        first time."""
        return self._trains and policy.loss_scaling and not self._loss_scale

    def _scale_losses(self) -> None:
        """Adds the loss-scale variables to this train step's state (the first time it runs
        under mixed_float16): it lays its state out and compiles again."""
        names = tuple(v.name for v in mixed_precision.loss_scale_variables())
        self._loss_scale = names
        self._updated = [*self._updated, *names]
        self.variable_names = sorted({*self.variable_names, *names})
        self._layout = None
        self._drop_compiled()

    def pure(
        self,
        state_values: dict[str, Any],
        rng: Any,
        feeds: Sequence[Any],
        learning_phase: int | None = None,
    ) -> tuple[list[Any], dict[str, Any]]:
        """The graph as a pure function, for ``jax.jit``, ``vmap``, ``lax.scan`` and sharding.

        It is the computation a call of ``f`` runs (``micro_batches`` included): for the same
        state, feeds and key it computes the same numbers, bit for bit, when compiled with
        ``f``'s options (``jax.jit(f.pure, compiler_options=f.compiler_options)``; on a GPU,
        with ``XLA_FLAGS=--xla_gpu_deterministic_ops=true``, else XLA's autotuner may choose
        other kernels for each compile). A call
        of ``f`` uses the key :meth:`next_key` returns; each random op draws from
        ``fold_in(rng, its seed)``.
        What ``f`` adds around it is layout (its small variables packed into one buffer, the
        updated ones donated) and bookkeeping (committing the new state, counting runs).

        Args:
            state_values: variable name -> value; must hold :attr:`variable_names` (extra entries
                pass through unchanged). ``f.state()`` gives the current values.
            rng: a JAX key (e.g. ``jax.random.PRNGKey(i)``, or ``f.next_key()`` for the numbers
                ``f``'s next call draws).
            feeds: one value per input, in order, leaving out the learning-phase tensor.
            learning_phase: 0 or 1 (a Python int); default the global learning phase.

        Returns:
            ``(outputs, new_state)``: a list of output values and the state dict after the
            updates, with the same keys as ``state_values``.
        """
        policy = mixed_precision.global_policy()
        if self._starts_scaling(policy):
            with STORE.lock.write():
                self._scale_losses()
        missing = [n for n in self.variable_names if n not in state_values]
        if missing:
            raise KeyError(f"pure: state_values lacks variables {missing}; start from f.state()")
        if len(feeds) != len(self._feed_inputs):
            raise ValueError(
                f"pure: expected {len(self._feed_inputs)} feeds (for "
                f"{[x.name for x in self._feed_inputs]}), got {len(feeds)}"
            )
        ctx = Context(
            state=dict(state_values), rng=rng, learning_phase=learning_phase, policy=policy
        )
        outputs, new = self._evaluate(ctx, feeds)
        new_state = dict(state_values)
        new_state.update(new)
        return outputs, new_state

    def _traced(self, key: Any, args: Sequence, rng: Any, feeds: Sequence) -> Any:
        self.trace_count += 1
        phase, policy = _phase_and_policy(key)
        layout = self._layout
        state = layout.state(args)
        keys = dict(zip(self._random, table_keys(rng, len(self._random)))) if self._random else {}
        ctx = Context(state=state, learning_phase=phase, keys=keys, policy=policy)
        if self.check_numerics:
            ctx.numerics = []
        outputs, new = self._evaluate(ctx, feeds)
        if any(map(graph.is_bcoo, outputs)):
            self._convert = to_numpy
        new.update(zip(layout.loose_updated, _laid_out(layout.loose_updated, new)))
        outputs = _laid_out_outputs(outputs)
        if self.check_numerics:  # one flag per node checked, after the outputs
            self._watched[key] = [node for node, _ in ctx.numerics]
            flags = [flag for _, flag in ctx.numerics]
            outputs.append(jnp.stack(flags) if flags else jnp.ones((0,), bool))
        return outputs, layout.new_state(args, new)

    def _steps(self, key: Any, args: Sequence, rng: Any, feeds: Sequence) -> Any:
        """Inside a trace: :attr:`steps_per_call` steps in a ``lax.scan``, each on its slice of
        the stacked feeds, its random runs counted after the previous step's (as separate
        calls count them), carrying the updated state; the outputs stacked per step."""
        donated = self._layout.donated

        def step(carry: tuple, xs: tuple) -> tuple:
            state, index = carry
            step_rng = None if rng is None else advanced_runs(rng, index)
            outputs, new = self._traced(key, state, step_rng, xs)
            state = list(state)
            for position, value in zip(donated, new):
                state[position] = value
            return (tuple(state), index + 1), outputs

        (state, _), outputs = lax.scan(step, (tuple(args), jnp.uint32(0)), tuple(feeds))
        return outputs, [state[position] for position in donated]

    def _compile(self, key: Any, args: tuple) -> Any:
        """Compiles the graph for ``key``, its learning phase and dtype policy (see
        :func:`_compile_key`), tracing it now, on ``args``.

        The compiled function takes flat positional arguments (the state, as laid out by
        :class:`~jaxkeras._engine.packs.StateLayout`, its updated part donated; the random-run table
        when the graph draws; the feeds) and returns a flat tuple (outputs, then the new
        state), which is what JAX's C++ dispatch handles fastest. The updated state is donated,
        unless the traced graph calls back into Python (``jax.pure_callback``, ``io_callback``,
        ``jax.debug.callback``, e.g. via ``print_tensor``): such a call can fail while it runs,
        after donation, and would leave the variables without values. Its calls also wait for
        their results before the store takes the new state, since on an accelerator a failure
        while it runs shows only when its results are read (on CPU the call raises at once).
        Errors found while tracing change nothing. JAX reuses the trace looked at for
        callbacks and for the quick tier's LLVM level (for every compilation: the level depends
        on the program's size and on where its work is, :func:`jaxkeras.tiers.quick_plan`), so
        the graph is traced once per phase and input signature.
        """
        n_state, n_rng = self._layout.n_args, int(bool(self._random))
        first_feed = n_state + n_rng
        platform = _platform_of(args)

        def run(*flat):
            rng = flat[n_state] if n_rng else None
            with lowered_for(platform):
                if self.steps_per_call > 1:
                    outputs, new = self._steps(key, flat[:n_state], rng, flat[first_feed:])
                else:
                    outputs, new = self._traced(key, flat[:n_state], rng, flat[first_feed:])
            return (*outputs, *new)

        run.__name__ = run.__qualname__ = self.name or "k_function"  # jit(train_function)

        if jax.process_count() > 1:
            self._convert = to_numpy
        donated = self._layout.donated
        if self.check_numerics:  # a failed check keeps the state as it was
            donated = ()
        jaxpr = jax.jit(run, donate_argnums=donated).trace(*args).jaxpr
        tiered = tiers.has_second_tier()
        # (walked once, where donation or the optimized tier's first run needs to know)
        primitives = _primitives(jaxpr.jaxpr) if donated or tiered else set()
        calls_back = any(name.endswith("callback") for name in primitives)
        if donated and calls_back:
            donated = ()
            self._calls_back = True
        options = compiler_options()
        if tiered:
            plan = tiers.quick_plan(jaxpr)
            options = tiers.quick_options(plan.level)
            tiered = plan.moves or plan.later
        compiled = jax.jit(run, donate_argnums=donated, compiler_options=options)
        if tiered:
            warm_up = platform == "cpu" and not calls_back
            quick = tiers.Quick(run, donated, options, compiled, warm_up, plan.moves)
            quick.symbolic.plan(self._unknown_sizes(first_feed), exportable=not calls_back)
            self._quick[key] = quick
            # a small program (see set_up), which zeros cannot keep in a loop
            if warm_up and plan.level == 1 and plan.later and "while" not in primitives:
                tiers.set_up(compiled, args)
        self._compiled[key] = compiled
        self._options = options
        return compiled

    def _unknown_sizes(self, first_feed: int) -> frozenset[tuple[int, int]]:
        """The places ``(argument, axis)`` of the feeds' batch sizes that their inputs leave
        unknown (``None``), the feeds' arguments starting at ``first_feed``: the size that a
        later call changes after others did (a decode's batch, which shrinks once sequences
        end). Other unknown sizes often never change (Keras's targets are ``(None, None)``,
        their classes fixed by the model's output), and a symbol for one would fail where the
        graph needs it equal to a known size."""
        fed = [f for f in self._feeders if f is not None]
        return frozenset(
            (first_feed + k, len(feeder.shape) - len(feeder.tensor.shape))
            for k, feeder in enumerate(fed)
            if feeder.tensor.shape and feeder.tensor.shape[0] is None
        )

    def _compile_first(self, key: Any, args: tuple) -> Any:
        """:meth:`_compile`, then the other batch sizes announced by
        :func:`jaxkeras._engine.ahead.plan_batch_sizes`, in the background."""
        compiled = self._compile(key, args)
        self._ahead = None
        if planned_batch_sizes():
            ahead = Ahead(compiled, args, len(self._feed_inputs))
            if ahead.sizes:
                ahead.compile_beside()
                self._ahead = ahead
                if (quick := self._quick.get(key)) is not None:
                    quick.planned = frozenset(ahead.sizes)
        return compiled

    def release(self) -> None:
        """Drops the compiled executables (the next call compiles again)."""
        self._drop_compiled()

    def _drop_compiled(self) -> None:
        """Forgets every executable, and any optimized one still compiling."""
        self._compiled, self._ahead = {}, None
        self._quick, self._to_optimize, self._optimized = {}, {}, {}
        self._steady = None

    def state(self) -> dict[str, jax.Array]:
        """Returns a copy of the current values of this function's variables, by name."""
        return get_state(self.variable_names)

    def next_key(self) -> jax.Array:
        """The key the next call of this function draws its random numbers from, to give
        :meth:`pure` for the same numbers: ``fold_in(PRNGKey(global seed), run)``, where
        ``run`` is how many times its random ops have run (counting nothing).

        Returns:
            A JAX key (raw ``uint32[2]`` data).

        Raises:
            ValueError: when its random ops have run different numbers of times (some ran in
                other functions too): then no one key gives the numbers of its next call.
        """
        runs = sorted(set(STORE.next_runs(self._random)))
        if len(runs) > 1:
            raise ValueError(
                f"next_key: this function's random ops have run {runs} times (some also ran "
                "elsewhere), so its next call draws from one key per op, not one key"
            )
        return call_key(STORE.seed, runs[0] if runs else 0)

    @property
    def compiler_options(self) -> dict[str, Any] | None:
        """The XLA options this function is compiled with, for a ``jax.jit`` of your own
        (``jax.jit(f.pure, compiler_options=f.compiler_options)``); ``None`` for XLA's
        defaults (see :func:`jaxkeras._xla.options.compiler_options`): the quick tier's for this
        program (:func:`jaxkeras.tiers.quick_options`), the optimized tier's once this function
        runs it (:mod:`jaxkeras.tiers`): those of the executable the last call ran (tiers move
        per feed shapes)."""
        return self._options

    # calling -----------------------------------------------------------------------------------

    def _feeds(self, inputs: Sequence[Any]) -> tuple[int, list]:
        """Returns the learning phase and the checked feeds for a call on ``inputs``, placed by
        the distribution in effect."""
        if type(inputs) not in _SEQUENCES:
            inputs = [inputs] if self._n_inputs == 1 else inputs
            if not isinstance(inputs, (list, tuple)):
                raise self._count_error(inputs)
        if len(inputs) != self._n_inputs:
            raise self._count_error(inputs)
        if self._phase_at is None:
            phase = PHASE.value or 0
            feeds = list(map(_Input.feed, self._feeders, inputs))
        else:
            phase = _check_phase(inputs[self._phase_at])
            feeds = [f.feed(v) for f, v in zip(self._feeders, inputs) if f is not None]
        if DISTRIBUTION.active and (where := DISTRIBUTION.current()) is not None:
            feeds = where.place_feeds(feeds)  # (active: a scope may be another thread's)
        return phase, feeds

    def _count_error(self, inputs: Any) -> ValueError:
        return ValueError(
            f"function expects a list of {self._n_inputs} values "
            f"(for {[x.name for x in self.inputs]}), got {described(inputs)}"
        )

    def _inside_trace_error(self) -> RuntimeError:
        """The error of a call inside a user's ``jax.jit``/``grad``/``vmap``: there the graph's
        variables would be read as constants of that trace (stale once they change, with
        nothing to tell) and its updates would store traced values, so nothing runs and the
        store is left as it was. Its pure form takes the state as an argument instead."""
        label = f" {self.name!r}" if self.name else ""
        return RuntimeError(
            f"K.function{label} was called inside a jax.jit/grad/vmap trace. There its variables "
            "would be constants of your trace (stale once they change) and its updates could "
            "not be stored. Call it outside the trace, or trace its pure form with the state "
            "as an argument: `outputs, new_state = f.pure(state, key, feeds)`, with "
            "`state = f.state()` and `key = f.next_key()` passed in (then `K.set_state("
            "new_state)` outside, to keep the updates). See docs/functional-jax.md."
        )

    def lower(self, inputs: Sequence[Any]) -> jax.stages.Lowered:
        """Lowers the compiled function for ``inputs`` without running it (to inspect its HLO,
        its cost or its memory: ``f.lower(inputs).compile().memory_analysis()``).

        Args:
            inputs: one value per input tensor, as for a call.

        Returns:
            JAX's ``Lowered`` object.
        """
        phase, feeds = self._feeds(inputs)
        rng = (empty_run_table(len(self._random)),) if self._random else ()
        key = _compile_key(phase)
        with STORE.lock.write():
            if self._starts_scaling(_phase_and_policy(key)[1]):
                self._scale_losses()
            args = (*self._state_args(), *rng, *feeds)
            compiled = self._compiled.get(key) or self._compile(key, args)
            return compiled.lower(*args)

    def _state_args(self) -> tuple:
        """The state arguments of a call (holding the store's lock exclusively).

        The first call has the store settle where the function's variables live and lay its
        state out (``Store.layout``: those whose place no function has decided yet are packed,
        the updated apart from the read), for good (only :meth:`_scale_losses` adds to its
        state): no variable's place changes after, so nothing another function does makes this
        one lay out or compile again. A later call packs again the packs loosened since (by
        writes from outside a compiled function), in the same places.
        """
        if self._layout is None:
            self._layout = STORE.layout(self._updated, self._kept)
            self._drop_compiled()
        return STORE.state_args(self._layout)

    def _compiled_for(self, phase: int, args: tuple, feeds: list) -> Any:
        """The executable for a call in ``phase`` (under the dtype policy in effect) on state
        ``args`` and ``feeds``: compiled by the first call, or waited for when it is one of the
        planned sizes compiling ahead, or its signature's optimized one (:meth:`_next_tier`)."""
        policy = mixed_precision.global_policy()
        steady, reshaped = self._steady, self._reshaped[0]
        if steady is not None and steady[:3] == (reshaped, phase, policy):
            return steady[3]  # (no feed changed shape since that signature's last call)
        key = _compile_key(phase, policy)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compile_first(key, (*args, *feeds))
        elif (ahead := self._ahead) is not None and ahead.wait(feeds):
            self._ahead = None  # (read into a local: readers run concurrently)
        if self._quick:
            compiled = self._next_tier(key, compiled, args, feeds, (reshaped, phase, policy))
        return compiled

    def _next_tier(self, key: Any, compiled: Any, args: tuple, feeds: list, steady: tuple) -> Any:
        """Tiered compilation (:mod:`jaxkeras.tiers`), per signature (``key`` and the feeds'
        shapes): a new signature runs a quick executable (:meth:`jaxkeras.tiers.Quick.executable`:
        ``compiled`` for the first, where it stays in the default mode); the call that
        follows its ``CALLS_BEFORE_OPTIMIZING`` calls starts its optimized compile in the
        background; a later call moves to it, when
        :meth:`jaxkeras.tiers.Upgrade.due` says. So a function called with a new shape each
        time never compiles at the optimized options. Returns the executable to call; one
        a signature moved to is kept with ``steady`` (the count of shape changes, the phase
        and the policy of this call) for the next calls of the same signature."""
        signature = (key, *map(_SHAPE, feeds))
        moved = self._optimized.get(signature)
        if moved is not None:
            executable, self._options = moved
            if self._shapes_tracked:
                self._steady = (*steady, executable)
            return executable
        upgrade = self._to_optimize.get(signature)
        if upgrade is None:
            if (quick := self._quick.get(key)) is None:  # compiled with one tier
                return compiled
            # (its first call, which compiles it, is not counted: as a function's first call)
            runs = quick.executable((*args, *feeds), len(self._feed_inputs))
            if quick.final(runs):  # compiled once: settled at once
                executable, self._options = self._optimized.setdefault(signature, runs)
                return executable
            upgrade = self._to_optimize.setdefault(signature, tiers.Upgrade(quick, runs))
            executable, self._options = upgrade.quick
            return executable
        executable, self._options = upgrade.quick
        upgrade.countdown -= 1
        if upgrade.countdown == 0:
            upgrade.start((*args, *feeds), len(self._feed_inputs))
        elif upgrade.countdown < 0 and upgrade.due():
            return self._take_optimized(signature, upgrade.quick)
        return executable

    def _take_optimized(self, signature: tuple, quick: tuple[Any, Any]) -> Any:
        """Waits for ``signature``'s optimized compile and moves to it, and the other planned
        batch sizes it compiled with their own signatures (stays on its ``quick`` executable
        and options when it failed); the signature then has no further tier."""
        upgrade = self._to_optimize.pop(signature, None)
        upgraded = None if upgrade is None else upgrade.result()
        if upgraded is None:  # failed (or another thread moved it meanwhile)
            executable, self._options = self._optimized.setdefault(signature, quick)
            return executable
        self._options = tiers.optimized_options()
        n_feeds = len(signature) - 1
        for job in upgrade.jobs:
            planned = (signature[0], *[spec.shape for spec in job[len(job) - n_feeds :]])
            self._optimized.setdefault(planned, (upgraded, self._options))
            pending = self._to_optimize.get(planned)
            if pending is not None and not pending.started:
                self._to_optimize.pop(planned, None)
        return upgraded

    def _check_flags(self, phase: int, flags: Any) -> None:
        """Raises, naming the first node whose value was not finite (``check_numerics``)."""
        flags = np.asarray(flags)
        if flags.all():
            return
        node = self._watched[_compile_key(phase)][int(np.argmin(flags))]
        label = getattr(node, "_label", None) or node.name
        shapes = ", ".join(str(p.shape) for p in node._inputs()) or "none"
        raise FloatingPointError(
            f"check_numerics: {label!r} (op {node.name!r}, inputs of shapes {shapes}) gave NaN "
            "or infinity; no variable was updated"
        )

    @property
    def settled(self) -> bool:
        """Whether each signature called so far runs its last executable: none runs a quick
        compile that an optimized one is to replace (:mod:`jaxkeras.tiers`)."""
        return not self._to_optimize

    def wait_optimized(self, timeout: float | None = None) -> bool:
        """Waits for this function's optimized compiles in flight (:mod:`jaxkeras.tiers`) and
        moves to them now, rather than at the call where it would have.

        Args:
            timeout: the most seconds to wait for each (``None``: as long as it takes).

        Returns:
            Whether the optimized tier is in use.
        """
        started = [(s, u) for s, u in list(self._to_optimize.items()) if u.started]
        for _, upgrade in started:
            if not upgrade.wait(timeout):
                return False
        for signature, upgrade in started:
            self._take_optimized(signature, upgrade.quick)
        return self._options == tiers.optimized_options() and tiers.has_second_tier()

    def __call__(self, inputs: Sequence[Any]) -> Any:
        """Runs the graph on ``inputs`` (one value per input tensor, in order).

        Returns:
            A list of NumPy arrays (a single array when ``outputs`` was not a list).

        Raises:
            ValueError: for a wrong number of inputs, a feed whose shape does not fit, or a
                learning-phase feed other than 0 or 1.
            TypeError: for a feed that cannot be cast to its input's dtype.
            RuntimeError: for a call inside a ``jax.jit``/``grad``/``vmap`` trace (see
                :meth:`_inside_trace_error`).
        """
        if TRACE.value is not TOP_LEVEL:
            raise self._inside_trace_error()
        if type(inputs) in _SEQUENCES and len(inputs) == self._n_inputs and self._plain:
            # the common case, checked with the fewest Python calls (see _feeds)
            phase = PHASE.value or 0
            feeds = list(map(_Input.feed, self._feeders, inputs))
            if DISTRIBUTION.active and (where := DISTRIBUTION.current()) is not None:
                feeds = where.place_feeds(feeds)
        else:
            phase, feeds = self._feeds(inputs)
        if self._random:
            feeds.insert(0, STORE.take_runs(self._random, self.steps_per_call))
        values, lock, n_out = STORE.values, STORE.lock, self._n_outputs
        # Outputs are converted under the lock: one may be a stored value itself (JAX forwards
        # an input returned unchanged), which another thread's call could donate.
        if self._updated:
            lock.acquire_write()
            try:
                if self._trains and self._starts_scaling(mixed_precision.global_policy()):
                    self._scale_losses()
                layout = self._layout
                args = None if layout is None else layout.args(values)
                if args is None:
                    args = self._state_args()
                results = self._compiled_for(phase, args, feeds)(*args, *feeds)
                if self.check_numerics:
                    self._check_flags(phase, results[n_out])
                    results = (*results[:n_out], *results[n_out + 1 :])
                if self._calls_back:  # a failure while it ran raises here, before the commit
                    jax.block_until_ready(results)
                STORE.commit(self._layout, results, n_out)
                if self._device_outputs:
                    outputs = list(results[:n_out])
                elif n_out == 1:
                    outputs = [self._convert(results[0])]
                else:
                    outputs = list(map(self._convert, results[:n_out]))
            finally:
                lock.release_write()
        else:
            while True:  # (a pack loosened by another thread is packed again, then retried)
                lock.acquire_read()
                try:
                    layout = self._layout
                    args = None if layout is None else layout.args(values)
                    if args is not None:
                        compiled = self._compiled_for(phase, args, feeds)
                        results = compiled(*args, *feeds)  # a first call traces
                        if self.check_numerics:
                            self._check_flags(phase, results[n_out])
                            results = results[:n_out]
                        if self._device_outputs:
                            outputs = list(results)
                        else:  # (a first call may change _convert: look it up now)
                            outputs = list(map(self._convert, results))
                        break
                finally:
                    lock.release_read()
                with lock.write():
                    self._state_args()
        if self._scalars and not self._device_outputs:
            outputs = [o[()] if o.ndim == 0 else o for o in outputs]
        return outputs[0] if self._single else outputs


_ARRAY_TYPES = (np.ndarray, ARRAY_TYPE)
_BORROWED_BYTES = cpu_memory.BORROWED_BYTES
_SEQUENCES = (list, tuple)
_SHAPE = operator.attrgetter("shape")


def _compile_key(phase: int, policy: Any = None) -> Any:
    """What a compilation is for: the learning phase, with the dtype policy's name unless it
    is float32's (a function compiles once per phase and policy); ``policy`` defaults to the
    one in effect."""
    name = (policy or mixed_precision.global_policy()).name
    return phase if name == "float32" else (phase, name)


def _phase_and_policy(key: Any) -> tuple[int, Any]:
    """The learning phase and the :class:`~jaxkeras.mixed_precision.Policy` of ``key``."""
    if isinstance(key, tuple):
        return key[0], mixed_precision.POLICIES[key[1]]
    return key, mixed_precision.POLICIES["float32"]


def _laid_out(names: list[str], new: dict[str, Any]) -> list:
    """Inside a trace: the new values of the loose variables ``names``, each kept in the layout
    of its stored value (so no call moves the state)."""
    values = []
    for name in names:
        value, layout = new[name], stored_layout(STORE.values.get(name))
        if layout is not None and not graph.is_bcoo(value):
            value = lax.with_sharding_constraint(value, layout)
        values.append(value)
    return values


def _laid_out_outputs(outputs: list) -> list:
    """Inside a trace: the outputs, in the distribution's output layout."""
    distribution = DISTRIBUTION.current()
    layout = None if distribution is None else distribution.output_layout()
    if layout is None:
        return outputs
    return [o if graph.is_bcoo(o) else lax.with_sharding_constraint(o, layout) for o in outputs]


def _primitives(jaxpr: Any, names: set | None = None) -> set[str]:
    """The names of the primitives of a jaxpr and of those nested in it (scan, cond, custom
    derivatives): whether it calls Python (``...callback``) or loops on values (``while``)."""
    names = set() if names is None else names
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else (param,):
                inner = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr holds a Jaxpr
                if hasattr(inner, "eqns"):
                    _primitives(inner, names)
    return names


def _platform_of(args: Sequence[Any]) -> str | None:
    """The one platform a ``jax.jit`` of ``args`` runs on (that of the arrays' devices and of
    JAX's default device, which takes NumPy arguments; a distribution has placed the feeds
    and variables on its devices before), or
    ``None`` when they disagree (then the ops that lower per platform leave the choice to
    the lowering: :func:`jaxkeras._ops.spatial.per_platform`)."""
    platforms = {
        device.platform
        for arg in args
        if isinstance(arg, jax.Array) and not isinstance(arg, jax.core.Tracer)
        for device in arg.devices()
    }
    default = jax.config.jax_default_device  # None, a device or a platform name
    if default is None:
        default = jax.default_backend()
    platforms.add(getattr(default, "platform", default))
    return platforms.pop() if len(platforms) == 1 else None


def _check_phase(value: Any) -> int:
    if np.ndim(value) != 0 or value not in (0, 1):
        raise ValueError(f"learning phase feed must be 0 or 1, got {value!r}")
    return int(value)


def release_compiled() -> None:
    """Drops the compiled executables of every live :class:`Function` (``clear_session``)."""
    for f in list(_FUNCTIONS):
        f.release()


def function(
    inputs: Sequence[Any],
    outputs: Any,
    updates: Sequence[Any] | None = None,
    name: str | None = None,
    micro_batches: int = 1,
    steps_per_call: int = 1,
    device_outputs: bool = False,
    check_numerics: bool = False,
    **kwargs: Any,
) -> Function:
    """Compiles a graph into a callable: ``f([x_value, ...]) -> [output_value, ...]``.

    The graph is lowered to one pure function ``(state, rng, feeds) -> (outputs, new_state)``
    and compiled once with ``jax.jit`` per input shape (and per learning phase); the variables
    it uses are collected from the graph. Every output and update value is computed from the
    state before the call; updates are committed after it. Several updates of one variable
    compose: increments (``update_add``, ``update_sub``, ``moving_average_update``) add up in
    list order, and an assignment (``update`` or a ``(variable, value)`` pair) replaces what came
    before it. Feeds are cast to the input dtypes. Calls are thread-safe.

    The compiled function is named after ``name`` (``jit(train_function)`` in its HLO and in
    profiles; ``jit(k_function)`` without one), and each op's operations after the
    ``K.name_scope`` it was built in and its op name (``dense_1/dot``; a Keras layer builds
    its ops in a scope of its name): see ``f.lower(inputs).as_text(debug_info=True)`` and
    :func:`jaxkeras.profiler.trace`.

    Gradient accumulation: with ``micro_batches=k``, a call splits every feed along axis 0
    into ``k`` equal micro-batches (its size there must be a multiple of ``k``; micro-batch
    ``i`` holds rows ``i, i + k, i + 2k, ...``, so a batch sharded over devices stays evenly
    sharded) and computes what depends on the feeds one micro-batch at a time, in a
    ``lax.scan``, so memory holds one micro-batch's intermediate values (the activations a
    gradient keeps):

    - gradients (``K.gradients``) with respect to a variable are the mean of the
      micro-batches' gradients (for a mean loss, those of the whole batch); with respect to a
      batch-shaped tensor computed from the feeds (an input, an activation), each example's
      row is its gradient of its micro-batch's loss (so a per-example quantity, such as a
      gradient penalty's input-gradient norms, is that of the whole batch; a mean loss's
      input gradients are ``k`` times the whole batch's);
    - outputs that depend on the feeds are computed per micro-batch and combined: those whose
      first dimension is the batch's (unknown in the static shape, as for Keras inputs, or
      one of the feeds' sizes) have one row per example, put back in the order of the feeds'
      rows; the others (a scalar loss or metric) are the mean over the micro-batches; an
      output that reads gradients is computed once, after the micro-batches, from the
      gradients so combined;
    - updates are computed once, after the micro-batches, from the mean gradients, and from
      the mean over the micro-batches of any other feed-dependent value they read (the loss
      an optax transform is given; the batch statistics of a moving average, which are then
      each micro-batch's, averaged).

    Multi-step calls: with ``steps_per_call=n``, every feed stacks ``n`` steps' values along a
    new first axis (a feed of shape ``(n, *placeholder_shape)``), and one call runs the ``n``
    steps in one compiled ``lax.scan``, each step reading the state the previous one left:
    the updates, the random numbers (step ``i`` draws what the ``i``-th of ``n`` separate
    calls would) and the learning phase are those of ``n`` separate calls, and so is the
    state after it, bit for bit. Each output stacks its ``n`` steps' values along a new first
    axis. ``f.pure`` stays one step. With ``device_outputs=True`` a call returns the outputs
    as ``jax.Array`` s without waiting for them (the next call can be dispatched while the
    device works; read them with ``np.asarray``).

    Numerics checks: with ``check_numerics=True`` every floating-point value a call computes
    (each op's, the gradients' and their replays') is checked for NaN and infinity inside the
    compiled function; when one is not finite, the call raises ``FloatingPointError`` naming
    the first such op in evaluation order (its ``K.name_scope``/layer label, op and input
    shapes) and updates no variable (the state is not donated then). It costs one ``isfinite``
    reduction per value; Keras 2 passes ``model.compile(..., check_numerics=True)`` on.

    Random ops that depend on the feeds (dropout) draw different numbers in each
    micro-batch: micro-batch ``i`` draws from ``fold_in(key, i)`` of the key the whole call
    would draw from. The learning phase applies to every micro-batch. ``f.pure`` computes
    the same. Keras 2 passes the keyword arguments of ``model.compile`` on to ``K.function``,
    so ``model.compile(..., micro_batches=4)`` accumulates in its train, test and predict
    functions (every batch they get, the last of an epoch too, must then split evenly).

    Args:
        inputs: placeholders (or other tensors) to feed, possibly the learning-phase tensor.
        outputs: a tensor or a list of tensors.
        updates: ``K.update*`` results or ``(variable, new_value)`` pairs.
        name: a name for the function and its compiled code (Keras 2 passes
            ``"train_function"``, ``"test_function"``, ``"predict_function"``).
        micro_batches: the number of micro-batches a call computes one at a time (1: the
            whole batch at once).
        steps_per_call: the number of steps one call runs (1: one).
        device_outputs: return the outputs as ``jax.Array`` s on the device, without waiting
            for them (default: NumPy arrays, which wait).
        check_numerics: check every value the call computes for NaN and infinity (see
            below).
        **kwargs: not supported (TF session options); any raises.

    Returns:
        A :class:`Function`; ``f.pure`` is the pure function.

    Raises:
        TypeError, ValueError: for bad arguments (see :class:`Function`), or unsupported
            keyword arguments. A call whose feed does not split into ``micro_batches`` raises
            a ``ValueError`` naming the feed and its shape.

    Example:
        >>> x = K.placeholder((None, 3))
        >>> f = K.function([x], [K.sum(x, axis=1)])
        >>> f([np.ones((2, 3))])
        [array([3., 3.], dtype=float32)]
        >>> w = K.variable([1.0, 2.0, 3.0])
        >>> loss = K.mean(K.square(K.dot(x, K.expand_dims(w))))
        >>> step = K.function([x], [loss], [K.update_sub(w, 0.01 * K.gradients(loss, [w])[0])],
        ...                   micro_batches=4)
        >>> loss_value = step([np.ones((8, 3))])  # 4 micro-batches of 2 rows
        >>> float(loss_value[0])
        36.0
    """
    if kwargs:
        raise ValueError(f"function: unsupported arguments {sorted(kwargs)}")
    return Function(
        inputs,
        outputs,
        updates,
        name,
        micro_batches,
        steps_per_call,
        device_outputs,
        check_numerics,
    )


# ---------------------------------------------------------------------------------------------
# gradients


def gradients(loss: Any, variables: Sequence[Any]) -> list[Any]:
    """Returns the gradients of ``loss`` (summed when not scalar) with respect to ``variables``.

    They are computed by ``jax.grad`` over a replay of the graph from ``variables`` to ``loss``.
    ``variables`` may hold variables, placeholders and intermediate tensors; the results are
    tensors, so gradients of gradients work. An entry that ``loss`` does not depend on gets
    ``None``, as in Keras 2.

    Args:
        loss: a scalar (or summed) tensor.
        variables: a list of variables/tensors (or a single one).

    Returns:
        A list of gradient tensors (or ``None``), one per entry of ``variables``.

    Raises:
        TypeError: for an entry that is not a floating-point variable or tensor, or a
            ``loss`` that is not floating-point.
    """
    xs = list(variables) if isinstance(variables, (list, tuple)) else [variables]
    for i, x in enumerate(xs):
        if not isinstance(x, Symbolic):
            raise TypeError(f"gradients: variables must be variables or tensors, got {x!r}")
        if not jnp.issubdtype(x.dtype, jnp.inexact):
            raise TypeError(
                f"gradients: variables[{i}] ({x.name!r}) has dtype {x.dtype}; gradients are "
                "taken with respect to floating-point tensors only"
            )
    if not isinstance(loss, Symbolic):
        return [None] * len(xs)
    if not jnp.issubdtype(loss.dtype, jnp.floating):
        raise TypeError(
            f"gradients: loss ({loss.name!r}) has dtype {loss.dtype}; cast it to a "
            "floating-point type (an integer loss has no gradient)"
        )
    return graph.gradient_nodes(loss, xs)


_stop_gradient = op(lambda x: lax.stop_gradient(x), name="stop_gradient")


def stop_gradient(variables: Any) -> Any:
    """Blocks gradients through a tensor (or each tensor of a list).

    Args:
        variables: a tensor, or a list/tuple of tensors.

    Returns:
        The same value(s), seen as constants by :func:`gradients`.
    """
    if isinstance(variables, (list, tuple)):
        return [_stop_gradient(v) for v in variables]
    return _stop_gradient(variables)


# ---------------------------------------------------------------------------------------------
# eval


def eval(x: Any) -> Any:
    """Evaluates a tensor, variable or update now.

    An update is applied once (the variable takes its new value). Outside a state scope the
    result is a NumPy array; inside one, the scope's (possibly traced) value.

    Args:
        x: a tensor without unfed placeholders, a variable, an update, or an array.

    Returns:
        The value (for an update: the variable's new value).
    """
    return eval_with_feeds(x, {})


def eval_with_feeds(fetches: Any, feed_dict: dict) -> Any:
    """Evaluates ``fetches`` (a pytree of tensors/updates) with placeholder feeds; see :func:`eval`.

    Every value is computed from the state before the updates among the fetches, which then
    compose (see :func:`function`) and are committed together; an update's result is its
    variable's value right after it.

    Args:
        fetches: a tensor, variable, update, or a list/dict of them.
        feed_dict: placeholder -> value.

    Returns:
        The values in the structure of ``fetches``: NumPy arrays outside a state scope.

    Raises:
        TypeError: for a key of ``feed_dict`` that is not a tensor, or a feed that cannot be
            cast to its dtype.
        ValueError: for a feed whose shape does not fit (as :class:`Function` checks them).
    """
    leaves, treedef = jax.tree_util.tree_flatten(
        fetches, is_leaf=lambda v: isinstance(v, (Symbolic, Update))
    )
    memo = {}
    for p, value in feed_dict.items():
        if not isinstance(p, Symbolic):
            raise TypeError(f"feed_dict keys must be placeholders or tensors, got {p!r}")
        memo[p] = _Input(p).feed(value)
    updates = [leaf for leaf in leaves if isinstance(leaf, Update)]
    targets = [leaf.payload if isinstance(leaf, Update) else leaf for leaf in leaves]
    scope = graph.active_scope()
    if scope is not None:
        return jax.tree_util.tree_unflatten(treedef, _run(targets, updates, leaves, scope, memo))
    with STORE.lock.write() if updates else STORE.lock.read():
        results = _run(targets, updates, leaves, Context(), memo)
        results = [to_numpy(r) for r in results]
    return jax.tree_util.tree_unflatten(treedef, results)


def _run(targets: list, updates: list, leaves: list, ctx: Context, memo: dict) -> list:
    """Evaluates ``targets`` in ``ctx`` and applies the updates among ``leaves`` to it (a
    scope) or to the store; returns each leaf's result."""
    values = evaluate(targets, ctx, memo)
    payloads = [v for leaf, v in zip(leaves, values) if isinstance(leaf, Update)]
    new, after = compose_updates(updates, payloads, ctx.read)
    for target in dict.fromkeys(u.variable for u in updates):
        if ctx.scope:
            ctx.write(target, new[target.name])
        else:
            STORE.write({target.name: place_like(new[target.name], STORE.read(target.name))})
    after_iter = iter(after)
    return [next(after_iter) if isinstance(leaf, Update) else v for leaf, v in zip(leaves, values)]


def to_sparse_value(value: Any, dtype: str) -> Any:
    """Converts a feed for a sparse placeholder (SciPy sparse, BCOO or dense) to a BCOO array.

    Args:
        value: the feed.
        dtype: the placeholder's dtype.

    Returns:
        A ``jax.experimental.sparse.BCOO``.
    """
    if isinstance(value, sparse.BCOO):
        return value.astype(dtype)
    if hasattr(value, "tocoo"):
        return sparse.BCOO.from_scipy_sparse(value).astype(dtype)
    return sparse.BCOO.fromdense(jnp.asarray(value, dtype=dtype))
