"""The checks of tests/test_distribution.py that need several devices, run in a subprocess.

``python distribution_worker.py devices OUT.json`` runs on 8 CPU devices (the test sets
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` before JAX starts) and writes what it
measured to OUT.json: each model trained on one device, data-parallel and model-parallel, the
shardings of its variables, errors. ``python distribution_worker.py host ID PORT OUT.json`` is
one of two processes of a two-host job (4 CPU devices each) on localhost. The test asserts.
"""

from __future__ import annotations

import gc
import json
import os
import re
import sys

import jax
import numpy as np
import optax

import jaxkeras as K
from jaxkeras import distribution as D
from jaxkeras import mixed_precision
from jaxkeras.optimizers import OptaxOptimizer

MODE = sys.argv[1]
if MODE == "host":  # CPU devices of several processes talk through gloo
    jax.config.update("jax_cpu_collectives_implementation", "gloo")

STEPS, BATCH = 20, 64


def digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return (x / 16.0).astype("float32"), np.eye(10, dtype="float32")[y]


def plain(name: str) -> str:
    """A variable's name without the ``_N`` that keeps it unique among live variables."""
    return re.sub(r"_\d+$", "", name)


def describe(array: jax.Array) -> dict:
    """The sharding of a stored value, in JSON."""
    sharding = array.sharding
    spec = getattr(sharding, "spec", None)
    return {
        "spec": None if spec is None else [list(a) if isinstance(a, tuple) else a for a in spec],
        "devices": len(sharding.device_set),
        "shard_shape": list(array.addressable_shards[0].data.shape),
        "replicated": bool(sharding.is_fully_replicated),
    }


# ---------------------------------------------------------------------------------------------
# models written with K ops


def mlp(x):
    w1 = K.variable(K.random_normal((64, 32), seed=1) * 0.2, name="dense_1/kernel")
    b1 = K.zeros((32,), name="dense_1/bias")
    w2 = K.variable(K.random_normal((32, 10), seed=2) * 0.2, name="dense_2/kernel")
    b2 = K.zeros((10,), name="dense_2/bias")
    hidden = K.dropout(K.relu(K.dot(x, w1) + b1), 0.1, seed=3)  # fresh numbers every step
    return K.softmax(K.dot(hidden, w2) + b2), [w1, b1, w2, b2]


def convnet(x):
    k = K.variable(K.random_normal((3, 3, 1, 8), seed=4) * 0.3, name="conv_1/kernel")
    c = K.zeros((8,), name="conv_1/bias")
    w = K.variable(K.random_normal((128, 10), seed=5) * 0.1, name="dense_3/kernel")
    b = K.zeros((10,), name="dense_3/bias")
    images = K.reshape(x, (-1, 8, 8, 1))
    hidden = K.pool2d(
        K.relu(K.bias_add(K.conv2d(images, k, padding="same"), c)), (2, 2), strides=(2, 2)
    )
    return K.softmax(K.dot(K.batch_flatten(hidden), w) + b), [k, c, w, b]


def train(model, distribution, data, optimizer: str = "momentum", policy: str = "float32") -> dict:
    """Trains ``model`` for STEPS steps under ``distribution``: SGD with momentum written in K
    ops, or (``optimizer="optax"``) ``OptaxOptimizer(optax.adam)``."""
    K.clear_session()
    K.set_random_seed(0)
    gc.collect()  # the variables of earlier runs go, so names repeat
    xs, ys = data
    mixed_precision.set_global_policy(policy)
    scope = distribution.scope() if distribution is not None else None
    if scope is not None:
        scope.__enter__()
    try:
        x, t = K.placeholder((None, 64)), K.placeholder((None, 10))
        probs, params = model(x)
        loss = K.mean(K.categorical_crossentropy(t, probs))
        if optimizer == "optax":  # its slots are named after their params, so placed alike
            opt = OptaxOptimizer(optax.adam(1e-2))
            updates = opt.get_updates(loss, params)
            slots = [v for v in opt.weights if any(v.name.endswith(p.name) for p in params)]
        else:  # named after their variables, so the layout map's regular expressions place them
            velocities = [K.zeros(K.int_shape(p), name=f"{p.name}/velocity") for p in params]
            updates, slots = [], velocities
            for p, v, g in zip(params, velocities, K.gradients(loss, params)):
                updates += [K.update(v, 0.9 * v - 0.1 * g), K.update_add(p, 0.9 * v - 0.1 * g)]
        step = K.function([x, t], [loss], updates=updates)
        placed = {plain(n): describe(a) for n, a in K.get_state(params).items()}
        losses = [
            float(step([xs[i * BATCH : (i + 1) * BATCH], ys[i * BATCH : (i + 1) * BATCH]])[0])
            for i in range(STEPS)
        ]
        state = K.get_state(params)
        values = [K.get_value(p) for p in params]
        result = {
            "losses": losses,
            "weights": {plain(p.name): v.tolist() for p, v in zip(params, values)},
            "placed": placed,
            "trained": {plain(n): describe(a) for n, a in state.items()},
            "slots": {plain(n): describe(a) for n, a in K.get_state(slots).items()},
            "state_matches_value": all(
                isinstance(v, np.ndarray) and np.array_equal(np.asarray(state[p.name]), v)
                for p, v in zip(params, values)
            ),
        }
        if policy == "mixed_float16":
            scale = mixed_precision.loss_scale_variables()[0]
            result["loss_scale"] = describe(K.get_state([scale])[scale.name])
        if distribution is not None:
            try:
                step([xs[:13], ys[:13]])
            except ValueError as err:
                result["odd_batch_error"] = str(err)
        return result
    finally:
        mixed_precision.set_global_policy("float32")
        if scope is not None:
            scope.__exit__(None, None, None)


def model_parallel(*layouts: tuple[str, tuple]) -> D.ModelParallel:
    mesh = D.DeviceMesh((2, 4), ("batch", "model"))
    layout_map = D.LayoutMap(mesh)
    for key, axes in layouts:
        layout_map[key] = axes
    return D.ModelParallel(layout_map=layout_map, batch_dim_name="batch")


def random_draws(distribution) -> list:
    """Two calls of a function whose dropout mask is drawn on the (split) batch."""
    K.clear_session()
    K.set_random_seed(0)
    x = K.placeholder((None, 6))
    f = K.function([x], [K.dropout(x, 0.5, seed=11)])
    ones = np.ones((16, 6), "float32")
    if distribution is None:
        return [f([ones])[0].tolist() for _ in range(2)]
    with distribution.scope():
        return [f([ones])[0].tolist() for _ in range(2)]


def writes_keep_layout(folder: str) -> dict:
    """The layout of a split variable after each way of writing it."""
    with model_parallel(("kernel", (None, "model"))).scope():
        v = K.variable(np.zeros((4, 8)), name="kernel")
    layouts = {}
    K.set_value(v, np.ones((4, 8)))
    layouts["set_value"] = describe(K.get_state([v])[v.name])
    K.set_state({v.name: np.full((4, 8), 2.0)})
    layouts["set_state"] = describe(K.get_state([v])[v.name])
    K.eval(K.update(v, np.full((4, 8), 3.0)))
    layouts["eval_update"] = describe(K.get_state([v])[v.name])
    path = os.path.join(folder, "checkpoint.npz")
    K.save_checkpoint(path, [v])
    K.restore_checkpoint(path, [v])
    layouts["restore_checkpoint"] = describe(K.get_state([v])[v.name])
    layouts["value"] = K.get_value(v).tolist()
    return layouts


# ---------------------------------------------------------------------------------------------
# multi-backend Keras 2.3.1


def keras_fit(how: str, data) -> dict:
    import keras

    K.clear_session()
    K.set_random_seed(0)
    np.random.seed(0)  # Keras shuffles with NumPy's global generator
    gc.collect()
    xs, ys = data[0][:1024], data[1][:1024]

    def build():
        model = keras.models.Sequential(
            [
                keras.layers.Dense(32, activation="relu", input_shape=(64,)),
                keras.layers.Dropout(0.1),
                keras.layers.Dense(10, activation="softmax"),
            ]
        )
        model.compile(keras.optimizers.Adam(0.01), "categorical_crossentropy")
        return model

    def fit(model):
        history = model.fit(xs, ys, batch_size=BATCH, epochs=2, shuffle=True, verbose=0)
        return history.history["loss"], model.predict(xs, batch_size=BATCH)

    if how == "single":
        model = build()
        losses, predictions = fit(model)
    elif how == "scope":
        with D.DataParallel().scope():
            model = build()
            losses, predictions = fit(model)
    else:  # "set_distribution"
        D.set_distribution(D.DataParallel())
        try:
            model = build()
            losses, predictions = fit(model)
        finally:
            D.set_distribution(None)
    state = K.get_state(model.weights)
    return {
        "losses": [float(v) for v in losses],
        "predictions": predictions.tolist(),
        "trained": {plain(n): describe(a) for n, a in state.items()},
    }


def devices_run(out: str) -> None:
    data = digits()
    results = {"devices": D.list_devices()}
    mlp_layouts = (
        ("dense_1/kernel", (None, "model")),
        ("dense_1/bias", ("model",)),
        ("dense_2/kernel", ("model", None)),
    )
    conv_layouts = (
        ("conv_1/kernel", (None, None, None, "model")),
        ("conv_1/bias", ("model",)),
        ("dense_3/kernel", ("model", None)),
    )
    for name, model, layouts in (("mlp", mlp, mlp_layouts), ("convnet", convnet, conv_layouts)):
        results[name] = {
            "single": train(model, None, data),
            "data_parallel": train(model, D.DataParallel(), data),
            "model_parallel": train(model, model_parallel(*layouts), data),
        }
    results["mlp_optax"] = {
        "single": train(mlp, None, data, "optax"),
        "model_parallel": train(mlp, model_parallel(*mlp_layouts), data, "optax"),
    }
    results["mixed"] = {
        "single": train(mlp, None, data, policy="mixed_float16"),
        "data_parallel": train(mlp, D.DataParallel(), data, policy="mixed_float16"),
        "model_parallel": train(mlp, model_parallel(*mlp_layouts), data, policy="mixed_float16"),
    }
    results["random"] = {
        "single": random_draws(None),
        "data_parallel": random_draws(D.DataParallel()),
    }
    results["writes"] = writes_keep_layout(os.path.dirname(out))
    results["keras"] = {
        how: keras_fit(how, data) for how in ("single", "scope", "set_distribution")
    }
    with open(out, "w") as f:
        json.dump(results, f)


def host_train(distribution, process_id: int) -> dict:
    """Three steps of linear regression; each host feeds its half of every batch."""
    K.clear_session()
    K.set_random_seed(0)
    gc.collect()  # the variable of the run before goes, so the name "w" is free
    rng = np.random.RandomState(0)
    xs, ys = rng.rand(192, 8).astype("float32"), rng.rand(192, 2).astype("float32")
    half = slice(process_id * 32, process_id * 32 + 32)
    D.set_distribution(distribution)
    try:
        x, t = K.placeholder((None, 8)), K.placeholder((None, 2))
        w = K.variable(K.random_normal((8, 2), seed=1), name="w")
        loss = K.mean(K.square(K.dot(x, w) - t))
        (g,) = K.gradients(loss, [w])
        f = K.function([x, t], [loss, K.dot(x, w)], updates=[K.update_sub(w, 0.1 * g)])
        losses = []
        for i in range(3):
            batch = slice(i * 64, i * 64 + 64)
            # one device: the whole batch; distributed: this host's half of it
            if distribution is None:
                value, outputs = f([xs[batch], ys[batch]])
            else:
                value, outputs = f([xs[batch][half], ys[batch][half]])
            losses.append(float(value))
        return {
            "losses": losses,
            "outputs_shape": list(outputs.shape),
            "value": K.get_value(w).tolist(),
            "sharding": describe(K.get_state([w])[w.name]),
        }
    finally:
        D.set_distribution(None)


def host_run(process_id: int, port: int, out: str) -> None:
    """One host of two (4 CPU devices each), connected on localhost."""
    D.initialize(f"localhost:{port}", num_processes=2, process_id=process_id)
    results = {"devices": len(D.list_devices()), "local": jax.local_device_count()}
    results["single"] = host_train(None, process_id)
    results["data_parallel"] = host_train(D.DataParallel(), process_id)
    results["model_parallel"] = host_train(model_parallel(("^w$", ("model", None))), process_id)
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    if MODE == "devices":
        devices_run(sys.argv[2])
    else:
        host_run(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
