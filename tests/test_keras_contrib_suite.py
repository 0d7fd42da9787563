"""keras-contrib's own test tree (its last commit: layers, CRF, losses, callbacks, optimizers,
...), run against jaxkeras through Keras 2.3.1.

keras-contrib is not on PyPI (keras-team never published it there), so ``make test`` cannot
fetch it: the tree runs where a keras-contrib source tree is found, ``keras_contrib/`` and
``tests/`` in ``JAXKERAS_KERAS_CONTRIB`` (default: the venv's ``keras-contrib/``, which ``make
keras-contrib KERAS_CONTRIB_GIT=<a clone of keras-team/keras-contrib>`` fills from the clone's
last commit), and is skipped elsewhere, saying so. Like Keras 2.3.1's tree
(``tests/test_keras2_suite.py``), it runs in one subprocess, two xdist workers, with
``KERAS_BACKEND=jaxkeras`` and the plugin ``tests/keras2_suite_plugin.py``; every test must pass
or be skipped by keras-contrib's own markers, except those in
``tests/keras_contrib_suite_exclusions.py``, each with its reason; an excluded test that
starts passing fails the run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from keras_contrib_suite_exclusions import EXCLUDED

from tests.helpers import check_tree, run_test_tree

ROOT = Path(__file__).resolve().parent.parent
TREE = Path(os.environ.get("JAXKERAS_KERAS_CONTRIB", Path(sys.prefix) / "keras-contrib"))

pytestmark = [
    pytest.mark.keras2,
    pytest.mark.slow,  # about 3 minutes on 2 cores
    pytest.mark.skipif(
        not (TREE / "tests" / "conftest.py").exists(),
        reason=f"keras-contrib is not on PyPI and its tree is not in {TREE}: `make "
        "keras-contrib KERAS_CONTRIB_GIT=<a clone of keras-team/keras-contrib>` puts it there",
    ),
]


def test_keras_contrib_test_tree_passes(tmp_path):
    report = tmp_path / "report.json"
    environ = dict(
        os.environ,
        KERAS_BACKEND="jaxkeras",
        KERAS_HOME=str(tmp_path),
        PYTHONPATH=os.pathsep.join([str(TREE), str(ROOT / "tests")]),
        JAXKERAS_SUITE_EXCLUSIONS="keras_contrib_suite_exclusions",
        JAXKERAS_SUITE_REPORT=str(report),
    )
    # the tests write their files (a CRF's .h5, logs) into the working folder
    out, outcomes = run_test_tree(TREE, TREE / "tests", environ, report, "-n", "2", cwd=tmp_path)
    check_tree("keras-contrib", out, outcomes, EXCLUDED, passed=100)
