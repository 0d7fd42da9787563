"""Compiling ahead: a function compiled for one announced batch size compiles the others in a
background thread, and the later call with one of them reuses that compilation."""

import threading

import numpy as np
import pytest

import jaxkeras as K
from jaxkeras._engine.ahead import plan_batch_sizes, planned_batch_sizes
from jaxkeras._xla.options import compiler_options
from tests.helpers import compile_threads


@pytest.fixture
def compiles():
    """The names of the threads that ran XLA compiles (see ``compile_threads``); the batch
    plan is cleared afterwards. XLA's options are probed first: once per process, that is
    not a compile of the graph's."""
    compiler_options()
    with compile_threads() as threads:
        yield threads
    plan_batch_sizes(())


def _train_step():
    """A gradient step on a fed batch: returns the variable and the function."""
    w = K.variable(np.arange(12.0).reshape(4, 3) / 10)
    x = K.placeholder((None, 4))
    y = K.dot(x, w)
    loss = K.mean(K.square(y))
    (grad,) = K.gradients(loss, [w])
    return w, K.function([x], [loss, y], updates=[K.update_sub(w, 0.1 * grad)])


def _reference_step(w, x):
    y = x @ w
    return np.mean(y**2), y, w - 0.1 * (2 * x.T @ y / y.size)


def test_planned_batch_size_compiles_in_the_background_and_is_reused(compiles):
    w, f = _train_step()
    plan_batch_sizes({4, 3})
    rng = np.random.default_rng(0)
    weights = K.get_value(w).astype(np.float64)
    for batch in (4, 4, 3, 4, 3):
        x = rng.standard_normal((batch, 4)).astype(np.float32)
        loss, y = f([x])
        want_loss, want_y, weights = _reference_step(weights, x.astype(np.float64))
        np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
        np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(K.get_value(w), weights, rtol=1e-5, atol=1e-6)
    assert f.trace_count == 2  # batch 3 was traced once, in the background
    assert len(compiles) == 2
    assert compiles.count(threading.current_thread().name) == 1  # the other one ran beside it


def test_read_only_and_random_functions_compile_ahead(compiles):
    x = K.placeholder((None, 5))
    f = K.function([x], [K.sum(K.dropout(x, 0.5, seed=3) * 0 + x, axis=1)])
    plan_batch_sizes([2, 7])
    for batch in (7, 2, 2):
        x_value = np.ones((batch, 5), np.float32)
        np.testing.assert_allclose(f([x_value])[0], np.full(batch, 5.0))
    assert f.trace_count == 2
    assert len(compiles) == 2
    assert compiles.count(threading.current_thread().name) == 1


def test_sizes_outside_the_plan_compile_as_before(compiles):
    _, f = _train_step()
    plan_batch_sizes({4, 3})
    f([np.ones((2, 4), np.float32)])  # 2 is not planned: nothing compiles ahead
    f([np.ones((4, 4), np.float32)])
    assert f.trace_count == 2
    assert compiles == [threading.current_thread().name] * 2


def test_a_shape_error_ahead_is_raised_by_the_call_that_meets_it(compiles):
    x = K.placeholder((None, 2))
    v = K.variable(np.zeros((4, 2)))
    f = K.function([x], [x], updates=[K.update_add(v, x)])  # only batch 4 fits v
    plan_batch_sizes({4, 3})
    f([np.ones((4, 2), np.float32)])
    with pytest.raises((ValueError, TypeError)):
        f([np.ones((3, 2), np.float32)])
    np.testing.assert_array_equal(K.get_value(v), np.ones((4, 2)))  # the state is untouched


def test_plan_batch_sizes_checks_its_argument():
    with pytest.raises(ValueError, match=r"positive ints.*0"):
        plan_batch_sizes([32, 0])
    with pytest.raises(ValueError, match=r"2\.5"):
        plan_batch_sizes([2.5])
    plan_batch_sizes(np.array([8, 3]))
    assert planned_batch_sizes() == {8, 3}
    plan_batch_sizes(())
    assert planned_batch_sizes() == frozenset()


class _RecordingDistribution:
    """A one-device distribution that records the threads that ask for its output layout."""

    def __init__(self):
        self.threads = []

    def variable_layout(self, name, shape):
        return None

    def place_feeds(self, feeds):
        return list(feeds)

    def output_layout(self):
        self.threads.append(threading.current_thread().name)


def test_the_background_trace_sees_the_callers_distribution(compiles):
    from jaxkeras._engine.graph.runtime import DISTRIBUTION

    _, f = _train_step()
    distribution = _RecordingDistribution()
    plan_batch_sizes({4, 3})
    with DISTRIBUTION.scoped(distribution):
        for batch in (4, 3):
            f([np.ones((batch, 4), np.float32)])
    here = threading.current_thread().name
    assert distribution.threads.count(here) == 1  # the trace of batch 4
    assert len(distribution.threads) == 2  # and the background trace of batch 3
    assert f.trace_count == 2 and len(compiles) == 2
