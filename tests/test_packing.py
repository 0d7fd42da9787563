"""Packed read-only variables (jaxkeras.packing): a function that reads many small variables
passes them as one buffer per dtype; every value it sees is the stored one, nothing recompiles."""

import functools
import importlib
import operator
import threading

import jax
import numpy as np

import jaxkeras as K
from jaxkeras.packing import MIN_PACKED, PACK_LIMIT_BYTES, ReadPack

function_module = importlib.import_module("jaxkeras.function")  # K.function shadows it

N = MIN_PACKED + 4


def small_variables(n=N, shape=(3,)):
    return [K.variable(np.full(shape, i, np.float32)) for i in range(n)]


def summed(variables, x):
    return functools.reduce(operator.add, variables, x)


def test_many_small_read_only_variables_are_packed_and_read_exactly():
    rng = np.random.default_rng(0)
    values = [rng.normal(size=s).astype(np.float32) for s in [(), (3,), (2, 3)] * 7]
    variables = [K.variable(v) for v in values]
    ints = [K.variable(np.arange(i, i + 4), dtype="int32") for i in range(MIN_PACKED)]
    flags = [K.variable(np.array([i % 2, 1], bool), dtype="bool") for i in range(3)]
    x = K.placeholder(())
    outputs = (
        [v * 1 for v in variables] + [i + 0 for i in ints] + [K.cast(f, "int32") for f in flags]
    )
    f = K.function([x], [o + K.cast(x, o.dtype) for o in outputs])
    assert f._pack is not None and not f._pack.singles  # every value is small and on one device
    out = f([0.0])
    for got, want in zip(out, values + [np.arange(i, i + 4) for i in range(MIN_PACKED)]):
        np.testing.assert_array_equal(got, want)  # concatenating and slicing are exact
        assert got.shape == np.shape(want)
    for i, got in enumerate(out[-3:]):
        np.testing.assert_array_equal(got, [i % 2, 1])


def test_a_replaced_value_is_seen_without_recompiling():
    variables = small_variables()
    x = K.placeholder((3,))
    f = K.function([x], [summed(variables, x)])
    feed = np.zeros(3, np.float32)
    expected = sum(range(N))
    np.testing.assert_array_equal(f([feed])[0], expected)
    for step in range(1, 4):
        K.set_value(variables[step], np.full(3, 100.0 * step))
        expected += 100.0 * step - step
        np.testing.assert_array_equal(f([feed])[0], expected)
        np.testing.assert_array_equal(f([feed])[0], expected)  # the same pack, reused
    assert f.trace_count == 1


def test_values_updated_and_donated_by_another_function_are_seen():
    variables = small_variables()
    x = K.placeholder((3,))
    read = K.function([x], [summed(variables, x)])
    bump = K.function([], [], updates=[K.update_add(v, 1.0) for v in variables])
    feed = np.zeros(3, np.float32)
    for step in range(4):
        np.testing.assert_array_equal(read([feed])[0], sum(range(N)) + N * step)
        bump([])  # donates the buffers the pack was built from
    assert read.trace_count == 1 and bump.trace_count == 1


def test_an_updating_function_packs_what_it_only_reads():
    variables = small_variables()
    count = K.variable(0.0)
    x = K.placeholder((3,))
    f = K.function([x], [summed(variables, x)], updates=[K.update_add(count, 1.0)])
    assert f._pack is not None
    for step in range(3):
        K.set_value(variables[0], np.full(3, float(step)))
        np.testing.assert_array_equal(f([np.ones(3, np.float32)])[0], 1 + step + sum(range(1, N)))
    assert K.get_value(count) == 3.0
    assert f.trace_count == 1


def test_large_few_and_placed_values_are_passed_one_by_one():
    big = K.variable(np.ones(PACK_LIMIT_BYTES // 4 + 1, np.float32))
    variables = small_variables()
    f = K.function([], [K.sum(big) + sum(K.sum(v) for v in variables)])
    assert f._pack.singles == [big.name]
    np.testing.assert_allclose(f([]), PACK_LIMIT_BYTES // 4 + 1 + 3 * sum(range(N)))
    few = small_variables(MIN_PACKED - 1)
    assert K.function([], [summed(few, 0.0)])._pack is None
    values = {f"v{i}": np.zeros(2, np.float32) for i in range(N)}
    placed = {k: jax.device_put(v, jax.devices()[0]) for k, v in values.items()}  # committed
    assert ReadPack.plan(list(placed), placed) is None
    unplaced = {k: jax.device_put(v) for k, v in values.items()}
    assert ReadPack.plan(list(unplaced), unplaced) is not None


def test_clear_session_drops_the_packed_values():
    variables = small_variables()
    f = K.function([], [summed(variables, 0.0)])
    f([])
    assert f._pack._cache is not None
    function_module.release_compiled()
    assert f._pack._cache is None
    np.testing.assert_array_equal(f([]), sum(range(N)))


def test_threads_reading_packed_values_see_whole_states():
    variables = small_variables(shape=())
    for v in variables:
        K.set_value(v, 0.0)
    read = K.function([], [K.stack(variables)])
    bump = K.function([], [], updates=[K.update_add(v, 1.0) for v in variables])
    read([])  # compiled once (threads making the first call at once would each compile)
    stop = threading.Event()
    seen, errors = [], []

    def reader():
        try:
            while not stop.is_set():
                values = read([])
                assert np.all(values == values[0]), values  # one write or the next, never a mix
                seen.append(values[0])
        except Exception as err:  # re-raised in the main thread
            errors.append(err)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for _ in range(300):
        bump([])
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors[0]
    assert seen and K.get_value(variables[0]) == 300.0
    assert read.trace_count == 1
