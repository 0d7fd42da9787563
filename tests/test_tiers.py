"""Tiered compilation: a quick compile first, the optimized one from a later call on."""

from __future__ import annotations

import threading

import jax
import numpy as np
import pytest

import jaxkeras as K
from jaxkeras import tiers
from jaxkeras._engine import symbolic
from jaxkeras._engine.ahead import plan_batch_sizes
from jaxkeras._xla import options as xla_options
from tests.helpers import compile_threads, run_python

pytestmark = pytest.mark.skipif(
    not tiers.has_second_tier(), reason="one tier here (not CPU, or switched off)"
)
RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _tiers_on(monkeypatch):
    monkeypatch.setattr(tiers, "CALLS_BEFORE_OPTIMIZING", 1)  # the second call starts it
    monkeypatch.setattr(tiers, "_SWITCH", [None])  # (the switch as it was, after the test)
    tiers.set_tiered_compilation("never_wait")  # (the default mode moves no first signature)
    yield
    for thread in threading.enumerate():  # no compile of this test's runs into the next one's
        if thread.name == "jaxkeras-optimized-compile":
            thread.join()


def _train_step():
    x, t = K.placeholder((None, 32)), K.placeholder((None, 10))
    ws = [K.variable(RNG.normal(0, 0.2, s).astype("float32")) for s in [(32, 64), (64, 10)]]
    logits = K.dot(K.relu(K.dot(x, ws[0])), ws[1])
    loss = K.mean(K.categorical_crossentropy(t, logits, from_logits=True))
    grads = K.gradients(loss, ws)
    f = K.function([x, t], [loss], updates=[K.update_sub(w, 0.1 * g) for w, g in zip(ws, grads)])
    return f, ws


def _batch(size=16):
    x = RNG.standard_normal((size, 32)).astype("float32")
    return [x, np.eye(10, dtype="float32")[RNG.integers(0, 10, size)]]


def test_the_optimized_compile_waits_for_its_calls(monkeypatch):
    monkeypatch.setattr(tiers, "CALLS_BEFORE_OPTIMIZING", 3)
    f, _ = _train_step()
    batch = _batch()
    for _ in range(3):
        f(batch)
    assert not f.wait_optimized(timeout=0)  # nothing started yet
    f(batch)  # the call after three starts it
    assert f.wait_optimized(timeout=120)


def test_a_later_call_runs_the_optimized_compile_without_tracing_again():
    f, _ = _train_step()
    batch = _batch()
    f(batch)  # the quick compile
    assert f.compiler_options == xla_options.compiler_options()
    f(batch)  # starts the optimized compile
    assert f.wait_optimized(timeout=120)
    f(batch)  # takes it
    assert f.compiler_options == tiers.optimized_options() != xla_options.compiler_options()
    assert f.trace_count == 1


def test_the_optimized_executable_runs_once_before_the_move(monkeypatch):
    # its first run (the set-up of an XLA:CPU executable) in the background, on zeros, so
    # that the call which moves runs as quickly as the next; the store sees none of it
    runs = []
    real = tiers._run_once
    monkeypatch.setattr(tiers, "_run_once", lambda c, specs: runs.append(specs) or real(c, specs))
    f, ws = _train_step()
    batch = _batch()
    f(batch)
    f(batch)  # starts the optimized compile
    before = [K.get_value(w) for w in ws]
    assert f.wait_optimized(timeout=120)
    assert len(runs) == 2  # the quick executable's set-up (see below), then the optimized one's
    assert [spec.shape for spec in runs[1][-2:]] == [(16, 32), (16, 10)]
    for w, value in zip(ws, before):
        np.testing.assert_array_equal(K.get_value(w), value)
    (loss,) = f(batch)
    assert np.isfinite(loss) and f.compiler_options == tiers.optimized_options()


def test_a_program_that_calls_python_back_is_not_run_before_its_calls(monkeypatch):
    runs = []
    monkeypatch.setattr(tiers, "_run_once", lambda c, specs: runs.append(specs))
    x = K.placeholder((None, 4))
    w = K.variable(np.ones((4, 2), "float32"))
    told = K.print_tensor(K.dot(x, w), "y")  # a print each call: none from a run of jaxkeras's
    f = K.function([x], [told], updates=[K.update_add(w, 0.1 * K.ones_like(w))])
    value = np.ones((3, 4), "float32")
    for _ in range(3):
        f([value])
    assert f.wait_optimized(timeout=120)
    assert runs == [] and f.compiler_options == tiers.optimized_options()


def test_both_tiers_compute_the_same_step():
    quick, ws = _train_step()
    start = [K.get_value(w) for w in ws]
    batch = _batch()
    losses = [quick(batch)[0], quick(batch)[0]]
    quick.wait_optimized(timeout=120)
    losses.append(quick(batch)[0])  # optimized from here
    assert quick.compiler_options == tiers.optimized_options()
    tiers.set_tiered_compilation(False)
    for w, value in zip(ws, start):
        K.set_value(w, value)
    plain, ws2 = _train_step()
    for w, value in zip(ws2, start):
        K.set_value(w, value)
    expected = [plain(batch)[0] for _ in range(3)]
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    assert plain.compiler_options == xla_options.compiler_options()  # never moved on


def test_each_feed_shape_moves_on_its_own(monkeypatch):
    monkeypatch.setattr(tiers, "CALLS_BEFORE_OPTIMIZING", 2)
    f, ws = _train_step()
    quick = f.compiler_options
    later = {**quick, xla_options.CPU_LEVEL_FLAG: 0}  # a later shape's quick compile
    for _ in range(3):  # the third call of 16 rows starts their optimized compile
        f(_batch(16))
    assert f.wait_optimized(timeout=120)
    f(_batch(16))
    assert f.compiler_options == tiers.optimized_options() != quick
    # a new shape after the move runs (and compiles at) the later shapes' quick options
    f(_batch(7))
    assert f.compiler_options == later
    f(_batch(16))  # the moved shape stays moved
    assert f.compiler_options == tiers.optimized_options()
    batch = _batch(7)
    f(batch)
    assert f.compiler_options == later
    assert [upgrade.started for upgrade in f._to_optimize.values()] == [False]
    # the contract holds for it too: f.pure with f's options is what f runs
    pure = jax.jit(f.pure, compiler_options=f.compiler_options)
    outputs, new = pure(f.state(), f.next_key(), batch)
    got = f(batch)  # its own third call: starts its own compile
    assert np.asarray(outputs[0]).tobytes() == np.asarray(got[0]).tobytes()
    for w in ws:
        assert np.asarray(new[w.name]).tobytes() == K.get_value(w).tobytes()
    assert f.wait_optimized(timeout=120)
    f(_batch(7))
    assert f.compiler_options == tiers.optimized_options()
    assert f.trace_count == 2  # one trace per shape, shared by its tiers


def test_a_later_shape_compiles_at_level_zero_and_planned_sizes_at_the_first(monkeypatch):
    monkeypatch.setattr(tiers, "CALLS_BEFORE_OPTIMIZING", 100)
    xla_options.compiler_options()  # (probed once per process: not a compile of the graph's)
    plan_batch_sizes({16, 5})
    try:
        f, _ = _train_step()
        with compile_threads() as compiles:
            f(_batch(16))  # compiles 16 rows, and 5 in the background
            f(_batch(5))
            assert f.compiler_options == (quick := xla_options.compiler_options())
            f(_batch(5))
            f(_batch(16))
            assert len(compiles) == 2  # nothing compiled again
            f(_batch(9))  # neither the first size nor a planned one: level 0
            assert f.compiler_options == {**quick, xla_options.CPU_LEVEL_FLAG: 0}
            f(_batch(9))
            assert len(compiles) == 3
    finally:
        plan_batch_sizes(())


def test_a_shape_after_the_move_computes_what_one_tier_does(monkeypatch):
    monkeypatch.setattr(tiers, "CALLS_BEFORE_OPTIMIZING", 1)
    rng = np.random.default_rng(3)
    start = [rng.normal(0, 0.2, s).astype("float32") for s in [(32, 64), (64, 10)]]
    batches = [_batch(size) for size in (16, 16, 16, 5, 9, 16, 5)]
    losses = {}
    for setting in ("never_wait", False):
        tiers.set_tiered_compilation(setting)
        f, ws = _train_step()
        for w, value in zip(ws, start):
            K.set_value(w, value)
        losses[setting] = []
        for i, batch in enumerate(batches):
            losses[setting].append(f(batch)[0])
            if i == 2 and setting:
                assert f.wait_optimized(timeout=120)  # 16 rows move; 5 and 9 come new
    np.testing.assert_allclose(losses["never_wait"], losses[False], rtol=1e-5)


def test_pure_with_the_options_in_use_is_the_call_bit_for_bit():
    f, ws = _train_step()
    batch = _batch()
    f(batch)
    f(batch)
    f.wait_optimized(timeout=120)
    f(batch)
    pure = jax.jit(f.pure, compiler_options=f.compiler_options)
    outputs, new = pure(f.state(), f.next_key(), batch)
    got = f(batch)
    np.testing.assert_array_equal(np.asarray(outputs[0]), got[0])
    for w in ws:
        np.testing.assert_array_equal(np.asarray(new[w.name]), K.get_value(w))


@pytest.mark.slow
def test_the_environment_switches_it_off(tmp_path):
    code = (
        "import numpy as np, jaxkeras as K\n"
        "K.tiers.CALLS_BEFORE_OPTIMIZING = 1\n"
        "x = K.placeholder((None, 4)); w = K.variable(np.ones((4, 2), 'float32'))\n"
        "f = K.function([x], [K.dot(x, w)], updates=[K.update_add(w, 1.0)])\n"
        "for _ in range(3): f([np.ones((2, 4), 'float32')])\n"
        "print(f.wait_optimized(60), K.tiers.tiered())\n"
    )
    printed = run_python(code, KERAS_HOME=str(tmp_path), JAXKERAS_TIERED_COMPILATION="0")
    assert printed.split()[-2:] == ["False", "False"]


class _Gate:
    """The optimized compile's jobs, handed out only once ``opened`` is set (a compile that
    takes as long as a test wants)."""

    def __init__(self, jobs, opened):
        self.jobs, self.opened = jobs, opened

    def __iter__(self):
        self.opened.wait(60)
        return iter(self.jobs)

    def __len__(self):
        return len(self.jobs)


@pytest.fixture
def gate(monkeypatch):
    opened = threading.Event()
    planned = tiers.planned_specs
    monkeypatch.setattr(tiers, "planned_specs", lambda *a: _Gate(planned(*a), opened))
    yield opened
    opened.set()


def test_never_wait_moves_at_the_first_call_after_the_compile_is_ready(monkeypatch, gate):
    monkeypatch.setattr(tiers, "CALLS_BEFORE_OPTIMIZING", 2)
    f, _ = _train_step()
    batch = _batch()
    quick = f.compiler_options
    for _ in range(12):  # far past where the reproducible mode would move (and wait)
        f(batch)
    assert f.compiler_options == quick  # the compile is held: no call waited for it
    (upgrade,) = f._to_optimize.values()  # one signature: its phase and its feed shapes
    gate.set()
    assert upgrade.wait(120)
    assert f.compiler_options == quick  # ready, but no call has moved yet
    f(batch)
    assert f.compiler_options == tiers.optimized_options() != quick
    assert f.trace_count == 1


def test_reproducible_moves_at_a_fixed_call_waiting_for_the_compile(monkeypatch, gate):
    monkeypatch.setattr(tiers, "CALLS_BEFORE_OPTIMIZING", 2)
    tiers.set_tiered_compilation("reproducible")
    f, _ = _train_step()
    batch = _batch()
    quick = f.compiler_options
    for _ in range(4):  # the compile starts at the third call
        f(batch)
    assert f.compiler_options == quick
    threading.Timer(0.5, gate.set).start()
    f(batch)  # the fifth: two calls after the start, it waits for the compile
    assert gate.is_set()
    assert f.compiler_options == tiers.optimized_options() != quick


def _run_losses(calls):
    """The losses and final weights of ``calls`` steps of a fresh train step from fixed
    weights and batches."""
    rng = np.random.default_rng(1)
    f, ws = _train_step()
    for w in ws:
        K.set_value(w, rng.normal(0, 0.2, K.int_shape(w)).astype("float32"))
    batches = [
        [
            rng.standard_normal((16, 32)).astype("float32"),
            np.eye(10, dtype="float32")[rng.integers(0, 10, 16)],
        ]
        for _ in range(4)
    ]
    losses = [f(batches[i % 4])[0] for i in range(calls)]
    f.wait_optimized()
    return np.array(losses), [K.get_value(w) for w in ws], f


def test_reproducible_runs_are_the_same_bit_for_bit(monkeypatch):
    monkeypatch.setattr(tiers, "CALLS_BEFORE_OPTIMIZING", 3)
    tiers.set_tiered_compilation("reproducible")
    first, first_ws, f = _run_losses(12)
    assert f.compiler_options == tiers.optimized_options()  # both tiers ran
    second, second_ws, _ = _run_losses(12)
    assert first.tobytes() == second.tobytes()
    for a, b in zip(first_ws, second_ws):
        assert a.tobytes() == b.tobytes()


def test_never_wait_runs_agree_to_rounding_whenever_they_move(monkeypatch, gate):
    monkeypatch.setattr(tiers, "CALLS_BEFORE_OPTIMIZING", 2)
    gate.set()
    early, early_ws, f = _run_losses(12)  # moves as soon as the compile is done
    assert f.compiler_options == tiers.optimized_options()
    tiers.set_tiered_compilation(False)
    quick, quick_ws, g = _run_losses(12)  # never moves
    assert g.compiler_options == xla_options.compiler_options()
    np.testing.assert_allclose(early, quick, rtol=1e-5)
    for a, b in zip(early_ws, quick_ws):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_a_large_program_compiles_its_quick_tier_at_level_zero(monkeypatch):
    small, _ = _train_step()
    small(_batch())
    size = tiers.program_size(
        small._compiled[0]
        .trace(*small._layout.args(K.state.STORE.values), *small._feeds(_batch())[1])
        .jaxpr
    )
    assert size > 10
    assert small.compiler_options[xla_options.CPU_LEVEL_FLAG] == 1
    monkeypatch.setattr(tiers, "LARGE_PROGRAM", size)
    monkeypatch.setattr(tiers, "FUSED_PER_FLOP", 1e9)  # as if its work were in matmuls
    large, ws = _train_step()
    batch = _batch()
    large(batch)
    assert large.compiler_options == {
        **xla_options.compiler_options(),
        xla_options.CPU_LEVEL_FLAG: 0,
    }
    # the contract holds at level 0 too: f.pure with f's options is what f runs
    pure = jax.jit(large.pure, compiler_options=large.compiler_options)
    outputs, new = pure(large.state(), large.next_key(), batch)
    got = large(batch)
    assert np.asarray(outputs[0]).tobytes() == np.asarray(got[0]).tobytes()
    for w in ws:
        assert np.asarray(new[w.name]).tobytes() == K.get_value(w).tobytes()


def test_program_size_counts_into_loop_bodies():
    def body(c, x):
        return c + x * 2, c

    flat = jax.make_jaxpr(lambda x: x * 2 + 1)(1.0)
    looped = jax.make_jaxpr(lambda xs: jax.lax.scan(body, 0.0, xs))(np.ones(3, "float32"))
    assert tiers.program_size(flat) == 2
    assert tiers.program_size(looped) == 1 + 3  # the scan, then its body's mul, add and copy


def test_the_quick_level_follows_where_a_large_programs_work_is(monkeypatch):
    monkeypatch.setattr(tiers, "LARGE_PROGRAM", 1)
    a, b = np.ones((64, 64), "float32"), np.ones((64, 64), "float32")
    products = jax.make_jaxpr(lambda a, b: jax.nn.relu(a @ b @ b))(a, b)  # 1M flops, 12k elements
    elementwise = jax.make_jaxpr(lambda a: jax.numpy.tanh(a * 2 + 1) * a)(a)
    assert tiers.quick_plan(products)[0] == 0
    assert tiers.quick_plan(elementwise)[0] == 1
    monkeypatch.setattr(tiers, "LARGE_PROGRAM", 10**6)
    assert tiers.quick_plan(products)[0] == 1  # small programs keep level 1


def test_which_programs_get_an_optimized_tier(monkeypatch):
    # small ones and large ones at level 0; a large one at level 1 keeps its one compile
    a = np.ones((64, 64), "float32")
    products = jax.make_jaxpr(lambda a: jax.nn.relu(a @ a @ a))(a)
    elementwise = jax.make_jaxpr(lambda a: jax.numpy.tanh(a * 2 + 1) * a)(a)
    assert tiers.quick_plan(products) == tiers.quick_plan(elementwise) == (1, True, True)
    monkeypatch.setattr(tiers, "LARGE_PROGRAM", 1)
    assert tiers.quick_plan(products) == (0, True, True)
    assert tiers.quick_plan(elementwise) == (1, False, False)


def test_a_level_zero_program_starts_its_optimized_compile_at_its_second_call(monkeypatch):
    monkeypatch.setattr(tiers, "CALLS_BEFORE_OPTIMIZING", 5)
    batch = _batch()
    small, _ = _train_step()  # level 1: the usual countdown
    small(batch)
    small(batch)
    assert not any(u.started for u in small._to_optimize.values())
    monkeypatch.setattr(tiers, "LARGE_PROGRAM", 1)
    monkeypatch.setattr(tiers, "FUSED_PER_FLOP", 1e9)  # as if its work were in matmuls
    large, _ = _train_step()
    large(batch)
    assert large.compiler_options[xla_options.CPU_LEVEL_FLAG] == 0
    large(batch)
    assert [u.started for u in large._to_optimize.values()] == [True]
    assert large.wait_optimized(timeout=120)
    assert large.compiler_options == tiers.optimized_options()


def test_a_large_program_at_level_one_has_one_tier(monkeypatch):
    monkeypatch.setattr(tiers, "LARGE_PROGRAM", 1)
    monkeypatch.setattr(tiers, "FUSED_PER_FLOP", 0.0)  # as if its work were XLA's own fusions
    f, _ = _train_step()
    batch = _batch()
    for _ in range(4):
        f(batch)
    assert not f.wait_optimized(timeout=120)
    assert f.compiler_options == xla_options.compiler_options()
    assert f._to_optimize == {} and f.trace_count == 1
    assert all(t.name != "jaxkeras-optimized-compile" for t in threading.enumerate())


@pytest.fixture
def default_mode(monkeypatch):
    monkeypatch.setattr(tiers, "_SWITCH", [None])
    monkeypatch.delenv(tiers.ENV_VAR, raising=False)
    assert tiers.mode() == "steady"


@pytest.mark.parametrize(
    ("said", "means"),
    [
        ("", "steady"),
        ("yes", "steady"),
        ("steady", "steady"),
        ("never_wait", "never_wait"),
        ("no", "off"),
    ],
)
def test_the_environment_picks_the_mode(monkeypatch, said, means):
    monkeypatch.setattr(tiers, "_SWITCH", [None])
    monkeypatch.setenv(tiers.ENV_VAR, said)
    assert tiers.mode() == means
    tiers.set_tiered_compilation(True)
    assert tiers.mode() == "steady"


def test_the_default_mode_compiles_a_first_signature_once(default_mode):
    f, _ = _train_step()
    batch = _batch()
    with compile_threads() as compiles:
        for _ in range(6):  # far past the call that would start an optimized compile
            f(batch)
        assert len(compiles) == 1
    assert f.compiler_options == xla_options.compiler_options()
    assert f._to_optimize == {} and not f.wait_optimized(timeout=0)
    assert all(t.name != "jaxkeras-optimized-compile" for t in threading.enumerate())
    assert f.trace_count == 1


def test_default_runs_are_the_same_bit_for_bit_and_as_one_tier(default_mode):
    first, first_ws, _ = _run_losses(12)
    second, second_ws, _ = _run_losses(12)
    tiers.set_tiered_compilation(False)
    plain, plain_ws, _ = _run_losses(12)
    assert first.tobytes() == second.tobytes() == plain.tobytes()
    for a, b, c in zip(first_ws, second_ws, plain_ws):
        assert a.tobytes() == b.tobytes() == c.tobytes()


def test_a_small_programs_first_call_sets_its_executable_up(default_mode, monkeypatch):
    # its first call runs the executable on zeros, then on the call's values: one compile,
    # the state updated once (the runs equal one tier's bit for bit: test above)
    runs = []
    real = tiers._run_once
    monkeypatch.setattr(tiers, "_run_once", lambda c, specs: runs.append(specs) or real(c, specs))
    f, _ = _train_step()
    with compile_threads() as compiles:
        f(_batch())
        assert len(compiles) == 1
    assert len(runs) == 1 and [a.shape for a in runs[0][-2:]] == [(16, 32), (16, 10)]
    f(_batch())
    assert len(runs) == 1  # once per signature
    x = K.placeholder((None, 3))
    doubled = K.op(
        lambda v: jax.lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, c[1] * 2), (0, v))[1]
    )
    loops = K.function([x], [doubled(x)])  # zeros might not end a loop on values
    np.testing.assert_array_equal(loops([np.ones((2, 3), "float32")])[0], np.full((2, 3), 4.0))
    assert len(runs) == 1
    monkeypatch.setattr(tiers, "LARGE_PROGRAM", 1)  # a large program's run costs a step
    f, _ = _train_step()
    f(_batch())
    assert len(runs) == 1


def test_in_the_default_mode_a_later_shape_compiles_at_level_zero_then_moves(default_mode):
    f, _ = _train_step()
    quick = xla_options.compiler_options()
    for _ in range(3):
        f(_batch(16))
    f(_batch(7))  # a shape seen later: a quick compile at level 0 ...
    assert f.compiler_options == {**quick, xla_options.CPU_LEVEL_FLAG: 0}
    f(_batch(7))  # ... whose optimized compile starts at its next call
    assert f.wait_optimized(timeout=120)
    f(_batch(7))
    assert f.compiler_options == tiers.optimized_options() != quick
    f(_batch(16))  # the first shape stays on its one compile
    assert f.compiler_options == quick
    assert f.trace_count == 2


def test_in_the_default_mode_a_large_program_compiles_every_shape_once(default_mode, monkeypatch):
    monkeypatch.setattr(tiers, "LARGE_PROGRAM", 1)
    monkeypatch.setattr(tiers, "FUSED_PER_FLOP", 1e9)  # as if its work were in matmuls
    f, _ = _train_step()
    for size in (16, 16, 7, 7, 7):
        f(_batch(size))
        assert f.compiler_options == xla_options.compiler_options()  # level 1, no bridge
    assert f._quick == {} and f._to_optimize == {}


def test_the_default_plan(default_mode, monkeypatch):
    a = np.ones((64, 64), "float32")
    products = jax.make_jaxpr(lambda a: jax.nn.relu(a @ a @ a))(a)
    elementwise = jax.make_jaxpr(lambda a: jax.numpy.tanh(a * 2 + 1) * a)(a)
    assert tiers.quick_plan(products) == tiers.quick_plan(elementwise) == (1, False, True)
    monkeypatch.setattr(tiers, "LARGE_PROGRAM", 1)
    assert tiers.quick_plan(products) == tiers.quick_plan(elementwise) == (1, False, False)


def _decoder():
    """An RNN over sequences of unknown batch and length, as a decode calls it."""
    x = K.placeholder((None, None, 4))
    w = K.variable(np.random.default_rng(7).normal(size=(4, 3)).astype("float32"))

    def step(inputs, states):
        h = K.tanh(K.dot(inputs, w) + states[0])
        return h, [h]

    last, outs, _ = K.rnn(step, x, [K.zeros_like(K.sum(x, axis=1)[:, :3])])
    return K.function([x], [last, K.mean(outs, axis=1), K.softmax(K.sum(outs, axis=1))])


_DECODE = [(4, 3), (4, 4), (4, 5), (3, 6), (3, 7), (2, 8), (4, 5)]  # one longer, fewer left


def test_later_shapes_are_compiled_from_one_symbolic_trace_with_the_numbers_of_their_own(
    default_mode, monkeypatch
):
    data = [RNG.normal(size=(b, t, 4)).astype("float32") for b, t in _DECODE]
    f = _decoder()
    got = [f([d]) for d in data[:-1]]
    # the first two shapes traced each, the third exported the program with the batch and the
    # length as symbols, which served the rest (the batch that shrank included)
    assert f.trace_count == 3
    got.append(f([data[-1]]))  # (a shape seen before: its own executable)
    monkeypatch.setattr(symbolic, "FROM_SIGNATURE", 10**9)
    g = _decoder()
    for d, ours in zip(data, got):
        for a, b in zip(ours, g([d])):
            np.testing.assert_array_equal(a, b)  # as each shape's own trace computes
    assert g.trace_count == len(set(_DECODE))


def test_a_later_shape_served_by_the_export_still_moves_to_its_optimized_compile(default_mode):
    f = _decoder()
    data = [RNG.normal(size=(b, t, 4)).astype("float32") for b, t in _DECODE[:4]]
    for d in data:
        f([d])
    level_zero = f.compiler_options
    assert level_zero[xla_options.CPU_LEVEL_FLAG] == 0
    before = f([data[-1]])  # its second call starts the optimized compile ...
    assert f.wait_optimized(timeout=120)
    after = f([data[-1]])  # ... which the next one runs
    assert f.compiler_options == tiers.optimized_options()
    for a, b in zip(before, after):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_program_that_cannot_be_exported_traces_each_shape(default_mode, capsys):
    x = K.placeholder((None, 3))
    f = K.function([x], [K.sum(K.print_tensor(x, "x:") * 2, axis=0)])  # a callback
    for size in (1, 2, 3, 4):
        np.testing.assert_array_equal(f([np.ones((size, 3), "float32")])[0], np.full(3, 2 * size))
    assert f.trace_count == 4
    assert capsys.readouterr().out.count("x:") == 4


def test_symbol_groups_share_a_symbol_between_sizes_that_always_agreed():
    first, second = ((16, 8), (16, 10), (5, 5)), ((7, 8), (7, 10), (5, 5))
    assert symbolic._symbol_groups([first, second], frozenset()) == (((0, 0), (1, 0)),)
    # an unknown size takes a symbol before it changes; one that agreed with another by chance
    # and then did not has a symbol of its own
    unknown = frozenset({(0, 1), (2, 0)})
    assert symbolic._symbol_groups([first, second], unknown) == (
        ((0, 0), (1, 0)),
        ((0, 1),),
        ((2, 0),),
    )
    assert symbolic._symbol_groups([first, ((7, 8, 1), (7, 10), (5, 5))], unknown) is None


def _counted_loss_step():
    """A train step with Keras's (None, None) targets and its batch size read as a number."""
    x, t = K.placeholder((None, 8)), K.placeholder((None, None))
    w = K.variable(np.random.default_rng(3).normal(size=(8, 3)).astype("float32"))
    total = K.sum(K.categorical_crossentropy(t, K.softmax(K.dot(x, w))))
    loss = total / K.cast(K.shape(x)[0], "float32")
    (g,) = K.gradients(loss, [w])
    return K.function([x, t], [loss], updates=[K.update_sub(w, 0.1 * g)])


def test_a_program_that_reads_its_batch_size_as_a_number_traces_each_shape(
    default_mode, monkeypatch
):
    sizes = [16, 9, 5, 3, 2]
    batches = [
        [RNG.normal(size=(n, 8)).astype("float32"), np.eye(3, dtype="float32")[np.arange(n) % 3]]
        for n in sizes
    ]
    f = _counted_loss_step()
    ours = [f(b)[0] for b in batches]
    # the third shape's export fails on the batch size (one trace of its own), and no other
    # export is tried: the targets' unknown classes are no symbol
    assert f.trace_count == len(sizes) + 1
    monkeypatch.setattr(symbolic, "FROM_SIGNATURE", 10**9)
    g = _counted_loss_step()
    np.testing.assert_array_equal(ours, [g(b)[0] for b in batches])
