"""Test set-up: small hypothesis budgets (CI has 2 cores) and a clean session per test."""

import os

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")

settings.register_profile(
    "ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci")


DEFAULTS = ("float32", 1e-7, "channels_last")


@pytest.fixture(autouse=True)
def _fresh_session():
    import jax

    import jaxkeras as K

    x64 = jax.config.jax_enable_x64
    K.clear_session()  # once per test: it also collects garbage (~0.1 s)
    yield
    if jax.config.jax_enable_x64 != x64:  # a 64-bit dtype turns x64 on for the process
        jax.config.update("jax_enable_x64", x64)
    settings = (K.floatx(), K.epsilon(), K.image_data_format())
    if settings != DEFAULTS:  # a leak would silently change every later test in this process
        K.set_floatx(DEFAULTS[0])
        K.set_epsilon(DEFAULTS[1])
        K.set_image_data_format(DEFAULTS[2])
        pytest.fail(f"the test left global settings changed: {settings}")
