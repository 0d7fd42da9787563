"""Settings: floatx, epsilon, image data format, keras.json."""

import json
import os
import subprocess
import sys

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


def _run(code, home):
    env = dict(os.environ, KERAS_HOME=str(home))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


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


def test_malformed_keras_json_names_the_file(tmp_path):
    (tmp_path / "keras.json").write_text("{not json")
    out = _run("import jaxkeras", tmp_path)
    assert out.returncode != 0
    assert str(tmp_path / "keras.json") in out.stderr


def test_missing_keras_json_is_fine(tmp_path):
    out = _run("import jaxkeras as K; print(K.floatx())", tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "float32"
