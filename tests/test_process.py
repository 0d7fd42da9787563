"""jaxkeras as a guest in the user's process (jaxkeras/process.py): importing and using it,
Keras 2 included, changes no process-wide setting; the ones it offers are opt-in; the same
model built in two processes compiles once when the compilation cache is asked for."""

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

# A user's program: jaxkeras beside its own JAX code, a K.function with an int64 variable, and
# a Keras 2.3.1 model compiled with Adam (whose step counter Keras makes int64), trained and
# used. Then what the user's own code sees.
_USER_PROGRAM = """
import json, os, resource, warnings
import numpy as np
os.environ["KERAS_BACKEND"] = "jaxkeras"
warnings.simplefilter("ignore")
import jax, jax.numpy as jnp
import jaxkeras as K
import keras

count = K.variable(0, dtype="int64")
x = K.placeholder((None, 4))
w = K.variable(np.ones((4, 2), np.float32))
f = K.function([x], [K.dot(x, w)], updates=[K.update_add(count, 1)])
f([np.ones((3, 4), np.float32)])
model = keras.models.Sequential([keras.layers.Dense(8, activation="relu", input_shape=(4,)),
                                 keras.layers.Dropout(0.5), keras.layers.Dense(2)])
model.compile("adam", "mse")
model.train_on_batch(np.ones((16, 4), np.float32), np.zeros((16, 2), np.float32))
model.predict(np.ones((2, 4), np.float32))

def resident_mb():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

before = resident_mb()
block = np.ones(400 * 2**20 // 8)  # 400 MB of the user's own NumPy, freed again
held = resident_mb()
del block
after = resident_mb()
print(json.dumps({
    "x64": jax.config.jax_enable_x64,
    "async": jax.config.values["jax_cpu_enable_async_dispatch"],
    "cache": jax.config.jax_compilation_cache_dir,
    "dtypes": [str(jnp.zeros(3).dtype), str(jnp.asarray(np.ones(3)).dtype),
               str(jax.random.normal(jax.random.PRNGKey(0), (2,)).dtype),
               str(jnp.arange(3).dtype)],
    "freed_mb": held - after, "held_mb": held - before,
    "count": int(K.get_value(count)),
}))
"""


def _run(program: str, home, **env_vars: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXKERAS_")}
    env.update(KERAS_HOME=str(home), JAX_PLATFORMS="cpu", **env_vars)
    out = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.keras2
def test_importing_and_using_jaxkeras_changes_nothing_in_the_process(tmp_path):
    seen = _run(_USER_PROGRAM, tmp_path)
    assert seen["count"] == 1
    assert seen["x64"] is False  # Keras's int64 step counter did not turn on 64-bit mode
    assert seen["async"] is True  # JAX's own default
    assert seen["cache"] is None  # no compilation cache written for the user's jax.jit
    assert seen["dtypes"] == ["float32", "float32", "float32", "int32"]
    if GLIBC:  # glibc's malloc gives a freed large block back to the system
        assert seen["held_mb"] > 350 and seen["freed_mb"] > 350, seen
    assert not (tmp_path / "jax_cache").exists()


@pytest.mark.keras2
@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_the_opt_in_settings_are_what_change_the_process(tmp_path):
    # the same program, asking for memory reuse and the cache: now they apply (so the test
    # above can tell them apart)
    seen = _run(
        _USER_PROGRAM, tmp_path, JAXKERAS_REUSE_CPU_MEMORY="1", JAXKERAS_COMPILATION_CACHE="1"
    )
    assert seen["async"] is False and seen["cache"] == str(tmp_path / "jax_cache")
    assert seen["freed_mb"] < 50, seen  # kept for the next allocation
    assert seen["x64"] is False and seen["dtypes"][0] == "float32"


_DROPOUT_MODEL = """
import json, os, warnings
import numpy as np
os.environ["KERAS_BACKEND"] = "jaxkeras"
warnings.simplefilter("ignore")
import keras
folder = os.environ["JAXKERAS_COMPILATION_CACHE"]
before = set(os.listdir(folder)) if os.path.isdir(folder) else set()
layers = keras.layers
model = keras.models.Sequential([layers.Dense(16, activation="relu", input_shape=(8,)),
                                 layers.Dropout(0.5), layers.Dense(3, activation="softmax")])
model.compile("adam", "categorical_crossentropy", metrics=["accuracy"])
x = np.random.rand(64, 8).astype(np.float32)
y = np.eye(3, dtype=np.float32)[np.random.randint(0, 3, 64)]
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
model.predict(x, batch_size=32)
print(json.dumps({"written": sorted(set(os.listdir(folder)) - before)}))
"""


@pytest.mark.keras2
def test_the_same_model_with_dropout_compiles_once_across_processes(tmp_path):
    # Dropout's seed, drawn from NumPy's unseeded RNG when the model is built, is a runtime
    # argument: the second process builds other seeds into the same programs, all loaded from
    # the cache
    cache = tmp_path / "cache"
    env = {
        "JAXKERAS_COMPILATION_CACHE": str(cache),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }
    first = _run(_DROPOUT_MODEL, tmp_path, **env)
    assert first["written"], first  # the first process compiled and wrote
    second = _run(_DROPOUT_MODEL, tmp_path, **env)
    assert second["written"] == [], second
