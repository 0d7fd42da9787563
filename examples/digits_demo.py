"""jaxkeras demo: logistic regression and a 2-layer MLP on scikit-learn's digits.

Both models are built the Keras-2 way (placeholders, variables, K.gradients, K.function with
updates) and compiled by JAX. Each epoch prints a progress line; at the end a table shows, for
each model, the test accuracy, the time to the first step and the steady-state step, next to
the same SGD step hand-written in JAX and measured the same way, its epochs alternating with
jaxkeras's so that the machine's drift falls on both (and TF-Keras's, where
``tf_keras`` is installed: in this interpreter, or in ``.venv-bench`` as ``make bench`` makes
it). Figures measured on this machine, each run; ``benchmarks/RESULTS.md`` has the reference
rows ("digits demo" rows).

Run ``python examples/digits_demo.py [--epochs N] [--json]`` (``--json``: one JSON line of
every side's figures last, for ``benchmarks/bench_demo.py``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

BATCH = 64
EPOCHS = 30
LR = 0.1
MODELS = (("logreg", [64, 10]), ("mlp", [64, 128, 10]))
ROOT = Path(__file__).resolve().parent.parent


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


def batches(data, epochs):
    """The training batches of every epoch, in the demo's one shuffled order: a list of
    epochs, each a list of ``[x, y]`` (gathered before any timing)."""
    x_train, _, y_train, _ = data
    order = np.random.default_rng(1)
    n_batches = len(x_train) // BATCH
    out = []
    for _ in range(epochs):
        perm = order.permutation(len(x_train))
        idx = [perm[b * BATCH : (b + 1) * BATCH] for b in range(n_batches)]
        out.append([[x_train[i], y_train[i]] for i in idx])
    return out


class Timing:
    """Per-step wall times of one training run: the first step counts from the model's build."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.steps: list[float] = []

    def step(self, call):
        """Times ``call()`` (one training step, its loss read back as NumPy) and returns it."""
        start = time.perf_counter()
        out = call()
        end = time.perf_counter()
        self.steps.append(end - (self.started if not self.steps else start))
        return out

    def summary(self) -> dict:
        """The first step (build, compile and run), the median of the last half of the steps
        (the steady state), the longest step after the first, and the time the steps after
        the first spent beyond twice the steady step ("lost": a stall shows there)."""
        later = np.asarray(self.steps[1:])
        steady = float(np.median(later[len(later) // 2 :]))
        return {
            "first": self.steps[0],
            "steady": steady,
            "longest": float(later.max()),
            "lost": float(np.maximum(later - 2 * steady, 0).sum()),
        }


def alternately(*runs):
    """Runs generators (one training run each, yielding after every epoch) an epoch at a time
    in turn, so that the machine's drift falls on each alike; returns their return values."""
    results = {}
    while len(results) < len(runs):
        for i, run in enumerate(runs):
            if i not in results:
                try:
                    next(run)
                except StopIteration as done:
                    results[i] = done.value
    return [results[i] for i in range(len(runs))]


def train_jaxkeras(name, sizes, data, epochs):
    """Trains one model with SGD through K.function, yielding after each epoch; returns (test
    accuracy, timing summary)."""
    import jaxkeras as K

    _, x_test, _, y_test = data
    timing = Timing(time.perf_counter())
    weights = [K.variable(p, name=f"{name}_p{i}") for i, p in enumerate(init_params(sizes))]
    x = K.placeholder((None, sizes[0]), name="x")
    y = K.placeholder((None, sizes[-1]), name="y")
    h = x
    for i in range(0, len(weights) - 2, 2):
        h = K.relu(K.dot(h, weights[i]) + weights[i + 1])
    probs = K.softmax(K.dot(h, weights[-2]) + weights[-1])
    loss = K.mean(K.categorical_crossentropy(y, probs))
    grads = K.gradients(loss, weights)
    updates = [K.update_sub(w, LR * g) for w, g in zip(weights, grads)]
    train_step = K.function([x, y], [loss], updates=updates)
    accuracy = K.mean(K.cast(K.equal(K.argmax(probs, -1), K.argmax(y, -1)), "float32"))
    evaluate = K.function([x, y], [accuracy])
    for epoch, epoch_batches in enumerate(batches(data, epochs)):
        losses = [timing.step(lambda b=b: train_step(b)[0]) for b in epoch_batches]
        acc = evaluate([x_test, y_test])[0]
        print(
            f"{name:>8} epoch {epoch + 1:2d}/{epochs}  loss {np.mean(losses):.4f}  "
            f"test accuracy {acc:.4f}"
        )
        yield
    assert train_step.trace_count == 1, "the training step compiled more than once"
    return float(evaluate([x_test, y_test])[0]), timing.summary()


def train_hand_written(sizes, data, epochs):
    """The same SGD step written directly with jax.jit and jax.grad, run on the same batches
    and timed the same way, yielding after each epoch; returns its timing summary."""
    import jax
    import jax.numpy as jnp

    epsilon = 1e-7  # K.epsilon(): the same clipping as K.categorical_crossentropy
    timing = Timing(time.perf_counter())
    params = [jnp.asarray(p) for p in init_params(sizes)]

    def loss_fn(ps, xb, yb):
        h = xb
        for i in range(0, len(ps) - 2, 2):
            h = jax.nn.relu(h @ ps[i] + ps[i + 1])
        probs = jax.nn.softmax(h @ ps[-2] + ps[-1])
        probs = jnp.clip(probs, epsilon, 1 - epsilon)
        return jnp.mean(-jnp.sum(yb * jnp.log(probs), axis=-1))

    @jax.jit
    def step(ps, xb, yb):
        loss, g = jax.value_and_grad(loss_fn)(ps, xb, yb)
        return [p - LR * gi for p, gi in zip(ps, g)], loss

    for epoch_batches in batches(data, epochs):
        for xb, yb in epoch_batches:

            def call(xb=xb, yb=yb):
                nonlocal params
                params, loss = step(params, xb, yb)
                return float(loss)  # K.function returns NumPy values: the same transfer

            timing.step(call)
        yield
    return timing.summary()


def train_tf_keras(sizes, data, epochs):
    """The same model and SGD in TF-Keras (``train_on_batch``), timed the same way; returns
    its timing summary."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tf_keras as keras

    timing = Timing(time.perf_counter())
    params = init_params(sizes)
    model = keras.Sequential([keras.Input((sizes[0],))])
    for i, units in enumerate(sizes[1:]):
        last = i == len(sizes) - 2
        model.add(keras.layers.Dense(units, activation="softmax" if last else "relu"))
    model.set_weights(params)
    model.compile(keras.optimizers.SGD(LR), "categorical_crossentropy")
    for epoch_batches in batches(data, epochs):
        for xb, yb in epoch_batches:
            timing.step(lambda xb=xb, yb=yb: float(model.train_on_batch(xb, yb)))
    return timing.summary()


def tf_keras_python() -> str | None:
    """An interpreter that has ``tf_keras``: this one, or ``.venv-bench``'s; ``None``."""
    try:
        import tf_keras  # noqa: F401
    except ImportError:
        bench = ROOT / ".venv-bench" / "bin" / "python"
        return str(bench) if bench.exists() else None
    return sys.executable


def tf_keras_rows(epochs):
    """TF-Keras's timing summary per model, each in a fresh process; ``{}`` without TF-Keras."""
    python = tf_keras_python()
    if python is None:
        return {}
    rows = {}
    for name, _ in MODELS:
        out = subprocess.run(
            [python, __file__, "--side", "tf_keras", "--model", name, "--epochs", str(epochs)],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode == 0:
            rows[name] = json.loads(out.stdout.strip().splitlines()[-1])
    return rows


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:8.1f} us"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON last")
    parser.add_argument("--side", choices=["tf_keras"], help=argparse.SUPPRESS)
    parser.add_argument("--model", choices=[n for n, _ in MODELS], help=argparse.SUPPRESS)
    args = parser.parse_args()
    data = load_data()
    if args.side == "tf_keras":
        print(json.dumps(train_tf_keras(dict(MODELS)[args.model], data, args.epochs)))
        return
    import jax

    import jaxkeras as K

    print(
        f"digits: {len(data[0])} train / {len(data[1])} test samples, backend {K.backend()}, "
        f"device {jax.devices()[0].platform}"
    )
    results = {}
    for name, sizes in MODELS:
        (acc, ours), hand = alternately(
            train_jaxkeras(name, sizes, data, args.epochs),
            train_hand_written(sizes, data, args.epochs),
        )
        results[name] = (acc, ours, hand)
    tf_rows = tf_keras_rows(args.epochs)
    print()
    print(
        "first step: build + compile + first training step; steady step: median of the last "
        "half of the steps;\nlongest: the longest step after the first. Hand-written JAX (its "
        "epochs alternating with jaxkeras's) and TF-Keras run the same model, SGD and batches."
    )
    header = f"{'model':>8} {'test acc':>9} {'':>14} {'first step':>11} {'steady step':>11}"
    print(header + f" {'longest':>11}")
    for name, (acc, ours, hand) in results.items():
        sides = [("jaxkeras", ours), ("hand-written", hand)]
        if name in tf_rows:
            sides.append(("TF-Keras", tf_rows[name]))
        for i, (side, row) in enumerate(sides):
            label = f"{name:>8} {acc:9.4f}" if i == 0 else " " * 18
            print(
                f"{label} {side:>14} {_ms(row['first'])} {_ms(row['steady'])} {_ms(row['longest'])}"
            )
        ratio = ours["steady"] / hand["steady"]
        print(f"{'':>18} {'ratio':>14} {ours['first'] / hand['first']:10.2f}x {ratio:10.2f}x")
    if not tf_rows:
        print("(TF-Keras: not installed here; `make bench` installs it into .venv-bench)")
    if results["mlp"][0] < 0.95:
        raise SystemExit(f"MLP test accuracy {results['mlp'][0]:.4f} is below 0.95")
    if args.json:
        sides = {
            name: {
                "accuracy": acc,
                "jaxkeras": ours,
                "hand_written": hand,
                "tf_keras": tf_rows.get(name),
            }
            for name, (acc, ours, hand) in results.items()
        }
        print(json.dumps(sides))


if __name__ == "__main__":
    main()
