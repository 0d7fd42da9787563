"""LSTM training step: K.rnn + K.gradients + K.function against hand-written lax.scan + jax.grad.

The model: an LSTM cell (fused kernels, gates i, f, g, o) over ``x`` of shape (64, 100, 32) with
128 units (on an accelerator: (1024, 100, 128) with 512 units), a dense head on the last output
and a mean squared error; one SGD step updates every weight. Both versions start from the same
weights; the script checks that they give the same loss and the same updated weights, then
times steps alternately (warm-up excluded): one row of the results table
(``benchmarks/run_all.py``).

Run: ``python benchmarks/bench_lstm.py [--quick]``.
"""

from __future__ import annotations

import argparse
import functools

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

# on an accelerator, a batch and widths that keep it busy
BATCH, STEPS, FEATURES, UNITS = (64, 100, 32, 128) if on_cpu() else (1024, 100, 128, 512)
LR = 0.01


def initial_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "kernel": rng.normal(0, 0.1, (FEATURES, 4 * UNITS)).astype(np.float32),
        "recurrent": rng.normal(0, 0.1, (UNITS, 4 * UNITS)).astype(np.float32),
        "bias": np.zeros(4 * UNITS, np.float32),
        "head": rng.normal(0, 0.1, (UNITS, 1)).astype(np.float32),
    }


def gates(z, c, tanh, sigmoid):
    """The LSTM state update from the pre-activations ``z`` (fused gates i, f, g, o)."""
    u = UNITS
    i, f = sigmoid(z[:, :u]), sigmoid(z[:, u : 2 * u])
    g, o = tanh(z[:, 2 * u : 3 * u]), sigmoid(z[:, 3 * u :])
    c = f * c + i * g
    return o * tanh(c), c


def keras_step(weights: dict[str, np.ndarray]):
    """The training step written with K ops; returns (step(x, y) -> loss, function, variables)."""
    v = {name: K.variable(value, name=name) for name, value in weights.items()}

    def step(x_t, states):
        z = K.dot(x_t, v["kernel"]) + K.dot(states[0], v["recurrent"]) + v["bias"]
        h, c = gates(z, states[1], K.tanh, K.sigmoid)
        return h, [h, c]

    x = K.placeholder((BATCH, STEPS, FEATURES))
    y = K.placeholder((BATCH, 1))
    zeros = np.zeros((BATCH, UNITS), np.float32)
    last, _, _ = K.rnn(step, x, [zeros, zeros])
    loss = K.mean(K.square(K.dot(last, v["head"]) - y))
    params = list(v.values())
    grads = K.gradients(loss, params)
    updates = [K.update(p, p - LR * g) for p, g in zip(params, grads)]
    f = K.function([x, y], [loss], updates=updates)
    return (lambda xv, yv: f([xv, yv])[0]), f, v


def jax_loss(params, x, y):
    def step(carry, x_t):
        h, c = carry
        z = x_t @ params["kernel"] + h @ params["recurrent"] + params["bias"]
        h, c = gates(z, c, jnp.tanh, jax.nn.sigmoid)
        return (h, c), None

    zeros = jnp.zeros((BATCH, UNITS), x.dtype)
    (h, _), _ = lax.scan(step, (zeros, zeros), jnp.swapaxes(x, 0, 1))
    return jnp.mean(jnp.square(h @ params["head"] - y))


@functools.partial(jax.jit, donate_argnums=0)  # K.function donates the state too
def _jax_train(params, x, y):
    loss, grads = jax.value_and_grad(jax_loss)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - LR * g, params, grads), loss


def jax_step(weights: dict[str, np.ndarray]):
    """The hand-written training step; returns (step(x, y) -> loss, params getter)."""
    holder = {"params": {k: jnp.asarray(w) for k, w in weights.items()}}

    def step(xv, yv):
        holder["params"], loss = _jax_train(holder["params"], xv, yv)
        return np.asarray(loss)

    return step, holder


def check_same(weights, x, y):
    k_step, _, variables = keras_step(weights)
    j_step, holder = jax_step(weights)
    k_loss, j_loss = k_step(x, y), j_step(x, y)
    np.testing.assert_allclose(k_loss, j_loss, rtol=agreement_rtol(1e-5))
    for name, var in variables.items():
        np.testing.assert_allclose(
            K.get_value(var),
            holder["params"][name],
            rtol=agreement_rtol(1e-4),
            atol=1e-6,
            err_msg=name,
        )
    return float(k_loss), float(j_loss)


def main(quick: bool = False) -> list[Row]:
    """Checks both steps agree, then times them interleaved (CPU time of the process on the
    CPU, wall-clock time on an accelerator).

    Args:
        quick: fewer repetitions.

    Returns:
        One row of the results table.
    """
    weights = initial_weights()
    rng = np.random.default_rng(1)
    x = rng.normal(size=(BATCH, STEPS, FEATURES)).astype(np.float32)
    y = rng.normal(size=(BATCH, 1)).astype(np.float32)
    check_same(weights, x, y)
    k_step, f, _ = keras_step(weights)
    j_step, _ = jax_step(weights)
    tier = on_optimized_tier(f, lambda: k_step(x, y))
    times = interleaved(
        {"K": lambda: k_step(x, y), "jax": lambda: j_step(x, y)},
        rounds=10 if quick else 30,
        warmup=3,
        clock=step_clock(),
    )
    assert f.trace_count == 1, f"the K.function step compiled {f.trace_count} times"
    return [
        ratio_row(
            f"LSTM train step ({BATCH}x{STEPS}x{FEATURES}, {UNITS} units, SGD)",
            times["K"],
            times["jax"],
            1.02,
            "`K.rnn` + `K.gradients` + `K.function` vs `lax.scan` + `jax.grad` + `jax.jit`; "
            f"K's {tier}",
        )
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    print(markdown_table(main(parser.parse_args().quick)))
