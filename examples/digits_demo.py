"""jaxkeras demo: logistic regression and a 2-layer MLP on scikit-learn's digits.

Both models are built the Keras-2 way (placeholders, variables, K.gradients, K.function with
updates) and compiled by JAX. Each epoch prints a progress line; at the end the test accuracy and
the time per training step are shown next to the same step hand-written in JAX.
"""

from __future__ import annotations

import itertools
import time

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import jaxkeras as K

BATCH = 64
EPOCHS = 30
LR = 0.1


def load_data():
    """Returns standardised digits split into train and test sets, labels one-hot."""
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[digits.target]
    return train_test_split(x, y, test_size=0.25, random_state=0, stratify=digits.target)


def init_params(sizes, seed=0):
    """Glorot-uniform weights and zero biases for dense layers of the given sizes."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        params.append(rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32))
        params.append(np.zeros(fan_out, dtype=np.float32))
    return params


def build_model(sizes):
    """Builds the Keras-2 style graph; returns (x, y, predictions, loss, weights)."""
    weights = [K.variable(p, name=f"p{i}") for i, p in enumerate(init_params(sizes))]
    x = K.placeholder((None, sizes[0]), name="x")
    y = K.placeholder((None, sizes[-1]), name="y")
    h = x
    for i in range(0, len(weights) - 2, 2):
        h = K.relu(K.dot(h, weights[i]) + weights[i + 1])
    probs = K.softmax(K.dot(h, weights[-2]) + weights[-1])
    loss = K.mean(K.categorical_crossentropy(y, probs))
    return x, y, probs, loss, weights


def train(name, sizes, data):
    """Trains one model with SGD through K.function; returns (test accuracy, seconds/step)."""
    x_train, x_test, y_train, y_test = data
    x, y, probs, loss, weights = build_model(sizes)
    grads = K.gradients(loss, weights)
    updates = [K.update_sub(w, LR * g) for w, g in zip(weights, grads)]
    train_step = K.function([x, y], [loss], updates=updates)
    accuracy = K.mean(K.cast(K.equal(K.argmax(probs, -1), K.argmax(y, -1)), "float32"))
    evaluate = K.function([x, y], [accuracy])
    order = np.random.default_rng(1)
    steps, seconds = 0, 0.0
    n_batches = len(x_train) // BATCH
    for epoch in range(EPOCHS):
        perm = order.permutation(len(x_train))
        losses = []
        for b in range(n_batches):
            idx = perm[b * BATCH : (b + 1) * BATCH]
            batch = [x_train[idx], y_train[idx]]  # (gathered outside the timing, as below)
            start = time.perf_counter()
            losses.append(train_step(batch)[0])
            if epoch > 0:  # epoch 0 includes compilation
                seconds += time.perf_counter() - start
                steps += 1
        acc = evaluate([x_test, y_test])[0]
        print(
            f"{name:>8} epoch {epoch + 1:2d}/{EPOCHS}  loss {np.mean(losses):.4f}  "
            f"test accuracy {acc:.4f}"
        )
    assert train_step.trace_count == 1, "the training step compiled more than once"
    return float(evaluate([x_test, y_test])[0]), seconds / steps


def hand_written_step_time(sizes, data):
    """Seconds per step of the same SGD step written directly with jax.jit and jax.grad."""
    x_train, _, y_train, _ = data
    params = [jnp.asarray(p) for p in init_params(sizes)]

    def loss_fn(ps, xb, yb):
        h = xb
        for i in range(0, len(ps) - 2, 2):
            h = jax.nn.relu(h @ ps[i] + ps[i + 1])
        logits = h @ ps[-2] + ps[-1]
        probs = jax.nn.softmax(logits)
        probs = jnp.clip(probs, K.epsilon(), 1 - K.epsilon())
        return jnp.mean(-jnp.sum(yb * jnp.log(probs), axis=-1))

    @jax.jit
    def step(ps, xb, yb):
        loss, g = jax.value_and_grad(loss_fn)(ps, xb, yb)
        return [p - LR * gi for p, gi in zip(ps, g)], loss

    params, loss = step(params, x_train[:BATCH], y_train[:BATCH])
    loss.block_until_ready()
    perm = np.random.default_rng(1).permutation(len(x_train))
    n_batches = len(x_train) // BATCH
    seconds = 0.0
    for b in range(n_batches * 10):
        idx = perm[(b % n_batches) * BATCH : (b % n_batches + 1) * BATCH]
        batch = [x_train[idx], y_train[idx]]  # fresh batches, gathered untimed, as in train()
        start = time.perf_counter()
        params, loss = step(params, *batch)
        float(loss)  # K.function returns NumPy values: include the same transfer
        seconds += time.perf_counter() - start
    return seconds / (n_batches * 10)


def main():
    data = load_data()
    print(
        f"digits: {len(data[0])} train / {len(data[1])} test samples, backend {K.backend()}, "
        f"device {jax.devices()[0].platform}"
    )
    results = {}
    for name, sizes in (("logreg", [64, 10]), ("mlp", [64, 128, 10])):
        acc, per_step = train(name, sizes, data)
        results[name] = (acc, per_step, hand_written_step_time(sizes, data))
    print()
    print(f"{'model':>8} {'test acc':>9} {'jaxkeras step':>14} {'hand-written':>13} {'ratio':>6}")
    for name, (acc, ours, theirs) in results.items():
        print(
            f"{name:>8} {acc:9.4f} {ours * 1e6:11.1f} us {theirs * 1e6:10.1f} us "
            f"{ours / theirs:6.2f}"
        )
    if results["mlp"][0] < 0.95:
        raise SystemExit(f"MLP test accuracy {results['mlp'][0]:.4f} is below 0.95")


if __name__ == "__main__":
    main()
