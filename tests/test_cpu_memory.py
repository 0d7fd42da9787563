"""Memory reuse on CPU (opt-in): asked for, a compiled call's temporaries stop page-faulting on
every call; the switch is read from the environment and keras.json, off by default, and left
alone where it cannot work."""

import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
import warnings

import jax
import numpy as np
import pytest

import jaxkeras as K
from jaxkeras._xla import cpu_memory

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

# A K.function whose loop carries 96 MiB: XLA:CPU keeps its buffers in the call's
# temporaries, one block of 192 MiB, far over the 32 MiB above which glibc maps a block afresh
# from the OS, and over the 64 MiB heaps of a worker thread's arena. It is fed, as Keras feeds
# a batch, a NumPy array that is not 64-byte aligned (XLA would copy it on a worker thread).
_FEWEST_FAULTS_OF_A_CALL = """
import json, resource
import numpy as np
import jax
import jaxkeras as K

n = 24 * 2**20
x = K.placeholder(shape=(n,))
carried = K.foldl(lambda a, e: K.sin(a) + K.reverse(a, 0) * e, K.constant([1.0, 2.0, 3.0]), x)
f = K.function([x], [K.sum(carried)])
buffer = np.arange(n + 16, dtype=np.float32) / n
feed = buffer[1 : n + 1]  # 4 bytes past an aligned address
temp_pages = f.lower([feed]).compile().memory_analysis().temp_size_in_bytes // 4096
first = f([feed])[0]
faults = []
for _ in range(8):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    f([feed])
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
expected = feed.astype(np.float64)
for e in (1.0, 2.0, 3.0):
    expected = np.sin(expected) + expected[::-1] * e
print(json.dumps({"reusing": K.process.reusing_cpu_memory(), "faults": min(faults),
                  "temp_pages": temp_pages, "sum": float(first), "expected": expected.sum(),
                  "async": jax.config.values["jax_cpu_enable_async_dispatch"]}))
"""


def _fewest_faults_of_a_call(tmp_path, **env_vars: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _SETTINGS}
    env.update(KERAS_HOME=str(tmp_path), JAX_PLATFORMS="cpu", **env_vars)
    out = subprocess.run(
        [sys.executable, "-c", _FEWEST_FAULTS_OF_A_CALL], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


_SETTINGS = (cpu_memory.REUSE_ENV, "JAX_CPU_ENABLE_ASYNC_DISPATCH")


@pytest.mark.slow
@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_a_calls_temporaries_fault_once_not_on_every_call(tmp_path):
    on = _fewest_faults_of_a_call(tmp_path, **{cpu_memory.REUSE_ENV: "1"})
    off = _fewest_faults_of_a_call(tmp_path)  # the default
    assert on["reusing"] and not off["reusing"]
    assert not on["async"] and off["async"]  # JAX's default is left alone when off
    assert on["temp_pages"] > 40_000
    # the fewest faults of a call: without reuse every call faults on every page of the block;
    # with it, a call finds a freed block of the size it needs (the heap may take a few calls
    # to hold one that small blocks have not split: it then keeps several)
    assert off["faults"] > 0.9 * off["temp_pages"], off
    assert on["faults"] < 0.02 * on["temp_pages"], on
    for result in (on, off):
        assert result["sum"] == pytest.approx(result["expected"], rel=1e-5)


@pytest.mark.slow
@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_a_variable_jax_does_not_read_changes_nothing(tmp_path):
    # JAX does not read $JAX_CPU_ENABLE_ASYNC_DISPATCH: jaxkeras does not either, and by
    # default leaves dispatch and malloc as they are
    kept = _fewest_faults_of_a_call(tmp_path, JAX_CPU_ENABLE_ASYNC_DISPATCH="0")
    assert not kept["reusing"] and kept["async"]
    assert kept["faults"] > 0.9 * kept["temp_pages"], kept


def test_the_environment_wins_over_keras_json(monkeypatch):
    monkeypatch.delenv(cpu_memory.REUSE_ENV, raising=False)
    assert cpu_memory.reuse_asked({}) is None  # not said: off
    assert cpu_memory.reuse_asked({cpu_memory.REUSE_KEY: False}) is False
    assert cpu_memory.reuse_asked({cpu_memory.REUSE_KEY: True}) is True
    monkeypatch.setenv(cpu_memory.REUSE_ENV, "off")
    assert cpu_memory.reuse_asked({cpu_memory.REUSE_KEY: True}) is False
    monkeypatch.setenv(cpu_memory.REUSE_ENV, " Yes ")
    assert cpu_memory.reuse_asked({cpu_memory.REUSE_KEY: False}) is True


def test_a_bad_setting_names_where_it_came_from(monkeypatch):
    monkeypatch.setenv(cpu_memory.REUSE_ENV, "maybe")
    with pytest.raises(ValueError, match=r"JAXKERAS_REUSE_CPU_MEMORY.*'maybe'"):
        cpu_memory.reuse_asked({})
    monkeypatch.delenv(cpu_memory.REUSE_ENV)
    with pytest.raises(ValueError, match=r"'reuse_cpu_memory'.*'no'"):
        cpu_memory.reuse_asked({cpu_memory.REUSE_KEY: "no"})


def test_a_bad_keras_json_setting_fails_the_import(tmp_path):
    (tmp_path / "keras.json").write_text(json.dumps({cpu_memory.REUSE_KEY: 0}))
    env = {k: v for k, v in os.environ.items() if k != cpu_memory.REUSE_ENV}
    env["KERAS_HOME"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", "import jaxkeras"], env=env, capture_output=True, text=True
    )
    assert out.returncode != 0
    assert "'reuse_cpu_memory' must be true or false, got 0" in out.stderr


@pytest.fixture
def platforms():
    saved = jax.config.jax_platforms
    yield lambda value: jax.config.update("jax_platforms", value)
    jax.config.update("jax_platforms", saved)


def test_only_a_cpu_only_jax_counts(platforms, monkeypatch):
    platforms("cpu")
    assert cpu_memory.runs_on_cpu_only()
    platforms("cuda,cpu")
    assert not cpu_memory.runs_on_cpu_only()
    platforms(None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: ())
    assert cpu_memory.runs_on_cpu_only()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: name == "libtpu" or None)
    assert not cpu_memory.runs_on_cpu_only()


def test_nothing_changes_once_jax_has_started(monkeypatch):
    jax.numpy.zeros(1).block_until_ready()  # JAX's threads have their own malloc arenas now
    calls = []
    monkeypatch.setattr(cpu_memory, "_state", {"reusing": False})
    monkeypatch.setattr(cpu_memory, "_mallopt", lambda: lambda *args: calls.append(args) or 1)
    with pytest.warns(UserWarning, match="import jaxkeras before any JAX computation"):
        assert not cpu_memory.reuse_cpu_memory()
    assert calls == [] and not cpu_memory.reusing()


def test_not_asked_for_it_touches_nothing(monkeypatch):
    calls = []
    monkeypatch.setattr(cpu_memory, "_state", {"reusing": False})
    monkeypatch.setattr(cpu_memory, "_mallopt", lambda: lambda *args: calls.append(args) or 1)
    for env, settings in [(None, {}), ("0", {cpu_memory.REUSE_KEY: True}), (None, {"x": 1})]:
        if env is None:
            monkeypatch.delenv(cpu_memory.REUSE_ENV, raising=False)
        else:
            monkeypatch.setenv(cpu_memory.REUSE_ENV, env)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # not asked for: nothing to say
            K.process.apply_settings(settings)
    assert calls == [] and not cpu_memory.reusing()


def test_asking_on_an_accelerator_says_how_to_run_on_the_cpu(platforms, monkeypatch):
    monkeypatch.setattr(cpu_memory, "_state", {"reusing": False})
    monkeypatch.setattr(cpu_memory, "_jax_started", lambda: False)
    monkeypatch.setattr(cpu_memory, "_mallopt", lambda: lambda *args: 1)
    platforms("cuda")
    with pytest.warns(UserWarning, match="JAX_PLATFORMS=cpu"):
        assert not K.process.reuse_cpu_memory()
    assert not cpu_memory.reusing()


def _offset(array: np.ndarray) -> int:
    return array.ctypes.data % cpu_memory.ALIGNMENT


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.float16])
def test_a_large_array_is_handed_over_aligned_and_equal(dtype):
    n = cpu_memory.BORROWED_BYTES // np.dtype(dtype).itemsize + 8
    values = (np.arange(2 * n + 64) % 7).astype(dtype)
    for array in (values[1 : n + 1], values[::2][:n].reshape(-1, 2)):  # unaligned, strided
        assert _offset(array) != 0 or not array.flags.c_contiguous
        handed = cpu_memory.borrowable(array)
        assert _offset(handed) == 0 and handed.flags.c_contiguous
        assert handed.dtype == array.dtype and handed.shape == array.shape
        np.testing.assert_array_equal(handed, array)


def test_a_small_or_aligned_array_is_handed_over_as_it_is():
    small = np.arange(cpu_memory.BORROWED_BYTES // 4 + 1, dtype=np.float32)[1:]
    assert small.nbytes <= cpu_memory.BORROWED_BYTES and _offset(small) != 0
    assert cpu_memory.borrowable(small) is small
    aligned = cpu_memory.borrowable(np.arange(10**6, dtype=np.float32)[1:])
    assert cpu_memory.borrowable(aligned) is aligned


def test_a_function_hands_large_numpy_feeds_over_aligned(monkeypatch):
    # with memory reuse off too: the hand-over changes nothing outside jaxkeras
    handed = []
    original = cpu_memory.borrowable

    def borrowable(array):
        handed.append(original(array))
        return handed[-1]

    monkeypatch.setattr(cpu_memory, "borrowable", borrowable)
    monkeypatch.setattr(cpu_memory, "_state", {"reusing": False})
    x = K.placeholder(shape=(None, 1000))
    f = K.function([x], [K.sum(x, axis=1)])
    feed = np.random.default_rng(0).random((60, 1001)).astype(np.float32)[:, 1:]  # strided
    np.testing.assert_allclose(f([feed])[0], feed.astype(np.float64).sum(axis=1), rtol=1e-5)
    assert len(handed) == 1 and _offset(handed[0]) == 0
    np.testing.assert_array_equal(handed[0], feed)
