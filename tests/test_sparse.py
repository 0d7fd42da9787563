"""Sparse values: SciPy-sparse variables and sparse placeholders stay sparse (BCOO) where JAX has
sparse rules, and are densified for other ops."""

import numpy as np
import pytest
import scipy.sparse as sp

import jaxkeras as K

DENSE = np.array(
    [[0, 0, 0, 0, 1.5], [0, 0, 0, 0, 0], [0, 0, 2, 7, 0], [0, 0, 0, 3, 0]], dtype=np.float32
)
W = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)


def test_sparse_variable_stays_sparse_through_concatenate():
    a, b = K.variable(sp.csr_matrix(DENSE)), K.variable(sp.coo_matrix(DENSE * 2))
    assert K.is_sparse(a) and K.int_shape(a) == (4, 5) and a.dtype == "float32"
    c = K.concatenate([a, b])
    assert K.is_sparse(c) and K.int_shape(c) == (4, 10)
    np.testing.assert_array_equal(K.eval(c), np.concatenate([DENSE, 2 * DENSE], -1))
    np.testing.assert_array_equal(K.eval(K.to_dense(c)), np.concatenate([DENSE, 2 * DENSE], -1))
    np.testing.assert_array_equal(K.get_value(a), DENSE)


def test_sparse_times_dense_and_ops_without_sparse_rules():
    a = K.variable(sp.csr_matrix(DENSE))
    w = K.variable(W)
    prod = K.dot(a, w)
    assert not K.is_sparse(prod)
    np.testing.assert_allclose(K.eval(prod), DENSE @ W, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(K.eval(K.exp(a)), np.exp(DENSE), rtol=1e-6)  # exp(0) = 1
    np.testing.assert_allclose(K.eval(K.tanh(a)), np.tanh(DENSE), rtol=1e-6)
    np.testing.assert_allclose(K.eval(K.sum(a, axis=1)), DENSE.sum(1), rtol=1e-6)


def test_sparse_placeholder_in_a_compiled_function():
    x = K.placeholder((None, 5), sparse=True)
    w = K.variable(W)
    f = K.function([x], [K.dot(x, w), K.sum(K.to_dense(x))])
    out, total = f([sp.csr_matrix(DENSE)])
    np.testing.assert_allclose(out, DENSE @ W, rtol=1e-5, atol=1e-6)
    assert total == DENSE.sum()
    out_dense, _ = f([DENSE])  # dense feeds are converted
    np.testing.assert_allclose(out_dense, DENSE @ W, rtol=1e-5, atol=1e-6)


def test_set_value_keeps_a_sparse_variable_sparse():
    a = K.variable(sp.csr_matrix(DENSE))
    K.set_value(a, np.eye(4, 5))
    assert K.is_sparse(a)
    np.testing.assert_array_equal(K.get_value(a), np.eye(4, 5))
    with pytest.raises(ValueError, match=r"\(2, 2\)"):
        K.set_value(a, np.eye(2))
