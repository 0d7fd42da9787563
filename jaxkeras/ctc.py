"""Connectionist temporal classification: the loss, greedy and beam-search decoding, sparse labels.

As in TF-Keras, ``y_pred`` holds softmax probabilities ``(samples, time, classes)`` whose last
class is the blank; they are turned into log-probabilities as ``log(y_pred + epsilon)``
(renormalized, as TF's CTC kernels do with their inputs). Every loop over time is a
``lax.scan``, so everything compiles.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.experimental import sparse

from jaxkeras._engine import graph
from jaxkeras.checks import (
    check_int,
)
from jaxkeras.config import epsilon
from jaxkeras.tensors import int_shape, ndim

__all__ = ["ctc_batch_cost", "ctc_decode", "ctc_label_dense_to_sparse"]

# A finite stand-in for log(0): keeps gradients finite where paths are impossible.
_LOG_ZERO = -1e30


def _log_probs(y_pred: jax.Array, eps: float) -> jax.Array:
    return jax.nn.log_softmax(jnp.log(y_pred + eps), axis=-1)


def _lengths(x: Any) -> jax.Array:
    return jnp.reshape(x, (-1,)).astype(jnp.int32)


def _check_y_pred(y_pred: Any, fn: str) -> None:
    if ndim(y_pred) != 3:
        raise ValueError(
            f"{fn}: y_pred must have shape (samples, time_steps, num_categories), got shape "
            f"{int_shape(y_pred)}"
        )


# ---------------------------------------------------------------------------------------------
# loss


def _min_steps(labels: jax.Array, label_length: jax.Array) -> jax.Array:
    """The fewest time steps an alignment of each row's labels needs: one per label, plus a
    blank between each pair of equal neighbours."""
    within = jnp.arange(labels.shape[1], dtype=jnp.int32)[None, :] < label_length[:, None]
    repeats = within[:, 1:] & (labels[:, 1:] == labels[:, :-1])
    return label_length + jnp.sum(repeats, axis=1, dtype=label_length.dtype)


def _ctc_loss_body(y_true, y_pred, input_length, label_length, *, eps):
    classes = y_pred.shape[2]
    labels = jnp.clip(y_true.astype(jnp.int32), 0, classes - 1)
    input_length, label_length = _lengths(input_length), _lengths(label_length)
    frames = jnp.arange(y_pred.shape[1], dtype=jnp.int32)[None, :] >= input_length[:, None]
    padded = jnp.arange(labels.shape[1], dtype=jnp.int32)[None, :] >= label_length[:, None]
    logits = jnp.log(y_pred + eps)  # optax log-softmaxes them: TF's renormalization
    # optax mixes 16-bit logits with float32: it runs under standard promotion whatever the
    # caller's, so strict promotion does not break it
    with jax.numpy_dtype_promotion("standard"):
        loss = optax.ctc_loss(
            logits,
            frames.astype(logits.dtype),
            labels,
            padded.astype(logits.dtype),
            blank_id=classes - 1,
        )
    fits = _min_steps(labels, label_length) <= input_length
    return jnp.where(fits, loss, jnp.inf)[:, None]  # TF: inf where no alignment fits


def ctc_batch_cost(y_true: Any, y_pred: Any, input_length: Any, label_length: Any) -> Any:
    """Runs the CTC loss on each batch element (``optax.ctc_loss``, the blank last).

    Args:
        y_true: ``(samples, max_string_length)`` labels (class indices below the blank, which
            is the last class); entries past ``label_length`` are ignored.
        y_pred: ``(samples, time_steps, num_categories)`` softmax probabilities.
        input_length: ``(samples, 1)`` number of valid time steps of each sample.
        label_length: ``(samples, 1)`` number of labels of each sample.

    Returns:
        ``(samples, 1)``: the negative log-likelihood of each sample's labels; ``inf`` where no
        alignment of the labels fits in ``input_length`` steps.

    Example:
        >>> y_pred = np.full((1, 3, 3), 1 / 3, np.float32)
        >>> K.eval(K.ctc_batch_cost(np.array([[0]]), y_pred, np.array([[3]]), np.array([[1]])))
        array([[1.5040774]], dtype=float32)
    """
    _check_y_pred(y_pred, "ctc_batch_cost")
    if ndim(y_true) != 2:
        raise ValueError(
            f"ctc_batch_cost: y_true must have shape (samples, max_string_length), got shape "
            f"{int_shape(y_true)}"
        )
    return graph.record(
        _ctc_loss_body,
        (y_true, y_pred, input_length, label_length),
        dict(eps=epsilon()),
        name="ctc_batch_cost",
    )


# ---------------------------------------------------------------------------------------------
# decoding


def _compact(values: jax.Array, keep: jax.Array) -> jax.Array:
    """Moves the kept entries of each row to its front, filling the rest with -1."""
    batch, steps = values.shape
    position = jnp.where(keep, jnp.cumsum(keep, axis=1) - 1, steps)
    rows = jnp.broadcast_to(jnp.arange(batch)[:, None], (batch, steps))
    out = jnp.full((batch, steps), -1, dtype=jnp.int32)
    return out.at[rows, position].set(values.astype(jnp.int32), mode="drop")


def _greedy_body(y_pred, input_length, *, eps):
    scores = jnp.log(y_pred + eps)
    steps, blank = scores.shape[1], scores.shape[2] - 1
    best = jnp.argmax(scores, axis=-1)
    valid = jnp.arange(steps, dtype=jnp.int32)[None, :] < _lengths(input_length)[:, None]
    previous = jnp.pad(best, ((0, 0), (1, 0)), constant_values=-1)[:, :-1]
    keep = valid & (best != blank) & (best != previous)
    neg_sum = -jnp.sum(jnp.where(valid, jnp.max(scores, axis=-1), 0.0), axis=1, keepdims=True)
    return [_compact(best, keep)], neg_sum


# Two multipliers of a polynomial hash of label prefixes (uint32 arithmetic wraps).
_HASH_MULTIPLIERS = np.array([0x9E3779B1, 0x85EBCA77], dtype=np.uint32)


def _beam_candidates(beams, log_probs_t):
    """Log-probabilities of the one-step continuations: ``(same_blank, same_label, extended)``.

    ``same_blank[k]`` and ``same_label[k]`` keep beam k's prefix, ending in a blank or in its
    last label; ``extended[k, c]`` appends label c. An extension equal to another live beam is
    merged into that beam's ``same_label`` (and its own entry set to log 0).
    """
    blank = log_probs_t.shape[0] - 1
    total = jnp.logaddexp(beams["p_blank"], beams["p_label"])
    same_blank = total + log_probs_t[blank]
    last = jnp.maximum(beams["last"], 0)  # any label for the empty prefix; masked below
    same_label = jnp.where(beams["length"] > 0, beams["p_label"] + log_probs_t[last], _LOG_ZERO)
    labels = jnp.arange(blank, dtype=jnp.int32)
    source = jnp.where(
        labels[None, :] == beams["last"][:, None], beams["p_blank"][:, None], total[:, None]
    )
    extended = source + log_probs_t[:blank][None, :]
    live = total > _LOG_ZERO / 2
    # child_of[j, k]: beam j is beam k followed by beam j's last label
    child_of = (
        live[:, None]
        & (beams["length"][:, None] == beams["length"][None, :] + 1)
        & jnp.all(beams["parent_hash"][:, None, :] == beams["hash"][None, :, :], axis=-1)
    )
    merged = jax.nn.logsumexp(jnp.where(child_of, extended[:, last].T, _LOG_ZERO), axis=1)
    same_label = jnp.logaddexp(same_label, jnp.where(jnp.any(child_of, axis=1), merged, _LOG_ZERO))
    taken = jnp.zeros(extended.shape, bool).at[:, last].max(child_of.T)
    extended = jnp.where(taken, _LOG_ZERO, extended)
    return same_blank, same_label, extended


def _beam_step(beams, log_probs_t):
    """One time step of CTC prefix beam search with a fixed number of beams."""
    width, steps = beams["prefix"].shape
    same_blank, same_label, extended = _beam_candidates(beams, log_probs_t)
    scores = jnp.concatenate([jnp.logaddexp(same_blank, same_label), extended.reshape(-1)])
    _, chosen = lax.top_k(scores, width)
    is_ext = chosen >= width
    n_labels = extended.shape[1]
    source = jnp.where(is_ext, (chosen - width) // n_labels, chosen)
    label = jnp.where(is_ext, (chosen - width) % n_labels, beams["last"][source])
    length = beams["length"][source]
    at_end = jnp.arange(steps, dtype=jnp.int32)[None, :] == length[:, None]
    old_hash = beams["hash"][source]
    new_hash = old_hash * _HASH_MULTIPLIERS + (label[:, None] + 1).astype(jnp.uint32)
    flat = extended.reshape(-1)[jnp.maximum(chosen - width, 0)]
    return {
        "prefix": jnp.where(at_end & is_ext[:, None], label[:, None], beams["prefix"][source]),
        "length": length + is_ext.astype(length.dtype),
        "last": label,
        "hash": jnp.where(is_ext[:, None], new_hash, old_hash),
        "parent_hash": jnp.where(is_ext[:, None], old_hash, beams["parent_hash"][source]),
        "p_blank": jnp.where(is_ext, _LOG_ZERO, same_blank[source]),
        "p_label": jnp.where(is_ext, flat, same_label[source]),
    }


def _beam_search_one(log_probs, length, *, beam_width, top_paths):
    steps = log_probs.shape[0]
    first = jnp.arange(beam_width) == 0
    beams = {
        "prefix": jnp.full((beam_width, steps), -1, dtype=jnp.int32),
        "length": jnp.zeros(beam_width, jnp.int32),
        "last": jnp.full(beam_width, -1, jnp.int32),
        "hash": jnp.zeros((beam_width, 2), jnp.uint32),
        "parent_hash": jnp.zeros((beam_width, 2), jnp.uint32),
        "p_blank": jnp.where(first, 0.0, _LOG_ZERO),
        "p_label": jnp.full(beam_width, _LOG_ZERO),
    }

    def step(beams, xs):
        log_probs_t, t = xs
        new = _beam_step(beams, log_probs_t)
        return jax.tree_util.tree_map(lambda n, o: jnp.where(t < length, n, o), new, beams), None

    beams, _ = lax.scan(step, beams, (log_probs, jnp.arange(steps, dtype=jnp.int32)))
    scores, best = lax.top_k(jnp.logaddexp(beams["p_blank"], beams["p_label"]), top_paths)
    live = scores > _LOG_ZERO / 2
    paths = jnp.where(live[:, None], beams["prefix"][best], -1)
    return paths, jnp.where(live, scores, -jnp.inf)


def _beam_body(y_pred, input_length, *, eps, beam_width, top_paths):
    search = jax.vmap(
        lambda lp, n: _beam_search_one(lp, n, beam_width=beam_width, top_paths=top_paths)
    )
    paths, scores = search(_log_probs(y_pred, eps), _lengths(input_length))
    return [paths[:, k] for k in range(top_paths)], scores


def ctc_decode(
    y_pred: Any,
    input_length: Any,
    greedy: bool = True,
    beam_width: int = 100,
    top_paths: int = 1,
) -> tuple[list[Any], Any]:
    """Decodes softmax outputs: best path (greedy) or CTC prefix beam search.

    Greedy decoding takes the most likely class at each step, merges repeats and drops blanks.
    Beam search keeps the ``beam_width`` most likely label prefixes (summing over their
    alignments) at every step and returns the ``top_paths`` best; with a beam at least as wide
    as the number of distinct prefixes it finds the exact most likely labellings. Unlike TF's
    ``ctc_beam_search_decoder`` with ``merge_repeated=True``, a label repeated across a blank
    (``a _ a``) is kept twice, as CTC defines it.

    Args:
        y_pred: ``(samples, time_steps, num_categories)`` softmax probabilities; the last
            category is the blank.
        input_length: ``(samples,)`` number of valid time steps of each sample.
        greedy: best-path decoding; otherwise beam search.
        beam_width: the number of beams (beam search).
        top_paths: how many decodings to return (beam search; at most ``beam_width``).

    Returns:
        ``(decoded, log_prob)``: ``decoded`` is a list (one entry for greedy decoding,
        ``top_paths`` for beam search) of int32 ``(samples, time_steps)`` label sequences
        padded with -1. ``log_prob`` is ``(samples, 1)`` for greedy decoding, holding the
        negative sum of each step's best log-probability as TF returns it, or
        ``(samples, top_paths)`` log-probabilities of the decoded sequences for beam search
        (``-inf`` for paths that do not exist).

    Example:
        >>> y_pred = np.array([[[0.1, 0.1, 0.8], [0.7, 0.2, 0.1], [0.6, 0.3, 0.1]]])
        >>> decoded, _ = K.ctc_decode(y_pred, np.array([3]))
        >>> np.asarray(decoded[0])
        array([[ 0, -1, -1]], dtype=int32)
    """
    _check_y_pred(y_pred, "ctc_decode")
    if greedy:
        return graph.record(
            _greedy_body, (y_pred, input_length), dict(eps=epsilon()), name="ctc_greedy_decode"
        )
    beam_width = check_int("ctc_decode", "beam_width", beam_width, minimum=1)
    top_paths = check_int("ctc_decode", "top_paths", top_paths, minimum=1)
    if top_paths > beam_width:
        raise ValueError(
            f"ctc_decode: top_paths ({top_paths}) must not exceed beam_width ({beam_width})"
        )
    return graph.record(
        _beam_body,
        (y_pred, input_length),
        dict(eps=epsilon(), beam_width=beam_width, top_paths=top_paths),
        name="ctc_beam_search_decode",
    )


# ---------------------------------------------------------------------------------------------
# sparse labels


def _sparse_parts(labels, label_lengths):
    batch, max_len = labels.shape
    keep = jnp.arange(max_len, dtype=jnp.int32)[None, :] < _lengths(label_lengths)[:, None]
    rows, cols = jnp.meshgrid(jnp.arange(batch), jnp.arange(max_len), indexing="ij")
    indices = jnp.stack([jnp.where(keep, rows, batch), jnp.where(keep, cols, max_len)], -1)
    order = jnp.argsort(~keep.reshape(-1), stable=True)  # kept entries first, row-major
    data = jnp.where(keep, labels, 0).reshape(-1)[order]
    return data, indices.reshape(-1, 2)[order].astype(jnp.int32)


def _assemble(data, indices, labels):
    return sparse.BCOO((data, indices), shape=labels.shape)


def ctc_label_dense_to_sparse(labels: Any, label_lengths: Any) -> Any:
    """Converts dense CTC labels to a sparse value holding the first ``label_lengths`` per row.

    Args:
        labels: ``(samples, max_string_length)`` labels.
        label_lengths: ``(samples,)`` number of labels of each sample.

    Returns:
        A ``jax.experimental.sparse.BCOO`` of the shape of ``labels`` (with symbolic arguments,
        a sparse tensor that ``K.is_sparse`` recognizes and ``K.to_dense`` converts). It holds
        one stored entry per position of ``labels``, the positions past each length marked as
        padding (out-of-range indices, which BCOO ignores).
    """
    if ndim(labels) != 2:
        raise ValueError(
            f"ctc_label_dense_to_sparse: labels must have shape (samples, max_string_length), "
            f"got shape {int_shape(labels)}"
        )
    data, indices = graph.record(
        _sparse_parts, (labels, label_lengths), {}, name="ctc_label_dense_to_sparse"
    )
    return graph.record(_assemble, (data, indices, labels), {}, name="ctc_sparse_labels")
