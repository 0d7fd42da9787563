"""Dtype policies: 16-bit products with float32 accumulation, and dynamic loss scaling."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import jax
import numpy as np
import optax
import pytest

import jaxkeras as K
from jaxkeras import mixed_precision as mp
from jaxkeras.optimizers import OptaxOptimizer

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _float32_after():
    yield
    mp.set_global_policy("float32")


def _dense_step(optimizer=None):
    """A softmax regression's train step: (function, weight, step counter)."""
    x, t = K.placeholder((None, 8)), K.placeholder((None, 4))
    w = K.variable(RNG.standard_normal((8, 4)).astype("float32") * 0.1)
    b = K.variable(np.zeros(4, "float32"))
    loss = K.mean(K.categorical_crossentropy(t, K.softmax(K.dot(x, w) + b)))
    if optimizer is None:
        it = K.variable(0, dtype="int32")
        grads = K.gradients(loss, [w, b])
        updates = [K.update_sub(w, 0.1 * grads[0]), K.update_sub(b, 0.1 * grads[1])]
        updates.append(K.update_add(it, 1))
    else:
        updates = optimizer.get_updates(loss, [w, b])
        it = optimizer.iterations
    return K.function([x, t], [loss], updates=updates), w, it


def _batch(n=16, scale=1.0):
    x = (RNG.standard_normal((n, 8)) * scale).astype("float32")
    return [x, np.eye(4, dtype="float32")[RNG.integers(0, 4, n)]]


def _dots(text: str) -> list[str]:
    """The operand and result types of each dot_general in StableHLO text."""
    return re.findall(r"stablehlo\.dot_general .*?: \((.*?)\) -> (tensor<[^>]*>)", text)


def test_policy_names_errors_and_scope():
    assert mp.global_policy().name == "float32"
    mp.set_global_policy("mixed_bfloat16")
    assert mp.global_policy() == mp.Policy("mixed_bfloat16", "bfloat16", "float32", False)
    with mp.policy("mixed_float16") as chosen:
        assert chosen.loss_scaling and mp.global_policy().compute_dtype == "float16"
    assert mp.global_policy().name == "mixed_bfloat16"
    with pytest.raises(ValueError, match=r"unknown dtype policy 'bfloat16'.*K.set_floatx"):
        mp.set_global_policy("bfloat16")
    assert mp.global_policy().name == "mixed_bfloat16"  # unchanged


def test_scoped_policy_is_per_thread():
    seen = []
    with mp.policy("mixed_float16"):
        worker = threading.Thread(target=lambda: seen.append(mp.global_policy().name))
        worker.start()
        worker.join()
    assert seen == ["float32"]


def test_mixed_bfloat16_products_are_bf16_with_f32_accumulation_both_ways():
    f, w, _ = _dense_step()
    batch = _batch()
    assert all("bf16" not in "".join(d) for d in _dots(f.lower(batch).as_text()))
    mp.set_global_policy("mixed_bfloat16")
    dots = _dots(f.lower(batch).as_text())
    # forward, and both gradient products: 16-bit operands, float32 results
    assert len(dots) >= 2
    for operands, result in dots:
        assert operands.count("bf16") == 2, operands
        assert result.endswith("f32>") or result.endswith("bf16>"), result
    assert any(result.endswith("f32>") for _, result in dots)
    loss = f(batch)[0]
    assert loss.dtype == np.float32
    assert K.get_value(w).dtype == np.float32  # master weights


def test_mixed_bfloat16_step_is_close_to_float32():
    batch = _batch()
    f, w, _ = _dense_step()
    start = K.get_value(w)
    loss32 = f(batch)[0]
    step32 = K.get_value(w) - start
    K.set_value(w, start)
    mp.set_global_policy("mixed_bfloat16")
    loss16 = f(batch)[0]
    step16 = K.get_value(w) - start
    assert loss16 == pytest.approx(loss32, rel=1e-2)
    assert np.linalg.norm(step16 - step32) / np.linalg.norm(step32) < 2e-2
    assert not np.array_equal(step16, step32)  # the products did run in 16 bits


def test_a_policy_change_compiles_once_per_policy():
    f, _, _ = _dense_step()
    batch = _batch()
    f(batch)
    assert f.trace_count == 1
    mp.set_global_policy("mixed_bfloat16")
    f(batch)
    f(batch)
    assert f.trace_count == 2
    mp.set_global_policy("float32")
    f(batch)
    assert f.trace_count == 2  # the float32 compilation is kept


def test_pure_is_the_call_under_a_policy():
    mp.set_global_policy("mixed_float16")
    f, w, _ = _dense_step()
    batch = _batch()
    f(batch)  # the first call under mixed_float16 adds the loss scale to f's state
    # with f's options, as the contract says: with XLA's defaults jaxlib 0.12's XLA:CPU
    # computes the update w - 0.1 * g with two roundings where f's quick compile (LLVM level 1)
    # fuses it into one multiply-add (jaxlib 0.10 fuses it at both levels)
    pure = jax.jit(f.pure, compiler_options=f.compiler_options)
    outputs, new = pure(f.state(), f.next_key(), batch)
    got = f(batch)
    np.testing.assert_array_equal(np.asarray(outputs[0]), got[0])
    np.testing.assert_array_equal(np.asarray(new[w.name]), K.get_value(w))


def test_gradients_of_gradients_under_a_policy():
    x = K.variable(RNG.standard_normal((3, 4)).astype("float32"))
    w = K.variable(RNG.standard_normal((4, 2)).astype("float32"))
    loss = K.sum(K.square(K.dot(x, w)))
    penalty = K.sum(K.square(K.gradients(loss, [x])[0]))
    second = K.gradients(penalty, [w])[0]
    f = K.function([], [second])
    want = f([])[0]
    mp.set_global_policy("mixed_bfloat16")
    got = f([])[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=5e-2, atol=5e-2 * np.abs(want).max())


def test_loss_scaling_skips_a_non_finite_step_and_halves_the_scale():
    mp.set_global_policy("mixed_float16")
    f, w, it = _dense_step()
    scale, count = mp.loss_scale_variables()
    f(_batch())
    assert K.get_value(it) == 1
    start_scale = K.get_value(scale)
    before = {v: K.get_value(v) for v in (w, it)}
    loss = f(_batch(scale=3e4))[0]  # float16 operands overflow
    assert not np.isfinite(loss)
    for v, value in before.items():
        np.testing.assert_array_equal(K.get_value(v), value)
    assert K.get_value(scale) == start_scale / 2
    assert K.get_value(count) == 0
    f(_batch())
    assert K.get_value(it) == 2
    assert K.get_value(count) == 1
    assert scale.name in f.variable_names and count.name in f.variable_names


def test_loss_scaling_grows_after_the_period(monkeypatch):
    monkeypatch.setattr(mp, "GROWTH_PERIOD", 3)
    mp.set_global_policy("mixed_float16")
    f, _, _ = _dense_step()
    scale, count = mp.loss_scale_variables()
    K.set_value(scale, 1024.0)
    K.set_value(count, 0)
    for _ in range(3):
        f(_batch())
    assert K.get_value(scale) == 2048.0
    assert K.get_value(count) == 0


def test_loss_scaling_recovers_small_gradients():
    """A gradient below float16's smallest subnormal (6e-8) is lost without scaling."""
    mp.set_global_policy("mixed_float16")
    x = K.placeholder((None, 8))
    w = K.variable(np.full((8, 1), 1.0, "float32"))
    loss = 1e-9 * K.sum(K.dot(x, w))  # d loss / d output = 1e-9: 0 in float16
    grad = K.gradients(loss, [w])[0]
    seen = K.variable(np.zeros((8, 1), "float32"))
    f = K.function([x], [loss], updates=[K.update(seen, grad), K.update_sub(w, 0 * grad)])
    f([np.ones((2, 8), "float32")])
    assert np.float16(1e-9) == 0  # the cotangent, unscaled, in float16
    # scaled by 2**15 it is 3.3e-5, a float16 subnormal: 1% steps
    np.testing.assert_allclose(K.get_value(seen), np.full((8, 1), 2e-9), rtol=2e-2)


def test_loss_scaling_with_an_optax_optimizer_skips_its_state_too():
    mp.set_global_policy("mixed_float16")
    opt = OptaxOptimizer(optax.adam(1e-2))
    f, w, it = _dense_step(opt)
    f(_batch())
    slots = [K.get_value(v) for v in opt.weights]
    before = K.get_value(w), K.get_value(it)
    f(_batch(scale=3e4))
    for v, value in zip(opt.weights, slots):
        np.testing.assert_array_equal(K.get_value(v), value)
    np.testing.assert_array_equal(K.get_value(w), before[0])
    assert K.get_value(it) == before[1]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env", "settings", "want"),
    [
        ({"JAXKERAS_DTYPE_POLICY": "mixed_bfloat16"}, None, "mixed_bfloat16"),
        ({}, '{"dtype_policy": "mixed_float16"}', "mixed_float16"),
        ({}, None, "float32"),
    ],
)
def test_policy_from_the_environment_or_keras_json(env, settings, want, tmp_path):
    if settings is not None:
        (tmp_path / "keras.json").write_text(settings)
    run_env = {k: v for k, v in os.environ.items() if k != "JAXKERAS_DTYPE_POLICY"}
    run_env.update(KERAS_HOME=str(tmp_path), **env)
    code = "import jaxkeras as K; print(K.mixed_precision.global_policy().name)"
    out = subprocess.run([sys.executable, "-c", code], env=run_env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == want


@pytest.mark.slow
def test_an_unknown_policy_in_the_environment_fails_the_import(tmp_path):
    env = dict(os.environ, KERAS_HOME=str(tmp_path), JAXKERAS_DTYPE_POLICY="mixed_int8")
    out = subprocess.run(
        [sys.executable, "-c", "import jaxkeras"], env=env, capture_output=True, text=True
    )
    assert out.returncode != 0
    assert "$JAXKERAS_DTYPE_POLICY: unknown dtype policy 'mixed_int8'" in out.stderr


def _products(text: str) -> list[tuple[str, str]]:
    """The operand and result types of each product (dot_general, convolution) in StableHLO."""
    pattern = r"stablehlo\.(?:dot_general|convolution)\b.*?: \((.*?)\) -> (tensor<[^>]*>)"
    return re.findall(pattern, text)


def _variable(*shape):
    return K.variable(RNG.standard_normal(shape).astype("float32") * 0.3)


PRODUCTS = {
    "conv2d": lambda x: K.conv2d(x, _variable(3, 3, 3, 16), padding="same"),
    "conv2d few filters": lambda x: K.conv2d(x, _variable(3, 3, 3, 2), strides=(2, 2)),
    "conv2d_transpose": lambda x: K.conv2d_transpose(
        x, _variable(3, 3, 4, 3), (2, 16, 16, 4), strides=(2, 2), padding="same"
    ),
    "separable_conv2d": lambda x: K.separable_conv2d(
        x, _variable(3, 3, 3, 2), _variable(1, 1, 6, 8), padding="same"
    ),
    "local_conv2d": lambda x: K.local_conv2d(x, _variable(36, 27, 4), (3, 3), (1, 1), (6, 6)),
    "batch_dot": lambda x: K.batch_dot(K.reshape(x, (-1, 64, 3)), K.reshape(x, (-1, 64, 3)), 1),
}


@pytest.mark.parametrize("name", list(PRODUCTS))
def test_products_of_every_kind_follow_the_policy(name):
    x = K.placeholder((2, 8, 8, 3))
    y = PRODUCTS[name](x)
    weights = [v for v in K.function([x], [y]).variable_names]
    loss = K.sum(K.square(y))
    f = K.function([x], [y, *K.gradients(loss, [x])])
    batch = [RNG.standard_normal((2, 8, 8, 3)).astype("float32")]
    want = f(batch)
    mp.set_global_policy("mixed_bfloat16")
    got = f(batch)
    products = _products(f.lower(batch).as_text())
    assert products, name
    for operands, _ in products:
        assert operands.count("bf16") == 2, (name, operands)
    for a, b in zip(got, want):
        assert a.dtype == np.float32
        assert np.abs(a - b).max() <= 2e-2 * np.abs(b).max(), name
    assert len(weights) == (0 if name == "batch_dot" else 1 + (name == "separable_conv2d"))


def test_a_weight_read_by_three_products_is_cast_once():
    w = K.variable(np.ones((8, 5), "float32"))
    xs = [K.placeholder((None, 8)) for _ in range(3)]
    y = K.dot(xs[0], w) + K.dot(xs[1], w) + K.dot(xs[2], w)
    f = K.function(xs, [y, K.gradients(K.sum(y), [w])[0]])
    mp.set_global_policy("mixed_bfloat16")
    compiled = f.lower([np.ones((4, 8), "float32")] * 3).compile().as_text()
    assert len(re.findall(r"bf16\[8,5\]\{[0-9,]*\} convert\(", compiled)) == 1


def test_cpu_depthwise_taps_stay_float32_and_accelerators_cast():
    """On CPU a depthwise convolution is elementwise products ('taps'), computed in float32
    (XLA:CPU has no 16-bit arithmetic to gain from); the grouped convolution other platforms
    use is a product, cast like the others."""
    x = K.placeholder((2, 8, 8, 3))
    kernel = _variable(3, 3, 3, 2)
    batch = [RNG.standard_normal((2, 8, 8, 3)).astype("float32")]
    mp.set_global_policy("mixed_bfloat16")
    taps = K.function([x], [K.depthwise_conv2d(x, kernel, padding="same")])
    grouped = K.function([x], [K.depthwise_conv2d(x, kernel, padding="same", lowering="lax")])
    if jax.default_backend() == "cpu":
        assert "bf16" not in taps.lower(batch).as_text()
    else:  # the default lowering off CPU is the grouped convolution
        ((operands, _),) = _products(taps.lower(batch).as_text())
        assert operands.count("bf16") == 2
    ((operands, result),) = _products(grouped.lower(batch).as_text())
    assert operands.count("bf16") == 2 and result.endswith("f32>")
    np.testing.assert_allclose(grouped(batch)[0], taps(batch)[0], rtol=0, atol=2e-2)


def test_the_loss_scale_is_checkpointed(tmp_path):
    mp.set_global_policy("mixed_float16")
    f, _, _ = _dense_step()
    f(_batch(scale=3e4))  # skipped: the scale halves
    scale, count = mp.loss_scale_variables()
    saved = K.get_value(scale), K.get_value(count)
    path = tmp_path / "step.npz"
    K.save_checkpoint(str(path))
    K.set_value(scale, 1.0)
    K.set_value(count, 7)
    K.restore_checkpoint(str(path), [scale, count])
    assert (K.get_value(scale), K.get_value(count)) == saved


def test_state_scope_follows_the_policy():
    x = RNG.standard_normal((4, 8)).astype("float32")
    w = K.variable(RNG.standard_normal((8, 3)).astype("float32"))
    with K.state_scope(K.get_state([w])):
        want = np.asarray(K.dot(x, w))
    with mp.policy("mixed_bfloat16"), K.state_scope(K.get_state([w])):
        got = np.asarray(K.dot(x, w))
    assert got.dtype == np.float32
    assert 0 < np.abs(got - want).max() <= 2e-2 * np.abs(want).max()
    # jax.Arrays in a state scope: the scope's policy too, not eager float32's
    arrays = jax.numpy.asarray(x), jax.numpy.asarray(K.get_value(w))
    with mp.policy("mixed_bfloat16"), K.state_scope(K.get_state([w])):
        np.testing.assert_array_equal(K.dot(*arrays), got)
