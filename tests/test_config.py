"""Settings: floatx, epsilon, image data format, keras.json."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import jaxkeras as K


@pytest.fixture
def restore_settings():
    # Through the setters: when Keras has loaded jaxkeras in this process, they also restore
    # Keras's own settings, which jaxkeras then follows.
    saved = (K.floatx(), K.epsilon(), K.image_data_format())
    yield
    K.set_floatx(saved[0])
    K.set_epsilon(saved[1])
    K.set_image_data_format(saved[2])


def test_defaults_and_backend():
    assert K.backend() == "jax"
    assert K.floatx() == "float32"
    assert K.epsilon() == 1e-7
    assert K.image_data_format() == "channels_last"


def test_setters_validate(restore_settings):
    K.set_floatx("float16")
    assert K.floatx() == "float16"
    assert K.variable([1.0]).dtype == "float16"
    with pytest.raises(ValueError, match="'int8'"):
        K.set_floatx("int8")
    K.set_epsilon(1e-5)
    assert K.epsilon() == 1e-5
    with pytest.raises(ValueError, match="-1"):
        K.set_epsilon(-1)
    with pytest.raises(ValueError, match="'abc'"):
        K.set_epsilon("abc")
    K.set_image_data_format("channels_first")
    assert K.image_data_format() == "channels_first"
    with pytest.raises(ValueError, match="'channels_middle'"):
        K.set_image_data_format("channels_middle")


def test_normalize_data_format(restore_settings):
    assert K.normalize_data_format(None) == "channels_last"
    assert K.normalize_data_format("Channels_First") == "channels_first"
    with pytest.raises(ValueError, match="'nchw'"):
        K.normalize_data_format("nchw")


def _prints_ok(code, home):
    out = _run(code, home)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def _run(code, home):
    env = dict(os.environ, KERAS_HOME=str(home))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


@pytest.mark.slow
def test_keras_json_is_read_at_import_and_never_written(tmp_path):
    path = tmp_path / "keras.json"
    path.write_text(
        json.dumps(
            {
                "floatx": "float64",
                "epsilon": 1e-4,
                "image_data_format": "channels_first",
                "backend": "jaxkeras",
            }
        )
    )
    before = path.read_text()
    out = _run(
        "import jaxkeras as K; v = K.variable([1.5]);"
        "print(K.floatx(), K.epsilon(), K.image_data_format(), v.dtype, K.eval(v).dtype)",
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["float64", "0.0001", "channels_first", "float64", "float64"]
    assert path.read_text() == before


@pytest.mark.slow
def test_malformed_keras_json_names_the_file(tmp_path):
    (tmp_path / "keras.json").write_text("{not json")
    out = _run("import jaxkeras", tmp_path)
    assert out.returncode != 0
    assert str(tmp_path / "keras.json") in out.stderr


@pytest.mark.slow
def test_missing_keras_json_is_fine(tmp_path):
    out = _run("import jaxkeras as K; print(K.floatx())", tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "float32"


@pytest.mark.slow
def test_64_bit_dtypes_are_narrowed_with_one_warning_unless_x64_is_on(tmp_path):
    # JAX's 64-bit mode off (its default): a 64-bit request computes in 32 bits, with one
    # warning per process, and the mode stays off for the user's own code
    code = """
import warnings, jax, jax.numpy as jnp, numpy as np, jaxkeras as K
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    it = K.variable(0, dtype="int64", name="iterations")
    idx = K.placeholder((None,), dtype="int64")
    g = K.function([idx], [idx * 2], updates=[K.update_add(it, 1)])
    out = g([np.array([3], np.int64)])[0]
    assert K.dtype(K.cast(np.ones(2), "float64")) == "float32"
narrowed = [w for w in caught if issubclass(w.category, K.NarrowedDtypeWarning)]
assert len(narrowed) == 1, [str(w.message) for w in caught]
message = str(narrowed[0].message)
assert "int64" in message and "int32" in message and "jax_enable_x64" in message, message
assert it.dtype == "int32" and out.dtype == np.int32 and int(out[0]) == 6
assert int(K.get_value(it)) == 1
assert not jax.config.jax_enable_x64 and jnp.zeros(3).dtype == jnp.float32
print("ok")
"""
    _prints_ok(code, tmp_path)


@pytest.mark.slow
def test_64_bit_dtypes_are_kept_when_the_user_turned_x64_on(tmp_path):
    code = """
import warnings, jax, numpy as np
jax.config.update("jax_enable_x64", True)
import jaxkeras as K
warnings.simplefilter("error")  # nothing is narrowed: nothing to say
w = K.variable(np.ones((2, 2)))
x = K.placeholder((None, 2))
f = K.function([x], [K.dot(x, w)])
assert f([np.ones((1, 2))])[0].dtype == np.float32
it = K.variable(0, dtype="int64", name="iterations")
assert it.dtype == "int64" and K.get_value(it).dtype == np.int64
big = K.variable(2**40, dtype="int64")
assert int(K.get_value(big)) == 2**40
idx = K.placeholder((None,), dtype="int64")
g = K.function([idx], [idx * 2], updates=[K.update_add(it, 1)])
out = g([np.array([2**33], np.int64)])[0]
assert out.dtype == np.int64 and int(out[0]) == 2**34 and int(K.get_value(it)) == 1
assert K.dtype(K.arange(3, 0, -1, dtype="int64")) == "int64"
assert K.dtype(K.cast(np.ones(2), "float64")) == "float64"
assert K.dtype(K.zeros((2,), dtype="uint64")) == "uint64"
assert f([np.ones((1, 2))])[0].dtype == np.float32  # float32 graphs stay float32
assert K.dtype(K.dot(x, w)) == "float32" and K.dtype(K.variable(1.0)) == "float32"
print("ok")
"""
    _prints_ok(code, tmp_path)


@pytest.mark.slow
def test_float64_floatx_turns_x64_on(tmp_path):
    # asking for 64-bit floats everywhere is the one switch that changes JAX's mode
    code = """
import jax, numpy as np, jaxkeras as K
assert not jax.config.jax_enable_x64
K.set_floatx("float64")
assert jax.config.jax_enable_x64 and K.get_value(K.variable(1.0)).dtype == np.float64
print("ok")
"""
    _prints_ok(code, tmp_path)
    (tmp_path / "keras.json").write_text(json.dumps({"floatx": "float64"}))
    out = _run("import jax, jaxkeras; print(jax.config.jax_enable_x64)", tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr


@pytest.mark.slow
def test_an_unknown_dtype_changes_no_mode(tmp_path):
    code = """
import jax, jaxkeras as K
try:
    K.variable(1, dtype="int65")
except TypeError as err:
    assert "int65" in str(err), err
assert not jax.config.jax_enable_x64
print("ok")
"""
    _prints_ok(code, tmp_path)


CACHE_PROGRAM = """
import logging, numpy as np, jax, jaxkeras as K
hits = []
class Hits(logging.Handler):
    def emit(self, record):
        hits.append("Persistent compilation cache hit" in record.getMessage())
logging.getLogger("jax._src.compiler").addHandler(Hits())
logging.getLogger("jax._src.compiler").setLevel(logging.DEBUG)
x = K.placeholder((None, 3))
w = K.variable(np.ones((3, 2)))
K.function([x], [K.tanh(K.dot(x, w))])([np.ones((2, 3))])
print(jax.config.jax_compilation_cache_dir, any(hits))
"""


def _cache_run(home, **env):
    environ = dict(os.environ, KERAS_HOME=str(home), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    environ.pop("JAXKERAS_COMPILATION_CACHE", None)
    environ.update(env)
    out = subprocess.run(
        [sys.executable, "-c", CACHE_PROGRAM], env=environ, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    folder, hit = out.stdout.split()
    return folder, hit == "True"


@pytest.mark.slow
def test_compilation_cache_is_off_unless_asked_for(tmp_path):
    assert _cache_run(tmp_path) == ("None", False)
    assert not (tmp_path / "jax_cache").exists()
    (tmp_path / "keras.json").write_text(json.dumps({"jax_compilation_cache": False}))
    assert _cache_run(tmp_path)[0] == "None"


@pytest.mark.slow
def test_compilation_cache_asked_for_is_beside_keras_json_and_reused(tmp_path):
    folder, hit = _cache_run(tmp_path, JAXKERAS_COMPILATION_CACHE="1")
    assert folder == str(tmp_path / "jax_cache") and not hit
    assert any((tmp_path / "jax_cache").iterdir())  # entries were written
    (tmp_path / "keras.json").write_text(json.dumps({"jax_compilation_cache": True}))
    assert _cache_run(tmp_path) == (folder, True)  # a second process compiles from the cache


@pytest.mark.slow
def test_compilation_cache_can_be_put_anywhere(tmp_path):
    moved = tmp_path / "elsewhere"
    assert _cache_run(tmp_path, JAXKERAS_COMPILATION_CACHE=str(moved))[0] == str(moved)
    (tmp_path / "keras.json").write_text(json.dumps({"jax_compilation_cache": str(moved)}))
    assert _cache_run(tmp_path)[0] == str(moved)
    assert _cache_run(tmp_path, JAXKERAS_COMPILATION_CACHE="off")[0] == "None"  # env wins
    own = tmp_path / "own"  # a program's own JAX setting wins
    assert _cache_run(tmp_path, JAX_COMPILATION_CACHE_DIR=str(own))[0] == str(own)


@pytest.mark.slow
def test_compilation_cache_asked_for_is_size_capped(tmp_path):
    environ = dict(os.environ, KERAS_HOME=str(tmp_path), JAXKERAS_COMPILATION_CACHE="on")
    environ.pop("JAX_COMPILATION_CACHE_MAX_SIZE", None)
    code = "import jax, jaxkeras; print(jax.config.jax_compilation_cache_max_size)"
    out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == 2 * 2**30  # least recently used entries go beyond 2 GiB


def test_cpu_compiles_use_quick_options_unless_xla_flags_name_them(monkeypatch):
    import os

    import jax

    from jaxkeras._xla.options import (
        CPU_FUSION_FLAG,
        CPU_LEVEL_FLAG,
        CPU_LIBRARY_FLAG,
        CPU_LIBRARY_OPS,
        CPU_PASSES_FLAG,
        CPU_SKIPPED_PASSES,
        CPU_SPLIT_FLAG,
        compiler_options,
    )

    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
    if jax.default_backend() != "cpu":
        assert compiler_options() is None  # other backends compile with XLA's defaults
        pytest.skip("the quick options are XLA:CPU's")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    split = min(32, cores)
    assert compiler_options() == _accepted_by_xla(
        {
            CPU_FUSION_FLAG: False,
            CPU_LEVEL_FLAG: 1,
            CPU_SPLIT_FLAG: split,
            CPU_LIBRARY_FLAG: CPU_LIBRARY_OPS,
            CPU_PASSES_FLAG: CPU_SKIPPED_PASSES,
        }
    )
    monkeypatch.setenv("XLA_FLAGS", f"--{CPU_FUSION_FLAG}=true --{CPU_SPLIT_FLAG}=8")
    assert compiler_options() == _accepted_by_xla(
        {
            CPU_LEVEL_FLAG: 1,
            CPU_LIBRARY_FLAG: CPU_LIBRARY_OPS,
            CPU_PASSES_FLAG: CPU_SKIPPED_PASSES,
        }
    )
    flags = f"--{CPU_LEVEL_FLAG}=3 --{CPU_FUSION_FLAG}=true --{CPU_SPLIT_FLAG}=32"
    flags += f" --{CPU_PASSES_FLAG}=dce"
    monkeypatch.setenv("XLA_FLAGS", f"{flags} --{CPU_LIBRARY_FLAG}=individual_dot")
    assert compiler_options() is None


def _accepted_by_xla(options: dict) -> dict:
    """``options`` less those this process's XLA rejects, each tried alone on a one-op program
    (jaxlib 0.11's XLA has no classic fusion emitters, so it rejects their option)."""
    import jax

    def accepts(name, value):
        try:
            jax.jit(lambda x: x - 1, compiler_options={name: value}).lower(1.0).compile()
        except Exception:  # XLA's error for an unknown option has no type of its own
            return False
        return True

    return {name: value for name, value in options.items() if accepts(name, value)}


def test_options_xla_rejects_are_dropped_once_not_failing_every_compile(monkeypatch):
    import jax

    from jaxkeras._xla import options as xla_options

    if jax.default_backend() != "cpu":
        pytest.skip("the probed options are XLA:CPU's")
    renamed = {"xla_cpu_no_such_option_of_ours": True, xla_options.CPU_LIBRARY_FLAG: "NO_SUCH_TYPE"}
    wanted = dict(xla_options.cpu_options(), **renamed)
    monkeypatch.setattr(xla_options, "cpu_options", lambda: wanted)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
    probes = []
    original = xla_options._compiles_with
    monkeypatch.setattr(xla_options, "_compiles_with", lambda o: probes.append(o) or original(o))
    options = xla_options.compiler_options()
    assert options == _accepted_by_xla({k: v for k, v in wanted.items() if k not in renamed})
    assert len(probes) == 1 + len(wanted)  # all together, then each alone
    assert xla_options.compiler_options() == options and len(probes) == 1 + len(wanted)  # once
    x = K.placeholder((None, 3))
    f = K.function([x], [K.sum(x * 2, axis=1)])
    assert f.compiler_options == options
    np.testing.assert_array_equal(f([np.ones((2, 3), np.float32)])[0], [6.0, 6.0])


def test_the_split_count_follows_the_cores_the_process_may_use(monkeypatch):
    from jaxkeras._xla import options as xla_options

    monkeypatch.setattr(xla_options, "_cores", lambda: 3)
    assert xla_options.cpu_options()[xla_options.CPU_SPLIT_FLAG] == 3
    monkeypatch.setattr(xla_options, "_cores", lambda: 96)
    assert (
        xla_options.cpu_options()[xla_options.CPU_SPLIT_FLAG] == 32
    )  # XLA's own default is the most


def _library_ops(hlo: str) -> set[str]:
    """The kinds of ops inside the computations that an optimized HLO hands YNNPACK."""
    kinds = set()
    for called in re.findall(r"ynn_fusion[.\d]* = .*?calls=(%[\w.]+)", hlo):
        body = hlo[hlo.index(called + " ") :]
        body = body[: body.index("\n}")]
        kinds |= {k for k in ("convolution", "reduce", "dot") if f" {k}(" in body}
    return kinds


def test_cpu_convolutions_run_in_xla_and_reductions_in_ynnpack():
    import jax
    import numpy as np
    from jax import lax

    if jax.default_backend() != "cpu":
        pytest.skip("XLA:CPU's library choices")
    shape, kernel = (8, 16, 16, 32), np.ones((3, 3, 32, 32), np.float32)
    x = K.placeholder(shape)
    y = K.relu(K.conv2d(x, K.variable(kernel), padding="same", lowering="lax"))
    f = K.function([x], [y, K.sum(y, axis=(1, 2))])
    feed = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    ours = _library_ops(f.lower([feed]).compile().as_text())
    assert "convolution" not in ours and "reduce" in ours

    @jax.jit
    def by_hand(a, k):  # XLA's defaults hand YNNPACK the convolution too
        dims = ("NHWC", "HWIO", "NHWC")
        out = jax.nn.relu(lax.conv_general_dilated(a, k, (1, 1), "SAME", dimension_numbers=dims))
        return out, out.sum(axis=(1, 2))

    assert "convolution" in _library_ops(by_hand.lower(feed, kernel).compile().as_text())
    for a, b in zip(f([feed]), by_hand(feed, kernel)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4 * float(np.abs(b).max()))


def test_a_reduction_of_a_transposed_operand_is_offered_to_ynnpack_whole():
    # BatchNormalization's gradient after the conv_lstm example's ConvLSTM2D: the RNN's
    # outputs time-major, their cotangent batch-major
    import jax
    import numpy as np

    from jaxkeras._xla.options import CPU_PASSES_FLAG, compiler_options

    if jax.default_backend() != "cpu":
        pytest.skip("XLA:CPU's library choices")
    rng = np.random.default_rng(0)
    time_major = rng.random((15, 10, 40, 40, 40), np.float32)
    batch_major = rng.random((10, 15, 40, 40, 40), np.float32)
    a, b = K.placeholder(time_major.shape), K.placeholder(batch_major.shape)
    product = K.permute_dimensions(a, (1, 0, 2, 3, 4)) * b
    f = K.function([a, b], [K.sum(product, axis=(0, 1, 2, 3))])
    hlo = f.lower([time_major, batch_major]).compile().as_text()
    assert "reduce-window" not in hlo and "reduce" in _library_ops(hlo)
    expected = np.einsum("tbhwc,bthwc->c", time_major.astype(np.float64), batch_major)
    np.testing.assert_allclose(f([time_major, batch_major])[0], expected, rtol=1e-5)

    # the same options but the skipped pass: XLA splits the sum into a reduce-window
    options = {k: v for k, v in compiler_options().items() if k != CPU_PASSES_FLAG}
    by_hand = jax.jit(lambda x, y: (x.transpose(1, 0, 2, 3, 4) * y).sum(axis=(0, 1, 2, 3)))
    lowered = by_hand.lower(time_major, batch_major)
    assert "reduce-window" in lowered.compile(options).as_text()


def test_the_quick_compiler_options_compute_the_same_bits():
    # K.function (compiled with xla_options.compiler_options() on CPU) against jax.jit with XLA's
    # defaults
    import jax
    import jax.numpy as jnp
    import numpy as np

    x_value = np.concatenate([np.linspace(-30, 30, 4001), np.geomspace(1e-20, 60, 4001)])
    x_value = x_value.astype(np.float32)
    x = K.placeholder((None,))
    ours = K.function(
        [x],
        [K.tanh(x), K.exp(x), K.log(K.abs(x) + 1e-30), K.sigmoid(x), K.softplus(x), x * 1.7 + 0.3],
    )
    theirs = jax.jit(
        lambda v: [
            jnp.tanh(v),
            jnp.exp(v),
            jnp.log(jnp.abs(v) + 1e-30),
            jax.nn.sigmoid(v),
            jax.nn.softplus(v),
            v * 1.7 + 0.3,
        ]
    )
    for a, b in zip(ours([x_value]), theirs(x_value)):
        np.testing.assert_array_equal(a, np.asarray(b))


# ---------------------------------------------------------------------------------------------
# the JAXKERAS_* yes/no switches: one rule (an empty value is not said)


def _tiered() -> bool:
    from jaxkeras import tiers

    return tiers.tiered()


def _reuse() -> bool | None:
    from jaxkeras._xla import cpu_memory

    return cpu_memory.reuse_asked({})


def _exact_sums() -> bool:
    from jaxkeras._xla import summation

    return summation._asked()


def _cache() -> str | None:
    from jaxkeras import process

    return process.compilation_cache_asked({})


_DEFAULT_CACHE = os.path.join(os.environ["KERAS_HOME"], "jax_cache")

# (variable, reader, what "" reads as, what a yes reads as, what a no reads as)
_SWITCHES = [
    ("JAXKERAS_TIERED_COMPILATION", _tiered, True, True, False),
    ("JAXKERAS_REUSE_CPU_MEMORY", _reuse, None, True, False),
    ("JAXKERAS_EXACT_SUMS", _exact_sums, False, True, False),
    ("JAXKERAS_COMPILATION_CACHE", _cache, None, _DEFAULT_CACHE, None),
]


@pytest.mark.parametrize(
    ("name", "read", "unsaid", "yes", "no"), _SWITCHES, ids=[s[0] for s in _SWITCHES]
)
@pytest.mark.parametrize(
    ("value", "means"),
    [
        ("", "unsaid"),
        (" ", "unsaid"),
        ("0", "no"),
        ("1", "yes"),
        ("false", "no"),
        ("true", "yes"),
        ("OFF", "no"),
        (" Yes ", "yes"),
    ],
)
def test_every_switch_reads_one_rule(monkeypatch, name, read, unsaid, yes, no, value, means):
    from jaxkeras import tiers

    monkeypatch.setattr(tiers, "_SWITCH", [None])  # no set_tiered_compilation in this test
    monkeypatch.setenv(name, value)
    assert read() == {"unsaid": unsaid, "yes": yes, "no": no}[means]


@pytest.mark.parametrize(
    ("name", "read"), [s[:2] for s in _SWITCHES], ids=[s[0] for s in _SWITCHES]
)
def test_a_switch_set_to_another_word_names_the_variable_and_the_value(monkeypatch, name, read):
    from jaxkeras import tiers

    monkeypatch.setattr(tiers, "_SWITCH", [None])
    bad = "none" if name == "JAXKERAS_COMPILATION_CACHE" else "maybe"  # any other is a folder
    monkeypatch.setenv(name, bad)
    with pytest.raises(ValueError, match=rf"\${name}.*'{bad}'"):
        read()


def test_an_empty_switch_leaves_it_to_keras_json(monkeypatch):
    from jaxkeras import process
    from jaxkeras._xla import cpu_memory

    monkeypatch.setenv(cpu_memory.REUSE_ENV, "")
    monkeypatch.setenv(process.CACHE_ENV, "")
    assert cpu_memory.reuse_asked({cpu_memory.REUSE_KEY: True}) is True
    assert process.compilation_cache_asked({process.CACHE_KEY: True}) == _DEFAULT_CACHE
    assert process.compilation_cache_asked({process.CACHE_KEY: ""}) is None
    monkeypatch.setenv(process.CACHE_ENV, "~/elsewhere")  # anything but a word is a folder
    assert process.compilation_cache_asked({}) == os.path.expanduser("~/elsewhere")


def test_the_switch_rule_itself(monkeypatch):
    from jaxkeras import config

    monkeypatch.delenv("JAXKERAS_SOME_SWITCH", raising=False)
    assert config.env_switch("JAXKERAS_SOME_SWITCH") is None
    assert [config.switch_word(w) for w in config.YES_WORDS] == [True] * 4
    assert [config.switch_word(w.upper()) for w in config.NO_WORDS] == [False] * 4
    assert config.switch_word("") is None and config.switch_word("2") is None
    monkeypatch.setenv("JAXKERAS_SOME_SWITCH", "2")
    with pytest.raises(ValueError, match=r"\$JAXKERAS_SOME_SWITCH must be a yes.*got '2'"):
        config.env_switch("JAXKERAS_SOME_SWITCH")
