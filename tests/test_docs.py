"""The guides in ``docs/`` run as written, and the docs build without a warning.

Code-block convention of the guides (``docs/*.md``):

- A fenced ```` ```python ```` block runs. A guide's blocks run in order, in one namespace, in
  a fresh process with ``JAX_PLATFORMS=cpu`` and a throwaway ``KERAS_HOME``, as a reader
  would run them one after another; the blocks assert what they compute, and each test below
  checks names they leave in the namespace.
- A block that imports Keras 2.3.1 (``import keras``) runs with the guide's other Keras
  blocks, in their own process with ``KERAS_BACKEND=jaxkeras``; those tests are marked
  ``slow``, as the README's Keras recipe is.
- A block that cannot run on a CPU-only machine with one process (several hosts, a GPU) is
  written as MyST's ```` ```{code-block} python ```` directive, with a ``:caption:`` saying
  why: Sphinx renders it as Python, and it never runs. Keep these few.
"""

import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import jaxkeras as K

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# Runs the blocks of a JSON file [[label, code], ...] in one namespace, then its checks; a
# traceback names the guide and the line each block starts on
DRIVER = textwrap.dedent(
    """
    import json, sys
    namespace = {"__name__": "__main__"}
    for label, code in json.load(open(sys.argv[1])):
        exec(compile(code, label, "exec"), namespace)
    """
)


def _blocks(guide: str, keras: bool) -> list[tuple[str, str]]:
    """``(label, code)`` of the guide's ``python`` blocks that import Keras (or not), in order."""
    text = (DOCS / guide).read_text()
    found = []
    for match in BLOCK.finditer(text):
        code = match.group(1)
        if ("import keras" in code) == keras:
            line = text.count("\n", 0, match.start()) + 2
            found.append((f"docs/{guide}, the block at line {line}", code))
    return found


def _run(guide, tmp_path, checks="", keras=False, env=None, timeout=600):
    """Runs the guide's blocks (those that import Keras, or the others), then ``checks`` in the
    same namespace, in a fresh process; fails with its output when it fails."""
    blocks = _blocks(guide, keras)
    assert blocks, f"docs/{guide} has no python blocks {'with' if keras else 'without'} Keras"
    if checks:
        blocks.append((f"the checks of tests/test_docs.py for {guide}", textwrap.dedent(checks)))
    script = tmp_path / "blocks.json"
    script.write_text(json.dumps(blocks))
    home = tmp_path / "keras_home"
    home.mkdir()
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("JAXKERAS_", "KERAS_"))}
    environment.update(JAX_PLATFORMS="cpu", KERAS_HOME=str(home), **(env or {}))
    if keras:
        environment["KERAS_BACKEND"] = "jaxkeras"
    run = subprocess.run(
        [sys.executable, "-c", DRIVER, str(script)],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-6000:]
    return run


GUIDES = sorted(p.name for p in DOCS.glob("*.md"))
TESTED = {
    "k-api.md",
    "keras2.md",
    "functional-jax.md",
    "distribution.md",
    "mixed-precision.md",
    "checkpoints-export.md",
    "accelerators.md",
    "process.md",
    "configuration.md",
}


def test_every_guide_with_code_is_tested():
    with_code = {g for g in GUIDES if _blocks(g, keras=False) or _blocks(g, keras=True)}
    assert with_code <= TESTED, f"add a test for {sorted(with_code - TESTED)}"
    assert TESTED <= set(GUIDES), f"missing guides: {sorted(TESTED - set(GUIDES))}"


def test_k_api_guide_runs(tmp_path):
    _run(
        "k-api.md",
        tmp_path,
        checks="""
        assert K.get_value(counter) == 3.0 and K.get_value(steps) == 1.0
        assert np.all(K.get_value(w) == 0.0) and K.int_shape(noisy) == (None, 3)
        assert not np.array_equal(first, second) and np.array_equal(a, b)
        """,
    )


def test_functional_jax_guide_runs(tmp_path):
    _run(
        "functional-jax.md",
        tmp_path,
        checks="""
        # the data are y = x @ [1, -2, 0.5] + 0.3 without noise: the jitted optax steps fit them
        np.testing.assert_allclose(K.get_value(w).ravel(), [1.0, -2.0, 0.5], atol=1e-3)
        np.testing.assert_allclose(K.get_value(b), [0.3], atol=1e-3)
        assert int(K.get_value(opt.iterations)) == 100
        assert int(state[opt.iterations.name]) == 101
        assert float(loss_value) < 1e-2
        """,
        # optax mixes dtypes, which JAX's strict promotion (the test suite's) refuses
        env={"JAX_NUMPY_DTYPE_PROMOTION": "standard"},
    )


@pytest.mark.slow
def test_functional_jax_guide_keras_recipe_runs(tmp_path):
    _run(
        "functional-jax.md",
        tmp_path,
        keras=True,
        checks="""
        assert model.optimizer.weights and model.predict(x_train).shape == (64, 10)
        """,
        env={"JAX_NUMPY_DTYPE_PROMOTION": "standard"},
    )
    assert (tmp_path / "model.h5").exists()


@pytest.mark.slow
def test_keras2_guide_runs(tmp_path):
    _run(
        "keras2.md",
        tmp_path,
        keras=True,
        checks="""
        assert keras.backend.backend() == "jaxkeras"
        assert history.history["loss"][-1] < history.history["loss"][0]
        """,
        env={"JAX_NUMPY_DTYPE_PROMOTION": "standard"},
    )


def test_distribution_guide_runs(tmp_path):
    _run(
        "distribution.md",
        tmp_path,
        checks="""
        assert len(D.list_devices()) == 8 and h.shape == (6, 32)
        assert type(D.distribution()).__name__ == "DataParallel"  # set by the first recipe
        sharded = K.get_state([kernel])[kernel.name]
        assert len(sharded.sharding.device_set) == 8
        assert sharded.sharding.shard_shape(sharded.shape) == (64, 8)
        """,
        # eight CPU devices, as the guide says to try it on one machine
        env={"XLA_FLAGS": "--xla_force_host_platform_device_count=8"},
    )


def test_mixed_precision_guide_runs(tmp_path):
    _run(
        "mixed-precision.md",
        tmp_path,
        checks="""
        assert mixed_precision.global_policy().name == "float32"
        assert out.dtype == np.float32
        """,
    )


def test_checkpoints_export_guide_runs(tmp_path):
    _run(
        "checkpoints-export.md",
        tmp_path,
        checks="""
        np.testing.assert_array_equal(K.get_value(w), np.ones((4, 2)))
        """,
    )


def test_accelerators_guide_runs(tmp_path):
    _run(
        "accelerators.md",
        tmp_path,
        checks="""
        assert losses.shape == (4,)
        """,
    )


def test_process_guide_runs(tmp_path):
    _run(
        "process.md",
        tmp_path,
        checks="""
        import platform, sys
        glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
        assert applied == glibc  # JAX runs on the CPU alone here, and had run nothing
        assert jax.config.jax_enable_x64
        assert jax.config.jax_compilation_cache_dir == folder
        """,
    )


def test_configuration_guide_runs(tmp_path):
    _run(
        "configuration.md",
        tmp_path,
        checks="""
        assert K.floatx() == "float32" and K.image_data_format() == "channels_last"
        """,
    )


def test_every_k_name_is_in_the_api_reference():
    pages = "\n".join(p.read_text() for p in (DOCS / "api").glob("*.md"))
    documented = set(re.findall(r"\.\. auto(?:function|class):: jaxkeras\.(\w+)", pages))
    # ... and the members an automodule lists (``:members: a, b``; bare: the module's __all__)
    for module, members in re.findall(r"\.\. automodule:: (\S+)\n\s+:members:(.*)", pages):
        listed = [m.strip() for m in members.split(",") if m.strip()]
        documented |= set(listed or importlib.import_module(module).__all__)
    names = {
        name
        for name in dir(K)
        if not name.startswith("_") and not isinstance(getattr(K, name), type(K))
    }
    assert names <= documented, f"not in docs/api: {sorted(names - documented)}"


@pytest.mark.slow
def test_docs_build_without_warnings(tmp_path):
    pytest.importorskip("sphinx", reason="the docs extra: pip install -e '.[docs]'")
    site = tmp_path / "site"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-E",
            "-b",
            "html",
            DOCS,
            site,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-6000:]
    assert (site / "api" / "state.html").exists()
