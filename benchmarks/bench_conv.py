"""Convolution and pooling lowerings on this machine, and the convnet training step they serve.

Rows of the results table (``benchmarks/run_all.py``), each the time of one lowering over
``lax``'s, from jit-compiled calls ending in ``block_until_ready``, warm-up excluded; the
variants of a row run alternately, so that load from other processes falls on all of them
alike:

1. ``K.conv2d`` forward and forward+backward (the VJP to input and kernel) per lowering:
   ``lax`` (``lax.conv_general_dilated``), ``im2col`` (jaxkeras': patches by strided slicing,
   one matmul) and ``patches`` (patches by ``lax.conv_general_dilated_patches``, one matmul;
   written here for comparison), on the layers of a small MNIST convnet, B=128: 28x28x1 -> 32
   and 14x14x32 -> 64, 3x3 kernels, 'same' and 'valid'.
2. The same for ``K.conv1d`` and ``K.conv3d`` (``lax`` against ``im2col``), and for
   convolutions with few output filters (< ``conv_lowering.FEW_FILTERS``) every lowering: ``taps``
   (one matmul with every window offset's kernel, then a sum of shifted slices) and ``auto``.
3. ``K.conv2d_transpose`` and ``K.conv3d_transpose`` forward and forward+backward,
   ``col2im`` (one matmul, then each window offset's slice added in place) against ``lax``
   (``lax.conv_transpose``): Keras's mnist_acgan generator layers and two decoder stages.
4. ``K.pool2d`` 2x2/2 max pooling forward and forward+backward per lowering: ``lax``
   (``lax.reduce_window``, whose gradient is XLA's select-and-scatter) and ``reshape``.
5. One SGD step of that convnet (conv32-relu-maxpool-conv64-relu-maxpool-dense10, softmax
   crossentropy) per combination of lowerings, and with ``'auto'`` (what jaxkeras picks here).

6. ``K.conv3d`` forward+backward with ``'auto'`` against ``'lax'`` on the conv_lstm example's
   Conv3D layer, (10, 15, 40, 40, 40) to 1 filter.
7. ``K.depthwise_conv2d``, ``K.separable_conv2d`` and ``K.separable_conv1d`` forward and
   forward+backward (the VJP to the input and every kernel), ``taps`` (each window offset's
   strided slice times its per-channel filters, summed) against ``lax`` (a grouped
   convolution), at layer sizes of MobileNet, MobileNetV2 and Xception (batch 4, 'same'); and
   the lowering ``'auto'`` picks here against TF-Keras 2.x's backend (``tf_keras.backend``;
   ``SeparableConv1D``'s ``tf.nn.separable_conv2d`` on an added axis for the 1-D case), run
   in its own environment, ``.venv-bench`` (``$BENCH_TF_PYTHON`` names another interpreter
   with TensorFlow and tf_keras; without one those rows are left out).

Ratios above 1: slower than ``lax`` (or TF-Keras). These results set
``jaxkeras._xla.conv_lowering``'s ``conv_lowering``, ``transpose_lowering`` and
``depthwise_lowering``, and ``pool.pool_lowering``.

Run: ``python benchmarks/bench_conv.py [--quick] [--only depthwise]`` (``--only depthwise``:
table 7 alone); ``--side tf_keras`` times TF-Keras's depthwise and separable cases alone
(prints JSON).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from common import Row, interleaved, json_of_process, markdown_table, ratio_row, step_clock
from jax import lax

import jaxkeras as K
from jaxkeras._xla import conv_lowering

ROOT = Path(__file__).resolve().parent.parent
BATCH = 128
LAYERS = [(28, 1, 32), (14, 32, 64)]  # (size, in_channels, out_channels), 3x3 kernels
PADDINGS = ("same", "valid")


def patches_conv(x, kernel, p):
    """im2col with ``lax.conv_general_dilated_patches`` (features ordered channel-major)."""
    kh, kw, c, f = kernel.shape
    cols = lax.conv_general_dilated_patches(
        x, (kh, kw), (1, 1), p.upper(), dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    return cols @ jnp.transpose(kernel, (2, 0, 1, 3)).reshape(c * kh * kw, f)


CONVS: dict[str, Callable] = {
    "lax": lambda x, k, p: K.conv2d(x, k, padding=p, lowering="lax"),
    "im2col": lambda x, k, p: K.conv2d(x, k, padding=p, lowering="im2col"),
    "patches": patches_conv,
}


def forward_backward(fn: Callable) -> Callable:
    """``(*args, cotangent) -> gradients`` of ``fn``, jit-compiled (forward pass included)."""
    return jax.jit(lambda *args: jax.vjp(fn, *args[:-1])[1](args[-1]))


def compare(
    label: str, fns: dict[str, Callable], args: tuple, repeats: int, rng: np.random.Generator
) -> list:
    """Rows ``label fwd`` and ``label fwd+bwd`` for functions that must agree on ``args``."""
    ref = np.asarray(next(iter(fns.values()))(*args))
    for fn in fns.values():
        np.testing.assert_allclose(np.asarray(fn(*args)), ref, rtol=1e-3, atol=1e-3)
    ct = jnp.asarray(rng.standard_normal(ref.shape), jnp.float32)
    forward = {n: jax.jit(fn) for n, fn in fns.items()}
    both = {n: forward_backward(fn) for n, fn in fns.items()}
    return [
        (f"{label} fwd", time_alternately(forward, args, repeats)),
        (f"{label} fwd+bwd", time_alternately(both, (*args, ct), repeats)),
    ]


def time_alternately(fns: dict[str, Callable], args: tuple, repeats: int) -> dict:
    """Seconds per call of each jit-compiled function on ``args`` (CPU time; wall-clock on an
    accelerator), one per round, interleaved."""
    calls = {n: functools.partial(_call, fn, args) for n, fn in fns.items()}
    return interleaved(calls, repeats, clock=step_clock())


def _call(fn: Callable, args: tuple) -> None:
    jax.block_until_ready(fn(*args))


def normal(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> jax.Array:
    return jnp.asarray(rng.standard_normal(shape) * scale, jnp.float32)


def conv2d_rows(repeats: int, rng: np.random.Generator) -> list:
    rows = []
    for size, c_in, c_out in LAYERS:
        args = (normal(rng, BATCH, size, size, c_in), normal(rng, 3, 3, c_in, c_out, scale=0.1))
        for padding in PADDINGS:
            fns = {n: functools.partial(c, p=padding) for n, c in CONVS.items()}
            rows += compare(f"{size}x{size}x{c_in}->{c_out} {padding}", fns, args, repeats, rng)
    return rows


def other_rank_rows(repeats: int, rng: np.random.Generator) -> list:
    """conv1d and conv3d: is im2col (or XLA's forward with matmul gradients) worth it there?
    Few output filters (``'taps'``): from more input channels (where ``'auto'`` picks it on
    CPU) and from fewer (where it does not). And pointwise (1x1) convolutions, a ResNet
    bottleneck's and a MobileNetV2 projection's, where ``'auto'`` picks im2col (one matmul)
    on CPU. And 3x3 convolutions of small images, VGG16's last stage on 32x32 inputs (2x2),
    ResNet's (1x1) and ResNet50V2's padded 4x4 ('valid': a 2x2 output), where ``'auto'``
    picks im2col too (outputs no larger than the window), and 4x4 and 8x8 ones ('same'),
    above that rule."""
    cases = [
        ("conv1d 128x100x32->64 k3", K.conv1d, (BATCH, 100, 32), (3, 32, 64)),
        ("conv3d 8x16x16x16x8->16 k3", K.conv3d, (8, 16, 16, 16, 8), (3, 3, 3, 8, 16)),
        ("conv1d 128x100x32->4 k3", K.conv1d, (BATCH, 100, 32), (3, 32, 4)),
        ("conv2d 10x40x40x40->1 k3", K.conv2d, (10, 40, 40, 40), (3, 3, 40, 1)),
        ("conv2d 10x40x40x40->4 k3", K.conv2d, (10, 40, 40, 40), (3, 3, 40, 4)),
        ("conv2d 128x28x28x1->4 k3", K.conv2d, (BATCH, 28, 28, 1), (3, 3, 1, 4)),
        ("conv3d 8x16x16x16x8->4 k3", K.conv3d, (8, 16, 16, 16, 8), (3, 3, 3, 8, 4)),
        ("conv2d 8x56x56x64->256 k1", K.conv2d, (8, 56, 56, 64), (1, 1, 64, 256)),
        ("conv2d 16x8x8x144->32 k1", K.conv2d, (16, 8, 8, 144), (1, 1, 144, 32)),
        ("conv2d 16x2x2x512->512 k3", K.conv2d, (16, 2, 2, 512), (3, 3, 512, 512)),
        ("conv2d 16x1x1x512->512 k3", K.conv2d, (16, 1, 1, 512), (3, 3, 512, 512)),
        ("conv2d 16x4x4x512->512 k3", K.conv2d, (16, 4, 4, 512), (3, 3, 512, 512)),
        ("conv2d 16x4x4x256->256 k3", K.conv2d, (16, 4, 4, 256), (3, 3, 256, 256), "valid"),
        ("conv2d 16x8x8x256->256 k3", K.conv2d, (16, 8, 8, 256), (3, 3, 256, 256)),
    ]
    rows = []
    for label, op, x_shape, k_shape, *padding in cases:
        padding = padding[0] if padding else "same"
        args = (normal(rng, *x_shape), normal(rng, *k_shape, scale=0.1))
        many = k_shape[-1] >= conv_lowering.FEW_FILTERS
        lowerings = ("lax", "im2col", "lax_im2col") if many else conv_lowering.LOWERINGS
        fns = {low: functools.partial(op, padding=padding, lowering=low) for low in lowerings}
        rows += compare(f"{label} {padding}", fns, args, repeats, rng)
    return rows


def transpose_rows(repeats: int, rng: np.random.Generator) -> list:
    """Transposed convolutions, ``'col2im'`` against XLA's: Keras's mnist_acgan generator
    (batch 100), an upsampling stage of a 2-D decoder and one of a 3-D decoder, and a stride-1
    ``'same'`` one (where ``'auto'`` keeps XLA's)."""
    cases = [
        ("2d 100x3x3x384->7x7x192 k5 s1 valid", (100, 3, 3, 384), (5, 5, 192, 384), 1, "valid"),
        ("2d 100x7x7x192->14x14x96 k5 s2 same", (100, 7, 7, 192), (5, 5, 96, 192), 2, "same"),
        ("2d 100x14x14x96->28x28x1 k5 s2 same", (100, 14, 14, 96), (5, 5, 1, 96), 2, "same"),
        ("2d 32x16x16x256->16x16x256 k3 s1 same", (32, 16, 16, 256), (3, 3, 256, 256), 1, "same"),
        ("3d 16x8x8x8x16->16^3x8 k3 s2 same", (16, 8, 8, 8, 16), (3, 3, 3, 8, 16), 2, "same"),
    ]
    rows = []
    for label, x_shape, k_shape, stride, padding in cases:
        n = len(x_shape) - 2
        op = {2: K.conv2d_transpose, 3: K.conv3d_transpose}[n]
        if padding == "valid":
            out = [(size - 1) * stride + k for size, k in zip(x_shape[1:-1], k_shape)]
        else:
            out = [size * stride for size in x_shape[1:-1]]
        shape = (x_shape[0], *out, k_shape[-2])
        args = (normal(rng, *x_shape), normal(rng, *k_shape, scale=0.05))
        fns = {
            low: functools.partial(
                op, output_shape=shape, strides=stride, padding=padding, lowering=low
            )
            for low in ("lax", "col2im")
        }
        rows += compare(f"conv{label}", fns, args, repeats, rng)
    return rows


def pool_rows(repeats: int, rng: np.random.Generator) -> list:
    rows = []
    for size, _, channels in LAYERS:
        fns = {
            low: functools.partial(K.pool2d, pool_size=2, strides=2, lowering=low)
            for low in ("lax", "reshape")
        }
        args = (normal(rng, BATCH, size, size, channels),)
        rows += compare(f"max 2x2/2 {size}x{size}x{channels}", fns, args, repeats, rng)
    return rows


def train_step(conv_lowering: str, pool_lowering: str, padding: str) -> Callable:
    """One SGD step of the convnet, with K.conv2d and K.pool2d inside a jax.jit."""

    def loss(params, x, y):
        h = x
        for i in (1, 2):
            h = K.conv2d(h, params[f"k{i}"], padding=padding, lowering=conv_lowering)
            h = K.pool2d(jax.nn.relu(h + params[f"b{i}"]), 2, 2, lowering=pool_lowering)
        logits = h.reshape(h.shape[0], -1) @ params["w"] + params["b"]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

    @jax.jit
    def step(params, x, y):
        grads = jax.grad(loss)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)

    return step


def train_rows(repeats: int, rng: np.random.Generator) -> list:
    x = jnp.asarray(rng.standard_normal((BATCH, 28, 28, 1)), jnp.float32)
    y = jax.nn.one_hot(rng.integers(0, 10, BATCH), 10)
    rows = []
    for padding in PADDINGS:
        side = 7 if padding == "same" else 5
        params = {
            "k1": rng.standard_normal((3, 3, 1, 32)) * 0.3,
            "b1": np.zeros(32),
            "k2": rng.standard_normal((3, 3, 32, 64)) * 0.1,
            "b2": np.zeros(64),
            "w": rng.standard_normal((side * side * 64, 10)) * 0.01,
            "b": np.zeros(10),
        }
        params = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
        combos = {
            "lax": ("lax", "lax"),
            "im2col": ("im2col", "lax"),
            "reshape pool": ("lax", "reshape"),
            "im2col+reshape": ("im2col", "reshape"),
            "auto": ("auto", "auto"),
        }
        steps = {n: train_step(c, p, padding) for n, (c, p) in combos.items()}
        ref = steps["lax"](params, x, y)
        for step in steps.values():  # every combination computes the same update
            for name, value in step(params, x, y).items():
                np.testing.assert_allclose(value, ref[name], rtol=1e-3, atol=1e-5)
        rows.append((f"train step {padding}", time_alternately(steps, (params, x, y), repeats)))
    return rows


def conv3d_auto_row(repeats: int, quick: bool) -> Row:
    """``K.conv3d`` forward+backward, ``'auto'`` against ``'lax'``: the conv_lstm example's
    Conv3D layer, (10, 15, 40, 40, 40) to 1 filter, 3x3x3 (batch 2 with ``quick``)."""
    rng = np.random.default_rng(0)
    batch = 2 if quick else 10
    args = (normal(rng, batch, 15, 40, 40, 40), normal(rng, 3, 3, 3, 40, 1, scale=0.1))
    fns = {
        low: functools.partial(K.conv3d, padding="same", lowering=low) for low in ("auto", "lax")
    }
    np.testing.assert_allclose(fns["auto"](*args), fns["lax"](*args), rtol=1e-3, atol=1e-3)
    ct = jnp.asarray(rng.standard_normal((batch, 15, 40, 40, 1)), jnp.float32)
    both = {n: forward_backward(fn) for n, fn in fns.items()}
    times = time_alternately(both, (*args, ct), repeats)
    chosen = conv_lowering.conv_lowering(jax.default_backend(), 3, 1, 40)
    row = ratio_row(
        f"`K.conv3d` fwd+bwd ({batch}, 15, 40, 40, 40) -> 1 filter, 3x3x3: 'auto' vs 'lax'",
        times["auto"],
        times["lax"],
        1.0,
        f"'auto' is {chosen} here",
    )
    if chosen == "lax":  # the same computation: a ratio off 1 is noise
        row.verdict = "yes"
        row.note += " (the same computation: the ratio measures noise)"
    return row


# (figure, op, input shape, depthwise kernel shape, pointwise filters or None, stride); 'same'
DEPTHWISE_CASES = [
    ("MobileNetV2 (4, 1, 1, 960) 3x3", "depthwise_conv2d", (4, 1, 1, 960), (3, 3, 960, 1), None, 1),
    (
        "MobileNetV2 (4, 28, 28, 144) 3x3 stride 2",
        "depthwise_conv2d",
        (4, 28, 28, 144),
        (3, 3, 144, 1),
        None,
        2,
    ),
    (
        "MobileNet (4, 56, 56, 128) 3x3",
        "depthwise_conv2d",
        (4, 56, 56, 128),
        (3, 3, 128, 1),
        None,
        1,
    ),
    (
        "multiplier 2 (4, 28, 28, 32) 3x3",
        "depthwise_conv2d",
        (4, 28, 28, 32),
        (3, 3, 32, 2),
        None,
        1,
    ),
    (
        "Xception (4, 19, 19, 728) 3x3 -> 728",
        "separable_conv2d",
        (4, 19, 19, 728),
        (3, 3, 728, 1),
        728,
        1,
    ),
    ("(4, 100, 64) k5 -> 64", "separable_conv1d", (4, 100, 64), (5, 64, 1), 64, 1),
]


def depthwise_arrays(index: int) -> tuple[np.ndarray, ...]:
    """The arguments of ``DEPTHWISE_CASES[index]``, float32 NumPy arrays drawn from a generator
    seeded by the case's index (the same on both sides)."""
    _, _, x_shape, d_shape, filters, _ = DEPTHWISE_CASES[index]
    rng = np.random.default_rng(index)
    args = [rng.standard_normal(x_shape), 0.1 * rng.standard_normal(d_shape)]
    if filters is not None:
        depth = d_shape[-2] * d_shape[-1]
        ones = (1,) * (len(d_shape) - 2)
        args.append(0.05 * rng.standard_normal((*ones, depth, filters)))
    return tuple(a.astype(np.float32) for a in args)


def checksum(y: Any, index: int) -> tuple[float, float]:
    """An order-sensitive digest of case ``index``'s output: its inner product with fixed
    random weights, and the scale its rounding errors go with (the output's norm)."""
    y = np.asarray(y, np.float64)
    weights = np.random.default_rng(1000 + index).standard_normal(y.shape)
    return float(np.sum(y * weights)), float(np.linalg.norm(y))


def depthwise_rows(repeats: int) -> tuple[list, dict, dict]:
    """``taps`` against ``lax`` per case (rows for :func:`lowering_rows`); per case, the
    forward+backward times of the lowering ``'auto'`` picks here and the output's
    :func:`checksum` (for the TF-Keras rows)."""
    chosen = conv_lowering.depthwise_lowering(jax.default_backend())
    rows, times, sums = [], {}, {}
    for index, (label, name, x_shape, _, _, stride) in enumerate(DEPTHWISE_CASES):
        args = depthwise_arrays(index)
        strides = (stride,) * (len(x_shape) - 2)
        fns = {
            low: functools.partial(getattr(K, name), strides=strides, padding="same", lowering=low)
            for low in ("lax", "taps")
        }
        pair = compare(f"`K.{name}` {label}", fns, args, repeats, np.random.default_rng(index))
        rows += pair
        times[index] = pair[1][1][chosen]
        sums[index] = checksum(fns[chosen](*args), index)
    return rows, times, sums


def tf_keras_side(repeats: int) -> dict:
    """TF-Keras's forward+backward of every depthwise case (in ``.venv-bench``): per case the
    CPU seconds of each call after two warm-up calls, and the output's :func:`checksum`."""
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf
    import tf_keras

    results = {}
    for index, (_, name, _, _, _, stride) in enumerate(DEPTHWISE_CASES):
        args = [tf.constant(a) for a in depthwise_arrays(index)]
        if name == "separable_conv1d":
            forward = functools.partial(_tf_separable_conv1d, tf, stride=stride)
        else:
            op = getattr(tf_keras.backend, name)
            forward = functools.partial(op, strides=(stride, stride), padding="same")
        y = forward(*args)
        ct = tf.constant(np.random.default_rng(index).standard_normal(y.shape), tf.float32)

        @tf.function
        def both(*args, forward=forward, ct=ct):
            with tf.GradientTape() as tape:
                tape.watch(args)
                y = forward(*args)
            return tape.gradient(y, args, output_gradients=ct)

        for _ in range(2):
            [g.numpy() for g in both(*args)]
        seconds = []
        for _ in range(repeats):
            start = time.process_time()
            [g.numpy() for g in both(*args)]
            seconds.append(time.process_time() - start)
        results[index] = {"seconds": seconds, "checksum": checksum(y.numpy(), index)}
    return results


def _tf_separable_conv1d(tf: Any, x: Any, depthwise: Any, pointwise: Any, stride: int) -> Any:
    """TF-Keras's ``SeparableConv1D``: ``tf.nn.separable_conv2d`` on an added rows axis."""
    y = tf.nn.separable_conv2d(
        tf.expand_dims(x, 1),
        tf.expand_dims(depthwise, 0),
        tf.expand_dims(pointwise, 0),
        strides=(1, stride, stride, 1),
        padding="SAME",
    )
    return tf.squeeze(y, [1])


def tf_keras_rows(repeats: int, times: dict, sums: dict) -> list[Row]:
    """Rows of jaxkeras' ``'auto'`` against TF-Keras per depthwise case (none when TF-Keras's
    interpreter is missing or fails); each output's checksum must agree."""
    python = Path(os.environ.get("BENCH_TF_PYTHON", ROOT / ".venv-bench" / "bin" / "python"))
    if not python.exists():
        print(f"bench_conv: {python} is missing: no TF-Keras rows", file=sys.stderr)
        return []
    command = [str(python), __file__, "--side", "tf_keras", "--repeats", str(repeats)]
    try:
        theirs = {int(k): v for k, v in json_of_process(command).items()}
    except RuntimeError as err:
        print(f"bench_conv: TF-Keras: {err}", file=sys.stderr)
        return []
    chosen = conv_lowering.depthwise_lowering(jax.default_backend())
    rows = []
    for index, (label, name, *_) in enumerate(DEPTHWISE_CASES):
        (ours_sum, scale), (their_sum, _) = sums[index], theirs[index]["checksum"]
        if abs(ours_sum - their_sum) > 1e-4 * scale:
            raise AssertionError(f"{label}: TF-Keras computes another output ({their_sum})")
        rows.append(
            ratio_row(
                f"`K.{name}` {label} fwd+bwd: 'auto' vs TF-Keras",
                times[index],
                theirs[index]["seconds"],
                None,
                f"'auto' is {chosen} here; TF-Keras 2.x in its own process; CPU time",
            )
        )
    return rows


def depthwise_section(repeats: int) -> list[Row]:
    """The depthwise and separable rows: ``taps`` against ``lax``, then against TF-Keras."""
    cases, times, sums = depthwise_rows(repeats)
    return lowering_rows("depthwise", cases, note=DEPTHWISE_NOTE) + tf_keras_rows(
        repeats, times, sums
    )


def lowering_rows(label: str, rows: list, baseline: str = "lax", note: str = "") -> list[Row]:
    """Results-table rows: each other lowering against ``baseline``, per case."""
    return [
        ratio_row(f"{label} {case}: {name} vs {baseline}", times[name], times[baseline], None, note)
        for case, times in rows
        for name in times
        if name != baseline
    ]


DEPTHWISE_NOTE = (
    "'taps' works around XLA's grouped-convolution gradient "
    "(https://github.com/jax-ml/jax/issues/13800: the kernel gradient becomes an ungrouped "
    "convolution, channels times the work)"
)


def main(quick: bool = False) -> list[Row]:
    """Times every table of this module and the conv3d 'auto' figure.

    Args:
        quick: fewer repetitions (and the conv3d figure at batch 2).

    Returns:
        The rows of the results table (ratios: the lowering's time over ``lax``'s, or
        jaxkeras' over TF-Keras's).
    """
    repeats = 5 if quick else 15
    rng = np.random.default_rng(0)
    rows = lowering_rows("conv2d B=128", conv2d_rows(repeats, rng))
    rows += lowering_rows("", other_rank_rows(repeats, rng))
    rows += lowering_rows("transposed", transpose_rows(repeats, rng))
    rows += lowering_rows("pool2d", pool_rows(repeats, rng))
    rows += lowering_rows("convnet SGD step", train_rows(repeats, rng))
    rows.append(conv3d_auto_row(3 if quick else 7, quick))
    rows += depthwise_section(repeats)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--side", choices=["tf_keras"], help="time TF-Keras's cases alone")
    parser.add_argument("--repeats", type=int, default=15, help="with --side: rounds")
    parser.add_argument("--only", choices=["depthwise"], help="only table 7")
    cli = parser.parse_args()
    if cli.side:
        print(json.dumps(tf_keras_side(cli.repeats)))
    elif cli.only:
        print(markdown_table(depthwise_section(5 if cli.quick else 15)))
    else:
        print(markdown_table(main(cli.quick)))
