"""The checks of tests/test_keras2_multi_gpu.py that need several devices, run in a subprocess.

``python keras2_multi_gpu_worker.py OUT.json`` runs on 8 CPU devices (the test sets
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` and ``KERAS_BACKEND=jaxkeras``) and writes
to OUT.json: an MLP with Dropout trained on one device and through ``multi_gpu_model`` (all
devices; a list of four), its losses, weights, predictions and where its weights live, a
``save_weights`` round trip of the template, and the errors of bad ``gpus``. The test asserts.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import keras
import numpy as np

import jaxkeras as K
from jaxkeras import keras2

SAMPLES, BATCH, EPOCHS = 1001, 64, 2  # the last batch of 41 rows: 8 devices do not divide it


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(SAMPLES, 8)).astype("float32")
    return x, (x[:, :4].sum(axis=1, keepdims=True) > 0).astype("float32")


def template() -> keras.models.Model:
    K.clear_session()
    K.set_random_seed(0)  # seeds NumPy too: the same weights, Dropout seeds and shuffles
    return keras.models.Sequential(
        [
            keras.layers.Dense(32, activation="relu", input_shape=(8,)),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )


def train(gpus) -> dict:
    x, y = data()
    model = template()
    trained = model if gpus is None else keras.utils.multi_gpu_model(model, gpus=gpus)
    trained.compile(keras.optimizers.Adam(0.01), "binary_crossentropy", metrics=["accuracy"])
    history = trained.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=True, verbose=0)
    result = {
        "losses": [float(v) for v in history.history["loss"]],
        "evaluate": [float(v) for v in trained.evaluate(x, y, batch_size=BATCH, verbose=0)],
        "predictions": trained.predict(x, batch_size=BATCH).ravel().tolist(),
        "weights": [w.tolist() for w in model.get_weights()],
        "devices": sorted(
            {d.id for a in K.get_state(model.weights).values() for d in a.sharding.device_set}
        ),
    }
    if gpus is not None:
        result["same_layers"] = trained.layers[1:] == model.layers
        result["parallel_class"] = type(trained).__name__
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "template.h5")
            model.save_weights(path)
            again = template()
            again.load_weights(path)
            result["saved_weights_equal"] = all(
                np.array_equal(a, b) for a, b in zip(again.get_weights(), model.get_weights())
            )
    return result


def error(gpus) -> list[str]:
    try:
        keras.utils.multi_gpu_model(template(), gpus=gpus)
    except (ValueError, TypeError) as e:
        return [type(e).__name__, str(e)]
    return ["none", ""]


def main(out: str) -> None:
    results = {
        "devices": len(K.distribution.list_devices()),
        "installed": [
            keras.utils.multi_gpu_model is keras2.multi_gpu_model,
            keras.utils.multi_gpu_utils.multi_gpu_model is keras2.multi_gpu_model,
            keras.callbacks.BackupAndRestore is keras2.BackupAndRestore,
        ],
        "single": train(None),
        "eight": train(8),
        "listed": train([1, 3, 5, 6]),
        "errors": {str(gpus): error(gpus) for gpus in (9, 1, [2], [0, 0], [0, 8], "2", 2.0)},
    }
    results["default_devices"] = default_devices()
    with open(out, "w") as f:
        json.dump(results, f)


def default_devices() -> int:
    """How many devices ``multi_gpu_model(model)`` (no ``gpus``) trains on."""
    parallel = keras.utils.multi_gpu_model(template())
    return parallel._jaxkeras_distribution.device_mesh.devices.size


if __name__ == "__main__":
    main(sys.argv[1])
