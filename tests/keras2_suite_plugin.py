"""Pytest plugin for running Keras 2.3.1's own test tree against jaxkeras.

Loaded with ``-p keras2_suite_plugin`` and ``KERAS_BACKEND=jaxkeras`` by
``tests/test_keras2_suite.py`` (``tests/`` on ``PYTHONPATH``); Keras's files are not edited.

- Exclusions: the tests in :data:`keras2_suite_exclusions.EXCLUDED` are strict expected
  failures (a file there is not collected).
- Session: Keras's ``tests/conftest.py`` clears the session after each test only on TensorFlow
  and CNTK; this plugin clears it on jaxkeras too, so no test leaks its learning phase or uids.
- Backends: backend_test.py compares ``KTF`` (the TensorFlow backend module) with Keras's
  NumPy reference backend ``KNP``; here ``KTF`` is jaxkeras.
- Reference: ``numpy_backend.in_top_k`` ranks with ``numpy.argsort``, whose default sort was
  stable for short rows in NumPy 1 (when Keras 2.3.1 was tested), so tied predictions ranked by
  index, as TF counts them. NumPy 2's default sort is not stable, so the reference is given the
  stable sort it had.
- 64-bit types: jaxkeras narrows a 64-bit dtype to 32 bits while JAX's 64-bit mode is off
  (its default; ``K.set_floatx('float64')`` turns it on), where TensorFlow always has them.
  The tests in :data:`X64_TESTS`, which ask for ``int64`` or ``float64`` and check they get
  it, run with ``jax_enable_x64`` on, the switch a jaxkeras user flips for 64-bit types; every
  test leaves the mode as it found it, so no test depends on another's order.
- Report: with ``JAXKERAS_SUITE_REPORT=path``, the controlling process writes a JSON object
  ``{node id: outcome}`` there (outcomes: passed, failed, skipped, xfailed), xdist or not.
"""

import json
import os
import sys
from pathlib import Path

import jax
import keras  # noqa: F401 - loads jaxkeras as Keras's backend
import numpy as np
import pytest
from keras.backend import numpy_backend
from keras2_suite_exclusions import EXCLUDED

import jaxkeras

sys.modules["keras.backend.tensorflow_backend"] = jaxkeras


def _in_top_k(predictions, targets, k):
    ranked = np.argsort(-predictions, kind="stable")[:, :k]
    return np.any(targets.reshape(-1, 1) == ranked, axis=-1)


numpy_backend.in_top_k = _in_top_k

_FILES = {key for key in EXCLUDED if "::" not in key}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leaves out the excluded files."""
    if not collection_path.is_relative_to(config.rootpath):
        return None
    relative = collection_path.relative_to(config.rootpath).as_posix()
    return True if relative in _FILES else None


def pytest_collection_modifyitems(items: list) -> None:
    """Marks the excluded tests as strict expected failures."""
    for item in items:
        reason = EXCLUDED.get(item.nodeid)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"excluded: {reason}"))


@pytest.fixture(autouse=True)
def _jaxkeras_clears_the_session():
    yield
    jaxkeras.clear_session()


X64_TESTS = (
    "tests/keras/backend/backend_test.py::TestBackend::test_arange",
    "tests/keras/backend/backend_test.py::TestBackend::test_dtype[float64]",
    "tests/keras/engine/test_topology.py::test_initialization_dtype",
)
"""Node ids (or their prefixes) of the tests that ask for 64-bit dtypes and check they get
them."""


@pytest.fixture(autouse=True)
def _x64_as_the_test_asks(request):
    saved = jax.config.jax_enable_x64
    if request.node.nodeid.startswith(X64_TESTS):
        jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", saved)


_OUTCOMES: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Records each test's outcome (the first failing or skipping phase decides)."""
    if report.when == "call" or not report.passed:
        outcome = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "failed"  # a strict XPASS fails
        if _OUTCOMES.get(report.nodeid, "passed") == "passed":
            _OUTCOMES[report.nodeid] = outcome


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """Records files that fail to import."""
    if report.failed:
        _OUTCOMES[report.nodeid] = "failed"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Writes the report (in the controlling process only, when xdist runs the tests)."""
    path = os.environ.get("JAXKERAS_SUITE_REPORT")
    if path and not hasattr(session.config, "workerinput"):
        Path(path).write_text(json.dumps(_OUTCOMES, indent=0, sort_keys=True))
