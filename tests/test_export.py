"""Exported functions: one file, loaded and called by a process that has only JAX."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import jax
import numpy as np
import pytest

import jaxkeras as K
from jaxkeras import export as E
from tests.helpers import run_on_keras2

RNG = np.random.default_rng(0)

# a fresh process: JAX and NumPy only, which it checks
SERVE = r"""
import json, sys
import numpy as np
import jax
with open(sys.argv[1], "rb") as f:
    exported = jax.export.deserialize(bytearray(f.read()))
inputs = np.load(sys.argv[2])
outputs = {k: np.asarray(exported.call(inputs[k])[0]).tolist() for k in inputs.files}
assert not any(m.split(".")[0] in ("jaxkeras", "keras") for m in sys.modules), "imported"
print(json.dumps({"outputs": outputs, "platforms": list(exported.platforms)}))
"""


def _serve(path, batches: dict, tmp_path) -> dict:
    np.savez(tmp_path / "inputs.npz", **batches)
    out = subprocess.run(
        [sys.executable, "-c", SERVE, str(path), str(tmp_path / "inputs.npz")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _convnet():
    x = K.placeholder((None, 8, 8, 1))
    kernel = K.variable(RNG.standard_normal((3, 3, 1, 4)).astype("float32"))
    dense = K.variable(RNG.standard_normal((64, 10)).astype("float32") * 0.1)
    h = K.pool2d(K.relu(K.conv2d(x, kernel, padding="same")), (2, 2), (2, 2))
    return K.function([x], [K.softmax(K.dot(K.batch_flatten(h), dense))])


@pytest.mark.slow
def test_an_exported_function_serves_any_batch_size_with_jax_alone(tmp_path):
    f = _convnet()
    path = tmp_path / "convnet.jax"
    exported = E.export(f, path)
    assert "batch" in str(exported.in_avals[0].shape)
    batches = {f"b{n}": RNG.standard_normal((n, 8, 8, 1)).astype("float32") for n in (1, 5, 32)}
    served = _serve(path, batches, tmp_path)
    assert served["platforms"] == ["cpu", "cuda"]
    for name, batch in batches.items():
        np.testing.assert_allclose(served["outputs"][name], f([batch])[0], rtol=1e-6, atol=1e-7)


def test_load_calls_the_exported_function(tmp_path):
    f = _convnet()
    path = tmp_path / "convnet.jax"
    E.export(f, path, platforms=["cpu"])
    batch = RNG.standard_normal((3, 8, 8, 1)).astype("float32")
    (got,) = E.load(path)(batch)  # on the CPU, wherever f runs
    if jax.default_backend() == "cpu":
        np.testing.assert_array_equal(got, f([batch])[0])
    else:  # f ran on the accelerator: other kernels, other rounding
        np.testing.assert_allclose(got, f([batch])[0], rtol=1e-5, atol=1e-6)


def test_load_of_a_function_exported_for_no_platform_here_says_so(tmp_path):
    path = tmp_path / "tpu_only.jax"
    E.export(_convnet(), path, platforms=["tpu"])  # this test never runs on a TPU
    with pytest.raises(ValueError, match=r"exported for platforms \['tpu'\].*export it again"):
        E.load(path)


def test_the_learning_phase_and_the_values_at_export_are_kept(tmp_path):
    x = K.placeholder((None, 4))
    w = K.variable(np.ones((4, 2), "float32"))
    y = K.dot(x, w)
    f = K.function([x], [K.in_train_phase(K.dropout(y, 0.5), y)])
    test_phase = E.export(f)  # phase 0: no dropout; for CPU and CUDA, so it runs on either
    batch = np.ones((2, 4), "float32")
    np.testing.assert_array_equal(np.asarray(test_phase.call(batch)[0]), np.full((2, 2), 4.0))
    K.set_value(w, np.zeros((4, 2), "float32"))  # after export: not seen
    np.testing.assert_array_equal(np.asarray(test_phase.call(batch)[0]), np.full((2, 2), 4.0))
    train_phase = E.export(f, learning_phase=1)
    dropped = np.asarray(train_phase.call(batch)[0])
    assert set(np.unique(dropped)) <= {0.0}  # the weights are 0 now; dropout still runs


def test_bad_arguments_name_themselves():
    f = _convnet()
    with pytest.raises(ValueError, match=r"platforms must be some of .* got \['gpu'\]"):
        E.export(f, platforms=["gpu"])
    with pytest.raises(ValueError, match="learning_phase must be 0 or 1, got 2"):
        E.export(f, learning_phase=2)
    with pytest.raises(TypeError, match=r"target must be a K\.function or a Keras model"):
        E.export(42)


KERAS_EXPORT = r"""
import json, sys
import numpy as np
import keras
from keras import layers
from jaxkeras import export

model = keras.models.Sequential([
    layers.Conv2D(8, 3, padding="same", activation="relu", input_shape=(8, 8, 1)),
    layers.BatchNormalization(),
    layers.Flatten(),
    layers.Dropout(0.3),
    layers.Dense(10, activation="softmax"),
])
model.compile("adam", "categorical_crossentropy")
rng = np.random.default_rng(0)
x = rng.standard_normal((64, 8, 8, 1)).astype("float32")
model.fit(x, np.eye(10)[rng.integers(0, 10, 64)], epochs=2, verbose=0)
export.export(model, sys.argv[1])
batches = {f"b{n}": rng.standard_normal((n, 8, 8, 1)).astype("float32") for n in (1, 7)}
np.savez(sys.argv[2], **batches)
print(json.dumps({k: model.predict(v).tolist() for k, v in batches.items()}))
"""


@pytest.mark.slow
@pytest.mark.keras2
@pytest.mark.skipif(importlib.util.find_spec("keras") is None, reason="keras 2.3.1 missing")
def test_a_keras_model_exports_its_predict(tmp_path):
    path, inputs = tmp_path / "model.jax", tmp_path / "batches.npz"
    printed = run_on_keras2(KERAS_EXPORT, tmp_path, str(path), str(inputs))
    predicted = json.loads(printed.strip().splitlines()[-1])
    batches = dict(np.load(inputs))
    served = _serve(path, batches, tmp_path)
    for name in batches:
        np.testing.assert_allclose(served["outputs"][name], predicted[name], rtol=1e-6, atol=1e-7)


def test_a_saved_model_serves_the_same_outputs(tmp_path):
    """Where TensorFlow is installed (make bench's environment), the SavedModel that
    ``to_saved_model`` writes serves the function's outputs for any batch size."""
    tf = pytest.importorskip("tensorflow")
    f = _convnet()
    E.to_saved_model(f, tmp_path / "saved")
    served = tf.saved_model.load(str(tmp_path / "saved")).signatures["serving_default"]
    for n in (1, 6):
        batch = RNG.standard_normal((n, 8, 8, 1)).astype("float32")
        got = served(input_0=tf.constant(batch))["output_0"].numpy()
        np.testing.assert_allclose(got, f([batch])[0], rtol=1e-6, atol=1e-7)


def test_to_saved_model_without_tensorflow_says_so(tmp_path):
    if importlib.util.find_spec("tensorflow") is not None:
        pytest.skip("TensorFlow is installed here")
    with pytest.raises(ImportError, match=r"to_saved_model needs TensorFlow"):
        E.to_saved_model(_convnet(), tmp_path / "saved")
