"""Train steps under the dtype policies (``jaxkeras.mixed_precision``).

The MLP and the convnet of ``bench_steps.py``, one SGD step each, written with ``K`` and run
under each policy, against:

- the same ``K`` step under ``'float32'`` (what 16-bit products cost or save on this
  platform: on a CPU without native bfloat16 arithmetic, XLA converts and computes in float32);
- the same model written in JAX by hand with the same casts and products (float32 weights
  and activations, each product's operands cast to the 16-bit type and accumulated in float32,
  its gradient products taking the cotangent in the 16-bit type, as jaxkeras does instead of
  JAX's float32 ones: jax-ml/jax#23797), under ``jax.jit`` with its parameters donated. Under
  ``'mixed_float16'`` the hand-written step scales its loss as jaxkeras does (jmp's
  ``DynamicLossScale``, a non-finite gradient skipping the update).

Run: ``python benchmarks/bench_mixed.py [--quick]``.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jmp
import numpy as np
from bench_steps import (
    CLASSES,
    LR,
    _batch,
    _max_pool,
    _sizes,
    convnet_forward,
    convnet_weights,
    jax_step,
    keras_step,
    mlp_forward,
    mlp_weights,
)
from common import Row, interleaved, markdown_table, on_optimized_tier, ratio_row, step_clock
from jax import lax

from jaxkeras import mixed_precision

POLICIES = ("mixed_bfloat16", "mixed_float16")


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _product(fn: Callable, x: Any, y: Any) -> Any:
    """``fn`` of 16-bit operands accumulated in float32, whose gradient products take the
    cotangent in the operands' type (what jaxkeras's policies compute, written by hand)."""
    return fn(x, y, preferred_element_type=jnp.float32)


def _product_forward(fn: Callable, x: Any, y: Any) -> tuple:
    return _product(fn, x, y), (x, y)


def _product_backward(fn: Callable, operands: tuple, cotangent: Any) -> tuple:
    _, transposed = jax.vjp(fn, *operands)
    return transposed(cotangent.astype(operands[0].dtype))


_product.defvjp(_product_forward, _product_backward)
_CONV = functools.partial(
    lax.conv_general_dilated,
    window_strides=(1, 1),
    padding="SAME",
    dimension_numbers=("NHWC", "HWIO", "NHWC"),
)


def _cast_ops(dtype: Any) -> Any:
    """Hand-written ops whose products take ``dtype`` operands and accumulate in float32."""

    class Ops:
        relu, pool = staticmethod(jax.nn.relu), staticmethod(_max_pool)
        flatten = staticmethod(lambda x: x.reshape(x.shape[0], -1))

        @staticmethod
        def dot(x, w):
            return _product(jnp.dot, x.astype(dtype), w.astype(dtype))

        @staticmethod
        def conv(x, kernel):
            return _product(_CONV, x.astype(dtype), kernel.astype(dtype))

    return Ops


def _hand_step(forward: Callable, weights: list[np.ndarray], dtype: Any) -> Callable:
    """The SGD step by hand with the casts of ``dtype``: ``step(x, y) -> loss``; for float16
    with dynamic loss scaling, as jaxkeras's (jmp's ``DynamicLossScale``; a non-finite
    gradient skips the step)."""
    if dtype != "float16":
        return jax_step(forward, weights, _cast_ops(dtype))[0]
    ops = _cast_ops(dtype)

    def loss_fn(params, x, y, scale):
        logits = forward(params, x, ops)
        loss = jnp.mean(-jnp.sum(y * jax.nn.log_softmax(logits), axis=-1))
        return scale.scale(loss), loss

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def train(params, scale, x, y):
        (_, loss), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, y, scale)
        grads = scale.unscale(grads)
        finite = jmp.all_finite(grads)
        new = [jnp.where(finite, p - LR * g, p) for p, g in zip(params, grads)]
        with jax.numpy_dtype_promotion("standard"):  # jmp's count times a bool
            return new, scale.adjust(finite), loss

    holder = {
        "params": [jnp.asarray(w) for w in weights],
        "scale": jmp.DynamicLossScale(jnp.float32(2.0**15), jnp.int32(0), period=2000),
    }

    def step(xv, yv):
        holder["params"], holder["scale"], loss = train(holder["params"], holder["scale"], xv, yv)
        return np.asarray(loss)

    return step


def policy_rows(name: str, forward: Callable, weights: list, x_shape: tuple, rounds: int) -> list:
    """A model's rows: each policy against float32 and against the hand-written step."""
    x, y = _batch(np.random.default_rng(1), x_shape)
    steps, functions = {}, {}
    for policy in ("float32", *POLICIES):
        mixed_precision.set_global_policy(policy)
        step, f, _ = keras_step(forward, weights, x_shape)
        steps[policy] = functools.partial(_under, policy, step)
        functions[policy] = f
    mixed_precision.set_global_policy("float32")
    losses = {policy: float(step(x, y)) for policy, step in steps.items()}
    for policy in POLICIES:  # the same model: losses agree to 16-bit precision
        assert abs(losses[policy] - losses["float32"]) < 2e-2 * abs(losses["float32"]), losses
    dtypes = {p: mixed_precision.POLICIES[p].compute_dtype for p in POLICIES}
    tiers = {p: on_optimized_tier(functions[p], functools.partial(steps[p], x, y)) for p in steps}
    hand = {p: _hand_step(forward, weights, dtypes[p]) for p in POLICIES}
    fns = {p: functools.partial(steps[p], x, y) for p in steps}
    fns.update({f"hand {p}": functools.partial(hand[p], x, y) for p in POLICIES})
    times = interleaved(fns, rounds=rounds, warmup=3, clock=step_clock())
    for policy, f in functions.items():
        assert f.trace_count == 1, f"{policy}: the step compiled {f.trace_count} times"
    rows = []
    for policy in POLICIES:
        rows.append(
            ratio_row(
                f"{name} train step, `{policy}` vs hand-written JAX with the same casts",
                times[policy],
                times[f"hand {policy}"],
                1.05,
                f"{step_clock()} time; K's {tiers[policy]}"
                + ("; both scale the loss (jmp)" if policy == "mixed_float16" else ""),
            )
        )
        rows.append(
            ratio_row(
                f"{name} train step, `{policy}` vs `float32`",
                times[policy],
                times["float32"],
                None,
                f"{step_clock()} time; what 16-bit products cost (< 1) or save here; "
                f"K's {tiers[policy]}",
            )
        )
    return rows


def _under(policy: str, step: Callable, *args: Any) -> Any:
    with mixed_precision.policy(policy):
        return step(*args)


def main(quick: bool = False) -> list[Row]:
    """The MLP and convnet rows under each policy.

    Args:
        quick: fewer repetitions.

    Returns:
        Rows of the results table.
    """
    sizes, rng = _sizes(), np.random.default_rng(0)
    rounds = 8 if quick else 20
    hidden, mlp_batch, conv_batch = sizes["hidden"], sizes["mlp_batch"], sizes["convnet_batch"]
    rows = policy_rows(
        f"MLP (784-{hidden}-{hidden}-{CLASSES}, batch {mlp_batch})",
        mlp_forward,
        mlp_weights(rng, hidden),
        (mlp_batch, 784),
        rounds,
    )
    rows += policy_rows(
        f"convnet (28x28x1, batch {conv_batch})",
        convnet_forward,
        convnet_weights(rng),
        (conv_batch, 28, 28, 1),
        rounds,
    )
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    print(markdown_table(main(parser.parse_args().quick)))
