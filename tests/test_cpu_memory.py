"""Memory reuse on CPU: a compiled call's temporaries stop page-faulting on every call, the
setting is read from the environment and keras.json, and it is left alone where it cannot
work."""

import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
import warnings

import jax
import pytest

from jaxkeras import cpu_memory

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

# A loop that carries 96 MiB: XLA:CPU keeps its buffers in the call's temporaries, one block
# of 192 MiB, far over the 32 MiB above which glibc maps a block afresh from the OS.
_FEWEST_FAULTS_OF_A_CALL = """
import json, resource, sys
import jax, jax.numpy as jnp
import jaxkeras

def step(x):
    return jnp.sum(jax.lax.fori_loop(0, 3, lambda i, a: jnp.sin(a) + a[::-1], x))

x = jnp.arange(24 * 2**20, dtype=jnp.float32) / 2**20
compiled = jax.jit(step).lower(x).compile()
temp_pages = compiled.memory_analysis().temp_size_in_bytes // resource.getpagesize()
compiled(x).block_until_ready()
faults = []
for _ in range(8):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    compiled(x).block_until_ready()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"reusing": jaxkeras.cpu_memory.reusing(), "faults": min(faults),
                  "temp_pages": temp_pages}))
"""


def _fewest_faults_of_a_call(tmp_path, reuse: str) -> dict:
    env = dict(os.environ, KERAS_HOME=str(tmp_path), JAX_PLATFORMS="cpu")
    env[cpu_memory.REUSE_ENV] = reuse
    out = subprocess.run(
        [sys.executable, "-c", _FEWEST_FAULTS_OF_A_CALL], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_a_calls_temporaries_fault_once_not_on_every_call(tmp_path):
    on, off = _fewest_faults_of_a_call(tmp_path, "1"), _fewest_faults_of_a_call(tmp_path, "0")
    assert on["reusing"] and not off["reusing"]
    assert on["temp_pages"] > 20_000
    # the fewest faults of a call: without reuse every call faults on every page of the block;
    # with it, a call finds a freed block of the size it needs (the heap may take a few calls
    # to hold one that small blocks have not split: it then keeps several)
    assert off["faults"] > 0.9 * off["temp_pages"], off
    assert on["faults"] < 0.02 * on["temp_pages"], on


def test_the_environment_wins_over_keras_json(monkeypatch):
    monkeypatch.delenv(cpu_memory.REUSE_ENV, raising=False)
    assert not cpu_memory.reuse_wanted({})  # opt-in
    assert cpu_memory.reuse_wanted({cpu_memory.REUSE_KEY: True})
    monkeypatch.setenv(cpu_memory.REUSE_ENV, "off")
    assert not cpu_memory.reuse_wanted({cpu_memory.REUSE_KEY: True})
    monkeypatch.setenv(cpu_memory.REUSE_ENV, " Yes ")
    assert cpu_memory.reuse_wanted({cpu_memory.REUSE_KEY: False})


def test_a_bad_setting_names_where_it_came_from(monkeypatch):
    monkeypatch.setenv(cpu_memory.REUSE_ENV, "maybe")
    with pytest.raises(ValueError, match=r"JAXKERAS_REUSE_CPU_MEMORY.*'maybe'"):
        cpu_memory.reuse_wanted({})
    monkeypatch.delenv(cpu_memory.REUSE_ENV)
    with pytest.raises(ValueError, match=r"'reuse_cpu_memory'.*'no'"):
        cpu_memory.reuse_wanted({cpu_memory.REUSE_KEY: "no"})


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
    monkeypatch.delenv(cpu_memory.REUSE_ENV, raising=False)
    with pytest.warns(UserWarning, match="import jaxkeras before any JAX computation"):
        assert not cpu_memory.reuse_cpu_memory({cpu_memory.REUSE_KEY: True})
    assert calls == [] and not cpu_memory.reusing()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not asked for: nothing to say
        assert not cpu_memory.reuse_cpu_memory({})


def test_asking_on_an_accelerator_says_how_to_run_on_the_cpu(platforms, monkeypatch):
    monkeypatch.setattr(cpu_memory, "_state", {"reusing": False})
    monkeypatch.setattr(cpu_memory, "_jax_started", lambda: False)
    monkeypatch.setattr(cpu_memory, "_mallopt", lambda: lambda *args: 1)
    platforms("cuda")
    with pytest.warns(UserWarning, match="JAX_PLATFORMS=cpu"):
        assert not cpu_memory.reuse_cpu_memory({cpu_memory.REUSE_KEY: True})
    assert not cpu_memory.reusing()
