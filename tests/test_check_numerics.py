"""``check_numerics``: a call that computes NaN or infinity names its first culprit and
changes nothing."""

from __future__ import annotations

import importlib.util

import numpy as np
import optax
import pytest

import jaxkeras as K
from jaxkeras.optimizers import OptaxOptimizer
from tests.helpers import run_on_keras2


def _step(optimizer=None):
    x = K.placeholder((None, 4))
    w = K.variable(np.ones((4, 2), "float32"))
    with K.name_scope("dense_1"):
        h = K.dot(x, w)
    with K.name_scope("head"):
        loss = K.mean(K.log(h))
    if optimizer is None:
        updates = [K.update_sub(w, 0.1 * K.gradients(loss, [w])[0])]
        slots = []
    else:
        updates = optimizer.get_updates(loss, [w])
        slots = [optimizer.iterations, *optimizer.weights]
    f = K.function([x], [loss], updates=updates, check_numerics=True)
    return f, [w, *slots]


@pytest.mark.parametrize("optimizer", [None, "adam"])
def test_the_first_non_finite_value_is_named_and_nothing_changes(optimizer):
    f, variables = _step(None if optimizer is None else OptaxOptimizer(optax.adam(0.1)))
    f([np.ones((2, 4), "float32")])
    before = [K.get_value(v) for v in variables]
    with pytest.raises(FloatingPointError, match=r"'head/log' \(op 'log.*', inputs of shapes"):
        f([-np.ones((2, 4), "float32")])  # log of negatives: NaN first in head/log
    for v, value in zip(variables, before):
        np.testing.assert_array_equal(K.get_value(v), value)
    (loss,) = f([np.full((2, 4), 2.0, "float32")])  # and it runs on
    assert np.isfinite(loss)


def test_a_gradient_that_is_not_finite_is_named():
    x = K.placeholder((None, 3))
    w = K.variable(np.zeros(3, "float32"))
    with K.name_scope("norm"):
        loss = K.sum(K.sqrt(K.square(x * w)))  # finite value 0, infinite-slope gradient
    grad = K.gradients(loss, [w])[0]
    f = K.function([x], [loss], updates=[K.update_sub(w, grad)], check_numerics=True)
    with pytest.raises(FloatingPointError, match="gave NaN or infinity"):
        f([np.ones((1, 3), "float32")])
    np.testing.assert_array_equal(K.get_value(w), np.zeros(3))


def test_check_numerics_is_one_step_at_a_time():
    x = K.placeholder((None, 2))
    with pytest.raises(ValueError, match="cannot be combined with micro_batches=2"):
        K.function([x], [K.sum(x)], micro_batches=2, check_numerics=True)


KERAS = r"""
import numpy as np
import keras
model = keras.models.Sequential([keras.layers.Dense(3, input_shape=(4,), name="dense_1")])
model.compile("sgd", "mse", check_numerics=True)
x, y = np.ones((8, 4), "float32"), np.ones((8, 3), "float32")
model.train_on_batch(x, y)
before = [w.copy() for w in model.get_weights()]
x[0, 0] = np.nan
try:
    model.train_on_batch(x, y)
    print("no error")
except FloatingPointError as err:
    same = all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    print("dense_1/" in str(err), same)
"""


@pytest.mark.slow
@pytest.mark.keras2
@pytest.mark.skipif(importlib.util.find_spec("keras") is None, reason="keras 2.3.1 missing")
def test_keras_compile_passes_check_numerics_on(tmp_path):
    assert run_on_keras2(KERAS, tmp_path).split()[-2:] == ["True", "True"]
