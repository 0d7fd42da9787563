"""rnn, map_fn, foldl, foldr against NumPy reference loops.

The cells are written with operators and a few local ops (tanh, sigmoid, a dropout), so these
tests exercise the loop machinery on its own.
"""

from __future__ import annotations

import itertools

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest

import jaxkeras as K
from jaxkeras import state
from tests.helpers import numeric_grad

tanh = K.op(jnp.tanh, name="tanh")
sigmoid = K.op(jax.nn.sigmoid, name="sigmoid")


@K.op(random=True)
def dropout(x, rate, seed=None, key=None):
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


B, T, F, U = 3, 4, 2, 3
RNG = np.random.default_rng(0)
X = RNG.normal(size=(B, T, F))
MASK = np.array([[1, 1, 1, 1], [0, 1, 0, 1], [1, 1, 1, 0]], dtype=bool)


def np_sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


# ---------------------------------------------------------------------------------------------
# cells: (weight shapes, NumPy step, K step builder, number of states)


class Simple:
    gates = 1
    n_states = 1

    @staticmethod
    def numpy(x_t, states, w, consts):
        z = x_t @ w["W"] + states[0] @ w["U"] + w["b"] + sum(consts)
        h = np.tanh(z)
        return h, [h]

    @staticmethod
    def keras(w):
        def step(x_t, states):
            z = x_t @ w["W"] + states[0] @ w["U"] + w["b"]
            for c in states[1:]:
                z = z + c
            h = tanh(z)
            return h, [h]

        return step


class LSTM:
    gates = 4
    n_states = 2

    @staticmethod
    def split(z):
        return [z[:, k * U : (k + 1) * U] for k in range(4)]

    @staticmethod
    def numpy(x_t, states, w, consts):
        z = x_t @ w["W"] + states[0] @ w["U"] + w["b"] + sum(consts)
        i, f, g, o = LSTM.split(z)
        c = np_sigmoid(f) * states[1] + np_sigmoid(i) * np.tanh(g)
        h = np_sigmoid(o) * np.tanh(c)
        return h, [h, c]

    @staticmethod
    def keras(w):
        def step(x_t, states):
            z = x_t @ w["W"] + states[0] @ w["U"] + w["b"]
            for const in states[2:]:
                z = z + const
            i, f, g, o = LSTM.split(z)
            c = sigmoid(f) * states[1] + sigmoid(i) * tanh(g)
            h = sigmoid(o) * tanh(c)
            return h, [h, c]

        return step


def weights_for(cell, seed=1):
    rng = np.random.default_rng(seed)
    n = cell.gates * U
    return {
        "W": rng.normal(size=(F, n)) * 0.7,
        "U": rng.normal(size=(U, n)) * 0.7,
        "b": rng.normal(size=(n,)) * 0.3,
    }


def variables_for(weights):
    return {k: K.variable(v, name=k) for k, v in weights.items()}


def reference_rnn(step, x, states, mask=None, go_backwards=False, zero_output_for_mask=False):
    """The TF-Keras semantics as a plain loop over batch-major ``x`` (float64)."""
    steps = range(x.shape[1])
    prev, outputs = None, []
    for t in reversed(steps) if go_backwards else steps:
        out, new_states = step(x[:, t], states)
        if mask is None:
            states = new_states
            outputs.append(out)
            continue

        def keep(a, t=t):
            return mask[:, t].reshape((-1,) + (1,) * (a.ndim - 1))

        prev = np.zeros_like(out) if prev is None else prev
        masked = np.where(keep(out), out, prev)
        states = [np.where(keep(n), n, s) for n, s in zip(new_states, states)]
        outputs.append(np.where(keep(out), out, 0.0) if zero_output_for_mask else masked)
        prev = masked
    outputs = np.stack(outputs, axis=1)
    return outputs[:, -1], outputs, states


def initial_states(cell, batch=B):
    return [np.full((batch, U), 0.1 * (k + 1)) for k in range(cell.n_states)]


def constants_for(cell):
    return [RNG.normal(size=(B, cell.gates * U)) * 0.5]


CONSTANTS = {cell: constants_for(cell) for cell in (Simple, LSTM)}


# ---------------------------------------------------------------------------------------------
# every option combination, eagerly and through placeholders + K.function

OPTIONS = list(itertools.product([False, True], repeat=6))


@pytest.mark.parametrize("cell", [Simple, LSTM], ids=["simple", "lstm"])
@pytest.mark.parametrize(
    "go_backwards,masked,constants,unroll,zero_output_for_mask,time_major",
    OPTIONS,
    ids=["".join("BMCUZT"[i] if v else "_" for i, v in enumerate(o)) for o in OPTIONS],
)
def test_rnn_matches_reference(
    cell, go_backwards, masked, constants, unroll, zero_output_for_mask, time_major
):
    weights = weights_for(cell)
    w = variables_for(weights)
    consts = CONSTANTS[cell] if constants else []
    mask = MASK if masked else None
    # rank-3 masks (samples, time, 1) when constants are used, rank 2 otherwise
    mask_arg = None if mask is None else (mask[..., None] if constants else mask)
    states0 = initial_states(cell)

    want_last, want_outputs, want_states = reference_rnn(
        lambda x_t, s: cell.numpy(x_t, s, weights, consts),
        X,
        states0,
        mask,
        go_backwards,
        zero_output_for_mask,
    )

    def swap(a):
        return np.swapaxes(a, 0, 1) if time_major else a

    def run(x, mask_value, states, constants):
        return K.rnn(
            cell.keras(w),
            x,
            states,
            go_backwards=go_backwards,
            mask=mask_value,
            constants=constants,
            unroll=unroll,
            time_major=time_major,
            zero_output_for_mask=zero_output_for_mask,
        )

    x32 = swap(X).astype(np.float32)
    m = None if mask_arg is None else swap(mask_arg)
    s32 = [s.astype(np.float32) for s in states0]
    c32 = [c.astype(np.float32) for c in consts]

    def check(last, outputs, states, way):
        np.testing.assert_allclose(last, want_last, rtol=1e-5, atol=1e-6, err_msg=way)
        np.testing.assert_allclose(swap(outputs), want_outputs, rtol=1e-5, atol=1e-6, err_msg=way)
        for got, want in zip(states, want_states):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=way)

    last, outputs, states = run(x32, m, s32, c32)
    got = K.eval([last, outputs, *states])
    check(got[0], got[1], got[2:], "eager")

    x_ph = K.placeholder((T, None, F) if time_major else (None, T, F))
    batch_axis = 1 if time_major else 0
    m_ph = None
    if m is not None:
        m_ph = K.placeholder(
            [None if i == batch_axis else d for i, d in enumerate(m.shape)], dtype="bool"
        )
    s_ph = [K.placeholder((None, U)) for _ in s32]
    c_ph = [K.placeholder((None, c.shape[1])) for c in c32]
    last, outputs, states = run(x_ph, m_ph, s_ph, c_ph)
    assert K.int_shape(outputs)[batch_axis] is None
    assert K.int_shape(outputs)[1 - batch_axis] == T
    assert K.int_shape(last) == (None, U)
    feeds = [x_ph, *s_ph, *c_ph] + ([] if m_ph is None else [m_ph])
    values = [x32, *s32, *c32] + ([] if m is None else [m])
    got = K.function(feeds, [last, outputs, *states])(values)
    check(got[0], got[1], got[2:], "function")


# ---------------------------------------------------------------------------------------------
# gradients


@pytest.mark.parametrize(
    "cell,masked,go_backwards,unroll",
    [(LSTM, True, True, False), (Simple, False, False, True), (Simple, True, False, False)],
    ids=["lstm-mask-backwards", "simple-unroll", "simple-mask"],
)
def test_gradients_against_finite_differences(cell, masked, go_backwards, unroll):
    weights = weights_for(cell, seed=3)
    w = variables_for(weights)
    mask = MASK if masked else None
    states0 = initial_states(cell)
    r_out = RNG.normal(size=(B, T, U))
    r_state = RNG.normal(size=(B, U))

    x_ph = K.placeholder((None, T, F))
    _, outputs, states = K.rnn(
        cell.keras(w),
        x_ph,
        [s.astype(np.float32) for s in states0],
        mask=mask,
        go_backwards=go_backwards,
        unroll=unroll,
    )
    loss = outputs * r_out.astype(np.float32)
    loss_states = states[-1] * r_state.astype(np.float32)
    grads = K.gradients(loss, list(w.values())) + K.gradients(loss_states, list(w.values()))
    got = K.function([x_ph], grads)([X.astype(np.float32)])

    for i, name in enumerate(w):

        def total(value, name=name, which=0):
            ws = dict(weights, **{name: value})
            _, outs, sts = reference_rnn(
                lambda x_t, s: cell.numpy(x_t, s, ws, []), X, states0, mask, go_backwards
            )
            return np.sum(outs * r_out) if which == 0 else np.sum(sts[-1] * r_state)

        for which, g in enumerate((got[i], got[len(w) + i])):
            want = numeric_grad(lambda v, t=total, k=which: t(v, which=k), weights[name], 1e-6)
            np.testing.assert_allclose(g, want, rtol=2e-3, atol=2e-4, err_msg=f"{name} {which}")


def test_gradient_with_respect_to_inputs_and_initial_state():
    weights = weights_for(Simple)
    w = variables_for(weights)
    x_ph = K.placeholder((B, T, F))
    h_ph = K.placeholder((B, U))
    _, outputs, _ = K.rnn(Simple.keras(w), x_ph, [h_ph], mask=MASK)
    gx, gh = K.gradients(outputs, [x_ph, h_ph])
    h0 = initial_states(Simple)[0]
    got_x, got_h = K.function([x_ph, h_ph], [gx, gh])([X, h0])

    def total(x, h):
        return np.sum(
            reference_rnn(lambda x_t, s: Simple.numpy(x_t, s, weights, []), x, [h], MASK)[1]
        )

    np.testing.assert_allclose(got_x, numeric_grad(lambda v: total(v, h0), X), rtol=2e-3, atol=2e-4)
    np.testing.assert_allclose(got_h, numeric_grad(lambda v: total(X, v), h0), rtol=2e-3, atol=2e-4)


# ---------------------------------------------------------------------------------------------
# unroll, compilation, weights


def test_unroll_equals_scan():
    w = variables_for(weights_for(LSTM))
    x_ph = K.placeholder((None, T, F))
    m_ph = K.placeholder((None, T), dtype="bool")
    results = []
    for unroll in (False, True):
        last, outputs, states = K.rnn(
            LSTM.keras(w),
            x_ph,
            [np.zeros((B, U), np.float32)] * 2,
            mask=m_ph,
            unroll=unroll,
            go_backwards=True,
        )
        results.append(K.function([x_ph, m_ph], [last, outputs, *states])([X, MASK]))
    for scanned, unrolled in zip(*results):
        np.testing.assert_allclose(unrolled, scanned, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("unroll", [False, True])
@pytest.mark.parametrize("time_major", [False, True])
def test_return_all_outputs_false_keeps_only_the_last_output(unroll, time_major):
    w = variables_for(weights_for(LSTM))
    x = np.swapaxes(X, 0, 1) if time_major else X
    mask = MASK.T if time_major else MASK
    x_ph = K.placeholder(x.shape)
    results = {}
    for keep in (True, False):
        last, outputs, states = K.rnn(
            LSTM.keras(w),
            x_ph,
            [np.zeros((B, U), np.float32)] * 2,
            mask=mask,
            unroll=unroll,
            time_major=time_major,
            return_all_outputs=keep,
        )
        expected = (1, B, U) if time_major else (B, 1, U)
        assert keep or K.int_shape(outputs) == expected
        results[keep] = K.function([x_ph], [last, outputs, *states])([x])
    every, only_last = results[True], results[False]
    for a, b in zip([every[0], *every[2:]], [only_last[0], *only_last[2:]]):
        np.testing.assert_array_equal(a, b)
    last_step = every[1][-1:] if time_major else every[1][:, -1:]
    np.testing.assert_array_equal(only_last[1], last_step)
    np.testing.assert_array_equal(np.squeeze(only_last[1], 0 if time_major else 1), every[0])


def test_one_trace_for_many_calls_and_new_weights_without_recompiling():
    weights = weights_for(Simple)
    w = variables_for(weights)
    x_ph = K.placeholder((None, T, F))
    _, outputs, _ = K.rnn(Simple.keras(w), x_ph, [np.zeros((B, U), np.float32)])
    f = K.function([x_ph], [outputs])
    for _ in range(100):
        got = f([X])[0]
    assert f.trace_count == 1

    new = dict(weights, W=weights["W"] * -0.5)
    K.set_value(w["W"], new["W"])
    got = f([X])[0]
    assert f.trace_count == 1
    want = reference_rnn(lambda x_t, s: Simple.numpy(x_t, s, new, []), X, [np.zeros((B, U))])[1]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_sliced_weights_and_outside_tensors_are_captured():
    weights = weights_for(LSTM)
    w = variables_for(weights)
    kernels = [w["W"][:, k * U : (k + 1) * U] for k in range(4)]
    scale = K.placeholder(())

    def step(x_t, states):
        gates = [x_t @ kernels[k] + states[0] @ w["U"][:, k * U : (k + 1) * U] for k in range(4)]
        i, f, g, o = (gates[k] + w["b"][k * U : (k + 1) * U] for k in range(4))
        c = sigmoid(f) * states[1] + sigmoid(i) * tanh(g)
        h = sigmoid(o) * tanh(c) * scale
        return h, [h, c]

    x_ph = K.placeholder((None, T, F))
    _, outputs, _ = K.rnn(step, x_ph, [np.zeros((B, U), np.float32)] * 2)
    got = K.function([x_ph, scale], [outputs])([X, 2.0])[0]

    def np_step(x_t, states):
        h, (_, c) = LSTM.numpy(x_t, states, weights, [])
        return 2.0 * h, [2.0 * h, c]

    want = reference_rnn(np_step, X, [np.zeros((B, U))] * 2)[1]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# learning phase and dropout inside the step


def test_learning_phase_and_dropout_inside_the_step():
    units = 16

    def step(x_t, states):
        ones = states[0] * 0.0 + 1.0
        drop = K.in_train_phase(lambda: dropout(ones, 0.5), ones)
        return drop, [states[0] + x_t[:, :1]]

    x_ph = K.placeholder((None, T, F))
    _, outputs, _ = K.rnn(step, x_ph, [np.zeros((4, units), np.float32)])
    assert outputs._uses_learning_phase
    f = K.function([x_ph, K.learning_phase()], [outputs])
    x = np.ones((4, T, F), np.float32)
    np.testing.assert_array_equal(f([x, 0])[0], 1.0)
    first, second = f([x, 1])[0], f([x, 1])[0]
    for masks in (first, second):
        assert set(np.unique(masks)) == {0.0, 2.0}
        # one mask for the whole sequence (as Keras's recurrent dropout expects)
        np.testing.assert_array_equal(masks, np.repeat(masks[:, :1], T, axis=1))
    assert not np.array_equal(first, second)  # fresh masks on every call


# ---------------------------------------------------------------------------------------------
# state scope under jax.jit


def test_under_jax_jit_in_a_state_scope_with_gradients():
    weights = weights_for(Simple)
    w = variables_for(weights)
    r = RNG.normal(size=(B, T, U))
    h0 = np.zeros((B, U), np.float32)

    def loss(values, x):
        with K.state_scope(values):
            _, outputs, _ = K.rnn(Simple.keras(w), x, [h0], mask=MASK)
        return jnp.sum(outputs * r), outputs

    values = K.get_state(list(w.values()))
    (_, outputs), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(
        values, X.astype(np.float32)
    )

    def reference(ws):
        return reference_rnn(lambda x_t, s: Simple.numpy(x_t, s, ws, []), X, [h0], MASK)[1]

    np.testing.assert_allclose(outputs, reference(weights), rtol=1e-5, atol=1e-6)
    want = numeric_grad(lambda v: np.sum(reference(dict(weights, U=v)) * r), weights["U"])
    np.testing.assert_allclose(grads[w["U"].name], want, rtol=2e-3, atol=2e-4)


# ---------------------------------------------------------------------------------------------
# more structure: rank-3 states, nested inputs, input_length


def test_mask_broadcasts_to_rank_3_states_and_outputs():
    def np_step(x_t, states):
        s = states[0] * 0.5 + x_t[:, None, :]
        return s * 2.0, [s]

    def k_step(x_t, states):
        s = states[0] * 0.5 + x_t[:, None, :]
        return s * 2.0, [s]

    s0 = np.ones((B, 2, F))
    want = reference_rnn(np_step, X, [s0], MASK, zero_output_for_mask=True)
    got = K.rnn(
        k_step, X.astype(np.float32), [s0.astype(np.float32)], mask=MASK, zero_output_for_mask=True
    )
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
    np.testing.assert_allclose(got[2][0], want[2][0], rtol=1e-6)


def test_nested_inputs():
    x2 = RNG.normal(size=(B, T, 1))

    def step(inputs, states):
        a, b = inputs
        h = states[0] + a * b
        return h, [h]

    x_ph, x2_ph = K.placeholder((None, T, F)), K.placeholder((None, T, 1))
    last, outputs, _ = K.rnn(step, [x_ph, x2_ph], [np.zeros((B, F), np.float32)])
    got = K.function([x_ph, x2_ph], [last, outputs])([X, x2])
    np.testing.assert_allclose(got[1], np.cumsum(X * x2, axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[0], np.sum(X * x2, axis=1), rtol=1e-5, atol=1e-6)


def test_input_length_masks_like_the_equivalent_mask():
    w = variables_for(weights_for(Simple))
    lengths = np.array([4, 2, 3])
    mask = np.arange(T)[None, :] < lengths[:, None]
    h0 = [np.zeros((B, U), np.float32)]
    by_length = K.rnn(Simple.keras(w), X.astype(np.float32), h0, input_length=lengths)
    by_mask = K.rnn(Simple.keras(w), X.astype(np.float32), h0, mask=mask)
    np.testing.assert_allclose(K.eval(by_length[1]), K.eval(by_mask[1]), rtol=1e-6)
    fixed = K.rnn(Simple.keras(w), X.astype(np.float32), h0, input_length=T)
    unmasked = K.rnn(Simple.keras(w), X.astype(np.float32), h0)
    np.testing.assert_allclose(K.eval(fixed[1]), K.eval(unmasked[1]), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# errors


def test_update_inside_the_step_raises():
    v = K.variable(np.zeros((B, U)))

    def step(x_t, states):
        K.update(v, states[0])
        return states[0], states

    with pytest.raises(ValueError, match=r"K\.update inside the step function of rnn"):
        K.rnn(step, X, [np.zeros((B, U))])
    with pytest.raises(ValueError, match=r"K\.update inside the step function of foldl"):
        K.foldl(lambda acc, x: K.update(v, acc), np.ones((2, B, U)))


def test_bad_arguments():
    def step(x_t, states):
        return x_t, states

    with pytest.raises(ValueError, match=r"rank >= 3.*\(3, 4\)"):
        K.rnn(step, np.ones((3, 4)), [np.zeros((3, 4))])
    with pytest.raises(ValueError, match=r"unroll=True needs a known number of time steps"):
        K.rnn(step, K.placeholder((None, None, 2)), [K.placeholder((None, 2))], unroll=True)
    with pytest.raises(ValueError, match="a mask needs at least one state"):
        K.rnn(step, np.ones((3, 4, 2)), [], mask=np.ones((3, 4)))
    with pytest.raises(ValueError, match=r"mask must have shape.*\(3,\)"):
        K.rnn(step, np.ones((3, 4, 2)), [np.zeros((3, 2))], mask=np.ones(3))
    with pytest.raises(ValueError, match=r"must keep the shape \(3, 5\)"):
        K.rnn(lambda x_t, s: (x_t, [x_t]), np.ones((3, 4, 2)), [np.zeros((3, 5))])
    with pytest.raises(ValueError, match=r"returned 2 tensors where 1 were expected"):
        K.rnn(lambda x_t, s: (x_t, [x_t, x_t]), np.ones((3, 4, 2)), [np.zeros((3, 2))])
    with pytest.raises(ValueError, match=r"must return \(output, new_states\)"):
        K.rnn(lambda x_t, s: x_t, np.ones((3, 4, 2)), [np.zeros((3, 2))])
    with pytest.raises(TypeError, match="go_backwards must be a bool, got 'yes'"):
        K.rnn(step, np.ones((3, 4, 2)), [np.zeros((3, 2))], go_backwards="yes")
    with pytest.raises(ValueError, match=r"input_length must be an int or a 1-D tensor.*\(3, 1\)"):
        K.rnn(step, np.ones((3, 4, 2)), [np.zeros((3, 2))], input_length=np.ones((3, 1)))


# ---------------------------------------------------------------------------------------------
# map_fn, foldl, foldr

ELEMS = RNG.normal(size=(5, 3))


def test_map_fn_with_a_variable_eagerly_and_through_a_function():
    m = RNG.normal(size=(3, 2))
    w = K.variable(m)
    want = np.tanh(ELEMS @ m)
    np.testing.assert_allclose(
        K.eval(K.map_fn(lambda row: tanh(row @ w), ELEMS)), want, rtol=1e-5, atol=1e-6
    )
    ph = K.placeholder((None, 3))
    out = K.map_fn(lambda row: tanh(row @ w), ph)
    assert K.int_shape(out) == (None, 2)
    f = K.function([ph], [out])
    np.testing.assert_allclose(f([ELEMS])[0], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(f([ELEMS[:2]])[0], want[:2], rtol=1e-5, atol=1e-6)


def test_map_fn_dtype_and_concrete_values():
    out = K.map_fn(lambda row: row * 2.0, ELEMS.astype(np.float32), dtype="float16")
    assert out.dtype == jnp.float16
    np.testing.assert_allclose(np.asarray(out, np.float64), ELEMS * 2.0, rtol=1e-3)


def np_fold(fn, elems, initializer, reverse):
    elems = list(elems[::-1] if reverse else elems)
    acc = elems.pop(0) if initializer is None else initializer
    for x in elems:
        acc = fn(acc, x)
    return acc


@pytest.mark.parametrize("fold,reverse", [(K.foldl, False), (K.foldr, True)], ids=["l", "r"])
@pytest.mark.parametrize("initializer", [None, np.full(3, 0.5)], ids=["no-init", "init"])
def test_folds(fold, reverse, initializer):
    def fn(acc, x):
        return acc * 2.0 - x  # order-sensitive

    want = np_fold(fn, ELEMS, initializer, reverse)
    ph = K.placeholder((None, 3))
    init32 = None if initializer is None else initializer.astype(np.float32)
    out = fold(fn, ph, init32)
    assert K.int_shape(out) == (3,)
    np.testing.assert_allclose(K.function([ph], [out])([ELEMS])[0], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        fold(fn, ELEMS.astype(np.float32), init32), want, rtol=1e-5, atol=1e-5
    )


def test_foldl_gradient_through_a_weight():
    m = RNG.normal(size=(3, 3)) * 0.5
    w = K.variable(m)
    ph = K.placeholder((None, 3))
    out = K.foldl(lambda acc, x: tanh(acc @ w + x), ph, np.zeros(3, np.float32))
    (g,) = K.gradients(out, [w])
    got = K.function([ph], [g])([ELEMS])[0]

    def total(v):
        return np.sum(np_fold(lambda acc, x: np.tanh(acc @ v + x), ELEMS, np.zeros(3), False))

    np.testing.assert_allclose(got, numeric_grad(total, m), rtol=2e-3, atol=2e-4)


def test_fold_errors():
    with pytest.raises(ValueError, match=r"foldl: fn\(acc, x\).*must keep the shape \(3,\)"):
        K.foldl(lambda acc, x: acc[None], ELEMS)
    with pytest.raises(ValueError, match=r"foldr: fn\(acc, x\).*dtype int32"):
        K.foldr(lambda acc, x: K.cast(acc, "float32"), np.arange(6).reshape(2, 3))
    with pytest.raises(ValueError, match="map_fn: elems must have rank >= 1"):
        K.map_fn(lambda x: x, np.float32(1.0))


# ---------------------------------------------------------------------------------------------
# loops whose step convolves


def _conv_rnn(unroll):
    kernel = K.variable(np.random.default_rng(0).normal(0, 0.2, (3, 3, 2, 2)))
    recurrent = K.variable(np.random.default_rng(1).normal(0, 0.2, (3, 3, 2, 2)))

    def step(x_t, states):
        z = K.conv2d(x_t, kernel, padding="same")
        h = K.tanh(z + K.conv2d(states[0], recurrent, padding="same"))
        return h, [h]

    x = K.placeholder((None, 5, 6, 6, 2))
    last, outputs, _ = K.rnn(step, x, [K.zeros_like(x[:, 0])], unroll=unroll)
    loss = K.sum(K.square(outputs))
    grads = K.gradients(loss, [kernel, recurrent])
    return K.function([x], [last, outputs, *grads])


def test_a_convolving_step_keeps_its_loop_with_matmul_gradients_on_cpu():
    feed = np.random.default_rng(2).normal(size=(2, 5, 6, 6, 2)).astype(np.float32)
    scanned, unrolled = _conv_rnn(False), _conv_rnn(True)
    for a, b in zip(scanned([feed]), unrolled([feed])):  # dots vs XLA's convolution: the
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)  # sums run in another order
    hlo = scanned.lower([feed]).compile().as_text()
    assert "while" in hlo  # the loop is kept ...
    if jax.default_backend() != "cpu":
        pytest.skip("the matmul gradients are XLA:CPU's workaround (jax#12868)")
    # ... and on CPU its convolutions' gradients are matmuls: XLA's kernel gradient would be a
    # convolution with a kernel-shaped result, its input gradient one with the reversed kernel
    text = scanned.lower([feed]).as_text()
    convolutions = [line for line in text.splitlines() if "stablehlo.convolution" in line]
    assert convolutions and not [c for c in convolutions if "-> tensor<3x3x2x2xf32>" in c]
    assert "stablehlo.reverse" not in text


def test_a_depthwise_convolving_step_is_unrolled_on_cpu():
    kernel = K.variable(np.random.default_rng(0).normal(0, 0.2, (3, 3, 2, 1)))

    def step(x_t, states):
        h = K.tanh(K.depthwise_conv2d(x_t + states[0], kernel, padding="same"))
        return h, [h]

    x = K.placeholder((None, 3, 5, 5, 2))
    last, _, _ = K.rnn(step, x, [K.zeros_like(x[:, 0])])
    f = K.function([x], [last])
    feed = np.ones((2, 3, 5, 5, 2), np.float32)
    hlo = f.lower([feed]).compile().as_text()
    # one unrolled loop body per step on CPU (jax#12868); other platforms keep XLA's loop
    assert ("while" in hlo) == (jax.default_backend() != "cpu")


def test_a_plain_step_keeps_its_loop():
    w = K.variable(np.eye(3))
    x = K.placeholder((None, 4, 3))

    def step(x_t, states):
        h = states[0] + K.dot(x_t, w)
        return h, [h]

    last, _, _ = K.rnn(step, x, [K.zeros_like(x[:, 0])])
    f = K.function([x], [last])
    feed = np.ones((2, 4, 3), np.float32)
    hlo = f.lower([feed]).as_text()
    assert "while" in hlo


def _scan_output_shapes(jaxpr):
    """The shapes of every ``scan``'s outputs in ``jaxpr`` and the jaxprs nested in it."""
    shapes = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scan":
            shapes += [tuple(v.aval.shape) for v in eqn.outvars]
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            shapes += _scan_output_shapes(sub)
    return shapes


def _stacked_shapes(f, feed):
    """The shapes of everything the loops of compiled function ``f`` stack, fed ``feed``."""
    f.lower([feed])  # lays the state out
    args = f._layout.args(state.store().values)
    traced = jax.make_jaxpr(lambda *args: f._traced(0, *args))(args, None, [feed])
    return _scan_output_shapes(traced.jaxpr)


def test_a_convolving_loop_saves_no_patches_for_its_gradient():
    # The forward loop stacks what the backward loop needs, per step; the im2col patches of
    # _conv_rnn's 3x3 convolutions of 2 channels (9 * 2 = 18 wide) are recomputed instead.
    shapes = _stacked_shapes(_conv_rnn(False), np.ones((2, 5, 6, 6, 2), np.float32))
    assert (5, 2, 6, 6, 2) in shapes  # the stacked per-step values are seen ...
    assert not [s for s in shapes if s[-1] == 18]  # ... and no patches among them


@pytest.mark.parametrize("channels, saved", [(7, False), (8, True), (12, True)])
def test_a_loop_gradient_stacks_only_deep_convolutions(channels, saved):
    # conv(x_t) sums 3 * 3 * channels terms per element (63, 72 or 108), 10 wide (a shape
    # nothing else has): stacked for the backward pass only when deeper than 64 (and from 12
    # channels, its kernel's gradient is taken per window offset, without patches)
    rng = np.random.default_rng(0)
    kernel = K.variable(rng.normal(0, 0.1, (3, 3, channels, 10)))
    recurrent = K.variable(rng.normal(0, 0.1, (3, 3, 5, 5)))

    def loop(unroll):
        def step(x_t, states):
            z = K.conv2d(x_t, kernel, padding="same")
            h = K.tanh(z[..., :5] * z[..., 5:] + K.conv2d(states[0], recurrent, padding="same"))
            return h, [h]

        x = K.placeholder((None, 3, 6, 6, channels))
        _, outputs, _ = K.rnn(step, x, [K.zeros((2, 6, 6, 5))], unroll=unroll)
        loss = K.sum(K.square(outputs))
        return K.function([x], [loss, *K.gradients(loss, [kernel, recurrent])])

    feed = rng.normal(size=(2, 3, 6, 6, channels)).astype(np.float32)
    shapes = _stacked_shapes(loop(False), feed)
    assert (3, 2, 6, 6, 5) in shapes  # the stacked per-step values are seen ...
    assert ((3, 2, 6, 6, 10) in shapes) is saved  # ... and conv(x_t) only if deeper than 64
    # the same values as the unrolled loop (XLA's convolutions, nothing recomputed; the
    # gradients' sums run in another order)
    for a, b in zip(loop(False)([feed]), loop(True)([feed])):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("depth, saved", [(3, False), (64, False), (65, True)])
def test_a_loop_gradient_stacks_only_deep_products(depth, saved):
    # x_t @ kernel sums `depth` terms per element, 140 wide (a shape nothing else has): its
    # output is stacked for the backward pass only when recomputing it would cost more
    rng = np.random.default_rng(0)
    kernel = K.variable(rng.normal(0, 0.1, (depth, 140)))
    recurrent = K.variable(rng.normal(0, 0.1, (70, 70)))

    def step(x_t, states):
        projected = K.dot(x_t, kernel)
        h = K.tanh(projected[:, :70] * projected[:, 70:] + K.dot(states[0], recurrent))
        return h, [h]

    x = K.placeholder((None, 4, depth))
    _, outputs, _ = K.rnn(step, x, [K.zeros((2, 70))])
    loss = K.sum(K.square(outputs))
    f = K.function([x], [loss, *K.gradients(loss, [kernel, recurrent])])
    feed = rng.normal(size=(2, 4, depth)).astype(np.float32)
    shapes = _stacked_shapes(f, feed)
    assert (4, 2, 70) in shapes  # the stacked per-step values are seen (outputs, carries) ...
    assert ((4, 2, 140) in shapes) is saved  # ... and x_t @ kernel only if deeper than 64
    # the gradients are right either way (float64 finite differences of the same loop)
    k, r = K.get_value(kernel).astype(np.float64), K.get_value(recurrent).astype(np.float64)

    def numpy_loss(k, r):
        h, total = np.zeros((2, 70)), 0.0
        for t in range(4):
            p = feed[:, t].astype(np.float64) @ k
            h = np.tanh(p[:, :70] * p[:, 70:] + h @ r)
            total += np.sum(h**2)
        return total

    value, grad_k, grad_r = f([feed])
    np.testing.assert_allclose(value, numpy_loss(k, r), rtol=1e-5)
    np.testing.assert_allclose(
        grad_k, numeric_grad(lambda v: numpy_loss(v, r), k), rtol=1e-3, atol=1e-4
    )
    np.testing.assert_allclose(
        grad_r, numeric_grad(lambda v: numpy_loss(k, v), r), rtol=1e-3, atol=1e-4
    )
