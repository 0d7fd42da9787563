"""Checkpoints, in both formats (a ``.npz`` file, an Orbax directory): round trips of every
kind of variable and of the random-number state, mismatch errors naming every variable and
changing nothing, atomic writes under SIGKILL, a training run resumed bit-identically in a new
process; the CheckpointManager's kept steps and its asynchronous saves, which updates made
while they are written (donating their variables' buffers) cannot corrupt; ModelParallel state
on 8 devices restored onto another mesh and onto 1 device, and a two-process job in which each
process writes only its own shards (tests/checkpoint_worker.py; the bytes each writes are
counted; its peak resident memory, which moves with the machine's load, is measured by hand:
benchmarks/RESULTS.md, "Orbax checkpoints")."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import optax
import pytest
import scipy.sparse

import jaxkeras as K
from jaxkeras import mixed_precision as mp
from jaxkeras._engine.store import STORE
from jaxkeras.checkpoint import CheckpointManager
from jaxkeras.optimizers import OptaxOptimizer
from tests.helpers import run_hosts

ROOT = Path(__file__).resolve().parent.parent
WORKER = str(Path(__file__).with_name("checkpoint_worker.py"))
FORMATS = ("npz", "orbax")


def _path(tmp_path: Path, fmt: str, name: str = "ckpt") -> Path:
    """A checkpoint path of the format: a ``.npz`` file, or a directory."""
    return tmp_path / (f"{name}.npz" if fmt == "npz" else name)


# ---------------------------------------------------------------------------------------------
# round trips


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_of_every_kind_of_variable(tmp_path, fmt):
    rng = np.random.default_rng(0)
    values = {
        "f32": rng.normal(size=(3, 4)).astype(np.float32),
        "f16": rng.normal(size=(5,)).astype(np.float16),
        "i32": np.arange(6, dtype=np.int32).reshape(2, 3),
        "flag": np.array([True, False]),
        "scalar": np.array(2.5, np.float32),
    }
    dtypes = {"f32": None, "f16": "float16", "i32": "int32", "flag": "bool", "scalar": None}
    made = {k: K.variable(v, dtype=dtypes[k], name=k) for k, v in values.items()}
    bf = K.variable(np.array([1.5, -2.25]), dtype="bfloat16", name="bf")
    sp = K.variable(scipy.sparse.random(4, 5, density=0.3, random_state=1), name="sp")
    # small variables a compiled function packs into one buffer (jaxkeras._engine.packs)
    small = [K.variable(np.full(3, float(i)), name=f"scope/small{i}") for i in range(3)]
    K.function([], [], updates=[K.update_add(v, 1.0) for v in small])([])
    assert any(STORE.packs.get(v.name) is not None for v in small)
    sp_dense = K.get_value(sp)
    path = _path(tmp_path, fmt)
    K.save_checkpoint(path)
    for v in [*made.values(), bf, *small]:
        K.set_value(v, np.zeros(v.shape))
    K.set_value(sp, np.zeros((4, 5)))
    K.restore_checkpoint(path)
    for k, v in made.items():
        got = K.get_value(v)
        assert got.dtype == values[k].dtype
        np.testing.assert_array_equal(got, values[k])
    assert K.get_value(bf).dtype.name == "bfloat16"
    np.testing.assert_array_equal(K.get_value(bf).astype(np.float32), [1.5, -2.25])
    assert K.is_sparse(sp)
    np.testing.assert_array_equal(K.get_value(sp), sp_dense)
    for i, v in enumerate(small):
        np.testing.assert_array_equal(K.get_value(v), np.full(3, i + 1.0, np.float32))
    if fmt == "npz":  # a plain npz with a JSON manifest
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
        assert meta["format"] == "jaxkeras.checkpoint"
        assert {name for name, _ in meta["variables"]} == set(K.get_state())  # every live one
    else:  # an Orbax CheckpointManager directory of one step
        assert [p.name for p in path.iterdir()] == ["0"]
        assert (path / "0" / "state").is_dir() and (path / "0" / "meta").is_dir()


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_random_state_is_restored(tmp_path, fmt):
    path = _path(tmp_path, fmt)
    node = K.random_uniform((4,), seed=3)
    K.eval(node)
    K.save_checkpoint(path)
    after = [K.eval(node) for _ in range(3)]
    K.restore_checkpoint(path)
    np.testing.assert_array_equal([K.eval(node) for _ in range(3)], after)
    # a node built after the restore with the same seed continues from the saved runs
    K.restore_checkpoint(path)
    np.testing.assert_array_equal(K.eval(K.random_uniform((4,), seed=3)), after[0])


@pytest.mark.parametrize("fmt", FORMATS)
def test_optimizer_slots_loss_scale_and_iterations_round_trip(tmp_path, fmt):
    """Adam's moments and ``iterations`` (OptaxOptimizer), the loss-scale variables of
    ``mixed_float16`` and dropout's random state: training resumed from a checkpoint repeats
    the steps taken after it, bit for bit."""
    mp.set_global_policy("mixed_float16")
    try:
        rng = np.random.default_rng(0)
        x, t = K.placeholder((None, 8)), K.placeholder((None, 4))
        w = K.variable(rng.normal(0, 0.3, (8, 4)), name="w")
        b = K.variable(np.zeros(4), name="b")
        hidden = K.dropout(K.dot(x, w) + b, 0.3)
        loss = K.mean(K.categorical_crossentropy(t, K.softmax(hidden)))
        opt = OptaxOptimizer(optax.adam(1e-2))
        step = K.function([x, t], [loss], updates=opt.get_updates(loss, [w, b]))
        labels = rng.integers(0, 4, (6, 16))
        batches = [[rng.normal(size=(16, 8)).astype("float32"), np.eye(4)[k]] for k in labels]
        batches[1][0] = batches[1][0] * 3e4  # overflows in float16: skipped, the scale halves
        scale, count = mp.loss_scale_variables()
        initial_scale = K.get_value(scale)  # (the loss scale lives as long as the process)
        for batch in batches[:3]:
            step(batch)
        state = [w, b, *opt.weights, scale, count]
        path = _path(tmp_path, fmt)
        K.save_checkpoint(path)
        saved = K.batch_get_value(state)
        losses = [step(batch)[0] for batch in batches[3:]]
        trained = K.batch_get_value(state)
        K.restore_checkpoint(path)
        for v, value in zip(state, saved):
            np.testing.assert_array_equal(K.get_value(v), value, err_msg=v.name)
        assert K.get_value(opt.iterations) == 2 and K.get_value(scale) == initial_scale / 2
        assert len(opt.weights) == 6  # iterations; adam's count, and mu and nu of w and b
        np.testing.assert_array_equal([step(batch)[0] for batch in batches[3:]], losses)
        for v, value in zip(state, trained):
            np.testing.assert_array_equal(K.get_value(v), value, err_msg=v.name)
    finally:
        mp.set_global_policy("float32")


@pytest.mark.parametrize("fmt", FORMATS)
def test_some_variables_only(tmp_path, fmt):
    path = _path(tmp_path, fmt)
    a, b = K.variable(1.0, name="a"), K.variable(2.0, name="b")
    K.save_checkpoint(path, [a])
    K.set_value(a, 5.0)
    K.restore_checkpoint(path, [a])
    assert K.get_value(a) == 1.0 and K.get_value(b) == 2.0
    with pytest.raises(ValueError, match="'b' is not in the checkpoint"):
        K.restore_checkpoint(path, ["b"])
    with pytest.raises(ValueError, match="no live variable is named 'nope'"):
        K.save_checkpoint(path, ["nope"])


# ---------------------------------------------------------------------------------------------
# mismatches


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_live_variable_missing_from_the_checkpoint_is_named(tmp_path, fmt):
    path = _path(tmp_path, fmt)
    w = K.variable(np.ones(2), name="w")
    K.save_checkpoint(path)
    extra = K.variable(np.zeros(3), name="extra")
    K.set_value(w, np.full(2, 7.0))
    with pytest.raises(ValueError, match="variable 'extra' is not in the checkpoint"):
        K.restore_checkpoint(path)
    np.testing.assert_array_equal(K.get_value(w), 7.0)  # nothing written
    del extra


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_checkpoint_variable_missing_here_is_named(tmp_path, fmt):
    path = _path(tmp_path, fmt)
    w = K.variable(np.ones(2), name="w")
    gone = K.variable(0.0, name="gone")
    K.save_checkpoint(path)
    del gone
    K.set_value(w, np.full(2, 7.0))
    with pytest.raises(ValueError, match="holds variable 'gone', which does not exist here"):
        K.restore_checkpoint(path)
    np.testing.assert_array_equal(K.get_value(w), 7.0)


@pytest.mark.parametrize("fmt", FORMATS)
def test_shape_and_dtype_mismatches_name_the_variable_and_change_nothing(tmp_path, fmt):
    path = _path(tmp_path, fmt)
    w = K.variable(np.ones((2, 3)), name="kernel")
    n = K.variable(np.int32(4), dtype="int32", name="steps")
    K.save_checkpoint(path)
    del w, n
    w = K.variable(np.full((3, 2), 9.0), name="kernel")
    n = K.variable(np.int32(5), dtype="int32", name="steps")
    with pytest.raises(ValueError, match=r"'kernel' has shape \(3, 2\).*\(2, 3\)"):
        K.restore_checkpoint(path)
    assert K.get_value(n) == 5 and np.all(K.get_value(w) == 9.0)
    del w, n
    w = K.variable(np.ones((2, 3)), name="kernel")
    n = K.variable(4.0, name="steps")
    with pytest.raises(ValueError, match=r"'steps' has dtype float32.*int32"):
        K.restore_checkpoint(path)
    assert K.get_value(n) == 4.0
    del w, n


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_mismatch_is_named_in_one_error(tmp_path, fmt):
    path = _path(tmp_path, fmt)
    keep = K.variable(np.ones(2), name="keep")
    gone = K.variable(np.ones(2), name="gone")
    kernel = K.variable(np.ones((2, 3)), name="kernel")
    K.save_checkpoint(path)
    del gone, kernel
    kernel = K.variable(np.ones((3, 3)), name="kernel")
    new = K.variable(np.ones(4), name="new")
    K.set_value(keep, [5.0, 6.0])
    with pytest.raises(ValueError) as info:
        K.restore_checkpoint(path)
    message = str(info.value)
    assert "holds variable 'gone', which does not exist here" in message
    assert "variable 'new' is not in the checkpoint" in message
    assert "variable 'kernel' has shape (3, 3), but the checkpoint holds shape (2, 3)" in message
    assert "'keep'" not in message
    np.testing.assert_array_equal(K.get_value(keep), [5.0, 6.0])  # nothing restored
    np.testing.assert_array_equal(K.get_value(kernel), np.ones((3, 3)))
    del kernel, new


def test_a_file_that_is_not_a_checkpoint_is_named(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match=r"cannot read checkpoint.*bad\.npz"):
        K.restore_checkpoint(bad)
    np.savez(tmp_path / "plain.npz", meta=np.array(json.dumps({"format": "other"})))
    with pytest.raises(ValueError, match="not a jaxkeras checkpoint"):
        K.restore_checkpoint(tmp_path / "plain.npz")


def test_a_directory_that_holds_no_checkpoint_is_named(tmp_path):
    K.variable(1.0, name="v")
    with pytest.raises(ValueError, match=r"no checkpoint directory at path=.*missing"):
        K.restore_checkpoint(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()  # not created
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"empty'? holds no checkpoint"):
        K.restore_checkpoint(tmp_path / "empty")
    (tmp_path / "junk" / "3").mkdir(parents=True)  # a step, but not written by jaxkeras
    with pytest.raises(ValueError, match=r"cannot read checkpoint .*junk/3.*\"meta\""):
        K.restore_checkpoint(tmp_path / "junk")


# ---------------------------------------------------------------------------------------------
# the CheckpointManager


def test_manager_keeps_the_last_n_steps(tmp_path):
    w = K.variable(np.zeros(3), name="w")
    with CheckpointManager(tmp_path / "run", max_to_keep=2) as manager:
        assert manager.latest_step() is None and manager.all_steps() == []
        for step in (0, 5, 10, 15):
            K.set_value(w, np.full(3, float(step)))
            manager.save(step)
        manager.wait()
        assert manager.all_steps() == [10, 15]
        assert manager.latest_step() == 15
        with pytest.raises(ValueError, match="step must be greater than the latest step 15"):
            manager.save(12)
        assert manager.restore(10) == 10
        np.testing.assert_array_equal(K.get_value(w), 10.0)
        with pytest.raises(ValueError, match=r"holds no step 5 \(its steps: \[10, 15\]\)"):
            manager.restore(5)
        np.testing.assert_array_equal(K.get_value(w), 10.0)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["10", "15"]
    with pytest.raises(RuntimeError, match="is closed"):
        manager.save(20)
    with CheckpointManager(tmp_path / "run") as again:  # a new manager finds the steps
        assert again.restore() == 15
    np.testing.assert_array_equal(K.get_value(w), 15.0)
    K.set_value(w, np.zeros(3))
    K.restore_checkpoint(tmp_path / "run")  # the latest step of a manager's directory
    np.testing.assert_array_equal(K.get_value(w), 15.0)


def test_manager_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match="max_to_keep must be a positive int, got 0"):
        CheckpointManager(tmp_path, max_to_keep=0)
    with pytest.raises(TypeError, match="asynchronous must be a bool, got 'yes'"):
        CheckpointManager(tmp_path, asynchronous="yes")
    with pytest.raises(TypeError, match="read_only must be a bool, got 1"):
        CheckpointManager(tmp_path, read_only=1)
    with CheckpointManager(tmp_path) as manager:
        with pytest.raises(ValueError, match="step must be an int >= 0, got -1"):
            manager.save(-1)
        with pytest.raises(ValueError, match="holds no checkpoint"):
            manager.restore()
    reader = CheckpointManager(tmp_path / "new", read_only=True)
    with reader, pytest.raises(ValueError, match="is read-only"):
        reader.save(0)
    assert not (tmp_path / "new").exists()


def test_an_async_save_is_not_corrupted_by_donating_updates(tmp_path):
    """A save is in flight while a compiled function updates the saved variables several
    times; the function donates their buffers (checked), yet the checkpoint holds the values
    of the moment of the save."""
    rng = np.random.default_rng(0)
    big = [K.variable(rng.normal(size=(1024, 1024)), name=f"big{i}") for i in range(4)]
    counter = K.variable(0.0, name="counter")
    step = K.function([], [], updates=[K.update_add(v, 1.0) for v in [*big, counter]])
    step([])  # compiled before the save
    at_save = K.batch_get_value([*big, counter])
    stored = [STORE.read(v.name) for v in big]
    with CheckpointManager(tmp_path / "run") as manager:
        manager.save(1)
        in_flight = manager.is_saving()
        for _ in range(5):
            step([])
        assert all(a.is_deleted() for a in stored)  # donated: their buffers were reused
        manager.wait()
        assert in_flight  # the updates ran while it was being written
        after = K.batch_get_value([*big, counter])
        manager.restore()
    for v, value in zip([*big, counter], at_save):
        np.testing.assert_array_equal(K.get_value(v), value, err_msg=v.name)
    np.testing.assert_array_equal(after[-1], at_save[-1] + 5.0)


def test_the_manager_saves_asynchronously_or_not(tmp_path):
    v = K.variable(np.zeros((1024, 1024)), name="v")
    with CheckpointManager(tmp_path / "sync", asynchronous=False) as manager:
        manager.save(0)
        assert not manager.is_saving()
        assert (tmp_path / "sync" / "0" / "state").is_dir()  # finalized on return
    del v


# ---------------------------------------------------------------------------------------------
# Orbax is an extra


def test_importing_jaxkeras_or_using_npz_does_not_import_orbax(tmp_path):
    code = (
        "import sys, jaxkeras as K, jaxkeras.checkpoint\n"
        "v = K.variable(1.0)\n"
        f"K.save_checkpoint({str(tmp_path / 'a.npz')!r}); K.restore_checkpoint("
        f"{str(tmp_path / 'a.npz')!r})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('orbax', 'tensorstore')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_without_orbax_the_orbax_path_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "orbax", None)  # an import of it raises ImportError
    monkeypatch.setitem(sys.modules, "orbax.checkpoint", None)
    K.variable(1.0, name="v")
    hint = r"pip install jaxkeras\[orbax\]"
    with pytest.raises(ImportError, match=hint):
        K.save_checkpoint(tmp_path / "dir")
    with pytest.raises(ImportError, match=hint):
        K.restore_checkpoint(tmp_path)
    with pytest.raises(ImportError, match=hint):
        CheckpointManager(tmp_path / "dir")
    K.save_checkpoint(tmp_path / "still.npz")  # the .npz format needs no Orbax
    assert not (tmp_path / "dir").exists()


def test_npz_refuses_to_gather_the_state_of_several_processes(tmp_path, monkeypatch):
    K.variable(1.0, name="v")
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    with pytest.raises(ValueError, match=r"2 processes; pass a directory path.*path=.*x\.npz"):
        K.save_checkpoint(tmp_path / "x.npz")
    assert not (tmp_path / "x.npz").exists()


# ---------------------------------------------------------------------------------------------
# a process killed mid-save


WRITER = """
import sys, numpy as np, jaxkeras as K
from jaxkeras.checkpoint import CheckpointManager
how, path = sys.argv[1], sys.argv[2]
big = [K.variable(np.zeros((1000, 1000)), name=f"big{i}") for i in range(4)]
tag = K.variable(0.0, name="tag")
manager = CheckpointManager(path, max_to_keep=2) if how == "manager" else None
i = 0
while True:
    i += 1
    for v in big:
        K.set_value(v, np.full((1000, 1000), float(i)))
    K.set_value(tag, float(i))
    if how == "manager":
        manager.save(i)
        manager.wait()
    else:
        K.save_checkpoint(path)
    print(i, flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["npz", "save_checkpoint", "manager"])
def test_a_killed_writer_leaves_the_previous_checkpoint(tmp_path, how):
    path = tmp_path / ("live.npz" if how == "npz" else "live")
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, how, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        completed = [int(proc.stdout.readline()) for _ in range(2)]
        time.sleep(0.05 + 0.1 * np.random.default_rng().random())  # somewhere mid-write
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    big = [K.variable(np.zeros((1000, 1000)), name=f"big{i}") for i in range(4)]
    tag = K.variable(0.0, name="tag")
    # (named: variables of earlier tests, such as the loss scale's, may live on)
    if how == "manager":
        with CheckpointManager(path, read_only=True) as manager:
            step = manager.restore(variables=[*big, tag])
        assert step == K.get_value(tag)
    else:
        K.restore_checkpoint(path, [*big, tag])
    assert K.get_value(tag) >= completed[-1]
    for v in big:  # every value from the same, complete write
        assert np.all(K.get_value(v) == K.get_value(tag)), v.name
    if how != "npz":  # the killed save's temporary directory, if it left one
        leftovers = [p.name for p in path.iterdir() if "tmp" in p.name]
        with CheckpointManager(path, read_only=True):
            assert [p.name for p in path.iterdir() if "tmp" in p.name] == leftovers
        with CheckpointManager(path) as manager:  # a manager that writes deletes it
            manager.save(int(K.get_value(tag)) + 1)
        assert [p.name for p in path.iterdir() if "tmp" in p.name] == []


# ---------------------------------------------------------------------------------------------
# training resumed in a new process


TRAIN = """
import sys, numpy as np, jaxkeras as K
from sklearn.datasets import load_digits
mode, path = sys.argv[1], sys.argv[2]
K.set_random_seed(0)
digits = load_digits()
x_all = (digits.data / 16.0).astype(np.float32)
y_all = np.eye(10, dtype=np.float32)[digits.target]
x, y = K.placeholder((None, 64)), K.placeholder((None, 10))
w1 = K.variable(np.random.normal(0, 0.1, (64, 32)), name="w1")
b1 = K.variable(np.zeros(32), name="b1")
w2 = K.variable(np.random.normal(0, 0.1, (32, 10)), name="w2")
b2 = K.variable(np.zeros(10), name="b2")
params = [w1, b1, w2, b2]
h = K.dropout(K.relu(K.dot(x, w1) + b1), 0.3)
loss = K.mean(K.categorical_crossentropy(y, K.softmax(K.dot(h, w2) + b2)))
grads = K.gradients(loss, params)
velocities = [K.variable(np.zeros(K.int_shape(p)), name=f"m{i}") for i, p in enumerate(params)]
updates = []
for p, g, m in zip(params, grads, velocities):
    new_m = 0.9 * m - 0.1 * g
    updates += [K.update(m, new_m), K.update(p, p + new_m)]
step = K.function([x, y], [loss], updates=updates)

def train(first, count):
    for i in range(first, first + count):
        rows = np.arange(i * 32, i * 32 + 32) % len(x_all)
        step([x_all[rows], y_all[rows]])

if mode == "first":
    train(0, 20)
    K.save_checkpoint(path)
else:
    K.restore_checkpoint(path)
train(20, 20)
np.save(sys.stdout.buffer, np.concatenate([K.get_value(p).ravel() for p in params]))
"""

KERAS_TRAIN = """
import sys, numpy as np, jaxkeras
import keras
from sklearn.datasets import load_digits
mode, path = sys.argv[1], sys.argv[2]
jaxkeras.set_random_seed(0)
np.random.seed(0)
x, y = load_digits(return_X_y=True)
x, y = (x / 16.0).astype("float32"), np.eye(10, dtype="float32")[y]
model = keras.models.Sequential([
    keras.layers.Dense(32, activation="relu", input_shape=(64,)),
    keras.layers.Dropout(0.2),
    keras.layers.Dense(10, activation="softmax"),
])
model.compile(keras.optimizers.Adam(0.01), "categorical_crossentropy")
model._make_train_function()  # the optimizer's variables exist from here
if mode == "first":
    model.fit(x[:640], y[:640], batch_size=64, epochs=1, shuffle=False, verbose=0)
    jaxkeras.save_checkpoint(path)
else:
    jaxkeras.restore_checkpoint(path)
model.fit(x[640:1280], y[640:1280], batch_size=64, epochs=1, shuffle=False, verbose=0)
state = [*model.get_weights(), *(keras.backend.get_value(w) for w in model.optimizer.weights)]
np.save(sys.stdout.buffer, np.concatenate([np.ravel(v).astype("float64") for v in state]))
"""


def _train(script, mode, path, env=None):
    # one tier: a resumed process counts its calls from 0, so it would move to the optimized
    # executable (whose last bits differ) at another step than the uninterrupted run
    env = dict(os.environ if env is None else env, JAXKERAS_TIERED_COMPILATION="0")
    out = subprocess.run(
        [sys.executable, "-c", script, mode, str(path)],
        capture_output=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    return np.load(io.BytesIO(out.stdout))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_training_resumed_in_a_new_process_is_bit_identical(tmp_path, fmt):
    path = _path(tmp_path, fmt, "mlp")
    straight = _train(TRAIN, "first", path)
    resumed = _train(TRAIN, "resume", path)
    assert np.array_equal(straight.view(np.uint32), resumed.view(np.uint32))


@pytest.mark.slow
@pytest.mark.keras2
@pytest.mark.skipif(
    importlib.util.find_spec("keras") is None, reason="keras 2.3.1 is not installed (test extra)"
)
def test_keras2_training_resumed_from_an_orbax_checkpoint_is_bit_identical(tmp_path):
    """Keras 2's Adam: its moments and ``iterations`` are variables, so they round-trip."""
    env = dict(os.environ, KERAS_BACKEND="jaxkeras", KERAS_HOME=str(tmp_path))
    straight = _train(KERAS_TRAIN, "first", tmp_path / "keras", env)
    resumed = _train(KERAS_TRAIN, "resume", tmp_path / "keras", env)
    assert np.array_equal(straight.view(np.uint64), resumed.view(np.uint64))


# ---------------------------------------------------------------------------------------------
# several devices, several processes (tests/checkpoint_worker.py)


def _env(tmp: Path, devices: int) -> dict:
    return dict(
        os.environ,
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        KERAS_HOME=str(tmp / "keras"),
    )


@pytest.fixture(scope="module")
def eight(tmp_path_factory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("eight")
    out = tmp / "out.json"
    proc = subprocess.run(
        [sys.executable, WORKER, "devices", str(tmp), str(out)],
        env=_env(tmp, 8),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return tmp, json.loads(out.read_text())


@pytest.mark.slow
def test_model_parallel_state_restores_onto_another_mesh(eight):
    _, r = eight
    assert r["placed"]["dense_1/kernel"] == {
        "spec": [None, "model"],
        "devices": 8,
        "shard_shape": [64, 8],
    }
    assert r["placed"]["dense_2/kernel/velocity"]["shard_shape"] == [8, 8]
    # restored onto a (4, 2) mesh with other layouts: placed as the variables are now
    assert r["replaced"]["dense_1/kernel"] == {
        "spec": ["model", None],
        "devices": 8,
        "shard_shape": [32, 32],
    }
    assert r["replaced"]["dense_2/kernel/velocity"]["shard_shape"] == [32, 4]
    assert r["replaced"]["dense_2/bias"]["shard_shape"] == [4]
    assert set(r["restored"]) == set(r["saved"]) and len(r["saved"]) == 8
    for name, value in r["saved"].items():
        assert r["restored"][name] == value, name  # exactly
    # the random state came along: dropout draws the same masks (sums on another mesh round
    # differently, hence the tolerance)
    np.testing.assert_allclose(r["losses_after_restore"], r["losses_after"], rtol=1e-5)
    assert r["losses_after"][0] != r["losses_after"][1]


@pytest.mark.slow
def test_model_parallel_state_restores_onto_one_device(eight):
    tmp, r = eight
    assert len(jax.devices()) == 1
    variables = {name: K.zeros(np.shape(value), name=name) for name, value in r["saved"].items()}
    K.restore_checkpoint(tmp / "sharded", list(variables.values()))
    for name, v in variables.items():
        np.testing.assert_array_equal(K.get_value(v), np.asarray(r["saved"][name], np.float32))
        assert len(K.get_state([v])[name].devices()) == 1


@pytest.fixture(scope="module")
def hosts(tmp_path_factory) -> tuple[Path, list[dict]]:
    tmp = tmp_path_factory.mktemp("hosts")
    return tmp, run_hosts(WORKER, [str(tmp)], tmp, _env(tmp, 4), timeout=600)


def _bytes_under(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@pytest.mark.slow
def test_each_process_writes_only_its_own_shards(hosts):
    """Each variable is split over both processes' devices: each process writes its half
    (Orbax's ``ocdbt.process_<i>`` folder), and nothing is written twice."""
    tmp, results = hosts
    (step,) = (tmp / "hosts").iterdir()
    written = [_bytes_under(step / "state" / f"ocdbt.process_{i}") for i in range(2)]
    total, local = results[0]["total"], results[0]["local"]
    assert local == total // 2
    for i in range(2):  # about its half (its chunks, lightly compressed), not the whole
        assert 0.8 * local < written[i] < 1.05 * local, (i, written, local)
    assert _bytes_under(step) < 1.1 * total


@pytest.mark.slow
def test_two_processes_restore_onto_another_mesh(hosts):
    _, results = hosts
    for r in results:
        assert r["restored_spec"] == {
            "spec": ["batch", "model"],
            "devices": 8,
            "shard_shape": [1024, 512],
        }
        assert all(all(shards) for shards in r["restored_shards_equal"].values())
        assert len(r["restored_shards_equal"]["w0"]) == 4  # its 4 devices' shards


# ---------------------------------------------------------------------------------------------
# restoring into a model built again (other names): match="order"


def _model(prefix: str = "dense") -> list:
    """A model's variables as a new user builds them twice in one process: the second time
    they get other names (``dense/kernel_1``), as Keras's layers get ``dense_2/kernel``."""
    return [
        K.variable(np.zeros((3, 2)), name=f"{prefix}/kernel"),
        K.variable(np.zeros(2), name=f"{prefix}/bias"),
        K.variable(0, dtype="int32", name="iterations"),
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_model_built_again_restores_by_order(tmp_path, fmt):
    path = _path(tmp_path, fmt)
    first = _model()
    trained = [np.arange(6.0).reshape(3, 2), np.array([0.5, -0.5]), np.int32(7)]
    K.batch_set_value(list(zip(first, trained)))
    K.save_checkpoint(path, first)
    twin = _model()
    assert [v.name for v in twin] != [v.name for v in first]
    with pytest.raises(ValueError, match=r"'dense/kernel_1' is not in the checkpoint.*'order'"):
        K.restore_checkpoint(path, twin)
    K.restore_checkpoint(path, twin, match="order")
    for variable, value in zip(twin, trained):
        np.testing.assert_array_equal(K.get_value(variable), value)
    K.set_value(first[0], np.zeros((3, 2)))  # restoring by name still works
    K.restore_checkpoint(path, first)
    np.testing.assert_array_equal(K.get_value(first[0]), trained[0])


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_order_mismatch_is_named_and_nothing_is_restored(tmp_path, fmt):
    path = _path(tmp_path, fmt)
    first = _model()
    K.save_checkpoint(path, first)
    other = [
        K.variable(np.full((2, 3), 9.0), name="other/kernel"),  # transposed
        K.variable(np.full(2, 9.0), dtype="float16", name="other/bias"),
        K.variable(9, dtype="int32", name="other/steps"),
        K.variable(9.0, name="other/extra"),
    ]
    with pytest.raises(ValueError) as info:
        K.restore_checkpoint(path, other, match="order")
    message = str(info.value)
    assert "variables lists 4 variables, but the checkpoint holds 3" in message
    assert (
        "variables[0] 'other/kernel' has shape (2, 3), but the checkpoint holds shape (3, 2) "
        "(the checkpoint's variable 0, saved as 'dense/kernel')" in message
    )
    assert "variables[1] 'other/bias' has dtype float16, but the checkpoint holds dtype" in message
    assert "other/steps" not in message  # an int32 scalar, as saved
    for variable in other:
        assert np.all(K.get_value(variable) == 9)  # nothing restored
    with pytest.raises(ValueError, match=r"variables\[1\] 'other/kernel' is listed twice"):
        K.restore_checkpoint(path, [other[0], other[0], other[2]], match="order")


@pytest.mark.parametrize("fmt", FORMATS)
def test_match_is_checked(tmp_path, fmt):
    path = _path(tmp_path, fmt)
    K.save_checkpoint(path, _model())
    with pytest.raises(ValueError, match=r"match='order' needs variables=\[\.\.\.\]"):
        K.restore_checkpoint(path, match="order")
    with pytest.raises(ValueError, match=r"match must be one of \('name', 'order'\), got 'shape'"):
        K.restore_checkpoint(path, match="shape")


def test_the_manager_restores_by_order(tmp_path):
    first = _model()
    K.set_value(first[1], [1.0, 2.0])
    with CheckpointManager(tmp_path / "run", asynchronous=False) as manager:
        manager.save(3, first)
        twin = _model()
        assert manager.restore(variables=twin, match="order") == 3
    np.testing.assert_array_equal(K.get_value(twin[1]), [1.0, 2.0])
