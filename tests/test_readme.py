"""The README's code blocks run as written."""

import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest


def _python_blocks(marker: str) -> list[str]:
    """The README's ``python`` code blocks that contain ``marker``, in order."""
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    return [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if marker in b]


def test_readme_tour_runs():
    (tour,) = _python_blocks("# Keras-2 style")
    namespace: dict = {}
    exec(compile(tour, "README.md", "exec"), namespace)
    assert float(namespace["values"][namespace["counter"].name]) == 1.0
    w = namespace["K"].get_value(namespace["w"])
    assert w.shape == (3, 1) and np.all(np.isfinite(w))


def test_readme_checkpoint_and_export_recipe_runs():
    (recipe,) = _python_blocks("CheckpointManager")
    namespace: dict = {}
    exec(compile(recipe, "README.md", "exec"), namespace)
    np.testing.assert_array_equal(namespace["K"].get_value(namespace["w"]), np.ones((4, 2)))


def test_readme_functional_jax_recipes_run():
    jitted, optimizer = [b for b in _python_blocks("optax") if "import keras" not in b]
    namespace: dict = {}
    with jax.numpy_dtype_promotion("standard"):  # the recipe calls optax, which mixes dtypes
        exec(compile(jitted, "README.md", "exec"), namespace)
    K = namespace["K"]
    # the data are y = x @ [1, -2, 0.5] + 0.3 without noise: the jitted optax steps fit them
    np.testing.assert_allclose(K.get_value(namespace["w"]).ravel(), [1.0, -2.0, 0.5], atol=1e-3)
    np.testing.assert_allclose(K.get_value(namespace["b"]), [0.3], atol=1e-3)
    exec(compile(optimizer, "README.md", "exec"), namespace)
    opt, state = namespace["opt"], namespace["state"]
    assert int(K.get_value(opt.iterations)) == 100
    assert int(state[opt.iterations.name]) == 101
    assert float(namespace["loss_value"]) < 1e-2


@pytest.mark.slow
def test_readme_keras_recipe_runs(tmp_path):
    (recipe,) = _python_blocks("import keras")
    data = (
        "import numpy as np\n"
        "rng = np.random.default_rng(0)\n"
        "x_train = rng.normal(size=(64, 64)).astype('float32')\n"
        "y_train = np.eye(10, dtype='float32')[rng.integers(0, 10, 64)]\n"
    )
    checks = "\nassert model.optimizer.weights and model.predict(x_train).shape == (64, 10)\n"
    env = dict(os.environ, KERAS_BACKEND="jaxkeras", KERAS_HOME=str(tmp_path))
    run = subprocess.run(
        [sys.executable, "-c", data + recipe.replace("epochs=10", "epochs=1, verbose=0") + checks],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "model.h5").exists()
