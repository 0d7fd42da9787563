"""Thread safety: compiled calls, K.eval of updates, set/get_value, batch_* and state scopes
from many threads at once (real threads, exact counts)."""

import threading

import jax
import numpy as np
import pytest

import jaxkeras as K

THREADS = 8


def run_threads(target, n=THREADS):
    errors = []

    def guarded(i):
        try:
            target(i)
        except Exception as err:  # collected and re-raised in the main thread
            errors.append(err)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]


def test_compiled_updates_from_eight_threads_lose_nothing():
    counter = K.variable(0.0)
    w = K.variable(np.ones((4, 4)))
    x = K.placeholder((4, 4))
    step = K.function([x], [K.dot(x, w)], updates=[K.update_add(counter, 1.0)])
    feed = np.ones((4, 4), np.float32)

    def work(_):
        for _ in range(1000):
            out = step([feed])[0]
            np.testing.assert_array_equal(out, 4.0)

    run_threads(work)
    assert K.get_value(counter) == THREADS * 1000


def test_readers_never_see_a_torn_or_donated_state():
    a, b = K.variable(0.0), K.variable(0.0)
    bump = K.function([], [], updates=[K.update_add(a, 1.0), K.update_add(b, 1.0)])
    read = K.function([], [a - b])
    stop = threading.Event()

    def writer():
        for _ in range(2000):
            bump([])
        stop.set()

    def reader(_):
        while not stop.is_set():
            va, vb = K.batch_get_value([a, b])
            assert va == vb  # both updates of one call are seen together
            assert read([])[0] == 0.0
            assert K.get_value(a) >= 0.0

    writer_thread = threading.Thread(target=writer)
    writer_thread.start()
    run_threads(reader, n=3)
    writer_thread.join()
    assert K.get_value(a) == K.get_value(b) == 2000


def test_a_large_variable_is_never_read_torn():
    # Whole-array writes (compiled updates, set_value) against readers of every element: a
    # reader sees one write or the next, never a mix, and never a donated buffer.
    v = K.variable(np.zeros(200_000))
    bump = K.function([], [], updates=[K.update(v, v + 1.0)])
    stop = threading.Event()

    def writer():
        for i in range(300):
            bump([])
            if i % 10 == 0:
                K.set_value(v, np.full(200_000, float(i + 1)))
        stop.set()

    def reader(_):
        while not stop.is_set():
            a = K.get_value(v)
            assert np.all(a == a[0])
            (b,) = K.batch_get_value([v])
            assert np.all(b == b[0])

    writer_thread = threading.Thread(target=writer)
    writer_thread.start()
    run_threads(reader, n=3)
    writer_thread.join()
    assert np.all(K.get_value(v) == 300.0)  # the last set_value (i=290 -> 291) and 9 bumps


def test_eval_of_updates_and_set_value_from_threads():
    total = K.variable(0.0)
    own = [K.variable(0.0) for _ in range(THREADS)]

    def work(i):
        for step in range(200):
            K.eval(K.update_add(total, 1.0))
            K.set_value(own[i], float(step))
            K.batch_set_value([(own[i], float(step) + 0.5)])
            assert K.get_value(own[i]) == step + 0.5

    run_threads(work)
    assert K.get_value(total) == THREADS * 200
    assert all(K.get_value(v) == 199.5 for v in own)


def test_state_scopes_are_per_thread():
    v = K.variable(1.0)

    def work(i):
        for _ in range(100):
            with K.state_scope({v: float(i)}) as scope:
                K.update_add(v, 1.0)
                assert float(K.eval(v * 1.0)) == i + 1.0
            assert float(scope.values[v.name]) == i + 1.0

    run_threads(work)
    assert K.get_value(v) == 1.0  # scopes never write the store


def test_functions_without_updates_run_concurrently():
    # Two calls of a read-only function meet at a barrier inside the computation: if calls
    # were serialized behind one lock, the first would wait alone and the barrier break.
    barrier = threading.Barrier(2, timeout=20)
    meeting = [False]

    def meet_body(x):
        if meeting[0]:
            barrier.wait()
        return x

    meet = K.op(
        lambda x: jax.pure_callback(meet_body, jax.ShapeDtypeStruct(x.shape, x.dtype), x),
        name="meet",
    )
    w = K.variable(np.ones(3))
    x = K.placeholder((3,))
    f = K.function([x], [meet(x * w)])
    f([np.ones(3)])  # compile first: JAX compiles one function in one thread at a time
    meeting[0] = True
    run_threads(lambda _: np.testing.assert_array_equal(f([np.ones(3)])[0], 1.0), n=2)


def test_a_thread_that_reads_cannot_deadlock_by_writing():
    from jaxkeras._engine.store import STORE

    with STORE.lock.read(), pytest.raises(RuntimeError, match="cannot write"):  # noqa: SIM117
        with STORE.lock.write():
            pass
    with STORE.lock.write(), STORE.lock.write(), STORE.lock.read():
        pass  # the writer may write again and read
