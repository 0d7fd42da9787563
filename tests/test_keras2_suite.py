"""Keras 2.3.1's own test tree (backend, layers, engine, optimizers, ...), run against jaxkeras.

``make test`` extracts ``tests/`` from the Keras 2.3.1 source distribution on PyPI into its
venv's ``keras-2.3.1-tests/`` (``.venv/`` for the default python3, never committed) and names
it in ``JAXKERAS_KERAS_TESTS``. The tree runs in one subprocess, two xdist
workers, with ``KERAS_BACKEND=jaxkeras``, JAX's strict dtype promotion (set by conftest.py)
and the plugin ``tests/keras2_suite_plugin.py`` (which also clears the session after each
test, as Keras's conftest does only for TensorFlow). Every test must pass or be skipped by
Keras's own markers (those for TensorFlow, Theano or CNTK only), except those in
``tests/keras2_suite_exclusions.py``, each with a reason that holds on the TensorFlow backend
too; an excluded test that starts passing fails the run. Its ``SKIPPED`` tests (whose outcome
depends on how this Python schedules threads, on every backend) are not run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from keras2_suite_exclusions import EXCLUDED

from tests.helpers import check_tree, run_test_tree

ROOT = Path(__file__).resolve().parent.parent
TREE = Path(os.environ.get("JAXKERAS_KERAS_TESTS", ROOT / ".venv" / "keras-2.3.1-tests"))

pytestmark = [
    pytest.mark.keras2,
    pytest.mark.slow,  # about 10 minutes on 2 cores
    pytest.mark.skipif(
        not (TREE / "tests" / "conftest.py").exists(),
        reason=f"{TREE}/tests not found: `make test` extracts it",
    ),
]


def test_keras_test_tree_passes(tmp_path):
    report = tmp_path / "report.json"
    environ = dict(
        os.environ,
        KERAS_BACKEND="jaxkeras",
        KERAS_HOME=str(tmp_path),
        PYTHONPATH=str(ROOT / "tests"),
        JAXKERAS_SUITE_REPORT=str(report),
    )
    out, outcomes = run_test_tree(TREE, "tests", environ, report, "-n", "2")
    check_tree("Keras 2.3.1", out, outcomes, EXCLUDED, passed=900)
