"""The store has one owner: every write of a variable's value goes through ``Store``, and where
a value lives (loose, or in a pack) is settled once, so no compiled function ever lays out or
compiles again because of what another function did."""

import sys

import numpy as np
import pytest

import jaxkeras as K
from jaxkeras import checkpoint
from jaxkeras._engine import packs
from jaxkeras._engine.store import STORE

BIG = (64, 64)  # 16 KiB of float32: over packs.PACK_BYTES, so it stays loose


def _reads(*variables):
    """A compiled function that reads ``variables`` (one output each), and updates nothing."""
    return K.function([], [v + 0.0 for v in variables])


def _check(f, *expected):
    for got, want in zip(f([]), expected):
        np.testing.assert_array_equal(got, want)


def test_a_later_function_does_not_lay_out_an_earlier_ones_state_anew():
    # issue 33: A reads v1, B reads v1 and v2; B's first call used to pack v1 with v2, and A
    # then laid its state out anew and compiled again
    v1, v2 = K.variable([1.0, 2.0]), K.variable([3.0])
    a = _reads(v1)
    _check(a, [1.0, 2.0])
    layout, place = a._layout, STORE.packs.get(v1.name)
    b = _reads(v1, v2)
    _check(b, [1.0, 2.0], [3.0])
    _check(a, [1.0, 2.0])
    assert a.trace_count == 1 and b.trace_count == 1
    assert a._layout is layout and STORE.packs.get(v1.name) is place


@pytest.mark.parametrize("lone", [True, False], ids=["v1 loose", "v1 packed"])
def test_a_variable_made_after_a_compile_and_later_updates_leave_it_compiled(lone):
    v1 = K.variable([1.0, 2.0])
    others = [] if lone else [K.variable([0.5])]  # read with v1 by A: packed together
    a = _reads(v1, *others)
    _check(a, [1.0, 2.0])
    assert (v1.name in STORE.packs) is not lone
    v2 = K.variable([10.0])
    v3 = K.variable(np.zeros(3))  # made after A's compile
    b = K.function(
        [],
        [v1 + v2[0], v3 + 0.0],
        updates=[K.update_add(v1, 1.0), K.update_add(v2, 1.0), K.update_add(v3, v1[:1])],
    )
    _check(b, [11.0, 12.0], [0.0, 0.0, 0.0])
    _check(b, [13.0, 14.0], [1.0, 1.0, 1.0])
    big = K.variable(np.ones(BIG))  # loose: updated in place by C
    c = K.function([], [], updates=[K.update(v1, v1 * 2.0), K.update_add(big, 1.0)])
    c([])
    _check(a, [6.0, 8.0])  # B's two updates, then C's
    _check(a, [6.0, 8.0])
    assert a.trace_count == 1 and b.trace_count == 1 and c.trace_count == 1
    np.testing.assert_array_equal(K.get_value(v3), [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(K.get_value(big), np.full(BIG, 2.0))


def test_places_are_settled_once_by_the_first_function_that_uses_them():
    lone, u1, u2, r1, r2 = (K.variable([float(i)]) for i in range(5))
    n = K.variable(np.int32(0), dtype="int32")
    first = _reads(lone)
    first([])
    assert lone.name not in STORE.packs  # a pack of one would save nothing
    train = K.function(
        [],
        [r1 + r2],
        updates=[
            K.update_add(u1, r1),
            K.update_add(u2, r2),
            K.update_add(lone, 1.0),
            K.update_add(n, 1),
        ],
    )
    train([])
    assert lone.name not in STORE.packs  # settled loose by the first function, for good
    updated, read = STORE.packs[u1.name], STORE.packs[r1.name]
    assert STORE.packs[u2.name] is updated and STORE.packs[r2.name] is read
    assert updated is not read  # what a function donates holds nothing it only reads
    assert n.name not in STORE.packs  # int32, alone of its dtype
    again = K.function([], [u1 + r1 + lone], updates=[K.update_add(r1, 1.0)])
    _check(again, [(1.0 + 3.0) + 3.0 + 1.0])  # u1 after the update, r1, lone after it
    assert STORE.packs[u1.name] is updated and STORE.packs[r1.name] is read
    train([])
    assert first.trace_count == train.trace_count == again.trace_count == 1
    np.testing.assert_array_equal(first([])[0], [2.0])


def test_values_written_through_every_path_are_read_without_a_retrace(tmp_path):
    small, other = K.variable([1.0, 2.0]), K.variable([0.0])
    big = K.variable(np.zeros(BIG))
    train = K.function(
        [], [], updates=[K.update_add(small, 1.0), K.update_add(other, 1.0), (big, big + 1.0)]
    )
    train([])
    assert STORE.packs[small.name] is STORE.packs[other.name] and big.name not in STORE.packs
    a = _reads(small, big)
    _check(a, [2.0, 3.0], np.ones(BIG))

    K.set_value(small, [5.0, 6.0])  # loosens the pack; A's next call packs it again
    K.set_value(big, np.full(BIG, 5.0))
    _check(a, [5.0, 6.0], np.full(BIG, 5.0))
    K.batch_set_value([(small, [7.0, 8.0]), (big, np.full(BIG, 7.0))])
    _check(a, [7.0, 8.0], np.full(BIG, 7.0))
    train([])  # a compiled function's updates
    _check(a, [8.0, 9.0], np.full(BIG, 8.0))
    K.eval(K.update_add(small, 1.0))  # an update run at once
    K.eval(K.update(big, big * 0.0))
    _check(a, [9.0, 10.0], np.zeros(BIG))
    with K.state_scope(K.get_state([small, big])) as scope:  # functional code, then committed
        K.update_sub(small, 9.0)
        K.update_add(big, 2.0)
    K.set_state(scope.values)
    _check(a, [0.0, 1.0], np.full(BIG, 2.0))
    K.set_state({small.name: np.array([3.0, 4.0]), big.name: np.full(BIG, 3.0)})
    _check(a, [3.0, 4.0], np.full(BIG, 3.0))
    path = tmp_path / "c.npz"
    checkpoint.save_checkpoint(path, [small, big])
    train([])
    _check(a, [4.0, 5.0], np.full(BIG, 4.0))
    checkpoint.restore_checkpoint(path, [small, big])
    _check(a, [3.0, 4.0], np.full(BIG, 3.0))
    assert a.trace_count == 1 and train.trace_count == 1
    np.testing.assert_array_equal(K.get_value(other), [3.0])  # its pack mate kept its value


class _Recording(dict):
    """The store's loose values, recording which module made each change."""

    writers: set

    def _note(self):
        self.writers.add(sys._getframe(2).f_code.co_filename)

    def __setitem__(self, key, value):
        self._note()
        super().__setitem__(key, value)

    def __delitem__(self, key):
        self._note()
        super().__delitem__(key)

    def update(self, *args, **kwargs):
        self._note()
        super().update(*args, **kwargs)

    def pop(self, *args):
        self._note()
        return super().pop(*args)

    def setdefault(self, *args):
        self._note()
        return super().setdefault(*args)

    def clear(self):
        self._note()
        super().clear()


def test_the_store_is_the_only_writer_of_values(tmp_path, monkeypatch):
    original = STORE.values
    recording = _Recording(original)
    recording.writers = set()
    buffer_writers = set()
    set_buffer = packs.Pack.set_buffer

    def recorded_set_buffer(pack, buffer):
        frame = sys._getframe(1)
        while frame.f_code.co_filename == packs.__file__:  # Pack.form sets it for its caller
            frame = frame.f_back
        buffer_writers.add(frame.f_code.co_filename)
        set_buffer(pack, buffer)

    monkeypatch.setattr(packs.Pack, "set_buffer", recorded_set_buffer)
    STORE.values = recording
    try:
        v, w = K.variable([1.0]), K.variable([2.0])  # Store.add
        big = K.variable(np.zeros(BIG))
        f = K.function(
            [], [v + w], updates=[K.update_add(v, 1.0), K.update_add(w, 1.0), (big, big + 1.0)]
        )
        f([])  # Store.settle, then Store.commit
        K.set_value(v, [5.0])  # Store.write (loosens the pack)
        f([])  # Store.repack, then Store.commit
        K.batch_set_value([(w, [1.0])])
        K.eval(K.update_add(big, 1.0))
        K.set_state({v.name: np.array([0.0])})
        checkpoint.save_checkpoint(tmp_path / "c.npz", [v, w, big])
        checkpoint.restore_checkpoint(tmp_path / "c.npz", [v, w, big])
        f([])
        del v, w, big, f  # Store.drop
    finally:
        original.clear()
        dict.update(original, recording)
        STORE.values = original
    store_file = sys.modules[STORE.__module__].__file__
    assert recording.writers == {store_file}
    assert buffer_writers == {store_file}
