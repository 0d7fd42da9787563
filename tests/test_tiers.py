"""Tiered compilation: a quick compile first, the optimized one from a later call on."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxkeras as K
from jaxkeras import tiers
from jaxkeras._xla import options as xla_options
from tests.helpers import run_python

pytestmark = pytest.mark.skipif(
    not tiers.has_second_tier(), reason="one tier here (not CPU, or switched off)"
)
RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _tiers_on(monkeypatch):
    monkeypatch.setattr(tiers, "CALLS_BEFORE_OPTIMIZING", 1)  # the second call starts it
    tiers.set_tiered_compilation(True)
    yield
    tiers.set_tiered_compilation(True)


def _train_step():
    x, t = K.placeholder((None, 32)), K.placeholder((None, 10))
    ws = [K.variable(RNG.normal(0, 0.2, s).astype("float32")) for s in [(32, 64), (64, 10)]]
    logits = K.dot(K.relu(K.dot(x, ws[0])), ws[1])
    loss = K.mean(K.categorical_crossentropy(t, logits, from_logits=True))
    grads = K.gradients(loss, ws)
    f = K.function([x, t], [loss], updates=[K.update_sub(w, 0.1 * g) for w, g in zip(ws, grads)])
    return f, ws


def _batch():
    x = RNG.standard_normal((16, 32)).astype("float32")
    return [x, np.eye(10, dtype="float32")[RNG.integers(0, 10, 16)]]


def test_the_optimized_compile_waits_for_its_calls(monkeypatch):
    monkeypatch.setattr(tiers, "CALLS_BEFORE_OPTIMIZING", 3)
    f, _ = _train_step()
    batch = _batch()
    for _ in range(3):
        f(batch)
    assert not f.wait_optimized(timeout=0)  # nothing started yet
    f(batch)  # the call after three starts it
    assert f.wait_optimized(timeout=120)


def test_a_later_call_runs_the_optimized_compile_without_tracing_again():
    f, _ = _train_step()
    batch = _batch()
    f(batch)  # the quick compile
    assert f.compiler_options == xla_options.compiler_options()
    f(batch)  # starts the optimized compile
    assert f.wait_optimized(timeout=120)
    f(batch)  # takes it
    assert f.compiler_options == tiers.optimized_options() != xla_options.compiler_options()
    assert f.trace_count == 1


def test_both_tiers_compute_the_same_step():
    quick, ws = _train_step()
    start = [K.get_value(w) for w in ws]
    batch = _batch()
    losses = [quick(batch)[0], quick(batch)[0]]
    quick.wait_optimized(timeout=120)
    losses.append(quick(batch)[0])  # optimized from here
    assert quick.compiler_options == tiers.optimized_options()
    tiers.set_tiered_compilation(False)
    for w, value in zip(ws, start):
        K.set_value(w, value)
    plain, ws2 = _train_step()
    for w, value in zip(ws2, start):
        K.set_value(w, value)
    expected = [plain(batch)[0] for _ in range(3)]
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    assert plain.compiler_options == xla_options.compiler_options()  # never moved on


def test_pure_with_the_options_in_use_is_the_call_bit_for_bit():
    f, ws = _train_step()
    batch = _batch()
    f(batch)
    f(batch)
    f.wait_optimized(timeout=120)
    f(batch)
    pure = jax.jit(f.pure, compiler_options=f.compiler_options)
    outputs, new = pure(f.state(), f.next_key(), batch)
    got = f(batch)
    np.testing.assert_array_equal(np.asarray(outputs[0]), got[0])
    for w in ws:
        np.testing.assert_array_equal(np.asarray(new[w.name]), K.get_value(w))


@pytest.mark.slow
def test_the_environment_switches_it_off(tmp_path):
    code = (
        "import numpy as np, jaxkeras as K\n"
        "K.tiers.CALLS_BEFORE_OPTIMIZING = 1\n"
        "x = K.placeholder((None, 4)); w = K.variable(np.ones((4, 2), 'float32'))\n"
        "f = K.function([x], [K.dot(x, w)], updates=[K.update_add(w, 1.0)])\n"
        "for _ in range(3): f([np.ones((2, 4), 'float32')])\n"
        "print(f.wait_optimized(60), K.tiers.tiered())\n"
    )
    printed = run_python(code, KERAS_HOME=str(tmp_path), JAXKERAS_TIERED_COMPILATION="0")
    assert printed.split()[-2:] == ["False", "False"]
