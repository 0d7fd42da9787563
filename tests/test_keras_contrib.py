"""keras-contrib on jaxkeras (``jaxkeras/_keras_contrib.py``): its backend functions against
NumPy references, and its CRF trained, decoded (with masks), saved and loaded.

The backend functions are tested here directly. The CRF needs keras-contrib itself, which is
not on PyPI (keras-team never published it there; it is installed from its repository):
the tests that import it run where a keras-contrib source tree is found, ``keras_contrib/``
in ``JAXKERAS_KERAS_CONTRIB`` (default: the venv's ``keras-contrib/``, where ``make
keras-contrib`` puts it), or an installed ``keras_contrib``; they are skipped elsewhere, saying
so. Each runs a fresh interpreter that loads jaxkeras through Keras 2.3.1.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import check_op, run_python

import jaxkeras as K
from jaxkeras import _keras_contrib as KC

CONTRIB = Path(os.environ.get("JAXKERAS_KERAS_CONTRIB", Path(sys.prefix) / "keras-contrib"))
"""A keras-contrib source tree (its ``keras_contrib/`` package and ``tests/``)."""


def contrib_path() -> str | None:
    """What to put on ``PYTHONPATH`` to import keras_contrib ('' when it is installed), or
    ``None`` when this machine has no keras-contrib."""
    if (CONTRIB / "keras_contrib" / "__init__.py").exists():
        return str(CONTRIB)
    return "" if importlib.util.find_spec("keras_contrib") is not None else None


needs_contrib = pytest.mark.skipif(
    contrib_path() is None,
    reason=f"keras-contrib is not on PyPI and not found here ({CONTRIB}, nor installed): "
    "`make keras-contrib KERAS_CONTRIB_GIT=<a clone of keras-team/keras-contrib>` puts it there",
)

# ---------------------------------------------------------------------------------------------
# NumPy references, written from TensorFlow's definitions


def depth_to_space_reference(x: np.ndarray, scale: int, data_format: str) -> np.ndarray:
    """TF's depth_to_space, element by element: output [b, r*s + i, c*s + j, k] is input
    [b, r, c, (i*s + j) * channels + k] (channels_last; channels_first on the transpose)."""
    if data_format == "channels_first":
        x = x.transpose(0, 2, 3, 1)
    batch, rows, cols, depth = x.shape
    channels = depth // scale**2
    out = np.zeros((batch, rows * scale, cols * scale, channels), x.dtype)
    for r, c, i, j in itertools.product(range(rows), range(cols), range(scale), range(scale)):
        start = (i * scale + j) * channels
        out[:, r * scale + i, c * scale + j, :] = x[:, r, c, start : start + channels]
    return out.transpose(0, 3, 1, 2) if data_format == "channels_first" else out


def patches_reference(x, ksizes, strides, padding, data_format):
    """TF's extract_image_patches in keras-contrib's layout: (batch, rows, cols, kr, kc, ch)
    (channels_last) or (batch, rows, cols, ch, kr, kc); 'same' pads as TF: ceil(size / stride)
    patches, the smaller half of the zeros before."""
    if data_format == "channels_first":
        x = x.transpose(0, 2, 3, 1)
    batch, height, width, channels = x.shape
    if padding == "same":
        out_shape = [-(-n // s) for n, s in zip((height, width), strides)]
        total = [
            max((o - 1) * s + k - n, 0)
            for o, s, k, n in zip(out_shape, strides, ksizes, (height, width))
        ]
        before = [t // 2 for t in total]
        x = np.pad(
            x,
            ((0, 0), (before[0], total[0] - before[0]), (before[1], total[1] - before[1]), (0, 0)),
        )
    else:
        out_shape = [(n - k) // s + 1 for n, k, s in zip((height, width), ksizes, strides)]
    out = np.zeros((batch, *out_shape, *ksizes, channels), x.dtype)
    for r, c in itertools.product(range(out_shape[0]), range(out_shape[1])):
        top, left = r * strides[0], c * strides[1]
        out[:, r, c] = x[:, top : top + ksizes[0], left : left + ksizes[1], :]
    return out.transpose(0, 1, 2, 5, 3, 4) if data_format == "channels_first" else out


# ---------------------------------------------------------------------------------------------
# the backend functions


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
@pytest.mark.parametrize(
    ("scale", "channels", "rows", "cols"), [(2, 1, 1, 1), (2, 3, 2, 3), (3, 2, 3, 2)]
)
def test_depth_to_space(data_format, scale, channels, rows, cols):
    depth = channels * scale**2
    shape = (2, depth, rows, cols) if data_format == "channels_first" else (2, rows, cols, depth)
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    check_op(
        lambda t: KC.depth_to_space(t, scale, data_format),
        lambda v: depth_to_space_reference(v, scale, data_format),
        [x],
        rtol=0,
        atol=0,
    )


def test_depth_to_space_takes_the_configured_format():
    x = np.arange(2 * 8 * 2 * 8, dtype=np.float32).reshape(2, 8, 2, 8)
    np.testing.assert_array_equal(
        KC.depth_to_space(x, 2), depth_to_space_reference(x, 2, "channels_last")
    )
    K.set_image_data_format("channels_first")
    try:
        got = K.eval(KC.depth_to_space(K.variable(x), 2))
    finally:
        K.set_image_data_format("channels_last")
    np.testing.assert_array_equal(got, depth_to_space_reference(x, 2, "channels_first"))


def test_depth_to_space_rejects_bad_arguments():
    x = np.zeros((1, 2, 2, 6), np.float32)
    with pytest.raises(ValueError, match="scale"):
        KC.depth_to_space(x, 0)
    with pytest.raises(ValueError, match="multiple of scale"):
        KC.depth_to_space(x, 2, "channels_last")
    with pytest.raises(ValueError, match="data_format"):
        KC.depth_to_space(x, 2, "nhwc")


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize(
    ("size", "ksizes", "strides"),
    [((7, 6), (2, 2), (2, 2)), ((5, 8), (3, 2), (1, 3)), ((4, 4), (3, 3), (2, 1))],
)
def test_extract_image_patches(data_format, padding, size, ksizes, strides):
    shape = (2, 3, *size) if data_format == "channels_first" else (2, *size, 3)
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    check_op(
        lambda t: KC.extract_image_patches(t, ksizes, strides, padding, data_format),
        lambda v: patches_reference(v, ksizes, strides, padding, data_format),
        [x],
        rtol=0,
        atol=0,
    )


def test_extract_image_patches_of_integers_is_exact():
    x = np.arange(2 * 5 * 5 * 2, dtype=np.int32).reshape(2, 5, 5, 2)
    got = KC.extract_image_patches(x, [3, 3], [2, 2], "same")
    assert got.dtype == np.int32
    np.testing.assert_array_equal(
        got, patches_reference(x, (3, 3), (2, 2), "same", "channels_last")
    )


def test_extract_image_patches_rejects_bad_arguments():
    x = np.zeros((1, 4, 4, 1), np.float32)
    with pytest.raises(ValueError, match="padding"):
        KC.extract_image_patches(x, (2, 2), (2, 2), "SAME")
    with pytest.raises(ValueError, match="ksizes"):
        KC.extract_image_patches(x, (2, 0), (2, 2))
    with pytest.raises(ValueError, match="ssizes"):
        KC.extract_image_patches(x, (2, 2), 2)
    with pytest.raises(ValueError, match="rank-4"):
        KC.extract_image_patches(np.zeros((4, 4, 1)), (2, 2), (2, 2))


@pytest.mark.parametrize("keep_dims", [True, False])
@pytest.mark.parametrize("axes", [[0, 1, 2], [0, 2, 3], [-1], [1]])
def test_moments(axes, keep_dims):
    x = np.random.default_rng(1).random((4, 3, 5, 2)).astype(np.float32)
    check_op(
        lambda t: list(KC.moments(t, axes, keep_dims=keep_dims)),
        lambda v: [
            np.mean(v.astype(np.float64), axis=tuple(axes), keepdims=keep_dims),
            np.var(v.astype(np.float64), axis=tuple(axes), keepdims=keep_dims),
        ],
        [x],
        rtol=1e-5,
        atol=1e-7,
    )


def test_moments_of_constants_and_float16():
    for value in (0.0, 1.0):
        mean, variance = KC.moments(np.full((3, 4), value, np.float32), [0, 1])
        assert float(mean) == value and float(variance) == 0.0
    x = np.random.default_rng(2).random((8, 3)).astype(np.float16)
    mean, variance = KC.moments(x, [0])
    assert mean.dtype == variance.dtype == np.float16
    np.testing.assert_allclose(mean, x.astype(np.float64).mean(0), rtol=1e-3)
    np.testing.assert_allclose(variance, x.astype(np.float64).var(0), rtol=1e-2)
    with pytest.raises(ValueError, match="axes"):
        KC.moments(x, 0)


def test_moments_gradient_is_the_variances():
    # as in TF: d var / d x = 2 (x - mean) / n, the mean held constant (its own term is 0)
    x = np.random.default_rng(3).normal(size=(6, 2)).astype(np.float32)
    xp = K.placeholder((6, 2))
    _, variance = KC.moments(xp, [0])
    (grad,) = K.gradients(K.sum(variance), [xp])
    got = K.function([xp], [grad])([x])[0]
    np.testing.assert_allclose(got, 2 * (x - x.mean(0)) / 6, rtol=1e-5, atol=1e-6)


def test_conv2d_is_channels_first_by_default():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 3, 6, 6)).astype(np.float32)
    kernel = rng.normal(size=(3, 3, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(
        K.eval(KC.conv2d(K.variable(x), K.variable(kernel), (2, 2), "same")),
        K.eval(K.conv2d(x, kernel, (2, 2), "same", "channels_first")),
        rtol=1e-6,
    )


def test_under_jit_patches_compile_once():
    count = 0

    @jax.jit
    def both(x):
        nonlocal count
        count += 1
        return KC.extract_image_patches(x, (2, 2), (1, 1), "valid"), KC.depth_to_space(x, 2)

    x = np.ones((1, 4, 4, 4), np.float32)
    both(x)
    both(x + 1)
    assert count == 1


# ---------------------------------------------------------------------------------------------
# with keras-contrib itself (a fresh interpreter each, Keras 2.3.1 loading jaxkeras)


def run_with_contrib(code: str, tmp_path: Path) -> str:
    path = contrib_path()
    pythonpath = os.pathsep.join(p for p in (path, os.environ.get("PYTHONPATH", "")) if p)
    return run_python(
        code,
        KERAS_BACKEND="jaxkeras",
        KERAS_HOME=str(tmp_path),
        PYTHONPATH=pythonpath,
        JAXKERAS_TEST_DIR=str(tmp_path),
    )


BACKEND = """
import keras_contrib  # first: its backend module imports Keras, which loads jaxkeras mid-import
import keras
from keras_contrib import backend as KC
from jaxkeras import _keras_contrib

assert keras.backend.backend() == "jaxkeras"
for name in ("conv2d", "extract_image_patches", "depth_to_space", "moments"):
    assert getattr(KC, name) is getattr(_keras_contrib, name), name
from keras_contrib.layers import CRF
print(CRF.viterbi_decoding._jaxkeras)
"""


@pytest.mark.keras2
@needs_contrib
def test_keras_contrib_backend_gets_jaxkeras_functions(tmp_path):
    assert run_with_contrib(BACKEND, tmp_path).split()[-1] == "True"


CRF = """
import itertools, os
import numpy as np
import keras
from keras import backend as K
from keras.layers import Embedding
from keras.models import Model, Sequential, load_model
from keras_contrib.layers import CRF
from keras_contrib.losses import crf_loss
from keras_contrib.metrics import crf_viterbi_accuracy, crf_marginal_accuracy

folder = os.environ["JAXKERAS_TEST_DIR"]
np.random.seed(0)
K.set_random_seed(0) if hasattr(K, "set_random_seed") else None
tags, steps, vocabulary = 5, 10, 12
x = np.random.randint(1, vocabulary, size=(6, steps))
x[0, -4:] = 0  # right padding
x[1, :5] = 0  # left padding
x[2, 1:] = 0  # one step
y = np.random.randint(0, tags, size=(6, steps, 1))


def energies(model, inputs):
    embedded = Model(model.input, model.layers[0].output).predict(inputs).astype(np.float64)
    kernel, chain, bias, left, right = [w.astype(np.float64) for w in model.layers[1].get_weights()]
    return embedded @ kernel + bias, chain, left, right


def viterbi_reference(model, inputs, masked):
    # keras-contrib's decoding semantics in NumPy: energies u (boundaries at a mask's first
    # step and before its rise), step t scored as min over y_t of m_t u_t(y_t) +
    # m_t m_{t+1} chain(y_t, y_{t+1}) + best(y_t), m_T = 0; backtrack from the last step's
    # choice for tag 0
    u, chain, left, right = energies(model, inputs)
    batch = len(inputs)
    m = (inputs > 0).astype(np.float64) if masked else np.ones(inputs.shape)
    if masked:
        before = np.concatenate([np.zeros((batch, 1)), m[:, :-1]], 1)
        after = np.concatenate([m[:, 1:], np.zeros((batch, 1))], 1)
        u = u + (m > before)[..., None] * left + (after > m)[..., None] * right
    else:
        u = u.copy()
        u[:, 0] += left
        u[:, -1] += right
    m2 = np.concatenate([m, np.zeros((batch, 1))], 1) if masked else np.ones((batch, steps + 1))
    best = np.zeros((batch, tags))
    tables = np.zeros((batch, steps, tags), int)
    for t in range(steps):
        score = (chain[None] * (m2[:, t] * m2[:, t + 1])[:, None, None]
                 + (u[:, t] * m2[:, t, None] + best)[:, :, None])
        tables[:, t] = score.argmin(1)
        best = score.min(1)
    path = np.zeros((batch, steps), int)
    path[:, -1] = tables[np.arange(batch), -1, tables[:, -1, 0]]
    for t in range(steps - 2, -1, -1):
        path[:, t] = tables[np.arange(batch), t, path[:, t + 1]]
    return path, u, chain


def brute_force(u, chain, row, mask_row):
    # the least-energy tag sequence of the unmasked steps of one row
    steps_on = np.flatnonzero(mask_row)
    best, best_path = np.inf, None
    for seq in itertools.product(range(tags), repeat=len(steps_on)):
        e = sum(u[row, t, s] for t, s in zip(steps_on, seq))
        e += sum(chain[a, b] for a, b in zip(seq, seq[1:]))
        if e < best:
            best, best_path = e, seq
    return best_path


# masked, sparse targets, join mode: train, decode, evaluate, save and load
model = Sequential([Embedding(vocabulary, 4, mask_zero=True), CRF(tags, sparse_target=True)])
model.compile("adam", loss=crf_loss, metrics=[crf_viterbi_accuracy, crf_marginal_accuracy])
history = model.fit(x, y, epochs=3, batch_size=3, verbose=0)
losses = history.history["loss"]
assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses
predicted = model.predict(x)
assert np.array_equal(predicted, np.eye(tags)[predicted.argmax(-1)])  # one-hot paths
decoded = predicted.argmax(-1)
expected, u, chain = viterbi_reference(model, x, masked=True)
assert np.array_equal(decoded, expected), (decoded, expected)
assert (decoded[0, -4:] == 0).all() and (decoded[1, :5] == 0).all() and (decoded[2, 1:] == 0).all()
for row in (0, 1, 3):
    on = x[row] > 0
    assert tuple(decoded[row][on]) == brute_force(u, chain, row, on), row
_, viterbi_accuracy, _ = model.evaluate(x, y, verbose=0)
mine = (decoded[x > 0] == y[..., 0][x > 0]).mean()
assert abs(viterbi_accuracy - mine) < 1e-5, (viterbi_accuracy, mine)

path = os.path.join(folder, "crf.h5")
model.save(path)
loaded = load_model(path, custom_objects={"CRF": CRF, "crf_loss": crf_loss,
                                          "crf_viterbi_accuracy": crf_viterbi_accuracy,
                                          "crf_marginal_accuracy": crf_marginal_accuracy})
assert np.array_equal(loaded.predict(x), predicted)
for mine_w, theirs in zip(model.get_weights(), loaded.get_weights()):
    assert np.array_equal(mine_w, theirs)
loaded.fit(x, y, epochs=1, batch_size=3, verbose=0)  # and trains on
print("masked ok")

# no mask, one-hot targets, fixed length
model = Sequential([Embedding(vocabulary, 4, input_length=steps), CRF(tags)])
model.compile("rmsprop", loss=crf_loss, metrics=[crf_viterbi_accuracy])
model.fit(x, np.eye(tags)[y[..., 0]], epochs=2, batch_size=3, verbose=0)
decoded = model.predict(x).argmax(-1)
expected, _, _ = viterbi_reference(model, x, masked=False)
assert np.array_equal(decoded, expected), (decoded, expected)
print("unmasked ok")

# marginal mode: masked steps are uniform
model = Sequential([Embedding(vocabulary, 4, input_length=steps, mask_zero=True),
                    CRF(tags, learn_mode="marginal", unroll=True)])
model.compile("rmsprop", loss=crf_loss)
model.fit(x, np.eye(tags)[y[..., 0]], epochs=1, batch_size=3, verbose=0)
marginals = model.predict(x)
np.testing.assert_allclose(marginals[0, -4:], 1 / tags, atol=1e-6)
np.testing.assert_allclose(marginals.sum(-1), 1, rtol=1e-5)
print("marginal ok")
"""


@pytest.mark.keras2
@pytest.mark.slow  # three small models, about a CPU minute
@needs_contrib
def test_crf_trains_decodes_saves_and_loads_with_masks(tmp_path):
    lines = run_with_contrib(CRF, tmp_path).splitlines()
    assert lines[-3:] == ["masked ok", "unmasked ok", "marginal ok"]
