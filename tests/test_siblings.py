"""Sibling ops run as one (jaxkeras/_xla/siblings.py): a loop body that applies several
kernels to one input, as Keras's recurrent cells do per gate, computes one product or
convolution; values and gradients are those of the separate ops."""

from __future__ import annotations

import numpy as np
import pytest

import jaxkeras as K
from jaxkeras._xla import siblings

UNITS = 3


def _gated_rnn(x, kernel, recurrent):
    """An LSTM-like loop whose step multiplies its input and state by four captured column
    slices of each kernel (Keras's LSTMCell, implementation 1)."""
    gates = [kernel[:, k * UNITS : (k + 1) * UNITS] for k in range(4)]
    recurrent_gates = [recurrent[:, k * UNITS : (k + 1) * UNITS] for k in range(4)]

    def step(inputs, states):
        z = [K.dot(inputs, w) + K.dot(states[0], u) for w, u in zip(gates, recurrent_gates)]
        c = K.sigmoid(z[1]) * states[1] + K.sigmoid(z[0]) * K.tanh(z[2])
        h = K.sigmoid(z[3]) * K.tanh(c)
        return h, [h, c]

    zeros = K.zeros_like(x[:, 0, :1]) * K.zeros((1, UNITS))
    return K.rnn(step, x, [zeros, zeros])[1], gates


def _numpy_gated_rnn(x, kernel, recurrent):
    def sigmoid(v):
        return 1 / (1 + np.exp(-v))

    h = c = np.zeros((x.shape[0], UNITS))
    outputs = []
    for t in range(x.shape[1]):
        z = x[:, t] @ kernel + h @ recurrent
        i, f, g, o = (z[:, k * UNITS : (k + 1) * UNITS] for k in range(4))
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs, 1)


@pytest.fixture
def gated():
    rng = np.random.default_rng(0)
    kernel = rng.normal(0, 0.5, (2, 4 * UNITS)).astype(np.float32)
    recurrent = rng.normal(0, 0.5, (UNITS, 4 * UNITS)).astype(np.float32)
    data = rng.normal(0, 1, (5, 6, 2)).astype(np.float32)
    return kernel, recurrent, data


def test_a_loop_body_multiplies_once_by_the_concatenated_kernels(gated):
    kernel, recurrent, data = gated
    x = K.placeholder((None, 6, 2))
    outputs, _ = _gated_rnn(x, K.variable(kernel), K.variable(recurrent))
    f = K.function([x], [outputs])
    np.testing.assert_allclose(
        f([data])[0], _numpy_gated_rnn(data, kernel, recurrent), rtol=1e-5, atol=1e-6
    )
    # one product for the input, one for the state, not four of each
    assert f.lower([data]).as_text().count("stablehlo.dot_general") == 2


def test_gradients_through_merged_siblings_are_the_separate_ops(gated, monkeypatch):
    kernel, recurrent, data = gated

    def grads():
        x = K.placeholder((None, 6, 2))
        w, u = K.variable(kernel), K.variable(recurrent)
        outputs, gates = _gated_rnn(x, w, u)
        loss = K.sum(K.square(outputs))
        # with respect to a variable and to one gate's slice (a captured node)
        return K.function([x], K.gradients(loss, [w, u, gates[2]]))([data])

    merged = grads()
    monkeypatch.setattr(siblings, "SPLITS", {})
    separate = grads()
    for a, b in zip(merged, separate):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # the slice's gradient is the variable's columns for that gate
    np.testing.assert_allclose(merged[2], merged[0][:, 2 * UNITS : 3 * UNITS], rtol=1e-6)


def test_the_parts_gradients_are_concatenated_not_padded_and_summed(gated):
    # slicing the merged output per member would transpose to one zero-padded copy of the
    # whole output per member, summed; one split transposes to one concatenate
    kernel, recurrent, data = gated
    x = K.placeholder((None, 6, 2))
    w, u = K.variable(kernel), K.variable(recurrent)
    outputs, _ = _gated_rnn(x, w, u)
    f = K.function([x], K.gradients(K.sum(K.square(outputs)), [w, u]))
    lines = f.lower([data]).as_text().splitlines()
    merged = f"tensor<{len(data)}x{4 * UNITS}xf32>"  # a step's merged product: (batch, 4 gates)
    assert not [line for line in lines if "stablehlo.pad" in line and merged in line]
    concatenated = [line for line in lines if "stablehlo.concatenate" in line]
    assert sum(line.endswith(f"-> {merged}") for line in concatenated) == 2  # input, state


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_sibling_convolutions_in_a_loop_body(data_format):
    rng = np.random.default_rng(1)
    kernel = rng.normal(0, 0.3, (3, 3, 2, 8)).astype(np.float32)
    shape = (4, 3, 5, 5, 2) if data_format == "channels_last" else (4, 3, 2, 5, 5)
    data = rng.normal(0, 1, shape).astype(np.float32)
    channel = -1 if data_format == "channels_last" else 1
    x = K.placeholder(shape)
    w = K.variable(kernel)
    parts = [w[:, :, :, 2 * k : 2 * k + 2] for k in range(4)]

    def step(inputs, states):
        convs = [K.conv2d(inputs, p, padding="same", data_format=data_format) for p in parts]
        return K.concatenate(convs, axis=channel), states

    _, outputs, _ = K.rnn(step, x, [K.zeros((4, 1))])
    got = K.function([x], [outputs])([data])[0]
    for t in range(3):
        frame = K.constant(data[:, t])
        expected = K.eval(
            K.conv2d(frame, K.constant(kernel), padding="same", data_format=data_format)
        )
        np.testing.assert_allclose(got[:, t], expected, rtol=1e-5, atol=1e-5)


def test_kernels_of_other_dtypes_or_shapes_are_not_grouped(gated):
    kernel, _, data = gated
    x = K.placeholder((None, 6, 2))
    narrow = K.variable(kernel[:, :UNITS])
    wide = K.variable(kernel[:, UNITS:])  # another shape along the split axis: grouped
    half = K.variable(kernel[:, :UNITS], dtype="float16")  # another dtype: not grouped

    def step(inputs, states):
        total = K.sum(K.dot(inputs, narrow), -1, True) + K.sum(K.dot(inputs, wide), -1, True)
        return K.cast(K.dot(K.cast(inputs, "float16"), half), "float32") + total, states

    _, outputs, _ = K.rnn(step, x, [K.zeros((5, 1))])
    got = K.function([x], [outputs])([data])[0]
    totals = (data @ kernel).sum(-1, keepdims=True)
    halves = data.astype(np.float16).astype(np.float32)
    expected = halves @ kernel[:, :UNITS].astype(np.float16).astype(np.float32) + totals
    np.testing.assert_allclose(got, expected, rtol=5e-3, atol=5e-3)
