"""Training steps written with K against the same steps written in JAX by hand.

Two models, one SGD step each, NumPy batches in and the loss out as NumPy on both sides:

- an MLP (784 -> hidden -> hidden -> 10, relu, softmax crossentropy from logits);
- a small convnet (conv32-relu-maxpool-conv64-relu-maxpool-dense10 on 28x28x1, 3x3 kernels,
  ``'same'`` padding).

jaxkeras' step is ``K.gradients`` + ``K.function`` with ``K.update`` s; the reference is
``jax.value_and_grad`` inside ``jax.jit`` with the parameters donated (as ``K.function`` donates
its state). Both start from the same weights; the script checks that they give the same loss
and the same updated weights, then times steps alternately.

The sizes follow the platform: on CPU, batch 128 (hidden width 512); on an accelerator, batches
that keep it busy (MLP batch 8,192 with hidden width 4,096; convnet batch 2,048), timed in
wall-clock time (the CPU time of the host says nothing of the device's work).

Run: ``python benchmarks/bench_steps.py [--quick]``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from common import (
    Row,
    agreement_rtol,
    interleaved,
    markdown_table,
    on_cpu,
    on_optimized_tier,
    ratio_row,
    step_clock,
)
from jax import lax

import jaxkeras as K

LR = 0.01
CLASSES = 10


def _sizes() -> dict[str, int]:
    """Batch sizes and the MLP's width for the platform JAX runs on."""
    if on_cpu():
        return {"mlp_batch": 128, "hidden": 512, "convnet_batch": 128}
    return {"mlp_batch": 8192, "hidden": 4096, "convnet_batch": 2048}


def mlp_forward(params: Sequence[Any], x: Any, ops: Any) -> Any:
    """The MLP's logits; ``ops`` supplies ``dot`` and ``relu`` (``K`` or :data:`JNP`)."""
    *hidden, last = params
    for w, b in zip(hidden[::2], hidden[1::2]):
        x = ops.relu(ops.dot(x, w) + b)
    return ops.dot(x, last)


def convnet_forward(params: Sequence[Any], x: Any, ops: Any) -> Any:
    """The convnet's logits; ``ops`` supplies ``conv``, ``pool``, ``relu``, ``flatten`` and
    ``dot``."""
    k1, b1, k2, b2, dense = params
    x = ops.pool(ops.relu(ops.conv(x, k1) + b1))
    x = ops.pool(ops.relu(ops.conv(x, k2) + b2))
    return ops.dot(ops.flatten(x), dense)


class _KerasOps:
    dot, relu = staticmethod(K.dot), staticmethod(K.relu)
    conv = staticmethod(functools.partial(K.conv2d, padding="same"))
    pool = staticmethod(functools.partial(K.pool2d, pool_size=(2, 2), strides=(2, 2)))
    flatten = staticmethod(K.batch_flatten)


def _max_pool(x: jax.Array) -> jax.Array:
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def _conv(x: jax.Array, kernel: jax.Array) -> jax.Array:
    return lax.conv_general_dilated(
        x, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )


class JNP:
    """The hand-written side's ops: ``jax.numpy`` and ``lax``."""

    dot, relu = staticmethod(jnp.dot), staticmethod(jax.nn.relu)
    conv, pool = staticmethod(_conv), staticmethod(_max_pool)
    flatten = staticmethod(lambda x: x.reshape(x.shape[0], -1))


def mlp_weights(rng: np.random.Generator, hidden: int) -> list[np.ndarray]:
    """Weights and biases of the MLP, then its output layer (no bias)."""
    sizes = [784, hidden, hidden]
    params = []
    for a, b in itertools.pairwise(sizes):
        params += [rng.normal(0, a**-0.5, (a, b)), np.zeros(b)]
    params.append(rng.normal(0, hidden**-0.5, (hidden, CLASSES)))
    return [p.astype(np.float32) for p in params]


def convnet_weights(rng: np.random.Generator) -> list[np.ndarray]:
    """Both kernels with their biases, then the dense layer (no bias)."""
    params = [
        rng.normal(0, 1 / 3, (3, 3, 1, 32)),
        np.zeros(32),
        rng.normal(0, (9 * 32) ** -0.5, (3, 3, 32, 64)),
        np.zeros(64),
        rng.normal(0, (7 * 7 * 64) ** -0.5, (7 * 7 * 64, CLASSES)),
    ]
    return [p.astype(np.float32) for p in params]


def keras_step(forward: Callable, weights: list[np.ndarray], x_shape: tuple) -> tuple:
    """The SGD step with K: ``(step(x, y) -> loss, the K.function, the variables)``."""
    variables = [K.variable(w) for w in weights]
    x, y = K.placeholder(x_shape), K.placeholder((x_shape[0], CLASSES))
    logits = forward(variables, x, _KerasOps)
    loss = K.mean(K.categorical_crossentropy(y, logits, from_logits=True))
    grads = K.gradients(loss, variables)
    updates = [K.update(v, v - LR * g) for v, g in zip(variables, grads)]
    f = K.function([x, y], [loss], updates=updates)
    return (lambda xv, yv: f([xv, yv])[0]), f, variables


def jax_step(forward: Callable, weights: list[np.ndarray], ops: Any = None) -> tuple:
    """The SGD step by hand: ``(step(x, y) -> loss, a holder of the parameters)``; ``ops``
    supplies the model's ops (default :class:`JNP`)."""
    ops = JNP if ops is None else ops

    def loss_fn(params, x, y):
        logits = forward(params, x, ops)
        return jnp.mean(-jnp.sum(y * jax.nn.log_softmax(logits), axis=-1))

    @functools.partial(jax.jit, donate_argnums=0)
    def train(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return [p - LR * g for p, g in zip(params, grads)], loss

    holder = {"params": [jnp.asarray(w) for w in weights]}

    def step(xv, yv):
        holder["params"], loss = train(holder["params"], xv, yv)
        return np.asarray(loss)

    return step, holder


def _batch(rng: np.random.Generator, x_shape: tuple) -> tuple[np.ndarray, np.ndarray]:
    x = rng.normal(size=x_shape).astype(np.float32)
    y = np.eye(CLASSES, dtype=np.float32)[rng.integers(0, CLASSES, x_shape[0])]
    return x, y


def step_row(figure: str, forward: Callable, weights: list, x_shape: tuple, rounds: int) -> Row:
    """Checks that both steps agree on a first step, then times them interleaved.

    Args:
        figure: the row's figure.
        forward: the model (:func:`mlp_forward` or :func:`convnet_forward`).
        weights: its initial weights.
        x_shape: the input batch's shape.
        rounds: timed repetitions.

    Returns:
        One row: jaxkeras' step over the hand-written one.
    """
    x, y = _batch(np.random.default_rng(1), x_shape)
    k_step, f, variables = keras_step(forward, weights, x_shape)
    j_step, holder = jax_step(forward, weights)
    np.testing.assert_allclose(k_step(x, y), j_step(x, y), rtol=agreement_rtol(1e-4))
    for variable, param in zip(variables, holder["params"]):
        np.testing.assert_allclose(
            K.get_value(variable), param, rtol=agreement_rtol(1e-3), atol=1e-5
        )
    tier = on_optimized_tier(f, lambda: k_step(x, y))
    times = interleaved(
        {"K": lambda: k_step(x, y), "jax": lambda: j_step(x, y)},
        rounds=rounds,
        warmup=3,
        clock=step_clock(),
    )
    assert f.trace_count == 1, f"the K.function step compiled {f.trace_count} times"
    return ratio_row(
        figure,
        times["K"],
        times["jax"],
        1.05,
        f"`K.gradients` + `K.function` vs `jax.grad` + `jax.jit`, state donated; "
        f"{step_clock()} time; K's {tier}",
    )


def main(quick: bool = False) -> list[Row]:
    """The MLP and convnet training-step rows.

    Args:
        quick: fewer repetitions.

    Returns:
        Two rows of the results table.
    """
    sizes, rng = _sizes(), np.random.default_rng(0)
    rounds = 10 if quick else 30
    mlp_batch, hidden, conv_batch = sizes["mlp_batch"], sizes["hidden"], sizes["convnet_batch"]
    return [
        step_row(
            f"MLP train step (784-{hidden}-{hidden}-10, batch {mlp_batch}, SGD)",
            mlp_forward,
            mlp_weights(rng, hidden),
            (mlp_batch, 784),
            rounds,
        ),
        step_row(
            f"convnet train step (conv32-pool-conv64-pool-dense, 28x28x1, batch {conv_batch}, SGD)",
            convnet_forward,
            convnet_weights(rng),
            (conv_batch, 28, 28, 1),
            rounds,
        ),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    print(markdown_table(main(parser.parse_args().quick)))
