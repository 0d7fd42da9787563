"""keras-contrib on jaxkeras: its backend functions, and the CRF's Viterbi decoding.

keras-contrib (keras-team's, the home of ``CRF``, ``SubPixelUpscaling``, ``GroupNormalization``,
``CosineConvolution2D`` and DSSIM) keeps a backend module of its own, ``keras_contrib.backend``,
which star-imports a branch per backend: Theano, TensorFlow and CNTK only. When Keras loads
jaxkeras, :func:`jaxkeras.keras2.install` arranges that, right after ``keras_contrib.backend``
is imported, :func:`complete_backend` gives it what its TensorFlow branch defines, with
TensorFlow's semantics: :func:`conv2d`, :func:`extract_image_patches`, :func:`depth_to_space`
and :func:`moments`. (That branch's star import also leaks the modules ``tf`` and ``ctc`` and
``py_all``, the builtin ``all``; keras-contrib reads none of them through
``keras_contrib.backend``.)

The CRF (``keras_contrib.layers.CRF``) decodes its best path with a helper that gathers one
entry per row, written for Theano and TensorFlow only: on any other backend it raises
``NotImplementedError``. Right after ``keras_contrib.layers.crf`` is imported,
:func:`decode_crf` gives the layer :func:`viterbi_decoding`, which computes the same path with
the layer's own energies and recursion and a backtracking ``lax.scan``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
from jax import lax

from jaxkeras import config
from jaxkeras._engine.graph import op
from jaxkeras.conv import conv2d as _conv2d
from jaxkeras.function import stop_gradient
from jaxkeras.ops import cast, dot, mean, one_hot, permute_dimensions, square
from jaxkeras.tensors import dtype, ndim

__all__ = ["conv2d", "depth_to_space", "extract_image_patches", "moments"]

_FORMATS = ("channels_first", "channels_last")


def _check_format(function: str, data_format: Any) -> str:
    if not isinstance(data_format, str) or data_format.lower() not in _FORMATS:
        raise ValueError(
            f"{function}: data_format must be 'channels_first' or 'channels_last', "
            f"got {data_format!r}"
        )
    return data_format.lower()


def _check_pair(function: str, argument: str, value: Any) -> tuple[int, int]:
    if (
        not isinstance(value, Sequence)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        raise ValueError(f"{function}: {argument} must be two positive ints, got {value!r}")
    return int(value[0]), int(value[1])


def conv2d(
    x: Any,
    kernel: Any,
    strides: Sequence[int] = (1, 1),
    padding: str = "valid",
    data_format: str = "channels_first",
    image_shape: Any = None,
    filter_shape: Any = None,
) -> Any:
    """2D convolution, as keras-contrib's TensorFlow branch defines it: ``K.conv2d``.

    Args:
        x: input, ``(batch, rows, cols, channels)`` or ``(batch, channels, rows, cols)``.
        kernel: ``(kh, kw, in_channels, out_channels)``.
        strides: a 2-tuple.
        padding: ``'valid'`` or ``'same'``.
        data_format: ``'channels_first'`` (keras-contrib's default here) or
            ``'channels_last'``.
        image_shape: ignored (Theano's hint).
        filter_shape: ignored (Theano's hint).

    Returns:
        ``x`` convolved with ``kernel``.
    """
    del image_shape, filter_shape
    return _conv2d(x, kernel, strides, padding, data_format)


@op(name="extract_image_patches", jit=("ksizes", "strides", "padding"))
def _patches(x: Any, ksizes: tuple[int, int], strides: tuple[int, int], padding: str) -> Any:
    # x is (batch, rows, cols, channels); out[b, i, j, ki, kj, c] is the padded
    # x[b, i * strides[0] + ki, j * strides[1] + kj, c]. Strided slices: exact for every dtype
    # (lax.conv_general_dilated_patches multiplies by a one-hot kernel, floats only).
    pads = lax.padtype_to_pads(x.shape[1:3], ksizes, strides, padding.upper())
    x = jnp.pad(x, ((0, 0), *pads, (0, 0)))
    rows = (x.shape[1] - ksizes[0]) // strides[0] + 1
    cols = (x.shape[2] - ksizes[1]) // strides[1] + 1
    last_row = (rows - 1) * strides[0] + 1
    last_col = (cols - 1) * strides[1] + 1
    taps = [
        jnp.stack(
            [
                x[:, ki : ki + last_row : strides[0], kj : kj + last_col : strides[1], :]
                for kj in range(ksizes[1])
            ],
            axis=3,
        )
        for ki in range(ksizes[0])
    ]
    return jnp.stack(taps, axis=3)


def extract_image_patches(
    x: Any,
    ksizes: Sequence[int],
    ssizes: Sequence[int],
    padding: str = "same",
    data_format: str = "channels_last",
) -> Any:
    """The ``ksizes`` patches of an image at every ``ssizes`` step, as TensorFlow extracts them.

    ``'same'`` padding is TensorFlow's: ``ceil(size / stride)`` patches per axis, zeros added
    around the image with the smaller half before.

    Args:
        x: a rank-4 image batch, ``(batch, rows, cols, channels)`` or ``(batch, channels,
            rows, cols)``.
        ksizes: the patch size, two ints.
        ssizes: the strides, two ints.
        padding: ``'same'`` or ``'valid'``.
        data_format: ``'channels_last'`` or ``'channels_first'``.

    Returns:
        ``(batch, patch_rows, patch_cols, ksizes[0], ksizes[1], channels)`` for
        ``channels_last``; ``(batch, patch_rows, patch_cols, channels, ksizes[0],
        ksizes[1])`` for ``channels_first`` (keras-contrib's layouts).

    Raises:
        ValueError: for a bad ``ksizes``, ``ssizes``, ``padding`` or ``data_format``, or an
            input that is not rank 4.

    Example:
        >>> from jaxkeras import _keras_contrib as KC
        >>> KC.extract_image_patches(np.ones((1, 4, 4, 3)), (2, 2), (2, 2)).shape
        (1, 2, 2, 2, 2, 3)
    """
    name = "extract_image_patches"
    ksizes = _check_pair(name, "ksizes", ksizes)
    strides = _check_pair(name, "ssizes", ssizes)
    if padding not in ("same", "valid"):
        raise ValueError(f"{name}: padding must be 'same' or 'valid', got {padding!r}")
    data_format = _check_format(name, data_format)
    if ndim(x) != 4:
        raise ValueError(f"{name}: x must be a rank-4 image batch, got rank {ndim(x)}")
    if data_format == "channels_first":
        x = permute_dimensions(x, (0, 2, 3, 1))
    patches = _patches(x, ksizes=ksizes, strides=strides, padding=padding)
    if data_format == "channels_first":
        patches = permute_dimensions(patches, (0, 1, 2, 5, 3, 4))
    return patches


@op(name="depth_to_space", jit=("scale", "channels_first"))
def _depth_to_space(x: Any, scale: int, channels_first: bool) -> Any:
    if channels_first:
        batch, depth, rows, cols = x.shape
        x = jnp.reshape(x, (batch, scale, scale, depth // scale**2, rows, cols))
        x = jnp.transpose(x, (0, 3, 4, 1, 5, 2))
        return jnp.reshape(x, (batch, depth // scale**2, rows * scale, cols * scale))
    batch, rows, cols, depth = x.shape
    x = jnp.reshape(x, (batch, rows, cols, scale, scale, depth // scale**2))
    x = jnp.transpose(x, (0, 1, 3, 2, 4, 5))
    return jnp.reshape(x, (batch, rows * scale, cols * scale, depth // scale**2))


def depth_to_space(input: Any, scale: int, data_format: str | None = None) -> Any:
    """Moves blocks of channels into ``scale x scale`` spatial blocks, as TensorFlow's
    ``depth_to_space`` (the sub-pixel shuffle).

    For ``channels_last``, output ``[b, r * scale + i, c * scale + j, k]`` is input
    ``[b, r, c, (i * scale + j) * channels + k]``, ``channels`` being the output's; for
    ``channels_first`` the same on the transposed layout. As keras-contrib's TensorFlow branch
    does, a float64 input is computed in float32, and the result is cast to float64 when
    floatx is float64.

    Args:
        input: a rank-4 tensor whose channels are a multiple of ``scale ** 2``.
        scale: the block size, an int ``>= 2``.
        data_format: ``'channels_first'`` or ``'channels_last'``; default from the config.

    Returns:
        A tensor with ``scale`` times the rows and columns and ``scale ** 2`` times fewer
        channels.

    Raises:
        ValueError: for a bad ``scale`` or ``data_format``, a rank other than 4, or channels
            that ``scale ** 2`` does not divide.
    """
    name = "depth_to_space"
    if not isinstance(scale, int) or isinstance(scale, bool) or scale < 1:
        raise ValueError(f"{name}: scale must be a positive int, got {scale!r}")
    data_format = _check_format(
        name, config.image_data_format() if data_format is None else data_format
    )
    if ndim(input) != 4:
        raise ValueError(f"{name}: input must be rank 4, got rank {ndim(input)}")
    channels_first = data_format == "channels_first"
    depth = input.shape[1 if channels_first else 3]
    if depth is not None and depth % scale**2:
        raise ValueError(
            f"{name}: the {depth} channels of the input are not a multiple of "
            f"scale ** 2 = {scale**2}"
        )
    if dtype(input) == "float64":
        input = cast(input, "float32")
    out = _depth_to_space(input, scale=scale, channels_first=channels_first)
    return cast(out, "float64") if config.floatx() == "float64" else out


@op(name="squeeze_axes", jit=("axes",))
def _squeeze_axes(x: Any, axes: tuple[int, ...]) -> Any:
    return jnp.squeeze(x, axes)


def moments(
    x: Any, axes: Sequence[int], shift: Any = None, keep_dims: bool = False
) -> tuple[Any, Any]:
    """Mean and variance over ``axes``, as TensorFlow's ``tf.nn.moments`` computes them.

    The variance is the mean of the squared deviations from the mean (the mean seen as a
    constant by gradients); a float16 input is computed in float32 and the results cast back.

    Args:
        x: a tensor.
        axes: the axes to reduce, a list of ints.
        shift: ignored (as in TensorFlow since 1.x: it once offset the computation).
        keep_dims: keep the reduced axes with size 1.

    Returns:
        ``(mean, variance)``.

    Raises:
        ValueError: when ``axes`` is not a list of ints.
    """
    del shift
    if isinstance(axes, int) or not all(
        isinstance(a, int) and not isinstance(a, bool) for a in axes
    ):
        raise ValueError(f"moments: axes must be a list of ints, got {axes!r}")
    axes = tuple(a % ndim(x) for a in axes)
    given = dtype(x)
    if given == "float16":
        x = cast(x, "float32")
    average = mean(x, axes, keepdims=True)
    variance = mean(square(x - stop_gradient(average)), axes, keepdims=True)
    if not keep_dims:
        average = _squeeze_axes(average, axes=axes)
        variance = _squeeze_axes(variance, axes=axes)
    if given == "float16":
        average, variance = cast(average, given), cast(variance, given)
    return average, variance


def complete_backend(backend: Any) -> None:
    """Gives ``keras_contrib.backend`` what its TensorFlow branch defines, where it lacks it.

    Args:
        backend: the module ``keras_contrib.backend``, just imported.
    """
    for name in __all__:
        if name not in backend.__dict__:
            setattr(backend, name, globals()[name])


@op(name="crf_backtrack", jit=())
def _backtrack(tables: Any) -> Any:
    # tables[b, t, j]: the best tag at t given tag j at t + 1 (int32, (batch, time, tags)).
    # The last step's table does not depend on j where a mask ends the sequence there; the
    # CRF reads its column 0, as keras-contrib's Theano and TensorFlow paths do.
    last = tables[:, -1, :]
    end = jnp.take_along_axis(last, last[:, :1], axis=1)[:, 0]

    def back(best: Any, table: Any) -> tuple[Any, Any]:
        previous = jnp.take_along_axis(table, best[:, None], axis=1)[:, 0]
        return previous, previous

    _, earlier = lax.scan(back, end, jnp.swapaxes(tables[:, :-1, :], 0, 1), reverse=True)
    return jnp.concatenate([jnp.swapaxes(earlier, 0, 1), end[:, None]], axis=1)


def viterbi_decoding(crf: Any, X: Any, mask: Any = None) -> Any:
    """The best tag sequence of a keras-contrib ``CRF`` layer (its ``viterbi_decoding``).

    The layer's own input energies (with its boundary energies) and its min-sum recursion
    give, per step, the best previous tag for each tag; :func:`_backtrack` follows them back
    from the last step in one ``lax.scan``.

    Args:
        crf: the ``CRF`` layer (built).
        X: its input, ``(batch, time, features)``.
        mask: its input mask, ``(batch, time)``, or ``None``.

    Returns:
        The best path, one-hot: ``(batch, time, crf.units)``.
    """
    energy = crf.activation(dot(X, crf.kernel) + crf.bias)
    if crf.use_boundary:
        energy = crf.add_boundary_energy(energy, mask, crf.left_boundary, crf.right_boundary)
    tables = cast(crf.recursion(energy, mask, return_logZ=False), "int32")
    return one_hot(_backtrack(tables), crf.units)


def decode_crf(crf_module: Any) -> None:
    """Gives ``keras_contrib.layers.crf.CRF`` :func:`viterbi_decoding` (its own raises
    ``NotImplementedError`` on backends other than Theano and TensorFlow).

    Args:
        crf_module: the module ``keras_contrib.layers.crf``, just imported.
    """
    layer = crf_module.CRF
    if getattr(layer.viterbi_decoding, "_jaxkeras", False):
        return

    def decoding(self: Any, X: Any, mask: Any = None) -> Any:
        return viterbi_decoding(self, X, mask)

    decoding.__doc__ = viterbi_decoding.__doc__
    decoding._jaxkeras = True
    layer.viterbi_decoding = decoding
