"""Unchanged Keras 2.3.1 models train under jaxkeras's dtype policies.

Each case runs in a fresh process (Keras 2.3.1 on jaxkeras), which trains the same model on
scikit-learn's digits under float32 and under a mixed policy, from the same initial weights,
and reports the accuracies and what the compiled train step computes in.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.helpers import run_on_keras2

pytestmark = [
    pytest.mark.keras2,
    pytest.mark.slow,  # trains models in subprocesses
    pytest.mark.skipif(
        importlib.util.find_spec("keras") is None,
        reason="keras 2.3.1 is not installed (test extra)",
    ),
]

SCRIPT = r"""
import json, re, sys
import numpy as np
import keras
from keras import layers
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
import jaxkeras
from jaxkeras import mixed_precision

kind, policy = sys.argv[1], sys.argv[2]
d = load_digits()
x = (d.data / 16.0).astype("float32")
y = keras.utils.to_categorical(d.target, 10)
x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
shape = {"mlp": (64,), "lstm": (8, 8), "convnet": (8, 8, 1), "resnet": (8, 8, 1)}[kind]
x_train, x_test = x_train.reshape((-1,) + shape), x_test.reshape((-1,) + shape)


def build():
    inp = layers.Input(shape)
    if kind == "mlp":
        h = layers.Dense(64, activation="relu")(inp)
    elif kind == "lstm":
        h = layers.LSTM(32)(inp)
    elif kind == "convnet":
        h = layers.Conv2D(16, 3, padding="same", activation="relu")(inp)
        h = layers.MaxPooling2D()(h)
        h = layers.Flatten()(h)
    else:  # a ResNet-style block: conv, BN, ReLU, conv, BN, add, ReLU
        h = layers.Conv2D(16, 3, padding="same")(inp)
        r = layers.Activation("relu")(layers.BatchNormalization()(h))
        r = layers.Conv2D(16, 3, padding="same")(r)
        r = layers.BatchNormalization()(r)
        h = layers.Activation("relu")(layers.add([h, r]))
        h = layers.Flatten()(h)  # (global average pooling left it at 40% accuracy: noise)
    out = layers.Dense(10, activation="softmax")(h)
    return keras.models.Model(inp, out)


def train(name):
    mixed_precision.set_global_policy(name)
    jaxkeras.set_random_seed(0)
    np.random.seed(0)
    model = build()
    model.compile(keras.optimizers.Adam(0.005), "categorical_crossentropy", metrics=["accuracy"])
    model.fit(x_train, y_train, epochs=8, batch_size=32, verbose=0)
    acc = model.evaluate(x_test, y_test, verbose=0)[1]
    f = model.train_function
    feeds = [x_train[:32], y_train[:32], np.ones(32, "float32")]
    feeds += [1] * (len(f.inputs) - len(feeds))  # the learning phase (BatchNormalization)
    text = f.lower(feeds).as_text()
    products = re.findall(
        r"stablehlo\.(?:dot_general|convolution).*?: \((.*?)\) -> (tensor<[^>]*>)", text
    )
    weights = {str(w.dtype) for w in model.get_weights()}
    return acc, products, weights, f.trace_count, f.variable_names


acc32, _, _, traces32, _ = train("float32")
acc, products, weights, traces, names = train(policy)
print(json.dumps({
    "float32": float(acc32),
    "mixed": float(acc),
    "products": products,
    "weights": sorted(weights),
    "traces": [traces32, traces],
    "scaled": "loss_scale" in names,
}))
"""


def _run(kind: str, policy: str, tmp_path) -> dict:
    return json.loads(run_on_keras2(SCRIPT, tmp_path, kind, policy).strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["mlp", "lstm", "convnet", "resnet"])
def test_keras_model_trains_in_mixed_bfloat16(kind, tmp_path):
    result = _run(kind, "mixed_bfloat16", tmp_path)
    assert result["mixed"] >= result["float32"] - 0.01  # within 1 point of float32
    assert result["weights"] == ["float32"]  # master weights
    assert result["products"], "no products in the train step"
    for operands, out in result["products"]:
        assert operands.count("bf16") == 2, operands  # forward and backward products
        assert out.endswith(("f32>", "bf16>")), out
    assert any(out.endswith("f32>") for _, out in result["products"])  # f32 accumulation
    # as many compilations as under float32 (the batch sizes of an epoch)
    assert result["traces"][0] == result["traces"][1]
    assert not result["scaled"]


def test_keras_model_trains_in_mixed_float16_with_loss_scaling(tmp_path):
    result = _run("mlp", "mixed_float16", tmp_path)
    assert result["mixed"] >= result["float32"] - 0.01
    assert result["scaled"]
    assert all(operands.count("f16") >= 2 for operands, _ in result["products"])


SKIP_SCRIPT = r"""
import json
import numpy as np
import keras
from keras import layers
from jaxkeras import mixed_precision

mixed_precision.set_global_policy("mixed_float16")
model = keras.models.Sequential([
    layers.Dense(16, activation="relu", input_shape=(8,)),
    layers.BatchNormalization(),
    layers.Dense(4, activation="softmax"),
])
model.compile(keras.optimizers.Adam(0.01), "categorical_crossentropy")
rng = np.random.default_rng(0)
x = rng.standard_normal((32, 8)).astype("float32")
y = np.eye(4, dtype="float32")[rng.integers(0, 4, 32)]
model.train_on_batch(x, y)
scale, count = mixed_precision.loss_scale_variables()
everything = model.weights + model.optimizer.weights
before = [keras.backend.get_value(v) for v in everything]
before_scale = float(keras.backend.get_value(scale))
model.train_on_batch(x * 1e5, y)  # float16 operands overflow: the step must be skipped
same = all(np.array_equal(keras.backend.get_value(v), b) for v, b in zip(everything, before))
after_scale = float(keras.backend.get_value(scale))
losses = [float(model.train_on_batch(x, y)) for _ in range(20)]
print(json.dumps({
    "same": same,
    "halved": after_scale == before_scale / 2,
    "iterations": int(keras.backend.get_value(model.optimizer.iterations)),
    "finite": bool(np.all(np.isfinite(losses))),
    "falling": losses[-1] < losses[0],
}))
"""


def test_keras_skipped_step_changes_no_variable(tmp_path):
    """A non-finite gradient under mixed_float16 leaves the weights, the BatchNormalization
    statistics, Adam's moments and ``iterations`` as they were; training goes on."""
    result = json.loads(run_on_keras2(SKIP_SCRIPT, tmp_path).strip().splitlines()[-1])
    assert result == {
        "same": True,
        "halved": True,
        "iterations": 21,
        "finite": True,
        "falling": True,
    }
