"""Constant-filled variables and tensors, arange (jaxkeras/_ops/create.py); switch, identity,
print_tensor, py_all and py_sum (jaxkeras/_ops/control.py)."""

import jax
import numpy as np
import pytest
from helpers import check_grad, check_op

import jaxkeras as K

RNG = np.random.default_rng(4)
X = RNG.normal(size=(2, 3)).astype(np.float32)


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda: K.zeros((3, 4)), np.zeros((3, 4))),
        (lambda: K.ones([2, 3]), np.ones((2, 3))),
        (lambda: K.ones(3), np.ones(3)),
        (lambda: K.eye(3), np.eye(3)),
        (lambda: K.eye((2, 3)), np.eye(2, 3)),
    ],
)
def test_filled_variables(make, expected):
    v = make()
    assert K.is_variable(v) and v.dtype == K.floatx()
    np.testing.assert_array_equal(K.eval(v), expected)


def test_filled_variables_dtype_and_name():
    v = K.zeros((2,), dtype="int32", name="counter")
    assert v.dtype == "int32" and v.name.startswith("counter")
    assert K.eye(2, dtype="float16").dtype == "float16"


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: K.zeros((2, None)), r"zeros: .* tuple of ints >= 0, got \(2, None\)"),
        (lambda: K.ones((-1,)), r"ones: .* tuple of ints >= 0, got \(-1,\)"),
        (lambda: K.eye("3"), "eye: .*shape must be a tuple of ints"),
    ],
)
def test_filled_variables_reject_bad_shapes(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_zeros_rejects_unknown_dtype():
    with pytest.raises(TypeError, match="unknown dtype 'f32x'"):
        K.zeros((2,), dtype="f32x")


@pytest.mark.parametrize(
    "fn, reference", [(K.zeros_like, np.zeros_like), (K.ones_like, np.ones_like)]
)
def test_like_ops_are_tensors(fn, reference):
    check_op(fn, reference, [X])
    out = fn(K.variable(X))
    assert not K.is_variable(out) and K.dtype(out) == "float32"
    ints = fn(K.placeholder((None, 3)), dtype="int32")
    assert K.dtype(ints) == "int32" and K.int_shape(ints) == (None, 3)


def test_identity():
    check_op(K.identity, lambda a: a, [X])
    assert not K.is_variable(K.identity(K.variable(X)))
    check_grad(K.identity, lambda a: a, X)


@pytest.mark.parametrize(
    "args, kwargs, expected",
    [
        ((5,), {}, np.arange(5)),
        ((-3,), {}, np.arange(0)),
        ((2, 7, 2), {}, np.arange(2, 7, 2)),
        ((0, 10, 1.5), {"dtype": "float32"}, np.arange(0, 10, 1.5)),
        ((3, 0, -1), {"dtype": "int16"}, np.arange(3, 0, -1)),
    ],
)
def test_arange(args, kwargs, expected):
    out = K.arange(*args, **kwargs)
    np.testing.assert_allclose(np.asarray(out), expected)
    assert K.dtype(out) == K.dtype(np.asarray([], dtype=kwargs.get("dtype", "int32")))


def test_arange_default_dtype_is_int32():
    assert np.asarray(K.arange(3)).dtype == np.int32


def test_arange_with_symbolic_stop():
    x = K.placeholder((None, 4))
    positions = K.arange(K.shape(x)[1])
    assert K.int_shape(positions) == (4,)
    value = K.function([x], [positions])([np.zeros((2, 4))])[0]
    np.testing.assert_array_equal(value, np.arange(4))


def test_arange_rejects_zero_step():
    with pytest.raises(ValueError, match="arange: step must not be 0"):
        K.arange(0, 5, 0)


def test_switch_with_python_condition_picks_one_branch():
    called = []
    assert K.switch(True, lambda: called.append("then") or 1, lambda: called.append("else")) == 1
    assert called == ["then"]


def test_switch_with_scalar_tensor_condition_and_callables():
    condition = K.placeholder((), dtype="bool")
    x = K.placeholder((None, 3))
    out = K.switch(condition, lambda: x * 2, lambda: x - 1)
    f = K.function([condition, x], [out])
    np.testing.assert_allclose(f([True, X])[0], X * 2)
    np.testing.assert_allclose(f([False, X])[0], X - 1)


def test_switch_with_lower_rank_condition_selects_samples():
    condition = np.array([True, False])
    check_op(
        lambda c, a: K.switch(c, a, -a),
        lambda c, a: np.where(c[:, None], a, -a),
        [condition, X],
    )


def test_switch_with_rank_2_condition_on_rank_3_values():
    values = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    condition = values[:, :, 0] > 0
    check_op(
        lambda c, a: K.switch(c, a, K.zeros_like(a)),
        lambda c, a: np.where(c[:, :, None], a, 0.0),
        [condition, values],
    )


def test_switch_with_integer_condition_and_scalar_branch():
    condition = np.array([[0, 2, 0], [1, 0, 0]], np.int32)
    check_op(
        lambda c, a: K.switch(c, a, 0.0), lambda c, a: np.where(c != 0, a, 0.0), [condition, X]
    )


def test_switch_gradient_flows_to_the_chosen_branch():
    condition = X > 0
    check_grad(
        lambda a: K.switch(condition, a * 3, a * a),
        lambda a: np.where(condition, a * 3, a * a),
        X,
    )


def test_switch_condition_rank_too_high():
    with pytest.raises(
        ValueError, match=r"switch: the condition's rank must not exceed .*\(2, 3\)"
    ):
        K.switch(K.placeholder((2, 3), dtype="bool"), K.placeholder((3,)), 1.0)


def test_print_tensor_prints_when_the_function_runs(capsys):
    x = K.placeholder((None, 2))
    y = K.print_tensor(x * 2, message="doubled:")
    f = K.function([x], [y + 1])
    assert capsys.readouterr().out == ""  # nothing when building or compiling
    out = f([np.array([[1.0, 2.0]], np.float32)])[0]
    f([np.array([[3.0, 4.0]], np.float32)])
    jax.effects_barrier()
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["doubled: [[2. 4.]]", "doubled: [[6. 8.]]"]
    np.testing.assert_allclose(out, [[3.0, 5.0]])


def test_print_tensor_summarizes_and_returns_x(capsys):
    values = np.arange(10, dtype=np.float32)
    out = K.print_tensor(values, summarize=2)
    jax.effects_barrier()
    assert capsys.readouterr().out.strip() == "[0. 1. ... 8. 9.]"
    np.testing.assert_array_equal(out, values)
    K.print_tensor(values, summarize=-1)
    jax.effects_barrier()
    assert capsys.readouterr().out.strip() == "[0. 1. 2. 3. 4. 5. 6. 7. 8. 9.]"


def test_print_tensor_passes_values_and_gradients():
    check_op(lambda a: K.print_tensor(a, "x"), lambda a: a, [X])
    check_grad(lambda a: K.print_tensor(a) ** 2, lambda a: a**2, X)


def test_print_tensor_rejects_a_non_string_message():
    with pytest.raises(ValueError, match="print_tensor: message must be a string, got 3"):
        K.print_tensor(X, 3)


def test_py_all_and_py_sum_are_the_builtins():
    assert K.py_all([1, True]) and not K.py_all([1, 0])
    assert K.py_sum([1, 2, 3]) == 6 and K.py_sum([[1], [2]], []) == [1, 2]


def test_zeros_and_ones_like_accept_lists():
    np.testing.assert_array_equal(K.eval(K.zeros_like([1.5, 2.5])), np.zeros(2))
    np.testing.assert_array_equal(K.eval(K.ones_like([[1, 2]])), np.ones((1, 2), np.int32))
