"""The Keras 2.3.1 compatibility layer applies when Keras loads jaxkeras, and only then."""

import importlib.util
import os

import pytest

from tests.helpers import run_on_keras2

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
    return run_on_keras2(PROBE.format(load=load), tmp_path).split()


def test_plain_import_restores_nothing(tmp_path):
    assert _probe("import jaxkeras", tmp_path) == ["False", "False", "False", "str"]


def test_keras_import_restores_names_but_not_for_other_h5py_readers(tmp_path):
    assert _probe("import keras", tmp_path) == ["True", "True", "True", "str"]


def test_importing_jaxkeras_first_then_keras_works(tmp_path):
    assert _probe("import jaxkeras, keras", tmp_path) == ["True", "True", "True", "str"]


H5PY_PROBE = """
import io, os, tempfile
import h5py
{load}
def opens_missing_file():
    try:
        h5py.File(os.path.join(tempfile.mkdtemp(), "missing.h5")).close()
        return "created"
    except OSError:
        return "OSError"
print(opens_missing_file(), hasattr(h5py.File, "fid"))
if "keras" in globals():
    from keras.utils.io_utils import H5Dict, save_to_binary_h5py
    def write(h5file):
        h5file.attrs["empty"] = []
        return H5Dict(h5file)["empty"], type(h5file.attrs["empty"]).__name__
    # Keras's in-memory file, opened without a mode; Keras reads the empty attribute as []
    print(*save_to_binary_h5py(write, io.BytesIO()))
"""


def test_h5py_changes_only_for_keras(tmp_path):
    # h5py 3 opens a file named without a mode read-only; Keras's own modules get h5py 2's
    # default (read-write, else read-only, else created) and empty attributes as lists, and
    # File.fid (h5py 2's alias of File.id) is back only when Keras loads jaxkeras
    plain = run_on_keras2(H5PY_PROBE.format(load="import jaxkeras"), tmp_path).split()
    assert plain == ["OSError", "False"]
    lines = run_on_keras2(H5PY_PROBE.format(load="import keras"), tmp_path).splitlines()
    assert lines[-2:] == ["OSError True", "[] ndarray"]


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
    # bytes come back as bytes (as h5py 2 gave them), text written as str stays str
    assert run_on_keras2(code, tmp_path).split("\n")[-2] == "str [b'a', b'bc'] jaxkeras"


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
    printed = run_on_keras2(OPTIMIZER_PROBE.format(load=load), tmp_path)
    assert printed.split()[-3:] == ["True", "Adam", "rejected"]


def _backend_exports(branch: str) -> set[str]:
    """The names Keras 2.3.1's ``keras.backend`` imports from its backend, at top level and
    in the ``if backend() == branch`` block of its ``__init__`` (read from its source)."""
    import ast

    spec = importlib.util.find_spec("keras")
    source = os.path.join(os.path.dirname(spec.origin), "backend", "__init__.py")
    with open(source) as f:
        tree = ast.parse(f.read())

    def imported(statements) -> set[str]:
        return {
            alias.name
            for s in statements
            if isinstance(s, ast.ImportFrom) and s.module == "load_backend"
            for alias in s.names
        }

    names = imported(tree.body)
    for block in (s for s in ast.walk(tree) if isinstance(s, ast.If)):
        test = ast.unparse(block.test)
        if test == f"backend() == {branch!r}":
            names |= imported(block.body)
    return names


SURFACE_PROBE = """
import warnings
warnings.simplefilter("error")  # Keras's Lambda warns when it cannot infer a shape
import keras
from keras import backend as K
missing = [n for n in {names!r} if not callable(getattr(K, n, None))]
first = keras.layers.Dense(2, input_shape=(3,)).name
K.clear_session()
again = keras.layers.Dense(2, input_shape=(3,)).name
x = keras.layers.Input((8, 8, 32))
ints = keras.layers.Input((5,), dtype="int32")
split = keras.layers.Lambda(lambda t: K.reshape(t, (-1, 8, 8, 8, 4)))
pair = keras.layers.Lambda(lambda ts: [ts[0] * 2, K.sum(ts[1], axis=-1)])
count = keras.layers.Lambda(lambda t: K.cast(K.expand_dims(t, 1), "float32"))
given = keras.layers.Lambda(lambda t: t[:, :2], output_shape=(2,))
outs = [split(x), *pair([x, x]), count(ints), given(keras.layers.Input((3,)))]
model = keras.models.Model([x, ints], outs[:4])
def shapes(t):
    return [K.int_shape(o) for o in t] if isinstance(t, list) else K.int_shape(t)
agree = all(layer.output_shape == shapes(layer.output) for layer in model.layers)
print(missing, first == again, agree)
print(split.output_shape, pair.output_shape, count.output_shape, given.output_shape)
"""


def test_keras_backend_surface_and_lambda_shapes(tmp_path):
    """Every name Keras 2.3.1's backend exports on TensorFlow exists on jaxkeras, Keras's own
    clear_session resets layer names, and Lambda infers output shapes without warning."""
    names = sorted(_backend_exports("tensorflow"))
    assert {"clear_session", "get_session", "set_session"} <= set(names)
    lines = run_on_keras2(SURFACE_PROBE.format(names=names), tmp_path).strip().splitlines()
    assert lines[-2] == "[] True True"
    assert lines[-1] == (
        "(None, 8, 8, 8, 4) [(None, 8, 8, 32), (None, 8, 8)] (None, 1, 5) (None, 2)"
    )


QUIET_TRAINING = """
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import numpy as np
    import keras
    import keras.backend as K
    model = keras.models.Sequential([keras.layers.Dense(2, input_shape=(3,))])
    model.compile("adam", "mse")
    model.fit(np.ones((8, 3)), np.ones((8, 2)), epochs=2, batch_size=4, verbose=0)
    model.evaluate(np.ones((4, 3)), np.ones((4, 2)), verbose=0)
    model.predict(np.ones((2, 3)))
    keras.optimizers.SGD()  # every optimizer of keras.optimizers makes an int64 step counter
    print(K.dtype(model.optimizer.iterations), K.get_value(model.optimizer.iterations))
print(len(caught), *(f"{w.category.__name__}: {w.message}" for w in caught))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    mine = K.variable(0, dtype="int64")  # what a user asks for is still said
print(K.dtype(mine), [w.category.__name__ for w in caught])
"""


def test_a_keras2_compile_and_fit_print_no_warning(tmp_path):
    # Keras's own int64 step counter (optimizer.iterations) counts in int32 without a
    # NarrowedDtypeWarning; a user's int64 request still gets one.
    counter, quiet, mine = run_on_keras2(QUIET_TRAINING, tmp_path).splitlines()[-3:]
    assert counter == "int32 4"  # 2 epochs of 2 batches
    assert quiet == "0", quiet
    assert mine == "int32 ['NarrowedDtypeWarning']"
