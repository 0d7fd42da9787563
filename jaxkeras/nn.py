"""Neural-network ops: activations, crossentropies, dropout, bias_add, batch normalization,
padding and resizing (convolution and pooling live in ``conv.py``, CTC in ``ctc.py``).

Each public function validates its static arguments, then calls a pure ``jax.numpy`` body
wrapped by :func:`jaxkeras._engine.graph.op`, so it runs eagerly on arrays, records a node on
symbolic tensors, and replays inside ``K.function``, ``K.gradients`` and a user's ``jax.jit``.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxkeras._engine.graph import Node, OpTensor, Symbolic, dtype_of, op, standardize_dtype
from jaxkeras._engine.graph.infer import broadcast_shapes
from jaxkeras._ops.common import standard_result_type, widened
from jaxkeras._xla.summation import correctly_rounded_moments
from jaxkeras.checks import (
    broadcastable,
    check_axis,
    check_broadcastable,
    check_data_format,
    check_float,
    check_int,
    check_rank,
    check_seed,
    compatible,
    is_int,
)
from jaxkeras.config import epsilon
from jaxkeras.tensors import int_shape, ndim

__all__ = [
    "batch_normalization",
    "bias_add",
    "binary_crossentropy",
    "categorical_crossentropy",
    "dropout",
    "elu",
    "hard_sigmoid",
    "normalize_batch_in_training",
    "relu",
    "resize_images",
    "resize_volumes",
    "sigmoid",
    "softmax",
    "softplus",
    "softsign",
    "sparse_categorical_crossentropy",
    "spatial_2d_padding",
    "spatial_3d_padding",
    "tanh",
    "temporal_padding",
]


def _first_spatial_axis(data_format: str) -> int:
    return 2 if data_format == "channels_first" else 1


# ---------------------------------------------------------------------------------------------
# activations


def _float_array(x: Any) -> jax.Array:
    """``x`` as an array; non-float values become the default float type."""
    if not isinstance(x, jax.Array):  # (asarray costs µs even on an array)
        x = jnp.asarray(x)
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(float)


def _parameter(fn: str, arg: str, value: Any, x: Any) -> Any:
    """An activation's parameter: a number (checked as :func:`check_float` does), or a tensor,
    variable or array broadcast against ``x`` (as TF-Keras takes them: ``K.relu``'s ``alpha``
    may hold one slope per unit).

    Args:
        fn: the function, for messages.
        arg: the argument's name, for messages.
        value: the parameter.
        x: the activation's input, whose shape the parameter must broadcast with.

    Returns:
        A Python float, or the tensor (a list or tuple as a NumPy array).

    Raises:
        TypeError: for a string, a boolean or anything else that is not a number or a tensor
            of numbers.
        ValueError: for a tensor that does not broadcast with ``x``.
    """
    if isinstance(value, (list, tuple)):
        value = np.asarray(value)
    message = f"{fn}: {arg} must be a number or a tensor of numbers, got {value!r}"
    if not isinstance(value, (Node, jax.Array, np.ndarray)):
        try:
            return check_float(fn, arg, value)
        except TypeError:
            raise TypeError(message) from None
    dtype = value._dtype if isinstance(value, Node) else value.dtype
    if not jnp.issubdtype(dtype, jnp.integer) and not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(message)
    check_broadcastable(fn, ("x", arg), x, value)
    return value


def _as_parameter(value: Any, dtype: Any) -> Any:
    """Inside an op body: a parameter (a number or a tensor) as an array of the compute type,
    as TF-Keras converts a tensor parameter to the dtype of ``x``."""
    return jnp.asarray(value).astype(dtype)


@op(name="elu", elementwise=True, jit=())
def _elu(x: Any, alpha: Any) -> Any:
    x = _float_array(x)
    return jax.nn.elu(x, _as_parameter(alpha, x.dtype))


def elu(x: Any, alpha: Any = 1.0) -> Any:
    """Exponential linear unit: ``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``.

    Args:
        x: a tensor or array.
        alpha: the scale of the negative section: a number, or (as in TF-Keras) a tensor,
            variable or array broadcast against ``x`` and cast to its float type.

    Returns:
        A tensor of the broadcast shape of ``x`` and ``alpha``.

    Raises:
        TypeError: when ``alpha`` is neither a number nor a tensor of numbers.
        ValueError: when ``alpha`` does not broadcast with ``x``.
    """
    return _elu(x, _parameter("elu", "alpha", alpha, x))


@op(name="relu", elementwise=True, jit=())
def _relu(x: Any, alpha: Any, max_value: Any, threshold: Any) -> Any:
    # boolean x meets 0, and integer x the float arguments, in the types standard promotion
    # gives them, cast to explicitly (so strict promotion accepts them too); tensor arguments
    # are cast to that float type, as TF-Keras casts them to the dtype of x. alpha is None for
    # no leak, max_value for no saturation.
    x = jnp.asarray(x)
    x = x.astype(standard_result_type(x, 0))
    real = x.astype(standard_result_type(x, 0.0))
    threshold = _as_parameter(threshold, real.dtype)
    out = jnp.where(real > threshold, x, 0)
    if max_value is not None:
        out = jnp.clip(out.astype(real.dtype), 0, _as_parameter(max_value, real.dtype))
    if alpha is not None:
        leak = _as_parameter(alpha, real.dtype) * jnp.maximum(threshold - real, 0)
        out = out.astype(real.dtype) - leak
    return out


def relu(x: Any, alpha: Any = 0.0, max_value: Any = None, threshold: Any = 0.0) -> Any:
    """Rectified linear unit, with optional leak, saturation and threshold (as TF-Keras).

    ``f(x) = max_value`` for ``x >= max_value``, ``x`` for ``threshold < x < max_value`` and
    ``alpha * (x - threshold)`` for ``x <= threshold``. As in TF-Keras, the kept part is clipped
    to ``[0, max_value]`` when ``max_value`` is given, so with a negative ``threshold`` values in
    ``(threshold, 0)`` become 0 in that case (and stay ``x`` without ``max_value``).

    Each of ``alpha``, ``max_value`` and ``threshold`` is a number or, as in TF-Keras and
    Theano, a tensor, variable or array broadcast against ``x`` (per-unit slopes, as
    keras-contrib's SReLU uses) and cast to the float type of the result.

    Args:
        x: a tensor or array.
        alpha: slope of the section below ``threshold``.
        max_value: saturation value, or ``None`` for none.
        threshold: the value below which the leaky section starts.

    Returns:
        A tensor of the dtype of ``x`` (float32 for integers given a float ``max_value`` or
        ``alpha``) and the broadcast shape of ``x`` and the tensor arguments.

    Raises:
        TypeError: when an argument is neither a number nor a tensor of numbers.
        ValueError: when a tensor argument does not broadcast with ``x``.

    Example:
        >>> K.relu(np.array([-2.0, 1.0, 8.0]), alpha=0.5, max_value=6.0)
        Array([-1.,  1.,  6.], dtype=float32)
        >>> K.eval(K.relu(K.variable([[-2.0, 0.5, 3.0]]), alpha=K.variable([[0.1, 0.2, 0.3]]),
        ...               max_value=K.variable([[1.0, 1.0, 1.0]])))
        array([[-0.2,  0.5,  1. ]], dtype=float32)
    """
    alpha = _parameter("relu", "alpha", alpha, x)
    threshold = _parameter("relu", "threshold", threshold, x)
    if max_value is not None:
        max_value = _parameter("relu", "max_value", max_value, x)
    return _relu(x, None if type(alpha) is float and alpha == 0.0 else alpha, max_value, threshold)


@op(elementwise=True, jit=())
def hard_sigmoid(x: Any) -> Any:
    """Piecewise-linear approximation of the sigmoid: ``clip(0.2 * x + 0.5, 0, 1)``.

    It is 0 for ``x < -2.5``, 1 for ``x > 2.5`` and ``0.2 * x + 0.5`` in between.

    Args:
        x: a tensor or array.

    Returns:
        A tensor of the shape of ``x``.
    """
    return jnp.clip(0.2 * _float_array(x) + 0.5, 0.0, 1.0)


@op(elementwise=True)
def sigmoid(x: Any) -> Any:
    """Element-wise logistic sigmoid ``1 / (1 + exp(-x))``.

    Args:
        x: a tensor or array.

    Returns:
        A tensor of the shape of ``x``.
    """
    return jax.nn.sigmoid(_float_array(x))


def _dense_float(x: Any) -> bool:
    """Whether ``x`` is a dense symbolic tensor of a floating dtype and known rank."""
    return (
        isinstance(x, Node)
        and not x._sparse
        and x._shape is not None
        and jnp.issubdtype(x._dtype, jnp.floating)
    )


def _shaped_like_x(x: Any, *_: Any, **__: Any) -> tuple[tuple, str] | None:
    """Shape rule: the shape and dtype of ``x``, a dense floating-point tensor; ``None``
    (run the op) for anything else."""
    return (x._shape, x._dtype) if _dense_float(x) else None


@op(name="softmax", shape_rule=_shaped_like_x, jit=("axis",))
def _softmax(x: Any, axis: int) -> Any:
    return jax.nn.softmax(_float_array(x), axis=axis)


def softmax(x: Any, axis: int = -1) -> Any:
    """Softmax along an axis: ``exp(x) / sum(exp(x), axis)``, computed stably.

    Args:
        x: a tensor or array.
        axis: the axis to normalize over (default the last).

    Returns:
        A tensor of the shape of ``x`` whose entries along ``axis`` sum to 1.
    """
    return _softmax(x, check_axis("softmax", "axis", axis, ndim(x)))


@op(elementwise=True)
def softplus(x: Any) -> Any:
    """Element-wise softplus ``log(1 + exp(x))``, computed without overflow.

    Args:
        x: a tensor or array.

    Returns:
        A tensor of the shape of ``x``.
    """
    return jax.nn.softplus(_float_array(x))


@op(elementwise=True, jit=())
def softsign(x: Any) -> Any:
    """Element-wise softsign ``x / (1 + |x|)``.

    Args:
        x: a tensor or array.

    Returns:
        A tensor of the shape of ``x``.
    """
    x = _float_array(x)
    return x / (1 + jnp.abs(x))


@op(elementwise=True)
def tanh(x: Any) -> Any:
    """Element-wise hyperbolic tangent.

    Args:
        x: a tensor or array.

    Returns:
        A tensor of the shape of ``x``.
    """
    return jnp.tanh(_float_array(x))


# ---------------------------------------------------------------------------------------------
# crossentropies


def _clip_probabilities(p: jax.Array, eps: float) -> jax.Array:
    return jnp.clip(p, eps, 1.0 - eps)


def _activation_args(output: Any, activation: Callable) -> tuple | None:
    """The positional arguments of the op that computed ``output``, when that op is
    ``activation`` (an op made by :func:`~jaxkeras._engine.graph.op`); ``None`` otherwise."""
    if isinstance(output, OpTensor) and output._fn is activation.pure:
        args, _ = jax.tree_util.tree_unflatten(output._treedef, output._leaves)
        return tuple(args)
    return None


def _logits_behind(fn: str, output: Any, from_logits: bool, logits: Any) -> tuple[Any, bool]:
    """TF-Keras's rule for a crossentropy whose ``output`` a sigmoid or softmax computed in
    the graph: the loss is computed from that activation's input (``logits``, or ``None`` when
    ``output`` is not such a value), without clipping; ``from_logits=True`` there warns."""
    if logits is None:
        return output, from_logits
    if from_logits:
        warnings.warn(
            f"{fn}: from_logits=True, but output was computed by an activation, so it holds "
            "probabilities, not logits; the loss uses the activation's input, as TF-Keras does",
            stacklevel=3,
        )
    return logits, True


@op(name="binary_crossentropy", jit=("from_logits", "eps"))
def _binary_crossentropy(target: Any, output: Any, from_logits: bool, eps: float) -> Any:
    output = _float_array(output)
    dtype, output = output.dtype, widened(output)
    target = jnp.asarray(target).astype(output.dtype)
    if from_logits:
        # TF's overflow-free max(z, 0) - z t + log(1 + exp(-|z|)), with |z| and max(z, 0)
        # chosen by z >= 0 as TF does, so that the gradient is sigmoid(z) - t also at z = 0
        positive = output >= 0
        relu = jnp.where(positive, output, 0.0)
        minus_abs = jnp.where(positive, -output, output)
        return (relu - output * target + jnp.log1p(jnp.exp(minus_abs))).astype(dtype)
    p = _clip_probabilities(output, eps)
    # TF-Keras's formula, eps added inside both logarithms: at p = 1 the clip gives the float32
    # next below 1 - eps, so 1 - p + eps is 2.19e-7 (loss 15.33 for t = 0). The barrier keeps
    # XLA's simplifier from folding (1 - p) + eps into (1 + eps) - p, which rounds to 2.38e-7.
    not_p = lax.optimization_barrier(1 - p)
    loss = target * jnp.log(p + eps) + (1 - target) * jnp.log(not_p + eps)
    return (-loss).astype(dtype)


def binary_crossentropy(target: Any, output: Any, from_logits: bool = False) -> Any:
    """Element-wise binary crossentropy between targets and predicted probabilities (or logits).

    As in TF-Keras: probabilities are clipped to ``[epsilon, 1 - epsilon]`` and ``epsilon``
    is added inside both logarithms, so the loss and its gradient stay finite at 0 and 1;
    logits use the overflow-free ``max(z, 0) - z * t + log(1 + exp(-|z|))``. When ``output``
    is a graph tensor computed by ``K.sigmoid``, the loss is computed from the sigmoid's input
    as logits, unclipped (and ``from_logits=True`` then warns), as TF-Keras does for a
    ``Sigmoid`` op; concrete arrays are always taken as they are.

    Args:
        target: targets in ``[0, 1]``, broadcastable with ``output``.
        output: probabilities, or logits when ``from_logits`` is True.
        from_logits: whether ``output`` holds logits.

    Returns:
        A tensor of the broadcast shape of ``target`` and ``output``.

    Raises:
        ValueError: when the shapes of ``target`` and ``output`` do not broadcast together.
    """
    check_broadcastable("binary_crossentropy", ("target", "output"), target, output)
    args = _activation_args(output, sigmoid)
    output, from_logits = _logits_behind(
        "binary_crossentropy", output, bool(from_logits), None if args is None else args[0]
    )
    return _binary_crossentropy(target, output, from_logits, epsilon())


def _crossentropy_shape(
    target: Any, output: Any, from_logits: bool, axis: int, eps: float
) -> tuple[tuple, str] | None:
    """Shape rule: ``target`` and ``output`` broadcast, without ``axis``, in ``output``'s
    dtype, for dense tensors of one rank; ``None`` (run the op) otherwise."""
    if not _dense_float(output) or not isinstance(target, Node) or target._sparse:
        return None
    if target._shape is None or len(target._shape) != len(output._shape):
        return None
    shape = list(broadcast_shapes(target._shape, output._shape))
    del shape[axis]
    return tuple(shape), output._dtype


@op(
    name="categorical_crossentropy",
    shape_rule=_crossentropy_shape,
    jit=("from_logits", "axis", "eps"),
)
def _categorical_crossentropy(
    target: Any, output: Any, from_logits: bool, axis: int, eps: float
) -> Any:
    output = _float_array(output)
    dtype, output = output.dtype, widened(output)
    target = jnp.asarray(target).astype(output.dtype)
    if from_logits:
        log_p = jax.nn.log_softmax(output, axis=axis)
    else:
        p = output / jnp.sum(output, axis=axis, keepdims=True)
        log_p = jnp.log(_clip_probabilities(p, eps))
    return (-jnp.sum(target * log_p, axis=axis)).astype(dtype)


def categorical_crossentropy(
    target: Any, output: Any, from_logits: bool = False, axis: int = -1
) -> Any:
    """Categorical crossentropy between one-hot (or soft) targets and predictions.

    Probabilities are first rescaled to sum to 1 along ``axis``, then clipped to
    ``[epsilon, 1 - epsilon]``, as TF-Keras does; logits go through a stable log-softmax. When
    ``output`` is a graph tensor computed by ``K.softmax`` over the last axis and ``axis`` is
    that axis, the loss is computed from the softmax's input as logits, unclipped (and
    ``from_logits=True`` then warns), as TF-Keras does for a ``Softmax`` op; concrete arrays
    are always taken as they are.

    Args:
        target: a tensor of the shape of ``output``.
        output: probabilities, or logits when ``from_logits`` is True.
        from_logits: whether ``output`` holds logits.
        axis: the class axis of ``output`` (``-1`` channels last, ``1`` channels first).

    Returns:
        A tensor of the shape of ``output`` without ``axis``.

    Raises:
        ValueError: if ``axis`` is out of range or the shapes of ``target`` and ``output``
            differ.
    """
    fn = "categorical_crossentropy"
    axis = check_axis(fn, "axis", axis, ndim(output))
    if not compatible(int_shape(target), int_shape(output)):
        raise ValueError(
            f"{fn}: target of shape {int_shape(target)} and output of shape "
            f"{int_shape(output)} must have the same shape"
        )
    output, from_logits = _logits_behind(
        fn, output, bool(from_logits), _softmax_logits(output, axis)
    )
    return _categorical_crossentropy(target, output, from_logits, axis, epsilon())


def _softmax_logits(output: Any, axis: int) -> Any:
    """The input of the ``K.softmax`` over the last axis, ``axis``, that computed ``output``;
    ``None`` when no such softmax did."""
    args = _activation_args(output, _softmax)
    if args is None or args[1] != axis or axis != len(output._shape) - 1:
        return None
    return args[0]


def _labels_fit(target_shape: tuple, positions: tuple) -> bool:
    """Whether a target of ``target_shape`` can hold one label per entry of ``positions``
    (TF flattens the target; sizes are compared where both are known)."""
    if None in target_shape or None in positions:
        return True
    return math.prod(target_shape) == math.prod(positions)


def _sparse_crossentropy_rule(
    target: Any, output: Any, from_logits: bool, axis: int, eps: float
) -> tuple[tuple, str]:
    """The output's shape without the class axis, as TF-Keras infers it: the target is
    flattened, so stand-in sizes for its unknown dimensions never tell its label count."""
    shape = int_shape(output)
    axis %= len(shape)
    dtype = dtype_of(output)
    float_dtype = dtype if jnp.issubdtype(dtype, jnp.floating) else standardize_dtype(float)
    return shape[:axis] + shape[axis + 1 :], float_dtype


@op(
    name="sparse_categorical_crossentropy",
    shape_rule=_sparse_crossentropy_rule,
    jit=("from_logits", "axis", "eps"),
)
def _sparse_categorical_crossentropy(
    target: Any, output: Any, from_logits: bool, axis: int, eps: float
) -> Any:
    output = jnp.moveaxis(_float_array(output), axis, -1)
    dtype, output = output.dtype, widened(output)
    labels = jnp.asarray(target)
    if not _labels_fit(labels.shape, output.shape[:-1]):
        raise ValueError(
            f"sparse_categorical_crossentropy: target of shape {labels.shape} does not hold one "
            f"label per position of output {output.shape[:-1]} (classes on axis {axis})"
        )
    logits = output if from_logits else jnp.log(_clip_probabilities(output, eps))
    log_p = jax.nn.log_softmax(logits, axis=-1)
    labels = labels.reshape(output.shape[:-1]).astype(jnp.int32)[..., None]
    return (-jnp.take_along_axis(log_p, labels, axis=-1)[..., 0]).astype(dtype)


def sparse_categorical_crossentropy(
    target: Any, output: Any, from_logits: bool = False, axis: int = -1
) -> Any:
    """Categorical crossentropy with integer class targets.

    Probabilities are clipped to ``[epsilon, 1 - epsilon]`` and renormalized by a log-softmax of
    their logarithm, as TF-Keras does; logits go through a stable log-softmax. A ``K.softmax``
    output in the graph is taken from its logits, as in :func:`categorical_crossentropy`. As in
    TF-Keras,
    the target may have any shape holding one label per position of ``output`` without
    ``axis`` (it is flattened): ``(batch, 1)`` labels, or ``(batch, 1, h, w)`` targets of
    channels-first outputs ``(batch, classes, h, w)``. A label outside ``0..classes-1`` gives
    NaN.

    Args:
        target: class indices (ints, or floats holding whole numbers), one per position.
        output: probabilities, or logits when ``from_logits`` is True.
        from_logits: whether ``output`` holds logits.
        axis: the class axis of ``output``.

    Returns:
        A tensor of the shape of ``output`` without ``axis``.

    Raises:
        ValueError: if ``axis`` is out of range or ``target`` does not hold one label per
            position (checked when the sizes are known).
    """
    fn = "sparse_categorical_crossentropy"
    out_shape = int_shape(output)
    axis = check_axis(fn, "axis", axis, len(out_shape))
    positions = out_shape[:axis] + out_shape[axis + 1 :]
    target_shape = int_shape(target)
    if not _labels_fit(target_shape, positions):
        raise ValueError(
            f"{fn}: target of shape {target_shape} does not hold one label per position of "
            f"output of shape {out_shape} with class axis {axis}: expected {positions} "
            "labels"
        )
    output, from_logits = _logits_behind(
        fn, output, bool(from_logits), _softmax_logits(output, axis)
    )
    return _sparse_categorical_crossentropy(target, output, from_logits, axis, epsilon())


# ---------------------------------------------------------------------------------------------
# dropout


def _noise_dims(x_shape: tuple, noise_shape: Any) -> tuple:
    """The concrete noise shape: ``None`` entries take the size of ``x`` in that dimension."""
    if noise_shape is None:
        return x_shape
    dims = tuple(s if d is None else int(d) for d, s in zip(noise_shape, x_shape))
    if len(noise_shape) != len(x_shape) or not broadcastable(dims, x_shape):
        raise ValueError(
            f"dropout: noise_shape {dims} does not broadcast to the shape {x_shape} of x"
        )
    return dims


@op(name="dropout", random=True)
def _dropout(
    x: Any, level: float, noise_shape: Any = None, seed: int | None = None, key: Any = None
) -> Any:
    x = _float_array(x)
    if not isinstance(level, float):  # a tensor (TF's rate may be one): its keep in x's type
        level = jnp.asarray(level).astype(x.dtype)
    keep = jax.random.bernoulli(key, 1.0 - level, _noise_dims(x.shape, noise_shape))
    return jnp.where(keep, x / (1.0 - level), 0)


def dropout(x: Any, level: float, noise_shape: Any = None, seed: int | None = None) -> Any:
    """Zeroes entries of ``x`` at random with probability ``level``, scaling the rest up.

    Kept entries are divided by ``1 - level``, so the expected value is unchanged.

    A random op: every call of a compiled function draws a fresh mask; within one call the mask
    is the same for every use of the result, also in its gradients. With a ``seed``, the
    sequence of masks is reproducible across runs. Dropout always applies; pick it for the
    training phase with ``K.in_train_phase``.

    Args:
        x: a tensor or array.
        level: the drop probability, in ``[0, 1)``: a number, or a float scalar tensor (as
            TF's rate; a value out of that range is not checked then).
        noise_shape: the shape of the keep/drop mask, broadcast to the shape of ``x`` (each
            entry 1 or the size of ``x`` there; ``None`` entries mean the size of ``x``);
            entries may be symbolic scalars such as ``K.shape(x)[0]``. Default the shape of
            ``x``.
        seed: an int making the masks reproducible.

    Returns:
        A tensor of the shape of ``x``.

    Raises:
        ValueError: if ``level`` is not in ``[0, 1)`` or ``noise_shape`` does not fit ``x``.
    """
    if isinstance(level, (Node, jax.Array, np.ndarray)) and not isinstance(level, numbers.Number):
        if ndim(level) != 0 or not jnp.issubdtype(dtype_of(level), jnp.floating):
            raise ValueError(
                f"dropout: level must be a float or a float scalar tensor, got {level!r}"
            )
    else:
        level = check_float("dropout", "level", level)
        if not 0.0 <= level < 1.0:
            raise ValueError(f"dropout: level must be in [0, 1), got {level!r}")
    seed = check_seed("dropout", seed)
    if noise_shape is not None:
        size = len(noise_shape) if isinstance(noise_shape, (list, tuple)) else None
        if size is None and isinstance(noise_shape, Symbolic):
            size = (int_shape(noise_shape) or (None,))[0]
        if size is not None and size != ndim(x):
            raise ValueError(
                f"dropout: noise_shape {noise_shape!r} must have one entry per dimension of x "
                f"(shape {int_shape(x)})"
            )
    return _dropout(x, level, noise_shape, seed)


# ---------------------------------------------------------------------------------------------
# bias


def _bias_add_shape(x: Any, bias: Any, channel_axis: int) -> tuple[tuple, str] | None:
    """Shape rule: ``x``'s shape and dtype for a 1-D bias of its dtype and of the size of its
    (known) channel axis; ``None`` (run the op) otherwise."""
    if not _dense_float(x) or not isinstance(bias, (Node, np.ndarray)):
        return None
    bias_shape = bias._shape if isinstance(bias, Node) else bias.shape
    bias_dtype = bias._dtype if isinstance(bias, Node) else bias.dtype.name
    if bias_dtype != x._dtype or bias_shape is None or len(bias_shape) != 1:
        return None
    channels = x._shape[channel_axis]
    return (x._shape, x._dtype) if channels is not None and channels == bias_shape[0] else None


@op(name="bias_add", shape_rule=_bias_add_shape, jit=("channel_axis",))
def _bias_add(x: Any, bias: Any, channel_axis: int) -> Any:
    x, bias = jnp.asarray(x), jnp.asarray(bias)
    if bias.ndim == 1:
        shape = [1] * x.ndim
        shape[channel_axis] = bias.shape[0]
        return x + bias.reshape(shape)
    if channel_axis == 1:
        # (spatial..., channels) is *reshaped* to (channels, spatial...), as TF-Keras does.
        bias = bias.reshape((bias.shape[-1], *bias.shape[:-1]))
    return x + bias[None]


def bias_add(x: Any, bias: Any, data_format: str | None = None) -> Any:
    """Adds a bias to a tensor of rank 2 or more.

    A 1-D bias is added along the channel axis (the last for ``'channels_last'``, axis 1 for
    ``'channels_first'``). A bias of rank ``ndim(x) - 1`` has shape
    ``(spatial..., channels)``; for ``'channels_last'`` it is added to every sample, for
    ``'channels_first'`` it is reshaped (not transposed) to ``(channels, spatial...)`` first,
    as TF-Keras does, so weights trained there keep their meaning.

    Args:
        x: a tensor of rank >= 2.
        bias: a 1-D tensor of length ``channels``, or of rank ``ndim(x) - 1``.
        data_format: ``'channels_last'`` or ``'channels_first'``; default
            :func:`image_data_format`.

    Returns:
        A tensor of the shape of ``x``.

    Raises:
        ValueError: for an invalid ``data_format``, or a bias whose rank or shape does not fit
            ``x`` (naming both shapes).
    """
    fn = "bias_add"
    data_format = check_data_format(fn, data_format)
    x_shape, b_shape = int_shape(x), int_shape(bias)
    if len(x_shape) < 2:
        raise ValueError(f"{fn}: x must have rank 2 or more, got shape {x_shape}")
    if len(b_shape) not in (1, len(x_shape) - 1):
        raise ValueError(
            f"{fn}: bias of shape {b_shape} must be 1-D or of rank {len(x_shape) - 1} "
            f"for x of shape {x_shape}"
        )
    channel_axis = 1 if data_format == "channels_first" else len(x_shape) - 1
    if len(b_shape) == 1:
        expected = (x_shape[channel_axis],)
    elif channel_axis == 1:
        expected = (*x_shape[2:], x_shape[1])
    else:
        expected = x_shape[1:]
    if not compatible(b_shape, expected):
        raise ValueError(
            f"{fn}: bias of shape {b_shape} does not fit x of shape {x_shape} "
            f"({data_format}): expected a bias of shape {expected}"
        )
    return _bias_add(x, bias, channel_axis)


# ---------------------------------------------------------------------------------------------
# batch normalization


def _normalize(x: jax.Array, mean: Any, var: Any, beta: Any, gamma: Any, eps: float) -> jax.Array:
    """``(x - mean) / sqrt(var + eps) * gamma + beta`` for parameters broadcastable to ``x``."""
    scale = lax.rsqrt(var + eps)
    if gamma is not None:
        scale = scale * gamma
    out = (x - mean) * scale
    return out if beta is None else out + beta


@op(name="batch_normalization", jit=("axis", "eps"))
def _batch_normalization(
    x: Any, mean: Any, var: Any, beta: Any, gamma: Any, axis: int, eps: float
) -> Any:
    x = _float_array(x)

    def along_axis(p: Any) -> Any:
        if p is None:
            return None
        p = jnp.asarray(p)
        if p.ndim != 1 or x.ndim == 1:
            return p
        shape = [1] * x.ndim
        shape[axis] = p.shape[0]
        return p.reshape(shape)

    return _normalize(x, *map(along_axis, (mean, var, beta, gamma)), eps)


def _check_parameter(p: Any, name: str, x_shape: tuple, axis: int, fn: str) -> None:
    """Raises unless ``p`` is a scalar, 1-D along ``axis``, or full-rank broadcastable."""
    shape = int_shape(p)
    if len(shape) == 0:
        return
    if len(shape) == 1 and len(x_shape) > 1:
        ok = broadcastable(shape, (x_shape[axis],))
        want = f"a 1-D tensor of length {x_shape[axis]}"
    else:
        ok = broadcastable(shape, x_shape)
        want = f"a tensor broadcastable to {x_shape}"
    if not ok:
        raise ValueError(
            f"{fn}: {name} of shape {shape} does not fit x of shape {x_shape} with axis={axis}: "
            f"expected {want}"
        )


def batch_normalization(
    x: Any, mean: Any, var: Any, beta: Any, gamma: Any, axis: int = -1, epsilon: float = 1e-3
) -> Any:
    """Normalizes ``x`` with given statistics: ``(x - mean) / sqrt(var + epsilon) * gamma + beta``.

    Each parameter may be 1-D (it then runs along ``axis``), have the rank of ``x`` (it is
    broadcast), or be a scalar. As in TF-Keras (``tf.nn.batch_normalization``), ``epsilon`` is
    added to the variance inside the square root.

    Args:
        x: a tensor.
        mean: the mean.
        var: the variance.
        beta: the offset, or ``None`` for 0.
        gamma: the scale, or ``None`` for 1.
        axis: the feature axis that 1-D parameters run along.
        epsilon: a small non-negative number added to the variance.

    Returns:
        A tensor of the shape of ``x``.

    Raises:
        ValueError: for an out-of-range ``axis``, a negative ``epsilon`` or a parameter whose
            shape does not fit.
    """
    fn = "batch_normalization"
    x_shape = int_shape(x)
    axis = check_axis(fn, "axis", axis, len(x_shape))
    eps = check_float(fn, "epsilon", epsilon, minimum=0)
    if mean is None or var is None:
        raise ValueError(f"{fn}: mean and var are required, got mean={mean!r}, var={var!r}")
    for name, p in (("mean", mean), ("var", var), ("beta", beta), ("gamma", gamma)):
        if p is not None:
            _check_parameter(p, name, x_shape, axis, fn)
    return _batch_normalization(x, mean, var, beta, gamma, axis, eps)


@op(name="normalize_batch_in_training", jit=("axes", "eps"))
def _normalize_batch_in_training(x: Any, gamma: Any, beta: Any, axes: tuple, eps: float) -> Any:
    x = _float_array(x)
    mean, var = correctly_rounded_moments(x, axis=axes, keepdims=True)

    def kept_shape(p: Any) -> Any:
        return None if p is None else jnp.reshape(p, mean.shape)

    normed = _normalize(x, mean, var, kept_shape(beta), kept_shape(gamma), eps)
    return normed, jnp.squeeze(mean, axis=axes), jnp.squeeze(var, axis=axes)


def normalize_batch_in_training(
    x: Any, gamma: Any, beta: Any, reduction_axes: Sequence[int], epsilon: float = 1e-3
) -> tuple[Any, Any, Any]:
    """Computes the mean and (biased) variance over ``reduction_axes`` and normalizes ``x``.

    Args:
        x: a tensor.
        gamma: the scale, or ``None`` for 1; it is reshaped to the shape of ``x`` with the
            reduction axes set to 1, so a 1-D tensor over the kept dimensions (e.g. the
            channels) or a tensor of that broadcast shape fits.
        beta: the offset, or ``None`` for 0; shaped like ``gamma``.
        reduction_axes: the axes to compute the statistics over (any, e.g. ``[0, 1, 2]`` for
            channels-last images or ``[0, 2, 3]`` for channels-first ones).
        epsilon: a small non-negative number added to the variance.

    Returns:
        ``(normalized, mean, variance)``: the normalized tensor (shape of ``x``), and the mean
        and biased variance with the reduction axes removed.

    Raises:
        ValueError: for an out-of-range or repeated axis, a negative ``epsilon``, or a
            ``gamma``/``beta`` whose size does not fit.
    """
    fn = "normalize_batch_in_training"
    x_shape = int_shape(x)
    if isinstance(reduction_axes, numbers.Integral):
        reduction_axes = (reduction_axes,)
    axes = tuple(check_axis(fn, "reduction_axes", a, len(x_shape)) for a in reduction_axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{fn}: reduction_axes {reduction_axes!r} repeats an axis")
    eps = check_float(fn, "epsilon", epsilon, minimum=0)
    kept = [d for i, d in enumerate(x_shape) if i not in axes]
    for name, p in (("gamma", gamma), ("beta", beta)):
        if p is None or None in kept or None in int_shape(p):
            continue
        if math.prod(int_shape(p)) != math.prod(kept):  # (math.prod: NumPy's costs µs)
            raise ValueError(
                f"{fn}: {name} of shape {int_shape(p)} does not fit x of shape {x_shape} "
                f"reduced over {axes}: it needs {math.prod(kept)} elements (e.g. shape "
                f"{tuple(kept)})"
            )
    return _normalize_batch_in_training(x, gamma, beta, tuple(sorted(axes)), eps)


# ---------------------------------------------------------------------------------------------
# padding


def _is_pad_pair(value: Any) -> bool:
    """Whether ``value`` is a ``(before, after)`` pair of non-negative ints."""
    return (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(is_int(v) and v >= 0 for v in value)
    )


@op(name="pad", jit=("widths",))
def _pad(x: Any, widths: tuple) -> Any:
    return jnp.pad(jnp.asarray(x), widths)


def _pad_axes(x: Any, pairs: Sequence[tuple[int, int]], first_axis: int) -> Any:
    """Zero-pads consecutive axes of ``x`` from ``first_axis`` on by ``pairs``."""
    widths = [(0, 0)] * ndim(x)
    widths[first_axis : first_axis + len(pairs)] = pairs
    return _pad(x, tuple(widths))


def _spatial_padding(x: Any, padding: Any, data_format: Any, rank: int, fn: str) -> Any:
    data_format = check_data_format(fn, data_format)
    n = rank - 2
    if not (
        isinstance(padding, (list, tuple))
        and len(padding) == n
        and all(_is_pad_pair(p) for p in padding)
    ):
        raise ValueError(
            f"{fn}: padding must be {n} pairs of non-negative ints, one (before, after) per "
            f"spatial axis, e.g. {((1, 1),) * n}; got {padding!r}"
        )
    check_rank(fn, "x", x, rank)
    pairs = [(int(a), int(b)) for a, b in padding]
    return _pad_axes(x, pairs, _first_spatial_axis(data_format))


def temporal_padding(x: Any, padding: tuple[int, int] = (1, 1)) -> Any:
    """Zero-pads the middle (time) axis of a 3-D tensor.

    Args:
        x: a tensor of shape ``(batch, steps, features)``.
        padding: ``(before, after)``: how many zeros to add at the start and end of axis 1.

    Returns:
        A tensor of shape ``(batch, steps + before + after, features)``.

    Raises:
        ValueError: if ``padding`` is not a pair of non-negative ints or ``x`` is not 3-D.
    """
    if not _is_pad_pair(padding):
        raise ValueError(
            "temporal_padding: padding must be a pair of non-negative ints (before, after), "
            f"got {padding!r}"
        )
    check_rank("temporal_padding", "x", x, 3)
    return _pad_axes(x, [(int(padding[0]), int(padding[1]))], 1)


def spatial_2d_padding(
    x: Any, padding: Any = ((1, 1), (1, 1)), data_format: str | None = None
) -> Any:
    """Zero-pads the two spatial axes of a 4-D tensor.

    Args:
        x: a tensor of shape ``(batch, rows, cols, channels)`` (channels last) or
            ``(batch, channels, rows, cols)`` (channels first).
        padding: ``((top, bottom), (left, right))``, non-negative ints.
        data_format: ``'channels_last'`` or ``'channels_first'``; default
            :func:`image_data_format`.

    Returns:
        The padded 4-D tensor.

    Raises:
        ValueError: for an invalid ``padding`` or ``data_format``, or a non-4-D ``x``.
    """
    return _spatial_padding(x, padding, data_format, 4, "spatial_2d_padding")


def spatial_3d_padding(
    x: Any, padding: Any = ((1, 1), (1, 1), (1, 1)), data_format: str | None = None
) -> Any:
    """Zero-pads the three spatial axes (depth, height, width) of a 5-D tensor.

    Args:
        x: a tensor of shape ``(batch, depth, height, width, channels)`` (channels last) or
            ``(batch, channels, depth, height, width)`` (channels first).
        padding: three ``(before, after)`` pairs of non-negative ints, one per spatial axis.
        data_format: ``'channels_last'`` or ``'channels_first'``; default
            :func:`image_data_format`.

    Returns:
        The padded 5-D tensor.

    Raises:
        ValueError: for an invalid ``padding`` or ``data_format``, or a non-5-D ``x``.
    """
    return _spatial_padding(x, padding, data_format, 5, "spatial_3d_padding")


# ---------------------------------------------------------------------------------------------
# resizing

# interpolation name -> jax.image.resize method ('nearest' repeats elements instead)
_INTERPOLATIONS = {
    "nearest": "nearest",
    "bilinear": "linear",
    "bicubic": "cubic",
    "lanczos3": "lanczos3",
    "lanczos5": "lanczos5",
}


@op(name="resize", jit=("factors", "first_axis", "interpolation"))
def _resize(x: Any, factors: tuple, first_axis: int, interpolation: str) -> Any:
    x = jnp.asarray(x)
    if interpolation == "nearest":
        for i, factor in enumerate(factors):
            x = jnp.repeat(x, factor, axis=first_axis + i)
        return x
    shape = list(x.shape)
    for i, factor in enumerate(factors):
        shape[first_axis + i] *= factor
    method = _INTERPOLATIONS[interpolation]
    return jax.image.resize(_float_array(x), tuple(shape), method, antialias=False)


def resize_images(
    x: Any,
    height_factor: int,
    width_factor: int,
    data_format: str | None = None,
    interpolation: str = "nearest",
) -> Any:
    """Upsamples the images of a 4-D tensor by integer factors.

    The result matches ``tf.image.resize`` to ``(rows * height_factor, cols * width_factor)``:
    ``'nearest'`` repeats each pixel; ``'bilinear'``, ``'bicubic'`` (Keys, a = -0.5),
    ``'lanczos3'`` and ``'lanczos5'`` interpolate with half-pixel centers, and near the border
    only the taps inside the image are used, with their weights renormalized to sum to 1.

    Args:
        x: a tensor of shape ``(batch, rows, cols, channels)`` (channels last) or
            ``(batch, channels, rows, cols)`` (channels first).
        height_factor: a positive int.
        width_factor: a positive int.
        data_format: ``'channels_last'`` or ``'channels_first'``; default
            :func:`image_data_format`.
        interpolation: ``'nearest'``, ``'bilinear'``, ``'bicubic'``, ``'lanczos3'`` or
            ``'lanczos5'``.

    Returns:
        The resized 4-D tensor (float for interpolations other than ``'nearest'``).

    Raises:
        ValueError: for an invalid ``data_format``, ``interpolation`` or factor, or a non-4-D
            ``x``.
    """
    fn = "resize_images"
    data_format = check_data_format(fn, data_format)
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(
            f"{fn}: interpolation must be one of {sorted(_INTERPOLATIONS)}, got {interpolation!r}"
        )
    factors = (
        check_int(fn, "height_factor", height_factor, minimum=1),
        check_int(fn, "width_factor", width_factor, minimum=1),
    )
    check_rank(fn, "x", x, 4)
    return _resize(x, factors, _first_spatial_axis(data_format), interpolation)


def resize_volumes(
    x: Any, depth_factor: int, height_factor: int, width_factor: int, data_format: str | None = None
) -> Any:
    """Upsamples the volumes of a 5-D tensor by repeating elements (nearest neighbour).

    Args:
        x: a tensor of shape ``(batch, depth, height, width, channels)`` (channels last) or
            ``(batch, channels, depth, height, width)`` (channels first).
        depth_factor: a positive int.
        height_factor: a positive int.
        width_factor: a positive int.
        data_format: ``'channels_last'`` or ``'channels_first'``; default
            :func:`image_data_format`.

    Returns:
        The resized 5-D tensor.

    Raises:
        ValueError: for an invalid ``data_format`` or factor, or a non-5-D ``x``.
    """
    fn = "resize_volumes"
    data_format = check_data_format(fn, data_format)
    factors = tuple(
        check_int(fn, arg, f, minimum=1)
        for f, arg in (
            (depth_factor, "depth_factor"),
            (height_factor, "height_factor"),
            (width_factor, "width_factor"),
        )
    )
    check_rank(fn, "x", x, 5)
    return _resize(x, factors, _first_spatial_axis(data_format), "nearest")
