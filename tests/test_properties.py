"""Property tests (Hypothesis) for the ops that tests/test_ops_reduce.py and
tests/test_ops_shape.py do not already cover with Hypothesis: argmax/argmin/cumsum/cumprod,
element-wise math (float32, float16, bfloat16), broadcasting binary ops and comparisons,
dot, batch_dot, clip and switch. Each example checks a family of ops against NumPy (float64)
eagerly, through K.function on placeholders with an unknown first dimension, on variables,
and under jax.jit (tests/helpers.py: check_op), in one compiled function per way."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import jaxkeras as K

pytestmark = pytest.mark.slow  # Hypothesis, each example compiled four ways

QUARTERS = st.integers(-16, 16).map(lambda v: v / 4)  # exact in every float type
SMALL_INTS = st.integers(-3, 3)
# rtol = atol for results compared with float64 on the same inputs (a few roundings each)
TOLERANCE = {"float32": 1e-5, "float16": 4e-3, "bfloat16": 3e-2}


def check_op(op, reference, inputs, rtol=1e-5, atol=1e-6, batch_none=True):
    """Asserts that ``op`` (a function of tensors returning a list) agrees with ``reference``
    eagerly, through K.function on placeholders and under jax.jit, and that the static shapes
    it infers fit the values (a lighter tests/helpers.check_op: no per-output K.eval)."""
    expected = reference(*inputs)
    placeholders = [
        K.placeholder(
            (None, *a.shape[1:]) if batch_none and a.ndim else a.shape, dtype=a.dtype.name
        )
        for a in inputs
    ]
    symbolic = op(*placeholders)
    ways = {
        "eager": op(*inputs),
        "function": K.function(placeholders, symbolic)(list(inputs)),
        "jit": jax.jit(op)(*inputs),
    }
    for way, values in ways.items():
        for i, (value, want) in enumerate(zip(values, expected, strict=True)):
            value = np.asarray(value)
            assert value.shape == np.shape(want), (way, i, value.shape, np.shape(want))
            np.testing.assert_allclose(
                value.astype(np.float64), want, rtol=rtol, atol=atol, err_msg=f"{way} {i}"
            )
    for i, (tensor, want) in enumerate(zip(symbolic, expected)):
        shape = K.int_shape(tensor)
        assert len(shape) == np.ndim(want), (i, shape, np.shape(want))
        assert all(d is None or d == n for d, n in zip(shape, np.shape(want))), (i, shape)


def _array(draw, shape, dtype):
    elements = SMALL_INTS if dtype == "int32" else QUARTERS
    x = draw(hnp.arrays("int32" if dtype == "int32" else "float32", shape, elements=elements))
    return x.astype(jnp.bfloat16) if dtype == "bfloat16" else x.astype(dtype)


def _axis(draw, rank):
    return draw(st.integers(-rank, rank - 1))


# ---------------------------------------------------------------------------------------------
# argmax, argmin, cumsum, cumprod


@st.composite
def scan_cases(draw):
    dtype = draw(st.sampled_from(["float32", "int32"]))
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    return _array(draw, shape, dtype), _axis(draw, len(shape))


@settings(max_examples=15)
@given(scan_cases())
def test_arg_reductions_and_scans_match_numpy(case):
    x, axis = case
    check_op(
        lambda a: [K.argmax(a, axis), K.argmin(a, axis), K.cumsum(a, axis), K.cumprod(a, axis)],
        lambda a: [
            np.argmax(a, axis),  # ties: the first index, as NumPy
            np.argmin(a, axis),
            np.cumsum(a, axis, dtype=a.dtype),
            np.cumprod(a, axis, dtype=a.dtype),
        ],
        [x],
    )


# ---------------------------------------------------------------------------------------------
# element-wise math


def _k_unary(x):
    positive = K.abs(x) + 0.5
    return [
        K.abs(x),
        K.square(x),
        K.sqrt(positive),
        K.exp(x),
        K.log(positive),
        K.sin(x),
        K.cos(x),
        K.tanh(x),
        K.sign(x),
        K.round(x),
        K.pow(positive, 3),
        K.sigmoid(x),
        K.hard_sigmoid(x),
        K.softplus(x),
        K.softsign(x),
        K.relu(x),
        K.relu(x, alpha=0.25, max_value=2.0),
        K.elu(x, 0.5),
        -x,
        x * 2 - 1,
    ]


def _np_unary(x):
    x = x.astype(np.float64)
    positive = np.abs(x) + 0.5
    return [
        np.abs(x),
        np.square(x),
        np.sqrt(positive),
        np.exp(x),
        np.log(positive),
        np.sin(x),
        np.cos(x),
        np.tanh(x),
        np.sign(x),
        np.round(x),  # half to even, as K.round
        positive**3,
        sp.expit(x),
        np.clip(0.2 * x + 0.5, 0, 1),
        np.logaddexp(x, 0),
        x / (1 + np.abs(x)),
        np.maximum(x, 0),
        np.where(x > 0, np.minimum(x, 2.0), 0.25 * x),
        np.where(x > 0, x, 0.5 * np.expm1(x)),
        -x,
        x * 2 - 1,
    ]


@st.composite
def unary_cases(draw):
    dtype = draw(st.sampled_from(sorted(TOLERANCE)))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4))
    return _array(draw, shape, dtype)


@settings(max_examples=15)
@given(unary_cases())
def test_elementwise_math_matches_numpy_in_each_float_type(x):
    tol = TOLERANCE[x.dtype.name]
    check_op(_k_unary, _np_unary, [x], rtol=tol, atol=tol)
    symbolic = _k_unary(K.placeholder(x.shape, dtype=x.dtype.name))
    assert {K.dtype(t) for t in symbolic} == {x.dtype.name}  # no silent up- or downcast


@st.composite
def binary_cases(draw):
    dtype = draw(st.sampled_from(["float32", "int32"]))
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3))
    x, y = (_array(draw, s, dtype) for s in shapes.input_shapes)
    return x, y


def _k_binary(x, y):
    return [
        K.maximum(x, y),
        K.minimum(x, y),
        x + y,
        x - y,
        x * y,
        K.equal(x, y),
        K.not_equal(x, y),
        K.greater(x, y),
        K.greater_equal(x, y),
        K.less(x, y),
        K.less_equal(x, y),
    ]


def _np_binary(x, y):
    return [
        np.maximum(x, y),
        np.minimum(x, y),
        x + y,
        x - y,
        x * y,
        x == y,
        x != y,
        x > y,
        x >= y,
        x < y,
        x <= y,
    ]


@settings(max_examples=15)
@given(binary_cases())
def test_binary_ops_broadcast_like_numpy(case):
    x, y = case
    check_op(_k_binary, _np_binary, [x, y])


# ---------------------------------------------------------------------------------------------
# dot and batch_dot


@st.composite
def dot_cases(draw):
    """x of rank 1-3 and y of rank 1-3 whose contracted sizes agree (NumPy's dot rule)."""
    n = draw(st.integers(1, 4))
    x_shape = (*draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=3)), n)
    y_rank = draw(st.integers(1, 3))
    if y_rank == 1:
        y_shape = (n,)
    else:
        lead = draw(hnp.array_shapes(min_dims=y_rank - 2, max_dims=y_rank - 2, max_side=3))
        y_shape = (*lead, n, draw(st.integers(1, 3)))
    return _array(draw, x_shape, "float32"), _array(draw, y_shape, "float32")


@settings(max_examples=15)
@given(dot_cases())
def test_dot_matches_numpy_dot(case):
    x, y = case
    check_op(
        lambda a, b: [K.dot(a, b)],
        lambda a, b: [np.dot(a.astype(np.float64), b)],
        [x, y],
        batch_none=False,
    )


def _np_batch_dot(x, y, axes):
    """Per sample: tensordot over one axis each (given with the batch axis); (batch, 1) when
    both are matrices, as Keras 2 does."""
    out = np.stack([np.tensordot(a, b, ([axes[0] - 1], [axes[1] - 1])) for a, b in zip(x, y)])
    return out.reshape(-1, 1) if x.ndim == y.ndim == 2 else out


@st.composite
def batch_dot_cases(draw):
    batch, n = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    x_rank, y_rank = draw(st.integers(2, 3)), draw(st.integers(2, 3))
    x_axis, y_axis = draw(st.integers(1, x_rank - 1)), draw(st.integers(1, y_rank - 1))

    def shape(rank, axis):
        sizes = [batch] + [draw(st.integers(1, 3)) for _ in range(rank - 1)]
        sizes[axis] = n
        return tuple(sizes)

    x = _array(draw, shape(x_rank, x_axis), "float32")
    y = _array(draw, shape(y_rank, y_axis), "float32")
    return x, y, (x_axis, y_axis)


@settings(max_examples=15)
@given(batch_dot_cases())
def test_batch_dot_matches_per_sample_tensordot(case):
    x, y, axes = case
    check_op(
        lambda a, b: [K.batch_dot(a, b, axes)],
        lambda a, b: [_np_batch_dot(a.astype(np.float64), b, axes)],
        [x, y],
    )


# ---------------------------------------------------------------------------------------------
# clip and switch


@st.composite
def clip_cases(draw):
    dtype = draw(st.sampled_from(["float32", "int32"]))
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    bounds = st.one_of(st.none(), st.integers(-3, 3))
    return _array(draw, shape, dtype), draw(bounds), draw(bounds)


@settings(max_examples=15)
@given(clip_cases())
def test_clip_matches_numpy(case):
    x, low, high = case
    if low is not None and high is not None:
        high = max(low, high)  # Keras: a maximum below the minimum is raised to it
    expected = np.clip(x, low, high) if (low, high) != (None, None) else x
    check_op(lambda a: [K.clip(a, low, high)], lambda a: [expected], [x])
    assert K.dtype(K.clip(K.placeholder(x.shape, dtype=x.dtype.name), low, high)) == x.dtype.name


@st.composite
def switch_cases(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    condition_rank = draw(st.integers(1, len(shape)))
    condition = draw(hnp.arrays(np.bool_, shape[:condition_rank]))
    return condition, _array(draw, shape, "float32"), _array(draw, shape, "float32")


@settings(max_examples=15)
@given(switch_cases())
def test_switch_selects_per_leading_entry_like_where(case):
    condition, x, y = case
    expanded = condition.reshape(condition.shape + (1,) * (x.ndim - condition.ndim))
    check_op(
        lambda c, a, b: [K.switch(c, a, b)],
        lambda c, a, b: [np.where(expanded, a, b)],
        [condition, x, y],
    )
