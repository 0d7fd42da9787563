"""Bounded resources: functions created and dropped leave nothing behind, clear_session
releases compiled executables, and repeated calls never recompile (trace counts)."""

import gc
import importlib

import jax
import numpy as np
import pytest

import jaxkeras as K

function_module = importlib.import_module("jaxkeras.function")


# What is left behind is counted, not read off the process's resident memory, which moves with
# the allocator and whatever else runs: the same counts under any load.


def _executables() -> int:
    """The XLA executables alive in this process (compiled and not yet freed)."""
    return len(jax.devices()[0].client.live_executables())


def _tracked_objects() -> int:
    """The objects Python's garbage collector tracks, after a collection."""
    gc.collect()
    return len(gc.get_objects())


@pytest.mark.slow
def test_ten_thousand_functions_created_and_dropped_leave_nothing_behind():
    w = K.variable(np.ones((4, 4)))
    x = K.placeholder((None, 4))
    feed = np.ones((2, 4), np.float32)

    def churn(i):
        f = K.function([x], [K.dot(x, w) * float(i)], updates=[K.update_add(w, np.zeros((4, 4)))])
        if i % 50 == 0:  # compile and run one in fifty (compiling all would take minutes)
            np.testing.assert_allclose(f([feed])[0], 4.0 * i)

    for i in range(500):  # warm up JAX's own caches and allocator
        churn(i)
    gc.collect()
    functions, arrays, executables = (
        len(function_module._FUNCTIONS),
        len(jax.live_arrays()),
        _executables(),
    )
    for i in range(10_000):
        churn(i)
    gc.collect()
    # what a dropped function could leave: its registration, device buffers, executables
    assert len(function_module._FUNCTIONS) <= functions
    assert len(jax.live_arrays()) <= arrays + 5
    assert _executables() <= executables, "executables of functions that are gone are kept"


def test_clear_session_releases_compiled_executables():
    v = K.variable(2.0)
    x = K.placeholder((3,))
    f = K.function([x], [x * v])
    np.testing.assert_array_equal(f([np.ones(3)])[0], 2.0)
    assert f.trace_count == 1 and f._compiled
    K.clear_session()
    assert not f._compiled
    np.testing.assert_array_equal(f([np.ones(3)])[0], 2.0)  # it compiles again when called
    assert f.trace_count == 2


def test_repeated_calls_never_recompile():
    w = K.variable(np.ones((3, 2)))
    count = K.variable(0.0)
    x = K.placeholder((None, 3))
    y = K.in_train_phase(K.dot(x, w) * 2.0, K.dot(x, w))
    f = K.function([x, K.learning_phase()], [y], updates=[K.update_add(count, 1.0)])
    for _ in range(50):
        f([np.ones((4, 3)), 0])
        K.set_value(w, np.random.rand(3, 2))  # new values, same shapes: no retrace
    assert f.trace_count == 1
    f([np.ones((4, 3)), 1])
    assert f.trace_count == 2  # one per learning phase
    f([np.ones((7, 3)), 1])
    assert f.trace_count == 3  # a new input shape compiles once
    for batch in (4, 7, 4, 7):
        for phase in (0, 1):
            f([np.ones((batch, 3)), phase])
    assert f.trace_count == 4  # (7, phase 0) was the last new combination
    f([np.ones((4, 3), np.float64), 0])  # a float64 feed is cast to the input's dtype
    f([[[1.0, 2.0, 3.0]] * 4, 0])  # so is a nested list
    assert f.trace_count == 4
    assert K.get_value(count) == 50 + 1 + 1 + 8 + 2


def test_gradient_functions_compile_once():
    w = K.variable(np.ones(3))
    x = K.placeholder((None, 3))
    loss = K.mean(K.square(K.dot(x, K.reshape(w, (3, 1)))))
    (grad,) = K.gradients(loss, [w])
    step = K.function([x], [loss], updates=[K.update_sub(w, 0.01 * grad)])
    for _ in range(20):
        step([np.ones((5, 3))])
    assert step.trace_count == 1


@pytest.mark.slow
def test_shape_inference_with_a_symbol_per_unknown_dimension_keeps_memory_bounded():
    # reshape(x, (K.shape(x)[0], -1)) is inferred with one symbol per unknown dimension; fresh
    # symbols per inference would grow JAX's caches (thousands of objects, about 13 MB here);
    # the fixed pool does not (no object is kept: measured 0)
    def record(i):
        x = K.placeholder((None, 5, i % 3 + 1))
        assert K.int_shape(K.reshape(x, (K.shape(x)[0], -1))) == (None, 5 * (i % 3 + 1))

    for i in range(200):
        record(i)
    objects = _tracked_objects()
    for i in range(1500):
        record(i)
    assert _tracked_objects() - objects < 50, "shape inference keeps objects per call"
