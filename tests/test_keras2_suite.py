"""Keras 2.3.1's own test tree (backend, layers, engine, optimizers, ...), run against jaxkeras.

``make test`` extracts ``tests/`` from the Keras 2.3.1 source distribution on PyPI into its
venv's ``keras-2.3.1-tests/`` (``.venv/`` for the default python3, never committed) and names
it in ``JAXKERAS_KERAS_TESTS``. The tree runs in one subprocess, two xdist
workers, with ``KERAS_BACKEND=jaxkeras``, JAX's strict dtype promotion (set by conftest.py)
and the plugin ``tests/keras2_suite_plugin.py`` (which also clears the session after each
test, as Keras's conftest does only for TensorFlow). Every test must pass or be skipped by
Keras's own markers (those for TensorFlow, Theano or CNTK only), except those in
``tests/keras2_suite_exclusions.py``, each with a reason that holds on the TensorFlow backend
too; an excluded test that starts passing fails the run.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from keras2_suite_exclusions import EXCLUDED

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


def _run_tree(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    report = tmp_path / "report.json"
    environ = dict(
        os.environ,
        KERAS_BACKEND="jaxkeras",
        KERAS_HOME=str(tmp_path),
        PYTHONPATH=str(ROOT / "tests"),
        JAXKERAS_SUITE_REPORT=str(report),
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests",
            "-p",
            "keras2_suite_plugin",
            "-q",
            "-p",
            "no:cacheprovider",
            "-c",
            os.devnull,
            f"--rootdir={TREE}",
            "-W",
            "ignore::DeprecationWarning",
            *args,
        ],
        env=environ,
        capture_output=True,
        text=True,
        cwd=TREE,
        timeout=3600,
    )
    assert report.exists(), out.stdout[-3000:] + out.stderr[-3000:]
    return out, json.loads(report.read_text())


def test_keras_test_tree_passes(tmp_path):
    out, outcomes = _run_tree(tmp_path, "-n", "2")
    counts = collections.Counter(outcomes.values())
    assert counts["passed"] > 900, f"only {counts['passed']} Keras tests passed"
    failed = sorted(name for name, outcome in outcomes.items() if outcome == "failed")
    assert not failed, "\n".join(
        [f"{len(failed)} Keras tests failed:", *failed, "", out.stdout[-5000:]]
    )
    tests = [key for key in EXCLUDED if "::" in key]
    not_excluded = [key for key in tests if outcomes.get(key) != "xfailed"]
    assert not not_excluded, (
        f"excluded tests that were not run as expected failures: {not_excluded}"
    )
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-3000:]
    print(
        f"Keras 2.3.1 test tree: {counts['passed']} passed, {counts['xfailed']} excluded tests "
        f"and {len(EXCLUDED) - len(tests)} excluded files, {counts['skipped']} skipped by Keras"
    )
