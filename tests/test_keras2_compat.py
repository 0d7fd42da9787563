"""The Keras 2.3.1 compatibility layer applies when Keras loads jaxkeras, and only then."""

import importlib.util
import os
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.keras2,
    pytest.mark.slow,  # each test runs a subprocess
    pytest.mark.skipif(
        importlib.util.find_spec("keras") is None,
        reason="keras 2.3.1 is not installed (test extra)",
    ),
]

PROBE = """
import collections, inspect, os, sys, tempfile
import numpy as np
import h5py
{load}
import collections
path = os.path.join(tempfile.mkdtemp(), "probe.h5")
with h5py.File(path, "w") as f:
    f.attrs["v"] = b"2.3.1"
with h5py.File(path, "r") as f:
    mine = type(f.attrs["v"]).__name__
names = hasattr(np, "Inf") and hasattr(np, "unicode_")
print(hasattr(collections, "Mapping"), hasattr(inspect, "getargspec"), names, mine)
"""


def _probe(load: str, tmp_path) -> list[str]:
    env = dict(os.environ, KERAS_HOME=str(tmp_path), KERAS_BACKEND="jaxkeras")
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(load=load)], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_plain_import_restores_nothing(tmp_path):
    assert _probe("import jaxkeras", tmp_path) == ["False", "False", "False", "str"]


def test_keras_import_restores_names_but_not_for_other_h5py_readers(tmp_path):
    assert _probe("import keras", tmp_path) == ["True", "True", "True", "str"]


def test_importing_jaxkeras_first_then_keras_works(tmp_path):
    assert _probe("import jaxkeras, keras", tmp_path) == ["True", "True", "True", "str"]


def test_keras_reads_bytes_attributes(tmp_path):
    code = (
        "import keras, h5py, os\n"
        "from keras.utils.io_utils import H5Dict\n"
        f"p = os.path.join(r'{tmp_path}', 'a.h5')\n"
        "with h5py.File(p, 'w') as f:\n"
        "    f.attrs['backend'] = b'jaxkeras'\n"
        "    f.attrs['names'] = [b'a', b'bc']\n"
        "    f.attrs['text'] = 'unicode'\n"
        "d = H5Dict(h5py.File(p, 'r'))\n"
        "print(type(d['text']).__name__, list(d['names']), d['backend'].decode('utf8'))\n"
    )
    env = dict(os.environ, KERAS_HOME=str(tmp_path), KERAS_BACKEND="jaxkeras")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    # bytes come back as bytes (as h5py 2 gave them), text written as str stays str
    assert out.stdout.split("\n")[-2] == "str [b'a', b'bc'] jaxkeras"


OPTIMIZER_PROBE = """
{load}
import keras, optax
from jaxkeras.optimizers import OptaxOptimizer
opt = OptaxOptimizer(optax.sgd(0.1))
try:
    keras.optimizers.get(42)
    bad = "accepted"
except ValueError:
    bad = "rejected"
print(keras.optimizers.get(opt) is opt, type(keras.optimizers.get("adam")).__name__, bad)
"""


@pytest.mark.parametrize("load", ["import keras", "import jaxkeras"])
def test_keras_optimizers_get_accepts_optax_optimizers(load, tmp_path):
    env = dict(os.environ, KERAS_HOME=str(tmp_path), KERAS_BACKEND="jaxkeras")
    code = OPTIMIZER_PROBE.format(load=load)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-3:] == ["True", "Adam", "rejected"]
