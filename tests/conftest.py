"""Test set-up: small hypothesis budgets (CI has 2 cores), a clean session per test, a
throwaway ``KERAS_HOME`` and JAX's strict dtype promotion (as Equinox's tests use).

Inner loop, a few minutes on 2 cores (``make test`` runs everything, slow tests and Keras 2's
suite included)::

    .venv/bin/python -m pytest -n 2 -m "not slow and not keras2" tests
"""

import atexit
import gc
import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
# Strict dtype promotion: jaxkeras casts explicitly wherever it mixes dtypes, so an implicit
# promotion in the library (int32 with float32, float16 with float32, ...) fails the test that
# reaches it. Set before JAX is imported, so subprocesses (Keras 2's suite, workers, notebooks)
# run strict too; the fixture below sets it for each test in this process.
os.environ["JAX_NUMPY_DTYPE_PROMOTION"] = "strict"

# Set before jaxkeras is imported, so no test reads or writes the developer's ~/.keras (keras.json
# and what is kept beside it); subprocesses inherit it through os.environ. Each xdist worker
# makes its own.
_KERAS_HOME = tempfile.mkdtemp(prefix="jaxkeras_tests_keras_home_")
os.environ["KERAS_HOME"] = _KERAS_HOME
atexit.register(shutil.rmtree, _KERAS_HOME, ignore_errors=True)

settings.register_profile(
    "ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci")


DEFAULTS = ("float32", 1e-7, "channels_last")


@pytest.fixture(autouse=True, scope="session")
def _full_float32_products():
    """Off CPU, runs the tests' float32 matrix products and convolutions at full float32
    precision, here and in the processes they start.

    On NVIDIA GPUs JAX's default precision computes them in TF32 (as TF-Keras does by
    default), about 1e-3 relative, and the tests compare float32 results with float64
    references to 1e-5. jaxkeras leaves the choice to the user's process
    (``docs/accelerators.md``), so the tests make it for theirs.
    """
    import jax

    if jax.default_backend() != "cpu":
        os.environ["JAX_DEFAULT_MATMUL_PRECISION"] = "highest"
        jax.config.update("jax_default_matmul_precision", "highest")
    yield


@pytest.fixture(autouse=True)
def _strict_dtype_promotion(request: pytest.FixtureRequest):
    """Runs each test under JAX's strict dtype promotion, or the standard one when it is marked
    ``standard_promotion`` (a test of what standard promotion does).

    The global setting, not the thread-local ``jax.numpy_dtype_promotion`` context, so the
    threads a test starts get it too.
    """
    import jax

    standard = request.node.get_closest_marker("standard_promotion") is not None
    before = jax.config.jax_numpy_dtype_promotion
    jax.config.update("jax_numpy_dtype_promotion", "standard" if standard else "strict")
    yield
    jax.config.update("jax_numpy_dtype_promotion", before)


@pytest.fixture(autouse=True)
def _fresh_session(_strict_dtype_promotion):
    import jax

    import jaxkeras as K

    x64 = jax.config.jax_enable_x64
    K.clear_session()  # once per test: it also collects garbage
    # What survived that collection (modules, JAX's caches, module-level test data) is left out
    # of later ones, which then walk only what was allocated since: walking everything earlier
    # tests left behind took up to 1 s per test, half the suite's time.
    gc.freeze()
    yield
    if jax.config.jax_enable_x64 != x64:  # e.g. set_floatx("float64") turns x64 on
        jax.config.update("jax_enable_x64", x64)
    settings = (K.floatx(), K.epsilon(), K.image_data_format())
    if settings != DEFAULTS:  # a leak would silently change every later test in this process
        K.set_floatx(DEFAULTS[0])
        K.set_epsilon(DEFAULTS[1])
        K.set_image_data_format(DEFAULTS[2])
        pytest.fail(f"the test left global settings changed: {settings}")
