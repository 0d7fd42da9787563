"""CTC loss and decoding against brute force over all alignments (tiny inputs) and NumPy."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import logsumexp

import jaxkeras as K
from tests.helpers import numeric_grad

EPS = 1e-7
RNG = np.random.default_rng(0)


def random_probs(batch, steps, classes, rng=RNG):
    logits = rng.normal(size=(batch, steps, classes)) * 1.5
    return np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)


def np_log_probs(y):
    z = np.log(y + EPS)
    return z - logsumexp(z, axis=-1, keepdims=True)


def collapse(path, blank):
    merged = [c for i, c in enumerate(path) if i == 0 or c != path[i - 1]]
    return tuple(c for c in merged if c != blank)


def labelling_log_probs(log_probs, length):
    """log P(labelling) for every labelling, summing over all alignments of ``length`` steps."""
    steps = log_probs[:length]
    blank = log_probs.shape[1] - 1
    totals = {}
    for path in itertools.product(range(log_probs.shape[1]), repeat=length):
        score = sum(steps[t, c] for t, c in enumerate(path))
        totals.setdefault(collapse(path, blank), []).append(score)
    return {label: logsumexp(scores) for label, scores in totals.items()}


def brute_loss(y, labels, input_length, label_length):
    out = []
    for b in range(y.shape[0]):
        table = labelling_log_probs(np_log_probs(y[b]), int(input_length[b]))
        out.append(-table.get(tuple(labels[b, : int(label_length[b])]), -np.inf))
    return np.array(out)[:, None]


# ---------------------------------------------------------------------------------------------
# loss

Y = random_probs(3, 5, 3)
LABELS = np.array([[0, 1], [1, 1], [1, 0]])
INPUT_LENGTH = np.array([[5], [4], [3]])
LABEL_LENGTH = np.array([[2], [2], [1]])


def test_loss_matches_brute_force_eagerly_and_through_a_function():
    want = brute_loss(Y, LABELS, INPUT_LENGTH[:, 0], LABEL_LENGTH[:, 0])
    got = K.ctc_batch_cost(LABELS, Y.astype(np.float32), INPUT_LENGTH, LABEL_LENGTH)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)

    phs = [
        K.placeholder((None, 2)),  # Keras feeds labels as floats
        K.placeholder((None, 5, 3)),
        K.placeholder((None, 1), dtype="int32"),
        K.placeholder((None, 1), dtype="int32"),
    ]
    loss = K.ctc_batch_cost(*phs)
    assert K.int_shape(loss) == (None, 1)
    got = K.function(phs, [loss])([LABELS, Y, INPUT_LENGTH, LABEL_LENGTH])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5)


_LOSS_FUNCTION = {}


def loss_function():
    """One compiled loss for every problem shape below (one trace per number of steps)."""
    if not _LOSS_FUNCTION:
        phs = [
            K.placeholder((None, None), dtype="int32"),
            K.placeholder((None, None, 3)),
            K.placeholder((None, 1), dtype="int32"),
            K.placeholder((None, 1), dtype="int32"),
        ]
        _LOSS_FUNCTION["f"] = K.function(phs, [K.ctc_batch_cost(*phs)])
    return _LOSS_FUNCTION["f"]


@pytest.mark.slow
@given(steps=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_loss_on_random_tiny_problems(steps, seed):
    rng = np.random.default_rng(seed)
    y = random_probs(4, steps, 3, rng)
    labels = rng.integers(0, 2, size=(4, 2))
    label_length = rng.integers(0, 3, size=4)
    input_length = rng.integers(1, steps + 1, size=4)
    want = brute_loss(y, labels, input_length, label_length)  # inf where impossible
    got = loss_function()([labels, y, input_length[:, None], label_length[:, None]])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # float32 -log(p) near p = 1


def test_impossible_labelling_gives_inf():
    y = random_probs(1, 2, 3)
    got = K.ctc_batch_cost(np.array([[0, 0]]), y, np.array([[2]]), np.array([[2]]))
    assert np.isposinf(np.asarray(got)).all()


def test_loss_gradient_against_finite_differences():
    y_ph = K.placeholder((3, 5, 3))
    loss = K.ctc_batch_cost(LABELS, y_ph, INPUT_LENGTH, LABEL_LENGTH)
    (g,) = K.gradients(loss, [y_ph])
    got = K.function([y_ph], [g])([Y])[0]
    want = numeric_grad(
        lambda y: brute_loss(y, LABELS, INPUT_LENGTH[:, 0], LABEL_LENGTH[:, 0]).sum(), Y, 1e-6
    )
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-4)
    assert np.all(got[1, 4:] == 0.0)  # steps past input_length get no gradient


# ---------------------------------------------------------------------------------------------
# greedy decoding

Y_DECODE = random_probs(4, 5, 3, np.random.default_rng(7))
# a few hand-made rows: repeats, blanks between repeats, all blank
Y_DECODE[0] = np.eye(3)[[0, 0, 2, 0, 1]] * 0.9 + 0.1 / 3
Y_DECODE[1] = np.eye(3)[[2, 2, 2, 2, 2]] * 0.9 + 0.1 / 3
DECODE_LENGTH = np.array([5, 5, 3, 4])


def np_greedy(y, lengths):
    scores = np.log(y + EPS)
    blank = y.shape[2] - 1
    decoded = np.full(y.shape[:2], -1)
    neg_sum = np.zeros((y.shape[0], 1))
    for b in range(y.shape[0]):
        best = scores[b, : lengths[b]].argmax(-1)
        labels = collapse(list(best), blank)
        decoded[b, : len(labels)] = labels
        neg_sum[b, 0] = -scores[b, : lengths[b]].max(-1).sum()
    return decoded, neg_sum


def test_greedy_decoding_matches_numpy():
    want_decoded, want_log_prob = np_greedy(Y_DECODE, DECODE_LENGTH)
    np.testing.assert_array_equal(want_decoded[0], [0, 0, 1, -1, -1])
    np.testing.assert_array_equal(want_decoded[1], [-1] * 5)

    decoded, log_prob = K.ctc_decode(Y_DECODE.astype(np.float32), DECODE_LENGTH)
    assert len(decoded) == 1
    np.testing.assert_array_equal(np.asarray(decoded[0]), want_decoded)
    np.testing.assert_allclose(np.asarray(log_prob), want_log_prob, rtol=1e-5)

    y_ph, len_ph = K.placeholder((None, 5, 3)), K.placeholder((None,), dtype="int32")
    decoded, log_prob = K.ctc_decode(y_ph, len_ph)
    assert K.int_shape(decoded[0]) == (None, 5)
    assert K.int_shape(log_prob) == (None, 1)
    got = K.function([y_ph, len_ph], [decoded[0], log_prob])([Y_DECODE, DECODE_LENGTH])
    np.testing.assert_array_equal(got[0], want_decoded)
    np.testing.assert_allclose(got[1], want_log_prob, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# beam search


def _add(beams, prefix, p_blank, p_label):
    old = beams.get(prefix, (-np.inf, -np.inf))
    beams[prefix] = (np.logaddexp(old[0], p_blank), np.logaddexp(old[1], p_label))


def np_prefix_beam_search(log_probs, length, beam_width):
    """Textbook CTC prefix beam search with dictionaries (log space)."""
    blank = log_probs.shape[1] - 1
    beams = {(): (0.0, -np.inf)}  # prefix -> (log p ending in blank, log p ending in a label)
    for t in range(length):
        lp = log_probs[t]
        nxt = {}
        for prefix, (p_b, p_l) in beams.items():
            total = np.logaddexp(p_b, p_l)
            _add(nxt, prefix, total + lp[blank], -np.inf)
            if prefix:
                _add(nxt, prefix, -np.inf, p_l + lp[prefix[-1]])
            for c in range(blank):
                source = p_b if prefix and prefix[-1] == c else total
                _add(nxt, (*prefix, c), -np.inf, source + lp[c])
        ranked = sorted(nxt.items(), key=lambda kv: -np.logaddexp(*kv[1]))
        beams = dict(ranked[:beam_width])
    return sorted(((k, np.logaddexp(*v)) for k, v in beams.items()), key=lambda kv: -kv[1])


def decoded_rows(decoded, b):
    return [tuple(int(c) for c in np.asarray(d)[b] if c >= 0) for d in decoded]


def test_wide_beam_search_finds_the_exact_top_paths():
    top_paths = 3
    decoded, log_prob = K.ctc_decode(
        Y_DECODE.astype(np.float32), DECODE_LENGTH, greedy=False, beam_width=64, top_paths=top_paths
    )
    assert len(decoded) == top_paths
    for b in range(Y_DECODE.shape[0]):
        table = labelling_log_probs(np_log_probs(Y_DECODE[b]), DECODE_LENGTH[b])
        best = sorted(table.items(), key=lambda kv: -kv[1])[:top_paths]
        assert decoded_rows(decoded, b) == [label for label, _ in best]
        np.testing.assert_allclose(np.asarray(log_prob)[b], [p for _, p in best], rtol=1e-5)


def test_narrow_beam_search_matches_a_numpy_beam_search_through_a_function():
    y = random_probs(3, 5, 3, np.random.default_rng(3))
    lengths = np.array([5, 4, 5])
    y_ph, len_ph = K.placeholder((None, 5, 3)), K.placeholder((None,), dtype="int32")
    decoded, log_prob = K.ctc_decode(y_ph, len_ph, greedy=False, beam_width=2, top_paths=2)
    assert K.int_shape(log_prob) == (None, 2)
    got = K.function([y_ph, len_ph], [*decoded, log_prob])([y, lengths])
    for b in range(3):
        want = np_prefix_beam_search(np_log_probs(y[b]), lengths[b], beam_width=2)
        assert decoded_rows(got[:2], b) == [label for label, _ in want]
        np.testing.assert_allclose(got[2][b], [p for _, p in want], rtol=1e-5)


def test_missing_paths_are_padded():
    y = random_probs(1, 1, 2)  # one step, one label: only "" and "0" exist
    decoded, log_prob = K.ctc_decode(y, np.array([1]), greedy=False, beam_width=4, top_paths=3)
    assert np.asarray(decoded[2]).tolist() == [[-1]]
    assert np.isneginf(np.asarray(log_prob)[0, 2])


def test_16_bit_probabilities_and_64_bit_lengths():
    # optax's loss mixes float16 with float32, and NumPy's int64 lengths meet int32 ones with
    # JAX's 64-bit mode on: the results hold under the suite's strict dtype promotion
    y, y_decode = Y.astype(np.float32), Y_DECODE.astype(np.float32)
    loss = np.asarray(K.ctc_batch_cost(LABELS, y, INPUT_LENGTH, LABEL_LENGTH))
    low = K.ctc_batch_cost(LABELS, y.astype(np.float16), INPUT_LENGTH, LABEL_LENGTH)
    np.testing.assert_allclose(np.asarray(low, np.float32), loss, rtol=1e-2)
    decodings = [
        K.ctc_decode(y_decode, DECODE_LENGTH),
        K.ctc_decode(y_decode, DECODE_LENGTH, greedy=False, beam_width=8, top_paths=2),
    ]
    jax.config.update("jax_enable_x64", True)
    try:
        wide = K.ctc_batch_cost(LABELS, y, INPUT_LENGTH, LABEL_LENGTH)
        np.testing.assert_allclose(np.asarray(wide), loss, rtol=1e-6)
        for greedy, (paths, log_prob) in zip([True, False], decodings):
            got_paths, got_log_prob = K.ctc_decode(
                y_decode, DECODE_LENGTH, greedy=greedy, beam_width=8, top_paths=len(paths)
            )
            for got, want in zip(got_paths, paths):
                np.testing.assert_array_equal(got, want)
            np.testing.assert_allclose(got_log_prob, log_prob, rtol=1e-6)
    finally:
        jax.config.update("jax_enable_x64", False)


def test_decode_bad_arguments():
    with pytest.raises(ValueError, match=r"top_paths \(5\) must not exceed beam_width \(3\)"):
        K.ctc_decode(Y_DECODE, DECODE_LENGTH, greedy=False, beam_width=3, top_paths=5)
    with pytest.raises(ValueError, match="beam_width must be a positive int, got 0"):
        K.ctc_decode(Y_DECODE, DECODE_LENGTH, greedy=False, beam_width=0)
    with pytest.raises(ValueError, match=r"y_pred must have shape .*got shape \(4, 5\)"):
        K.ctc_decode(Y_DECODE[:, :, 0], DECODE_LENGTH)
    with pytest.raises(ValueError, match=r"y_true must have shape .*got shape \(3,\)"):
        K.ctc_batch_cost(LABELS[:, 0], Y, INPUT_LENGTH, LABEL_LENGTH)


# ---------------------------------------------------------------------------------------------
# sparse labels


def masked_labels(labels, lengths):
    return np.where(np.arange(labels.shape[1])[None, :] < lengths[:, None], labels, 0)


def test_label_dense_to_sparse():
    labels = np.array([[3, 1, 2, 2], [1, 4, 4, 4], [2, 2, 2, 2]], np.int32)
    lengths = np.array([3, 1, 0])
    sp = K.ctc_label_dense_to_sparse(labels, lengths)
    assert K.is_sparse(sp)
    assert sp.shape == (3, 4)
    np.testing.assert_array_equal(np.asarray(K.to_dense(sp)), masked_labels(labels, lengths))
    kept = np.asarray(sp.indices)[: lengths.sum()]
    np.testing.assert_array_equal(kept, [[0, 0], [0, 1], [0, 2], [1, 0]])  # row-major first

    labels_ph = K.placeholder((None, 4), dtype="int32")
    lengths_ph = K.placeholder((None,), dtype="int32")
    sp = K.ctc_label_dense_to_sparse(labels_ph, lengths_ph)
    assert K.is_sparse(sp)
    assert K.int_shape(sp) == (None, 4)
    dense = K.to_dense(sp)
    got = K.function([labels_ph, lengths_ph], [dense])([labels, lengths])[0]
    np.testing.assert_array_equal(got, masked_labels(labels, lengths))
    with pytest.raises(ValueError, match=r"labels must have shape .*got shape \(4,\)"):
        K.ctc_label_dense_to_sparse(labels[0], lengths)
