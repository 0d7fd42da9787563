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

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from keras_contrib_suite_exclusions import EXCLUDED

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
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(TREE / "tests"),
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
            "-n",
            "2",
        ],
        env=environ,
        capture_output=True,
        text=True,
        cwd=tmp_path,  # the tests write their files (a CRF's .h5, logs) into the working folder
        timeout=3600,
    )
    assert report.exists(), out.stdout[-3000:] + out.stderr[-3000:]
    outcomes = json.loads(report.read_text())
    counts = collections.Counter(outcomes.values())
    assert counts["passed"] > 100, f"only {counts['passed']} keras-contrib tests passed"
    failed = sorted(name for name, outcome in outcomes.items() if outcome == "failed")
    assert not failed, "\n".join(
        [f"{len(failed)} keras-contrib tests failed:", *failed, "", out.stdout[-5000:]]
    )
    tests = [key for key in EXCLUDED if "::" in key]
    not_excluded = [key for key in tests if outcomes.get(key) != "xfailed"]
    assert not not_excluded, (
        f"excluded tests that were not run as expected failures: {not_excluded}"
    )
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-3000:]
    print(
        f"keras-contrib test tree: {counts['passed']} passed, {counts['xfailed']} excluded "
        f"tests and {len(EXCLUDED) - len(tests)} excluded files, {counts['skipped']} skipped "
        "by keras-contrib"
    )
