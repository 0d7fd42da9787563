"""Keras 2.2.0 and 2.2.4 load jaxkeras with ``KERAS_BACKEND=jaxkeras`` alone, train, and
round-trip HDF5 files; Keras 2.2.4's own backend tests pass.

``make test`` installs each release into its own folder of the venv (``keras-2.2/2.2.0``,
``keras-2.2/2.2.4``: the venv's own Keras is 2.3.1) and extracts Keras 2.2.4's
``tests/keras/backend`` from its source distribution on PyPI (``keras-2.2/2.2.4-tests``).
Each test runs a fresh interpreter with that release first on ``PYTHONPATH``. Keras 2.2.4's
backend tests run with ``tests/keras2_suite_plugin.py``, like Keras 2.3.1's tree
(``tests/test_keras2_suite.py``); the tests in ``tests/keras22_backend_exclusions.py``, each
with a reason that holds on the TensorFlow backend too, are strict expected failures.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from keras22_backend_exclusions import EXCLUDED

from tests.helpers import check_tree, run_test_tree

ROOT = Path(__file__).resolve().parent.parent
RELEASES = Path(os.environ.get("JAXKERAS_KERAS22", Path(sys.prefix) / "keras-2.2"))

pytestmark = [
    pytest.mark.keras2,
    pytest.mark.slow,  # a fresh Keras process each; the backend tests take about 3 minutes
    pytest.mark.skipif(
        not (RELEASES / ".ready").exists(),
        reason=f"{RELEASES} not found: `make test` installs Keras 2.2.0 and 2.2.4 there",
    ),
]


def _environ(release: str, home: Path, **more: str) -> dict[str, str]:
    """The environment of a process that imports Keras ``release`` and loads jaxkeras."""
    return dict(
        os.environ,
        KERAS_BACKEND="jaxkeras",
        KERAS_HOME=str(home),
        PYTHONPATH=os.pathsep.join([str(RELEASES / release), str(ROOT / "tests")]),
        **more,
    )


def _run(code: str, release: str, home: Path) -> list[str]:
    """Runs ``code`` with Keras ``release``; returns the lines it printed."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=_environ(release, home),
        capture_output=True,
        text=True,
        cwd=home,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out.stdout.splitlines()


SMOKE = """
import os, warnings
import numpy as np
import keras
from keras import backend as K, layers, models

assert keras.__version__ == {release!r}, keras.__version__
assert K.backend() == "jaxkeras"
rng = np.random.default_rng(0)


def round_trip(model, x, y, name):
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    losses = history.history["loss"]
    assert len(losses) == 2 and all(np.isfinite(losses)), losses
    scores = model.evaluate(x, y, verbose=0)
    predicted = model.predict(x)
    weights = model.get_weights()
    slots = K.batch_get_value(model.optimizer.weights)

    model.save(name + ".h5")
    loaded = models.load_model(name + ".h5")
    np.testing.assert_array_equal(loaded.predict(x), predicted)
    np.testing.assert_array_equal(loaded.evaluate(x, y, verbose=0), scores)
    for mine, theirs in zip(weights, loaded.get_weights()):
        np.testing.assert_array_equal(mine, theirs)
    for mine, theirs in zip(slots, K.batch_get_value(loaded.optimizer.weights)):
        np.testing.assert_array_equal(mine, theirs)
    assert len(loaded.optimizer.weights) == len(slots) > 0
    loaded.fit(x, y, batch_size=16, epochs=1, verbose=0)  # the loaded model trains on

    model.save_weights(name + "-weights.h5")
    fresh = models.model_from_json(model.to_json())
    fresh.load_weights(name + "-weights.h5")
    np.testing.assert_array_equal(fresh.predict(x), predicted)
    print(name, "ok")


x = rng.normal(size=(64, 8)).astype("float32")
y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
mlp = models.Sequential(
    [
        layers.Dense(16, activation="relu", input_shape=(8,)),
        layers.Dropout(0.5),
        layers.BatchNormalization(),
        layers.Dense(1, activation="sigmoid"),
    ]
)
mlp.compile("adam", "binary_crossentropy", metrics=["accuracy"])
round_trip(mlp, x, y, "mlp")

sequences = rng.normal(size=(32, 10, 4)).astype("float32")
labels = keras.utils.to_categorical(rng.integers(0, 3, size=32), 3)
conv_lstm = models.Sequential(
    [
        layers.Conv1D(8, 3, activation="relu", input_shape=(10, 4)),
        layers.LSTM(6),
        layers.Dense(3, activation="softmax"),
    ]
)
conv_lstm.compile("rmsprop", "categorical_crossentropy", metrics=["accuracy"])
round_trip(conv_lstm, sequences, labels, "conv_lstm")
"""


@pytest.mark.parametrize("release", ["2.2.0", "2.2.4"])
def test_models_train_and_round_trip_hdf5(release, tmp_path):
    lines = _run(SMOKE.format(release=release), release, tmp_path)
    assert lines[-2:] == ["mlp ok", "conv_lstm ok"]


LOADED_FIRST = """
import collections
import jaxkeras
assert not hasattr(collections, "Iterable")  # nothing restored before Keras loads jaxkeras
import keras
from keras import backend as K
from jaxkeras import keras2
print(keras.__version__, K.backend(), keras2.keras_loader() is K, callable(K.clear_session))
"""


def test_jaxkeras_imported_before_keras_224(tmp_path):
    # Keras 2.2.0-2.2.4 load the backend in the keras.backend package itself (no
    # keras.backend.load_backend); a program that imported jaxkeras first works all the same
    assert _run(LOADED_FIRST, "2.2.4", tmp_path)[-1] == "2.2.4 jaxkeras True True"


def test_keras_224_backend_tests_pass(tmp_path):
    tree = RELEASES / "2.2.4-tests"
    report = tmp_path / "report.json"
    environ = _environ(
        "2.2.4",
        tmp_path,
        JAXKERAS_SUITE_REPORT=str(report),
        JAXKERAS_SUITE_EXCLUSIONS="keras22_backend_exclusions",
    )
    out, outcomes = run_test_tree(tree, "tests", environ, report, "-p", "no:xdist", timeout=1800)
    check_tree("Keras 2.2.4 backend", out, outcomes, EXCLUDED, passed=100)
