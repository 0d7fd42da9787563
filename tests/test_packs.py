"""Packs: a compiled function's variables travel as one flat buffer per dtype and role."""

import gc

import jax
import numpy as np
import pytest
import scipy.sparse

import jaxkeras as K
from jaxkeras import checkpoint, state

SHAPES = [(), (3,), (2, 4), (0,), (2, 1, 3)]


def _store():
    return state.store()


def _state_arguments(f, inputs):
    """How many arrays of state a call of ``f`` passes (the arguments before the feeds)."""
    return len(jax.tree_util.tree_leaves(f.lower(inputs).args_info)) - len(inputs)


def test_many_variables_travel_as_one_argument_per_dtype_and_role():
    updated = [K.variable(np.full(s, i, np.float32)) for i, s in enumerate(SHAPES * 8)]
    steps = [K.variable(0, dtype="int32") for _ in range(3)]
    rates = [K.variable(0.5 * (i + 1)) for i in range(5)]  # read, never updated
    x = K.placeholder(())
    updates = [K.update_add(v, rates[i % 5] * x) for i, v in enumerate(updated)]
    updates += [K.update_add(s, 1) for s in steps]
    f = K.function([x], [updated[1] + 0.0], updates=updates)
    assert _state_arguments(f, [np.float32(1)]) == 3  # float32 and int32 updated, float32 read
    for _ in range(3):
        f([np.float32(2)])
    for i, (v, s) in enumerate(zip(updated, SHAPES * 8)):
        np.testing.assert_allclose(K.get_value(v), np.full(s, i + 3 * 2 * 0.5 * (i % 5 + 1)))
    assert [int(K.get_value(s)) for s in steps] == [3, 3, 3]
    assert [float(K.get_value(r)) for r in rates] == [0.5, 1.0, 1.5, 2.0, 2.5]
    assert f.trace_count == 1


def test_updates_write_only_their_variables_places():
    a, b, c = (
        K.variable(np.arange(6.0).reshape(s) + k) for k, s in enumerate([(6,), (2, 3), (3, 2)])
    )
    f = K.function([], [a + 0.0, b + 0.0, c + 0.0], updates=[K.update(b, b * 10.0)])
    first = f([])
    second = f([])
    np.testing.assert_array_equal(second[0], first[0])
    np.testing.assert_array_equal(second[1], first[1] * 10)
    np.testing.assert_array_equal(second[2], first[2])
    np.testing.assert_array_equal(K.get_value(b), np.arange(6.0).reshape(2, 3) * 100 + 100)


def test_a_write_loosens_the_pack_and_the_next_call_packs_it_again_without_compiling():
    w = K.variable([1.0, 2.0])
    v = K.variable([[3.0]])
    f = K.function([], [w + 0.0], updates=[K.update_add(w, 1.0), K.update_add(v, 1.0)])
    f([])
    pack = _store().packs[w.name]
    assert pack is _store().packs[v.name] and pack.buffer is not None
    K.set_value(w, [10.0, 20.0])
    assert pack.buffer is None and set(_store().values) >= {w.name, v.name}
    np.testing.assert_array_equal(f([])[0], [10.0, 20.0])
    assert pack.buffer is not None and w.name not in _store().values
    np.testing.assert_array_equal(K.get_value(v), [[5.0]])
    K.batch_set_value([(v, [[0.0]])])
    K.set_state({w.name: np.zeros(2)})
    np.testing.assert_array_equal(f([])[0], [0.0, 0.0])
    np.testing.assert_array_equal(K.get_value(v), [[1.0]])
    assert f.trace_count == 1


def test_read_values_outlive_the_donation_of_their_pack():
    v, other = K.variable([1.0, 2.0, 3.0]), K.variable(0.0)
    f = K.function([], [], updates=[K.update_add(v, 1.0), K.update_add(other, 1.0)])
    f([])
    view = v.value()  # sliced from the buffer the next call donates
    buffer = _store().packs[v.name].buffer
    f([])
    assert buffer.is_deleted() and not view.is_deleted()
    np.testing.assert_array_equal(np.asarray(view), [2.0, 3.0, 4.0])
    np.testing.assert_array_equal(K.get_value(v), [3.0, 4.0, 5.0])


def test_functions_share_the_packs_of_their_variables():
    w = K.variable(np.ones((2, 2)))
    x = K.placeholder((1, 2))
    train = K.function([x], [], updates=[K.update_sub(w, K.dot(K.transpose(x), x))])
    predict = K.function([x], [K.dot(x, w)])
    expected = np.ones((2, 2))
    feed = np.array([[1.0, 2.0]], np.float32)
    for _ in range(3):
        np.testing.assert_allclose(predict([feed])[0], feed @ expected)
        train([feed])
        expected -= feed.T @ feed
    np.testing.assert_allclose(predict([feed])[0], feed @ expected)
    assert _state_arguments(predict, [feed]) == 1
    assert train.trace_count == predict.trace_count == 1


def test_a_deleted_variables_place_stays_unused():
    keep = K.variable([1.0, 2.0])
    gone = K.variable([7.0])
    f = K.function([], [], updates=[K.update_add(keep, 1.0), K.update_add(gone, 1.0)])
    f([])
    name = gone.name
    del f, gone
    gc.collect()
    assert name not in _store().names() and not _store().has(name)
    K.set_value(keep, [5.0, 5.0])  # loosens the pack: only the live member comes out
    assert name not in _store().values
    g = K.function([], [keep + 0.0], updates=[K.update_add(keep, 1.0)])
    np.testing.assert_array_equal(g([])[0], [5.0, 5.0])
    np.testing.assert_array_equal(K.get_value(keep), [6.0, 6.0])


def test_a_new_variable_with_a_dead_members_name_is_not_read_from_its_old_place():
    keep = K.variable([1.0, 2.0])
    gone = K.variable([7.0, 7.0, 7.0], name="reused")
    f = K.function([], [], updates=[K.update_add(keep, 1.0), K.update_add(gone, 1.0)])
    f([])
    del f, gone
    gc.collect()
    fresh = K.variable([1.0], name="reused")  # the same name, another shape
    assert fresh.name == "reused"
    g = K.function([], [fresh * 2.0], updates=[K.update_add(keep, 1.0), K.update_add(fresh, 1.0)])
    np.testing.assert_array_equal(g([])[0], [2.0])
    np.testing.assert_array_equal(K.get_value(fresh), [2.0])
    np.testing.assert_array_equal(K.get_value(keep), [3.0, 4.0])


def test_sparse_variables_stay_loose():
    dense = np.array([[0.0, 2.0], [3.0, 0.0]], np.float32)
    s = K.variable(scipy.sparse.csr_matrix(dense))
    w, b = K.variable(np.eye(2)), K.variable(np.zeros(2))
    f = K.function([], [K.dot(s, w) + b], updates=[K.update_add(w, 1.0), K.update_add(b, 1.0)])
    np.testing.assert_allclose(f([])[0], dense)
    np.testing.assert_allclose(f([])[0], dense @ (np.eye(2) + 1) + 1)
    assert s.name not in _store().packs and w.name in _store().packs


def test_checkpoints_save_and_restore_packed_variables(tmp_path):
    w, b = K.variable([1.0, 2.0]), K.variable(0.0)
    f = K.function([], [w + b], updates=[K.update_add(w, 1.0), K.update_add(b, 1.0)])
    f([])
    checkpoint.save_checkpoint(tmp_path / "c.npz", [w, b])
    f([])
    checkpoint.restore_checkpoint(tmp_path / "c.npz", [w, b])
    assert _store().packs[w.name].buffer is None
    np.testing.assert_array_equal(f([])[0], [3.0, 4.0])
    assert f.trace_count == 1


def test_a_failed_call_leaves_the_pack_unchanged():
    w = K.variable([1.0, 2.0])
    x = K.placeholder((2,))
    f = K.function([x], [w + x], updates=[K.update_add(w, x)])
    f([np.ones(2)])
    with pytest.raises(ValueError, match="shape"):
        f([np.ones(3)])
    np.testing.assert_array_equal(K.get_value(w), [2.0, 3.0])
    np.testing.assert_array_equal(f([np.ones(2)])[0], [3.0, 4.0])


def test_large_variables_stay_loose():
    big = K.variable(np.ones((64, 64)))  # 16 KiB, over PACK_BYTES: updated in place instead
    small = [K.variable(np.ones(64)) for _ in range(2)]
    f = K.function([], [], updates=[K.update_add(v, 1.0) for v in [big, *small]])
    f([])
    assert big.name not in _store().packs and small[0].name in _store().packs
    assert _state_arguments(f, []) == 2
    np.testing.assert_array_equal(K.get_value(big), np.full((64, 64), 2.0))


def test_a_packed_variable_read_inside_jax_jit_is_a_constant():
    v, other = K.variable([1.0, 2.0]), K.variable(0.0)
    K.function([], [], updates=[K.update_add(v, 1.0), K.update_add(other, 1.0)])([])

    @jax.jit
    def shifted(x):
        return x + v.value()

    np.testing.assert_array_equal(shifted(np.ones(2, np.float32)), [3.0, 4.0])
    np.testing.assert_array_equal(K.get_value(v), [2.0, 3.0])  # no tracer was kept


def test_a_lone_variable_stays_loose_for_good():
    v, w = K.variable([1.0]), K.variable([2.0])
    read_v = K.function([], [v + 0.0])
    np.testing.assert_array_equal(read_v([])[0], [1.0])
    assert v.name not in _store().packs  # a pack of one would save nothing
    train = K.function([], [], updates=[K.update_add(v, 1.0), K.update_add(w, 1.0)])
    train([])
    # v's place was settled by read_v: a later function never lays out an earlier one's state
    assert v.name not in _store().packs
    np.testing.assert_array_equal(read_v([])[0], [2.0])
    np.testing.assert_array_equal(read_v([])[0], [2.0])
    assert read_v.trace_count == 1 and _state_arguments(read_v, []) == 1
