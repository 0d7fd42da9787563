"""Loops over a tensor's leading axis: ``rnn``, ``map_fn``, ``foldl`` and ``foldr``.

A loop body written with K ops is traced once, on placeholders that stand for one step's values,
into an inner graph (:class:`StepGraph`). What that graph takes from outside (weights and slices
of them, constants, dropout masks, the learning phase) becomes the arguments of one graph node,
whose body runs the inner graph inside ``lax.scan`` (or a Python loop, for ``unroll=True``). So
``K.function`` collects the weights like any other node's, ``K.gradients`` differentiates through
the loop to them, and inside a state scope the node runs at once, which is how the loops work
under a user's own ``jax.jit``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jaxkeras._engine import graph
from jaxkeras._engine.graph import Context, Placeholder, Symbolic, dtype_of
from jaxkeras._ops.spatial import loop_body, per_platform
from jaxkeras.checks import check_bool, check_callable, check_dtype, compatible
from jaxkeras.state import forbid_updates
from jaxkeras.tensors import int_shape, ndim

__all__ = ["foldl", "foldr", "map_fn", "rnn"]

_UPDATE_MESSAGE = (
    "K.update inside the step function of {owner} is not supported: the step is traced once and "
    "run at every iteration of a compiled loop, where no variable can be written. Return the "
    "new value from the step instead (as a state or an output) and apply K.update to what the "
    "loop returns."
)


def _flatten(tree: Any) -> tuple[list, Any]:
    return jax.tree_util.tree_flatten(tree, is_leaf=lambda x: isinstance(x, Symbolic))


def _map(fn: Callable, *trees: Any) -> Any:
    return jax.tree_util.tree_map(fn, *trees)


# ---------------------------------------------------------------------------------------------
# the inner graph


def _per_step(values: Any, drop_axis: int | None, name: str) -> Any:
    """Placeholders shaped like the leaves of ``values``, without axis ``drop_axis``."""
    leaves, tree = _flatten(values)
    placeholders = []
    for i, leaf in enumerate(leaves):
        shape = list(int_shape(leaf))
        if drop_axis is not None:
            del shape[drop_axis]
        placeholders.append(Placeholder(tuple(shape), dtype_of(leaf), f"{name}_{i}"))
    return jax.tree_util.tree_unflatten(tree, placeholders)


def _split(outputs: Sequence[Any], placeholders: Sequence[Placeholder]) -> tuple[list, list]:
    """Splits a graph from ``placeholders`` to ``outputs`` into what runs inside the loop and
    what it takes from outside (in a stable order).

    Inside are the nodes that depend on the placeholders; taken from outside are the nodes that
    do not but feed nodes that do, and the outputs that do not depend on them at all.
    """
    order = graph.topological_order(outputs, None, {})
    inner = set(placeholders)
    for node in order:
        if any(parent in inner for parent in node._inputs()):
            inner.add(node)
    captured = {}
    for node in order:
        if node in inner:
            captured.update((p, None) for p in node._inputs() if p not in inner)
    captured.update((o, None) for o in outputs if isinstance(o, Symbolic) and o not in inner)
    return [n for n in order if n in inner], list(captured)


class StepGraph(graph.Subgraph):
    """A loop body written with K ops, traced once on placeholders, run on values in the loop.

    Args:
        fn: the body; called once with ``args``.
        args: one pytree of placeholders per argument of ``fn`` (see :func:`_per_step`).
        owner: the public function's name, for error messages.

    Attributes:
        args: the placeholders ``fn`` was traced on.
        result: what ``fn`` returned (a pytree of tensors).
        captured: the outside values the body uses; pass their values to :meth:`run`.
        slow_in_cpu_loops: whether the body runs an op that XLA:CPU runs much slower inside a
            compiled loop than unrolled (depthwise, separable and transposed convolutions,
            whose op bodies are marked so; jax-ml/jax#12868, open).
        uses_learning_phase: whether the body depends on the learning phase.
    """

    def __init__(self, fn: Callable, args: Sequence[Any], owner: str) -> None:
        self.args = list(args)
        self._placeholders = _flatten(self.args)[0]
        with forbid_updates(_UPDATE_MESSAGE.format(owner=owner)):
            self.result = fn(*args)
        self._outputs, self._tree = _flatten(self.result)
        self.outputs = self._outputs
        inner, self.captured = _split(self._outputs, self._placeholders)
        self.slow_in_cpu_loops = any(
            getattr(getattr(node, "_fn", None), "slow_in_cpu_loops", False) for node in inner
        )
        self.uses_learning_phase = any(
            getattr(node, "_uses_learning_phase", False)
            for node in graph.topological_order(self._outputs, None, {})
        )

    def run(self, ctx: Context, args: Sequence[Any], captured: Sequence[Any]) -> Any:
        """Evaluates the body on one step's values.

        Args:
            ctx: supplies random keys and the learning phase.
            args: values in the structure of the placeholders.
            captured: the values of :attr:`captured`, in order.

        Returns:
            The body's result, in the structure of :attr:`result`, as arrays.
        """
        memo = dict(zip(self._placeholders, jax.tree_util.tree_leaves(list(args))))
        memo.update(zip(self.captured, captured))
        values = graph.evaluate(self._outputs, ctx, memo)
        return jax.tree_util.tree_unflatten(self._tree, [jnp.asarray(v) for v in values])


def _context() -> Context:
    return graph.active_context() or Context()


def _cast_like(values: Any, like: Any) -> Any:
    """``values`` as arrays with the dtypes of the placeholders ``like`` (same structure)."""
    return _map(lambda v, p: jnp.asarray(v, dtype=p.dtype), values, like)


def _match(new: Any, old: Any, what: str) -> Any:
    """Checks that ``new`` fits the leaves of ``old`` and returns it in ``old``'s structure."""
    new_leaves, old_leaves = _flatten(new)[0], _flatten(old)[0]
    if len(new_leaves) != len(old_leaves):
        raise ValueError(
            f"{what}: returned {len(new_leaves)} tensors where {len(old_leaves)} were expected "
            f"({old!r}); return one new value per state"
        )
    for i, (n, o) in enumerate(zip(new_leaves, old_leaves)):
        n_shape, o_shape = int_shape(n), int_shape(o)
        fits = len(n_shape) == len(o_shape) and all(
            a is None or b is None or a == b for a, b in zip(n_shape, o_shape)
        )
        if not fits or dtype_of(n) != o.dtype:
            raise ValueError(
                f"{what}: value {i} has shape {n_shape} and dtype {dtype_of(n)}, but it must keep "
                f"the shape {o_shape} and dtype {o.dtype} it came in with"
            )
    return jax.tree_util.tree_unflatten(_flatten(old)[1], new_leaves)


# ---------------------------------------------------------------------------------------------
# rnn


def _swap(x: Any) -> Any:
    return jnp.swapaxes(x, 0, 1)


def _expand(mask_t: jax.Array, x: jax.Array) -> jax.Array:
    """The mask of one step with trailing axes added so that it broadcasts against ``x``."""
    return jnp.reshape(mask_t, mask_t.shape + (1,) * (x.ndim - mask_t.ndim))


def _select(mask_t: jax.Array, new: Any, old: Any) -> Any:
    return _map(lambda n, o: jnp.where(_expand(mask_t, n), n, o), new, old)


def _time_major_mask(mask, lengths, steps, time_major, go_backwards):
    if mask is None and lengths is not None:
        mask = jnp.arange(steps)[:, None] < jnp.reshape(lengths, (1, -1))
    elif mask is not None:
        mask = jnp.asarray(mask).astype(bool)
        mask = mask if time_major else _swap(mask)
    if mask is not None and go_backwards:
        mask = jnp.flip(mask, 0)
    return mask


def _rnn_body(
    inputs,
    states,
    mask,
    lengths,
    captured,
    *,
    step,
    go_backwards,
    unroll,
    time_major,
    zero_output_for_mask,
    return_all_outputs,
):
    ctx = _context()
    inputs = inputs if time_major else _map(_swap, inputs)
    if go_backwards:
        inputs = _map(lambda a: jnp.flip(a, 0), inputs)
    steps = jax.tree_util.tree_leaves(inputs)[0].shape[0]
    mask = _time_major_mask(mask, lengths, steps, time_major, go_backwards)
    states = _cast_like(states, step.args[1])

    def one_step(carry, xs):
        prev_output, states = carry
        x_t, mask_t = xs
        output, new_states = step.run(ctx, [x_t, states], captured)
        if mask_t is not None:
            fill = _map(jnp.zeros_like, output) if zero_output_for_mask else prev_output
            output = _select(mask_t, output, fill)
            new_states = _select(mask_t, new_states, states)
        return (output, new_states), (output if return_all_outputs else None)

    # The last output is carried (not sliced from the stacked outputs), so that the outputs
    # are not materialized when only the last one is used.
    first = _map(lambda a: a[0], inputs)
    shapes = jax.eval_shape(lambda: step.run(ctx, [first, states], captured)[0])
    carry = (_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes), states)
    if unroll:
        per_step = []
        for t in range(steps):
            carry, output = one_step(carry, _map(lambda a, t=t: a[t], (inputs, mask)))
            per_step.append(output)
        outputs = _map(lambda *ys: jnp.stack(ys), *per_step) if return_all_outputs else None
    else:
        carry, outputs = _scan(one_step, carry, (inputs, mask), steps, step.slow_in_cpu_loops)
    last_output, new_states = carry
    if not return_all_outputs:
        outputs = _map(lambda a: a[None], last_output)  # one time step: the last
    return last_output, (outputs if time_major else _map(_swap, outputs)), new_states


def _lengths(input_length: Any) -> Any:
    """The per-sample lengths among the accepted forms of ``input_length`` (else ``None``)."""
    if input_length is None or isinstance(input_length, int):
        return None
    if ndim(input_length) == 0:
        return None
    if ndim(input_length) != 1:
        raise ValueError(
            "rnn: input_length must be an int or a 1-D tensor of per-sample lengths, got shape "
            f"{int_shape(input_length)}"
        )
    return input_length


_MAX_UNROLLED_STEPS = 64
"""The longest loop rnn unrolls on CPU when its step runs an op marked ``slow_in_cpu_loops``
(compile time grows with it)."""


_SHALLOW_DEPTH = 64
"""The deepest matrix product or convolution (terms summed per output element) whose output a
compiled loop's gradient recomputes rather than stacks: at ``2 * depth`` flops an element,
recomputing it costs less than writing, page-faulting and reading back the stacked copy."""


def _saving_dots(body: Callable) -> Callable:
    """``body`` for a compiled loop whose gradient saves, per step, only the outputs of deep
    matrix products and convolutions (more than :data:`_SHALLOW_DEPTH` terms per element), and
    the carry: everything else the backward pass needs is recomputed from them.

    Without it the loop stacks every step's intermediate values (JAX's reverse mode of a scan
    saves them all unless the body is checkpointed: jax-ml/jax#3186, closed, where
    ``jax.checkpoint`` is the answer), among them the im2col patches of a ConvLSTM's
    convolutions (``k^2`` times their input's size, zero-initialised, written and sliced per
    training step); recomputing the patches and the gates' elementwise work costs less than
    storing them. Shallow products, such as the input convolution of a ConvLSTM on one
    channel (9 terms) or an LSTM's input projection, are recomputed too, and the stacked
    values shrink further. Measured by hand on the conv_lstm example's training step:
    ``benchmarks/RESULTS.md``, "Design measurements (by hand)", "ConvLSTM loops (rnn)".

    Args:
        body: a ``lax.scan`` body ``(carry, x) -> (carry, y)``.

    Returns:
        The same function under ``jax.checkpoint`` (``prevent_cse=False``: safe in a loop).
    """
    return jax.checkpoint(body, prevent_cse=False, policy=_deep_products)


def _deep_products(prim: Any, *args: Any, **params: Any) -> bool:
    """The ``jax.checkpoint`` policy of :func:`_saving_dots`.

    Args:
        prim: a primitive of the body.
        *args: its operands' abstract values.
        **params: its parameters.

    Returns:
        Whether to save its output: for matrix products and convolutions that sum more than
        :data:`_SHALLOW_DEPTH` terms per element (a convolution: its window's size times its
        input channels per group).
    """
    if prim is lax.dot_general_p:
        (contracting, _), _ = params["dimension_numbers"]
        return math.prod(args[0].shape[d] for d in contracting) > _SHALLOW_DEPTH
    if prim is lax.conv_general_dilated_p:
        # the kernel's axes but its output features: (in features per group, spatial...)
        in_and_window = params["dimension_numbers"].rhs_spec[1:]
        return math.prod(args[1].shape[d] for d in in_and_window) > _SHALLOW_DEPTH
    return False


def _scan(body: Callable, carry: Any, xs: Any, steps: int, slow_in_cpu_loops: bool) -> Any:
    """``lax.scan``, fully unrolled on CPU when the body runs an op that XLA:CPU runs much
    slower inside a compiled loop (depthwise, separable and transposed convolutions:
    jax-ml/jax#12868, open, "Convolution is significantly slower inside a loop body (CPU)")
    and the loop is short; other platforms keep the loop.

    The loop's body is traced inside :func:`~jaxkeras._ops.spatial.loop_body`, where plain
    convolutions with ``lowering='auto'`` choose lowerings with matmul gradients on CPU (see
    ``jaxkeras._xla.conv_lowering.loop_conv_lowering``), so a ConvLSTM keeps its loop: unrolled,
    XLA fuses the cell state's chain into every later step's consumers, and the conv_lstm
    example's training step ran far longer unrolled with XLA's convolutions than kept as a
    loop with matmuls, which is quicker still when its gradient also recomputes what it
    used to stack (:func:`_saving_dots`). Measured by hand: ``benchmarks/RESULTS.md``, "Design
    measurements (by hand)", "ConvLSTM loops (rnn)".
    """
    if not slow_in_cpu_loops or steps > _MAX_UNROLLED_STEPS:
        with loop_body():
            return lax.scan(_saving_dots(body), carry, xs)
    return per_platform(
        (carry, xs),
        cpu=lambda c, x: lax.scan(body, c, x, unroll=True),
        default=lambda c, x: lax.scan(body, c, x),
    )


def _check_inputs(inputs: Any, time_axis: int, unroll: bool) -> None:
    leaves = _flatten(inputs)[0]
    if not leaves:
        raise ValueError(f"rnn: inputs must hold at least one tensor, got {inputs!r}")
    for leaf in leaves:
        if ndim(leaf) < 3:
            raise ValueError(
                f"rnn: inputs must have rank >= 3 (samples, time, features...), got shape "
                f"{int_shape(leaf)}"
            )
    steps = int_shape(leaves[0])[time_axis]
    if unroll and steps is None:
        raise ValueError(
            f"rnn: unroll=True needs a known number of time steps, but inputs have shape "
            f"{int_shape(leaves[0])}; give the time dimension a fixed size or use unroll=False"
        )
    if steps == 0:
        raise ValueError(f"rnn: inputs have no time steps (shape {int_shape(leaves[0])})")


def _check_mask(mask: Any, states: list, inputs: Any, time_major: bool) -> None:
    if mask is None:
        return
    if not _flatten(states)[0]:
        raise ValueError("rnn: a mask needs at least one state (initial_states is empty)")
    layout = "(time, samples)" if time_major else "(samples, time)"
    expected = int_shape(_flatten(inputs)[0][0])[:2]
    if ndim(mask) < 2 or not compatible(int_shape(mask)[:2], expected):
        raise ValueError(
            f"rnn: mask must have shape {layout} or {layout[:-1]}, 1) matching inputs "
            f"{expected}, got shape {int_shape(mask)}"
        )


def _check_step_result(result: Any) -> tuple[Any, Any]:
    if not isinstance(result, (list, tuple)) or len(result) != 2:
        raise ValueError(f"rnn: step_function must return (output, new_states), got {result!r}")
    return result[0], result[1]


def rnn(
    step_function: Callable,
    inputs: Any,
    initial_states: Sequence[Any],
    go_backwards: bool = False,
    mask: Any = None,
    constants: Sequence[Any] | None = None,
    unroll: bool = False,
    input_length: Any = None,
    time_major: bool = False,
    zero_output_for_mask: bool = False,
    return_all_outputs: bool = True,
) -> tuple[Any, Any, list]:
    """Iterates a step function over the time dimension of a tensor (compiled with ``lax.scan``).

    The step function, written with K ops, is traced once on symbolic per-step values; it may
    use variables (weights), slices of them, tensors from outside (constants, dropout masks) and
    the learning phase. Random ops inside it draw the same values at every step of one run and
    fresh values on every run, which is what Keras's recurrent dropout masks expect; pass noise
    that must differ per step in with ``inputs``. ``K.update`` inside it raises ``ValueError``.

    Args:
        step_function: ``step_function(input_t, states) -> (output, new_states)``: ``input_t`` is
            one time step of ``inputs`` (no time axis), ``states`` the list of current states
            followed by ``constants``; ``new_states`` has one value per state, each of the
            state's shape and dtype.
        inputs: a tensor ``(samples, time, ...)`` of rank at least 3 (or a nested structure of
            such tensors, each given to the step in the same structure).
        initial_states: the list of initial states, each ``(samples, ...)``.
        go_backwards: iterate from the last time step to the first and return the outputs in
            that (reversed) order.
        mask: a boolean (or 0/1) tensor ``(samples, time)`` or ``(samples, time, 1)``; at a
            step where it is false, a sample keeps its states and repeats its previous output
            (zeros before the first unmasked step).
        constants: values appended to the states given to the step function.
        unroll: run a Python loop instead of ``lax.scan`` (needs a known number of steps).
        input_length: an int (accepted, unused), or a 1-D tensor of per-sample lengths that
            masks the steps from each length on when no ``mask`` is given.
        time_major: ``inputs``, ``mask`` and ``outputs`` are ``(time, samples, ...)``.
        zero_output_for_mask: masked steps output zeros instead of the previous output.
        return_all_outputs: when False, ``outputs`` holds only the last output (one time
            step), and the loop does not keep the others (less memory), as in TF-Keras 2.

    Returns:
        ``(last_output, outputs, new_states)``: the output of the last step ``(samples, ...)``,
        all outputs ``(samples, time, ...)`` (``(samples, 1, ...)`` with
        ``return_all_outputs=False``) and the list of final states.

    Raises:
        ValueError: for inputs of rank below 3, ``unroll=True`` without a static number of
            time steps, a mask without states, or a step function whose states change shape or
            dtype.

    Example:
        >>> w = K.variable(np.eye(3))
        >>> def step(x_t, states):
        ...     h = K.tanh(K.dot(x_t, w) + states[0])
        ...     return h, [h]
        >>> x = K.placeholder((None, 5, 3))
        >>> last, outputs, states = K.rnn(step, x, [K.zeros_like(x[:, 0])])
        >>> K.int_shape(outputs)
        (None, 5, 3)
    """
    go_backwards, unroll, time_major, zero_output_for_mask, return_all_outputs = (
        check_bool("rnn", a, v)
        for v, a in [
            (go_backwards, "go_backwards"),
            (unroll, "unroll"),
            (time_major, "time_major"),
            (zero_output_for_mask, "zero_output_for_mask"),
            (return_all_outputs, "return_all_outputs"),
        ]
    )
    check_callable("rnn", "step_function", step_function)
    time_axis = 0 if time_major else 1
    _check_inputs(inputs, time_axis, unroll)
    states = list(initial_states) if isinstance(initial_states, (list, tuple)) else [initial_states]
    _check_mask(mask, states, inputs, time_major)
    constants = list(constants or [])

    def traced(input_t, states_t):
        output, new_states = _check_step_result(step_function(input_t, list(states_t) + constants))
        return output, _match(new_states, states_t, "rnn: step_function's new_states")

    step = StepGraph(
        traced,
        [_per_step(inputs, time_axis, "rnn/input"), _per_step(states, None, "rnn/state")],
        "rnn",
    )
    last_output, outputs, new_states = graph.record(
        _rnn_body,
        (inputs, states, mask, _lengths(input_length), step.captured),
        dict(
            step=step,
            go_backwards=go_backwards,
            unroll=unroll,
            time_major=time_major,
            zero_output_for_mask=zero_output_for_mask,
            return_all_outputs=return_all_outputs,
        ),
        name="rnn",
        uses_learning_phase=step.uses_learning_phase,
    )
    return last_output, outputs, list(new_states)


# ---------------------------------------------------------------------------------------------
# map and folds


def _check_elems(elems: Any, owner: str) -> None:
    leaves = _flatten(elems)[0]
    if not leaves:
        raise ValueError(f"{owner}: elems must hold at least one tensor, got {elems!r}")
    for leaf in leaves:
        if ndim(leaf) < 1:
            raise ValueError(f"{owner}: elems must have rank >= 1, got a scalar {leaf!r}")


def _map_body(elems, captured, *, step, dtype):
    ctx = _context()

    def one(x):
        y = step.run(ctx, [x], captured)
        return y if dtype is None else _map(lambda v: v.astype(dtype), y)

    return lax.map(one, elems)


def map_fn(fn: Callable, elems: Any, name: str | None = None, dtype: Any = None) -> Any:
    """Applies ``fn`` to each element of ``elems`` (along its first axis), with ``lax.map``.

    ``fn`` is written with K ops and traced once on a symbolic element (see :func:`rnn` for
    what it may use).

    Args:
        fn: ``fn(x) -> y`` for one element ``x = elems[i]``.
        elems: a tensor (or nested structure of tensors) of rank at least 1.
        name: ignored (a graph name in TF).
        dtype: the dtype of the outputs (they are cast to it); default the dtype ``fn`` gives.

    Returns:
        The stacked results ``[fn(elems[0]), fn(elems[1]), ...]``.

    Example:
        >>> K.eval(K.map_fn(lambda row: row * 2, np.arange(6.0).reshape(3, 2)))
        array([[ 0.,  2.],
               [ 4.,  6.],
               [ 8., 10.]], dtype=float32)
    """
    check_callable("map_fn", "fn", fn)
    _check_elems(elems, "map_fn")
    dtype = None if dtype is None else check_dtype("map_fn", dtype)
    step = StepGraph(fn, [_per_step(elems, 0, "map_fn/elem")], "map_fn")
    return graph.record(
        _map_body, (elems, step.captured), dict(step=step, dtype=dtype), name="map_fn"
    )


def _fold_body(elems, initializer, captured, *, step, reverse):
    ctx = _context()
    if initializer is None:
        initializer = _map(lambda a: a[-1 if reverse else 0], elems)
        elems = _map(lambda a: a[:-1] if reverse else a[1:], elems)
    acc = _cast_like(initializer, step.args[0])

    def one(acc, x):
        return step.run(ctx, [acc, x], captured), None

    return lax.scan(one, acc, elems, reverse=reverse)[0]


def _fold(fn: Callable, elems: Any, initializer: Any, reverse: bool, owner: str) -> Any:
    check_callable(owner, "fn", fn)
    _check_elems(elems, owner)
    if initializer is None:
        acc = _per_step(elems, 0, f"{owner}/acc")
    else:
        acc = _per_step(initializer, None, f"{owner}/acc")

    def traced(acc_t, x_t):
        return _match(fn(acc_t, x_t), acc_t, f"{owner}: fn(acc, x)")

    step = StepGraph(traced, [acc, _per_step(elems, 0, f"{owner}/elem")], owner)
    return graph.record(
        _fold_body,
        (elems, initializer, step.captured),
        dict(step=step, reverse=reverse),
        name=owner,
    )


def foldl(fn: Callable, elems: Any, initializer: Any = None, name: str | None = None) -> Any:
    """Reduces ``elems`` along its first axis from left to right: ``fn(fn(acc, e0), e1)...``.

    ``fn`` is written with K ops and traced once (see :func:`rnn` for what it may use); the
    loop is a ``lax.scan``.

    Args:
        fn: ``fn(acc, x) -> new_acc``, keeping the shape and dtype of ``acc``.
        elems: a tensor (or nested structure of tensors) of rank at least 1.
        initializer: the first ``acc``; default ``elems[0]`` (then the fold starts at
            ``elems[1]``).
        name: ignored (a graph name in TF).

    Returns:
        The final accumulator, of the shape and dtype of ``initializer``.

    Example:
        >>> K.eval(K.foldl(lambda acc, x: acc + x, np.array([1.0, 2.0, 3.0])))
        array(6., dtype=float32)
    """
    return _fold(fn, elems, initializer, False, "foldl")


def foldr(fn: Callable, elems: Any, initializer: Any = None, name: str | None = None) -> Any:
    """Reduces ``elems`` along its first axis from right to left: ``fn(fn(acc, e[-1]), e[-2])...``.

    Args:
        fn: ``fn(acc, x) -> new_acc``, keeping the shape and dtype of ``acc``.
        elems: a tensor (or nested structure of tensors) of rank at least 1.
        initializer: the first ``acc``; default ``elems[-1]`` (then the fold starts at
            ``elems[-2]``).
        name: ignored (a graph name in TF).

    Returns:
        The final accumulator, of the shape and dtype of ``initializer``.
    """
    return _fold(fn, elems, initializer, True, "foldr")
