"""Shape manipulation and indexing (jaxkeras/_ops/shape.py): property tests over shapes, axes
and dtypes against NumPy, unknown dimensions kept through chains of ops, symbolic shape
arguments, and argument errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import check_grad, check_op
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import jaxkeras as K

RNG = np.random.default_rng(3)
X = RNG.normal(size=(2, 3, 4)).astype(np.float32)
ELEMENTS = {
    "float32": st.integers(-8, 8).map(lambda v: v / 4),
    "int32": st.integers(-9, 9),
    "bool": st.booleans(),
}


@st.composite
def shape_cases(draw):
    """An array of rank 1-4 (float32, int32 or bool) and arguments for every shape op."""
    dtype = draw(st.sampled_from(sorted(ELEMENTS)))
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=3))
    x = draw(hnp.arrays(dtype, shape, elements=ELEMENTS[dtype]))
    rank = len(shape)
    axis = st.integers(-rank, rank - 1)
    new_axis = st.integers(-rank - 1, rank)
    axes = st.lists(axis, min_size=1, max_size=rank, unique_by=lambda a: a % rank).map(tuple)
    # -1 absorbs the batch size, unknown while the graph is built
    target = list(draw(st.permutations(shape[1:])))
    target.insert(draw(st.integers(0, rank - 1)), -1)
    args = {
        "target": tuple(target),
        "pattern": tuple(draw(st.permutations(range(rank)))),
        "new_axis": draw(new_axis),
        "stack_axis": draw(new_axis),
        "concat_axis": draw(axis),
        "rep": draw(st.integers(0, 2)),
        "rep_axis": draw(axis),
        "reverse_axes": draw(st.one_of(axis, axes)),
        "tiles": tuple(draw(st.lists(st.integers(1, 2), min_size=rank, max_size=rank))),
    }
    return x, args


def _k_shape_ops(x, a):
    return [
        K.reshape(x, a["target"]),
        K.permute_dimensions(x, a["pattern"]),
        K.expand_dims(x, a["new_axis"]),
        K.squeeze(K.expand_dims(x, a["new_axis"]), a["new_axis"]),
        K.concatenate([x, x], a["concat_axis"]),
        K.stack([x, x], a["stack_axis"]),
        K.tile(x, a["tiles"]),
        K.repeat_elements(x, a["rep"], a["rep_axis"]),
        K.flatten(x),
        K.batch_flatten(x),
        K.transpose(x),
        K.reverse(x, a["reverse_axes"]),
    ]


def _np_shape_ops(x, a):
    return [
        np.reshape(x, a["target"]),
        np.transpose(x, a["pattern"]),
        np.expand_dims(x, a["new_axis"]),
        x,
        np.concatenate([x, x], a["concat_axis"]),
        np.stack([x, x], a["stack_axis"]),
        np.tile(x, a["tiles"]),
        np.repeat(x, a["rep"], a["rep_axis"]),
        x.reshape(-1),
        x.reshape(x.shape[0], -1),
        x.T,
        np.flip(x, a["reverse_axes"]),
    ]


# each example checks every op of the family in one compiled function (~0.5 s)
@pytest.mark.slow
@settings(max_examples=15)
@given(shape_cases())
def test_shape_ops_match_numpy(case):
    x, args = case
    check_op(lambda t: _k_shape_ops(t, args), lambda t: _np_shape_ops(t, args), [x])


def test_unknown_batch_survives_a_chain_of_ops():
    x = K.placeholder((None, 3, 4))
    steps = [
        (lambda t: K.abs(t), (None, 3, 4)),
        (lambda t: K.exp(t), (None, 3, 4)),
        (lambda t: K.sum(t, axis=-1, keepdims=True), (None, 3, 1)),
        (lambda t: K.expand_dims(t, 1), (None, 1, 3, 1)),
        (lambda t: K.squeeze(t, 1), (None, 3, 1)),
        (lambda t: K.permute_dimensions(t, (0, 2, 1)), (None, 1, 3)),
        (lambda t: K.repeat_elements(t, 2, axis=1), (None, 2, 3)),
        (lambda t: K.concatenate([t, t], axis=-1), (None, 2, 6)),
        (lambda t: K.tile(t, [1, 2, 1]), (None, 4, 6)),
        (lambda t: K.reverse(t, 1), (None, 4, 6)),
        (lambda t: K.l2_normalize(t, axis=-1), (None, 4, 6)),
        (lambda t: K.clip(t, 0.1, 0.5), (None, 4, 6)),
        (lambda t: K.batch_dot(t, t, axes=2), (None, 4, 4)),
        (lambda t: K.cast(t, "float16"), (None, 4, 4)),
        (lambda t: K.batch_flatten(t), (None, 16)),
        (lambda t: K.dot(t, np.ones((16, 2), np.float16)), (None, 2)),
    ]
    y = x
    for step, expected in steps:
        y = step(y)
        assert K.int_shape(y) == expected
    value = np.abs(X)
    e = np.exp(value).sum(-1, keepdims=True).transpose(0, 2, 1).repeat(2, 1)
    e = np.tile(np.concatenate([e, e], -1), (1, 2, 1))[:, ::-1]
    e = np.clip(e / np.linalg.norm(e, axis=-1, keepdims=True), 0.1, 0.5)
    e = np.einsum("bij,bkj->bik", e, e).reshape(2, 16).sum(-1, keepdims=True).repeat(2, 1)
    np.testing.assert_allclose(K.function([x], [y])([X])[0], e, rtol=2e-3)


def test_repeat():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    check_op(lambda t: K.repeat(t, 3), lambda t: np.repeat(t[:, None, :], 3, axis=1), [x])
    with pytest.raises(ValueError, match=r"repeat: x must have rank 2, got shape \(None, 3, 4\)"):
        K.repeat(K.placeholder((None, 3, 4)), 2)


def test_reshape_with_minus_one_keeps_unknown_batch():
    assert K.int_shape(K.reshape(K.placeholder((None, 3, 4)), (-1, 4))) == (None, 4)


def test_reshape_with_symbolic_dimension():
    x = K.placeholder((None, 3, 4))
    y = K.reshape(x, (K.shape(x)[0], K.shape(x)[1] * 4))
    assert K.int_shape(y) == (None, 12)
    np.testing.assert_array_equal(K.function([x], [y])([X])[0], X.reshape(2, 12))


def test_reshape_to_the_shape_of_another_tensor():
    x = K.placeholder((None, 12))
    like = K.placeholder((None, 3, 4))
    y = K.reshape(x, K.shape(like))
    assert K.int_shape(y) == (None, 3, 4)
    value = K.function([x, like], [y])([X.reshape(2, 12), X])[0]
    np.testing.assert_array_equal(value, X)


def test_reshape_to_a_shape_tensor_of_known_values():
    y = K.reshape(np.arange(6), np.array([3, 2]))
    np.testing.assert_array_equal(y, np.arange(6).reshape(3, 2))


@pytest.mark.parametrize(
    "shape, message",
    [
        (
            (5, 5),
            r"cannot reshape a tensor of shape \(2, 3, 4\) \(24 elements\) into shape \(5, 5\)",
        ),
        ((-1, 5), r"cannot reshape .* into shape \(-1, 5\)"),
        ((-1, -1), r"shape=\(-1, -1\) may hold at most 1 entries equal to -1"),
        ((2, "a"), r"reshape: shape must hold ints >= 0 or scalar tensors, got \(2, 'a'\)"),
    ],
)
def test_reshape_errors(shape, message):
    with pytest.raises(ValueError, match=message):
        K.reshape(K.placeholder((2, 3, 4)), shape)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x: K.permute_dimensions(x, (0, 1)), r"pattern must list each of the 3 axes"),
        (lambda x: K.permute_dimensions(x, (0, 1, 1)), r"pattern=\(0, 1, 1\) names an axis twice"),
        (lambda x: K.permute_dimensions(x, (0, 1, 3)), "pattern=3 is out of range"),
        (lambda x: K.expand_dims(x, 4), "expand_dims: axis=4 is out of range .* in \\[-4, 4\\)"),
        (lambda x: K.squeeze(x, 1), r"squeeze: axis 1 of a tensor of shape \(None, 3, 4\)"),
        (lambda x: K.squeeze(x, -4), "squeeze: axis=-4 is out of range"),
        (
            lambda x: K.concatenate([x, K.placeholder((None, 5, 4))], axis=-1),
            r"concatenate: incompatible shapes \[\(None, 3, 4\), \(None, 5, 4\)\]",
        ),
        (lambda x: K.concatenate([x, K.placeholder((None, 3))]), "concatenate: incompatible"),
        (lambda x: K.concatenate([x, x], axis=3), "concatenate: axis=3 is out of range"),
        (lambda x: K.concatenate([]), r"concatenate: expected a non-empty list of tensors"),
        (lambda x: K.stack([x, K.placeholder((None, 3, 5))]), "stack: incompatible shapes"),
        (lambda x: K.stack([x, x], axis=-5), "stack: axis=-5 is out of range"),
        (lambda x: K.repeat_elements(x, -1, 1), "repeat_elements: rep must be an int >= 0"),
        (lambda x: K.repeat_elements(x, 2, 5), "repeat_elements: axis=5 is out of range"),
        (lambda x: K.reverse(x, (0, 3)), "reverse: axes=3 is out of range"),
        (lambda x: K.slice(x, (0, 0), (1, 1)), "slice: start must have one entry per axis"),
        (lambda x: K.slice(x, (0, 2, 0), (1, 2, 1)), "slice: start=.* goes past the end"),
        (lambda x: K.one_hot(x, -2), "one_hot: num_classes must be an int >= 0, got -2"),
    ],
)
def test_shape_argument_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call(K.placeholder((None, 3, 4)))


def test_tile_follows_numpy_for_short_and_long_counts():
    np.testing.assert_array_equal(K.tile(np.array([1, 2]), 2), [1, 2, 1, 2])
    x = np.arange(6.0).reshape(2, 3)
    for n in (2, (2, 1), (1, 2, 1)):
        np.testing.assert_array_equal(K.eval(K.tile(K.variable(x), n)), np.tile(x, n))


def test_tile_with_symbolic_counts():
    x = K.placeholder((None, 3))
    y = K.tile(x, [1, K.shape(x)[0]])
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(K.function([x], [y])([value])[0], np.tile(value, (1, 2)))


def test_gather():
    indices = np.array([[0, 1], [1, 1]], np.int32)
    check_op(lambda r, i: K.gather(r, i), lambda r, i: r[i], [X, indices])
    check_grad(lambda r: K.gather(r, np.array([1, 0, 1])), lambda r: r[[1, 0, 1]], X)


def test_gather_on_a_variable_doc_example():
    var = K.variable([[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(
        K.eval(K.gather(var, [0, 1, 0])), [[1, 2, 3], [4, 5, 6], [1, 2, 3]]
    )


@pytest.mark.parametrize(
    "start, size", [((0, 1, 0), (-1, 2, 3)), ((1, 0, 2), (1, -1, -1)), ((0, 0, 0), (2, 3, 4))]
)
def test_slice_like_tf(start, size):
    def reference(a):
        index = tuple(slice(b, None if n == -1 else b + n) for b, n in zip(start, size))
        return a[index]

    check_op(lambda a: K.slice(a, start, size), reference, [X])


def test_slice_with_starts_computed_in_the_graph():
    # tf.slice takes tensor starts when the sizes are static (a masked CRF slices this way)
    def reference(a, t):
        return a[:, t[0] : t[0] + 2, 1:]

    check_op(
        lambda a, t: K.slice(a, [0, K.reshape(t, ()), 1], [-1, 2, -1]),
        reference,
        [X, np.array([1], np.int32)],
        batch_none=False,
    )
    # a start from a placeholder, and a whole 1-D start tensor inside jax.jit
    x, t = K.placeholder((None, 3, 4)), K.placeholder((), dtype="int32")
    f = K.function([x, t], [K.slice(x, [0, 1, t], [2, 2, 3])])
    np.testing.assert_array_equal(f([X, np.int32(1)])[0], X[:, 1:3, 1:4])
    starts = jax.jit(lambda a, s: K.slice(a, jnp.stack([0, 0, s]), [1, 3, 2]))(X, 2)
    np.testing.assert_array_equal(starts, X[:1, :, 2:4])
    # as lax.dynamic_slice, a start past the end is clamped so that the block fits
    np.testing.assert_array_equal(f([X, np.int32(3)])[0], X[:, 1:3, 1:4])


def test_slice_with_starts_computed_in_rnn_steps():
    inputs = K.placeholder((None, 4, 6))

    def step(x_t, states):  # the step's own index, kept as a state, picks two columns
        i = K.cast(states[1][0, 0], "int32")
        return K.slice(x_t, [0, i], [-1, 2]), [states[0], states[1] + 1]

    zeros = K.zeros_like(inputs[:, 0, :1])
    _, outputs, _ = K.rnn(step, inputs, [zeros, zeros])
    data = RNG.normal(size=(2, 4, 6)).astype(np.float32)
    want = np.stack([data[:, t, t : t + 2] for t in range(4)], axis=1)
    np.testing.assert_array_equal(K.function([inputs], [outputs])([data])[0], want)


def test_slice_sizes_must_be_known_when_traced():
    x, t = K.placeholder((None, 3, 4)), K.placeholder((), dtype="int32")
    with pytest.raises(ValueError, match=r"slice: size must be known .* got \(1, 1, JitTracer"):
        K.function([x, t], [K.slice(x, [0, 0, 0], [1, 1, t])])([X, np.int32(1)])
    with pytest.raises(ValueError, match=r"slice: size=\(1, -1, 2\) takes the rest of axis 1"):
        K.function([x, t], [K.slice(x, [0, t, 0], [1, -1, 2])])([X, np.int32(1)])
    with pytest.raises(ValueError, match="slice: start must hold ints or integer scalars"):
        jax.jit(lambda a, s: K.slice(a, [0, s, 0], [1, 1, 1]))(X, 0.5)


def test_one_hot():
    indices = np.array([[0, 2], [3, 1]], np.int32)  # 3 is out of range: all zeros
    check_op(lambda i: K.one_hot(i, 3), lambda i: np.eye(4, 3)[i], [indices])
    out = K.one_hot(K.placeholder((None, 2), dtype="int32"), 3)
    assert K.int_shape(out) == (None, 2, 3) and K.dtype(out) == K.floatx()


def test_size():
    check_op(K.size, lambda a: np.asarray(a.size), [X])
    out = K.size(K.placeholder((None, 3)))
    assert K.int_shape(out) == () and K.dtype(out) == "int32"


def test_get_variable_shape():
    assert K.get_variable_shape(K.variable(np.zeros((2, 5)))) == (2, 5)
    assert K.get_variable_shape(K.placeholder((None, 5))) == (None, 5)


def test_repeat_elements_result_carries_keras_shape():
    # the TF backend sets _keras_shape on repeat_elements results (Keras reads it)
    y = K.repeat_elements(K.placeholder((2, None, 3)), 2, axis=1)
    assert y._keras_shape == (2, None, 3)
    z = K.repeat_elements(K.placeholder((2, 4, 3)), 2, axis=2)
    assert z._keras_shape == (2, 4, 6)
    assert not hasattr(K.abs(z), "_keras_shape")


def test_tile_by_a_size_computed_from_an_unknown_shape():
    # Keras 2.3.1's confusion-matrix metrics tile thresholds by K.size(y_pred)
    x = K.placeholder((None, 3))
    n = K.size(x)
    t = K.tile(K.expand_dims(K.constant([0.5, 0.2]), 1), K.cast(K.stack([1, n]), "int32"))
    assert K.int_shape(t) == (2, None) and K.int_shape(n) == ()
    got, size = K.function([x], [t, n])([np.ones((4, 3), np.float32)])
    np.testing.assert_array_equal(got, np.tile([[0.5], [0.2]], (1, 12)).astype(np.float32))
    assert size == 12 and K.size(np.ones((2, 5))) == 10


def test_tile_by_counts_computed_in_the_graph_names_n():
    # TF tiles by a tensor's value at run time; under XLA an array's size is static, so a count
    # held in a variable is refused with jaxkeras's own error (never JAX's conversion error)
    x = K.variable(np.ones((2, 3), "float32"))
    n = K.variable(np.array([2, 1]), dtype="int32")
    with pytest.raises(ValueError, match="tile: n must be known when the graph is traced"):
        K.eval(K.tile(x, n))
    assert K.eval(K.tile(x, K.shape(x)[:1])).shape == (2, 6)  # static: fine
