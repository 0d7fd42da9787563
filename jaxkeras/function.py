"""``K.function`` (one jit-compiled pure function per graph), ``K.gradients`` and ``K.eval``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import sparse

from jaxkeras import graph, state
from jaxkeras.checks import check_fits, compatible
from jaxkeras.graph import (
    Context,
    GradNode,
    LearningPhase,
    Placeholder,
    Symbolic,
    evaluate,
    op,
    topological_order,
)
from jaxkeras.state import Update, Variable, normalize_updates


class Function:
    """A compiled graph: call it with a list of input values (see :func:`function`).

    Attributes:
        inputs: the input tensors, in feed order.
        outputs: the output tensors.
        updates: ``(variable, new_value)`` pairs committed after each call.
        variable_names: names of the variables the graph reads or updates (its state).
        trace_count: how many times the graph has been traced (compiled).
    """

    def __init__(
        self,
        inputs: Sequence[Any],
        outputs: Any,
        updates: Sequence[Any] | None = None,
        name: str | None = None,
    ) -> None:
        if not isinstance(inputs, (list, tuple)):
            raise TypeError(f"function: inputs must be a list of tensors, got {inputs!r}")
        for x in inputs:
            if not isinstance(x, graph.Tensor):
                raise TypeError(f"function: every input must be a placeholder or tensor, got {x!r}")
        self.name = name
        self.inputs = list(inputs)
        self._single = not isinstance(outputs, (list, tuple))
        self.outputs = [outputs] if self._single else list(outputs)
        self.updates = normalize_updates(updates)
        self._feed_inputs = [x for x in self.inputs if not isinstance(x, LearningPhase)]
        roots = self.outputs + [value for _, value in self.updates]
        nodes = topological_order(roots, None, dict.fromkeys(self._feed_inputs))
        names = {n.name for n in nodes if isinstance(n, Variable)}
        names.update(target.name for target, _ in self.updates)
        self.variable_names = sorted(names)
        self._grad_nodes = [n for n in nodes if isinstance(n, GradNode)]
        self.trace_count = 0
        self._compiled = jax.jit(
            self._traced, static_argnames=("learning_phase",), donate_argnums=(0,)
        )

    def pure(
        self,
        state_values: dict[str, Any],
        rng: Any,
        feeds: Sequence[Any],
        learning_phase: int | None = None,
    ) -> tuple[list[Any], dict[str, Any]]:
        """The graph as a pure function, for ``jax.jit``, ``vmap``, ``lax.scan`` and sharding.

        Args:
            state_values: variable name -> value; must hold :attr:`variable_names` (extra entries
                pass through unchanged). ``f.state()`` gives the current values.
            rng: a JAX key (e.g. ``jax.random.PRNGKey(i)``); random ops derive theirs from it.
            feeds: one value per input, in order, leaving out the learning-phase tensor.
            learning_phase: 0 or 1 (a Python int); default the global learning phase.

        Returns:
            ``(outputs, new_state)``: a list of output values and the state dict after the
            updates, with the same keys as ``state_values``.
        """
        missing = [n for n in self.variable_names if n not in state_values]
        if missing:
            raise KeyError(f"pure: state_values lacks variables {missing}; start from f.state()")
        if len(feeds) != len(self._feed_inputs):
            raise ValueError(
                f"pure: expected {len(self._feed_inputs)} feeds (for "
                f"{[x.name for x in self._feed_inputs]}), got {len(feeds)}"
            )
        ctx = Context(state=dict(state_values), rng=rng, learning_phase=learning_phase)
        memo = dict(zip(self._feed_inputs, feeds))
        # Gradient nodes first: their replay computes the loss and its ancestors once, for
        # the gradients and for the outputs that share them.
        values = evaluate(
            self._grad_nodes + self.outputs + [v for _, v in self.updates], ctx, memo
        )[len(self._grad_nodes) :]
        n_out = len(self.outputs)
        new_state = dict(state_values)
        for (target, _), value in zip(self.updates, values[n_out:]):
            new_state[target.name] = _new_value(target, value)
        return values[:n_out], new_state

    def _traced(self, state_values, rng, feeds, learning_phase=None):
        self.trace_count += 1
        return self.pure(state_values, rng, feeds, learning_phase)

    def state(self) -> dict[str, jax.Array]:
        """Returns a copy of the current values of this function's variables, by name."""
        return state.get_state(self.variable_names)

    def _feed(self, x: graph.Tensor, value: Any) -> Any:
        if isinstance(x, Placeholder) and x._sparse:
            return to_sparse_value(value, x.dtype)
        if isinstance(value, jax.Array) and value.dtype == jnp.dtype(x.dtype):
            array = value
        else:
            try:
                array = np.asarray(value, dtype=x.dtype)
            except (TypeError, ValueError) as err:
                raise TypeError(f"feed for {x.name!r} cannot be cast to {x.dtype}: {err}") from None
        if not compatible(array.shape, x.shape):
            raise ValueError(
                f"feed for {x.name!r} has shape {tuple(array.shape)}, but {x.name!r} "
                f"has shape {x.shape}"
            )
        return array

    def __call__(self, inputs: Sequence[Any]) -> Any:
        """Runs the graph on ``inputs`` (one value per input tensor, in order).

        Returns:
            A list of NumPy arrays (a single array when ``outputs`` was not a list).
        """
        if not isinstance(inputs, (list, tuple)):
            inputs = [inputs] if len(self.inputs) == 1 else inputs
        if not isinstance(inputs, (list, tuple)) or len(inputs) != len(self.inputs):
            raise ValueError(
                f"function expects a list of {len(self.inputs)} values "
                f"(for {[x.name for x in self.inputs]}), got {inputs!r}"
            )
        phase = None
        feeds = []
        for x, value in zip(self.inputs, inputs):
            if isinstance(x, LearningPhase):
                phase = _check_phase(value)
            else:
                feeds.append(self._feed(x, value))
        values = state.store().values
        state_values = {n: values[n] for n in self.variable_names}
        outputs, new_state = self._compiled(
            state_values, state.store().next_key(), feeds, learning_phase=phase
        )
        values.update(new_state)
        outputs = [_to_numpy(o) for o in outputs]
        return outputs[0] if self._single else outputs


def _to_numpy(value: Any) -> Any:
    """A NumPy array, or a NumPy scalar for 0-d values (as TF sessions returned them)."""
    array = state.to_numpy(value)
    return array[()] if array.ndim == 0 else array


def _check_phase(value: Any) -> int:
    if np.ndim(value) != 0 or value not in (0, 1):
        raise ValueError(f"learning phase feed must be 0 or 1, got {value!r}")
    return int(value)


def function(
    inputs: Sequence[Any],
    outputs: Any,
    updates: Sequence[Any] | None = None,
    name: str | None = None,
    **kwargs: Any,
) -> Function:
    """Compiles a graph into a callable: ``f([x_value, ...]) -> [output_value, ...]``.

    The graph is lowered to one pure function ``(state, rng, feeds) -> (outputs, new_state)``
    and compiled once with ``jax.jit`` per input shape (and per learning phase); the variables
    it uses are collected from the graph. Every output and update value is computed from the
    state before the call; updates are committed after it. Feeds are cast to the input dtypes.

    Args:
        inputs: placeholders (or other tensors) to feed, possibly the learning-phase tensor.
        outputs: a tensor or a list of tensors.
        updates: ``K.update*`` results or ``(variable, new_value)`` pairs.
        name: a name for the function.
        **kwargs: not supported (TF session options); any raises.

    Returns:
        A :class:`Function`; ``f.pure`` is the pure function.

    Example:
        >>> x = K.placeholder((None, 3))
        >>> f = K.function([x], [K.sum(x, axis=1)])
        >>> f([np.ones((2, 3))])
        [array([3., 3.], dtype=float32)]
    """
    if kwargs:
        raise ValueError(f"function: unsupported arguments {sorted(kwargs)}")
    return Function(inputs, outputs, updates, name)


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
    """
    xs = list(variables) if isinstance(variables, (list, tuple)) else [variables]
    for x in xs:
        if not isinstance(x, Symbolic):
            raise TypeError(f"gradients: variables must be variables or tensors, got {x!r}")
    if not isinstance(loss, Symbolic):
        return [None] * len(xs)
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


def _new_value(target: Variable, value: Any) -> Any:
    """An update's computed value, cast to its variable's dtype and checked against its shape."""
    value = jnp.asarray(value, dtype=target.dtype)
    if value.shape != target.shape:
        check_fits("update", "new value", value.shape, target)
    return value


def _apply_update(update: Update, ctx: Context, memo: dict) -> Any:
    (value,) = evaluate([update.value], ctx, memo)
    return _new_value(update.variable, value)


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

    Updates among the fetches are committed together after every value is computed.
    """
    leaves, treedef = jax.tree_util.tree_flatten(
        fetches, is_leaf=lambda v: isinstance(v, (Symbolic, Update))
    )
    scope = graph.active_scope()
    ctx = scope if scope is not None else Context()
    memo = {}
    for p, value in feed_dict.items():
        memo[p] = np.asarray(value, dtype=p.dtype) if isinstance(p, Symbolic) else value
    results, writes = [], []
    for leaf in leaves:
        if isinstance(leaf, Update):
            value = _apply_update(leaf, ctx, memo)
            writes.append((leaf.variable, value))
            results.append(value)
        else:
            results.append(evaluate([leaf], ctx, memo)[0])
    for target, value in writes:
        if scope is not None:
            scope.write(target, value)
        else:
            state.set_value(target, value)
    if scope is None:
        results = [state.to_numpy(r) for r in results]
    return jax.tree_util.tree_unflatten(treedef, results)


def to_sparse_value(value: Any, dtype: str) -> Any:
    """Converts a feed for a sparse placeholder (SciPy sparse, BCOO or dense) to a BCOO array."""
    if isinstance(value, sparse.BCOO):
        return value.astype(dtype)
    if hasattr(value, "tocoo"):
        return sparse.BCOO.from_scipy_sparse(value).astype(dtype)
    return sparse.BCOO.fromdense(jnp.asarray(value, dtype=dtype))
