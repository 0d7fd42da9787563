"""Pytest plugin for running a multi-backend Keras release's own tests against jaxkeras.

Loaded with ``-p keras2_suite_plugin`` and ``KERAS_BACKEND=jaxkeras`` by
``tests/test_keras2_suite.py`` (Keras 2.3.1's tree) and ``tests/test_keras22.py`` (Keras
2.2.4's backend tests), ``tests/`` on ``PYTHONPATH``; Keras's files are not edited.

- Exclusions: the tests in the ``EXCLUDED`` of the module that ``JAXKERAS_SUITE_EXCLUSIONS``
  names (default :mod:`keras2_suite_exclusions`, Keras 2.3.1's) are strict expected failures
  (a file there is not collected).
- Skipped: the tests in its ``SKIPPED`` (those whose outcome depends on how this Python
  schedules threads) are skipped, with their reasons.
- Alarms: a test that fails while its own ``signal.setitimer`` alarm is armed (Keras's
  time-outs) would have it fire in a later test; each test's alarm and ``SIGALRM`` handler are
  undone after it.
- Enqueuers: a test that fails may leave a Keras enqueuer running, its generator in
  ``keras.utils.data_utils._SHARED_SEQUENCES``, which every later process pool pickles for its
  workers (Keras's ``OrderedEnqueuer``), which a generator cannot be: that pool's thread dies
  and its test waits forever. Each test's entries are dropped after it (an enqueuer that
  stopped has dropped its own).
- Session: Keras's ``tests/conftest.py`` clears the session after each test only on TensorFlow
  and CNTK; this plugin clears it on jaxkeras too, so no test leaks its learning phase or uids.
- Backends: backend_test.py compares ``KTF`` (the TensorFlow backend module) with Keras's
  NumPy reference backend ``KNP``; here ``KTF`` is jaxkeras.
- Reference: (Keras 2.2.5 and later) ``numpy_backend.in_top_k`` ranks with ``numpy.argsort``,
  whose default sort was stable for short rows in NumPy 1 (when Keras 2.3.1 was tested), so
  tied predictions ranked by index, as TF counts them. NumPy 2's default sort is not stable,
  so the reference is given the stable sort it had.
- Reference: (Keras 2.2.4 and earlier) ``reference_operations.logsumexp`` calls
  ``scipy.misc.logsumexp``, which SciPy deprecated for ``scipy.special.logsumexp`` and has
  since removed (today's SciPy has no ``scipy.misc``); the reference is given the latter.
- 64-bit types: jaxkeras narrows a 64-bit dtype to 32 bits while JAX's 64-bit mode is off
  (its default; ``K.set_floatx('float64')`` turns it on), where TensorFlow always has them.
  The tests in :data:`X64_TESTS` (or the exclusions module's own ``X64_TESTS``), which ask for
  ``int64`` or ``float64`` and check they get it, run with ``jax_enable_x64`` on, the switch a
  jaxkeras user flips for 64-bit types; every test leaves the mode as it found it, so no test
  depends on another's order.
- Report: with ``JAXKERAS_SUITE_REPORT=path``, the controlling process writes a JSON object
  ``{node id: outcome}`` there (outcomes: passed, failed, skipped, xfailed), xdist or not.
"""

import importlib
import json
import os
import signal
import sys
from pathlib import Path

import jax
import keras  # noqa: F401 - loads jaxkeras as Keras's backend
import numpy as np
import pytest

import jaxkeras

_EXCLUSIONS = importlib.import_module(
    os.environ.get("JAXKERAS_SUITE_EXCLUSIONS", "keras2_suite_exclusions")
)
EXCLUDED = _EXCLUSIONS.EXCLUDED
SKIPPED = getattr(_EXCLUSIONS, "SKIPPED", {})

sys.modules["keras.backend.tensorflow_backend"] = jaxkeras


def _in_top_k(predictions, targets, k):
    ranked = np.argsort(-predictions, kind="stable")[:, :k]
    return np.any(targets.reshape(-1, 1) == ranked, axis=-1)


try:
    from keras.backend import numpy_backend  # Keras 2.2.5 and later
except ImportError:  # earlier releases test against tests/keras/backend/reference_operations.py
    numpy_backend = None
else:
    numpy_backend.in_top_k = _in_top_k

_FILES = {key for key in EXCLUDED if "::" not in key}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leaves out the excluded files."""
    if not collection_path.is_relative_to(config.rootpath):
        return None
    relative = collection_path.relative_to(config.rootpath).as_posix()
    return True if relative in _FILES else None


def _logsumexp(x, axis=None, keepdims=False):
    import scipy.special

    return scipy.special.logsumexp(
        x, axis=tuple(axis) if isinstance(axis, list) else axis, keepdims=keepdims
    )


def pytest_collection_modifyitems(items: list) -> None:
    """Marks the excluded tests as strict expected failures; gives Keras 2.2's reference
    operations (imported by now, when the tests use them) SciPy's ``logsumexp``."""
    reference = sys.modules.get("reference_operations")
    if reference is not None:
        reference.logsumexp = _logsumexp
    for item in items:
        reason = EXCLUDED.get(item.nodeid)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"excluded: {reason}"))
        if item.nodeid in SKIPPED:
            item.add_marker(pytest.mark.skip(reason=SKIPPED[item.nodeid]))


@pytest.fixture(autouse=True)
def _no_alarm_outlives_its_test():
    handler = signal.getsignal(signal.SIGALRM)
    yield
    if signal.getitimer(signal.ITIMER_REAL)[0]:
        signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, handler)


@pytest.fixture(autouse=True)
def _no_enqueuer_outlives_its_test():
    yield
    shared = getattr(sys.modules.get("keras.utils.data_utils"), "_SHARED_SEQUENCES", {})
    for uid in list(shared):
        shared[uid] = None


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
them (Keras 2.3.1's; an exclusions module may name its own)."""
X64_TESTS = getattr(_EXCLUSIONS, "X64_TESTS", X64_TESTS)


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
