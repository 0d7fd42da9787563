"""``keras.utils.multi_gpu_model`` on jaxkeras (jaxkeras/_keras2_multi_gpu.py): a Keras 2 model
trained data-parallel on 8 forced CPU devices has the one-device model's losses, weights and
predictions within 1e-5; its weights are the template's (``save_weights`` on the template
saves them) and live on the chosen devices; bad ``gpus`` raise Keras's messages.

Keras runs in a subprocess (``tests/keras2_multi_gpu_worker.py``) started with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.keras2, pytest.mark.slow]

WORKER = str(Path(__file__).with_name("keras2_multi_gpu_worker.py"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("multi_gpu")
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=8",
        JAX_PLATFORMS="cpu",
        KERAS_BACKEND="jaxkeras",
        KERAS_HOME=str(tmp / "keras"),
    )
    out = tmp / "out.json"
    proc = subprocess.run(
        [sys.executable, WORKER, str(out)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def test_installed_in_keras(runs):
    assert runs["devices"] == 8
    assert runs["installed"] == [True, True, True]


@pytest.mark.parametrize("how", ["eight", "listed"])
def test_trains_as_one_device(runs, how):
    single, run = runs["single"], runs[how]
    assert single["losses"][1] < single["losses"][0]
    np.testing.assert_allclose(run["losses"], single["losses"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run["evaluate"], single["evaluate"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run["predictions"], single["predictions"], atol=1e-5)
    for got, want in zip(run["weights"], single["weights"]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_weights_are_the_templates_on_the_chosen_devices(runs):
    assert runs["single"]["devices"] == [0]
    assert runs["eight"]["devices"] == list(range(8))
    assert runs["listed"]["devices"] == [1, 3, 5, 6]
    assert runs["default_devices"] == 8
    for how in ("eight", "listed"):
        assert runs[how]["same_layers"]
        assert runs[how]["saved_weights_equal"]


@pytest.mark.parametrize(
    "gpus, error, match",
    [
        (
            9,
            "ValueError",
            "To call `multi_gpu_model` with `gpus=9`, we expect the following "
            "devices to be available: ['cpu:0', 'cpu:1', 'cpu:2', 'cpu:3', 'cpu:4', 'cpu:5', "
            "'cpu:6', 'cpu:7', 'cpu:8']. However this machine only has: ['cpu:0', 'cpu:1', "
            "'cpu:2', 'cpu:3', 'cpu:4', 'cpu:5', 'cpu:6', 'cpu:7']. Try reducing `gpus`.",
        ),
        ([0, 8], "ValueError", "To call `multi_gpu_model` with `gpus=[0, 8]`, we expect"),
        (1, "ValueError", "call it with gpus >= 2. Received: gpus=1"),
        ([2], "ValueError", "call it with len(gpus) >= 2. Received: gpus=[2]"),
        ([0, 0], "ValueError", "gpus lists a device twice: gpus=[0, 0]"),
        ("2", "TypeError", "gpus must be an int, a list of device ids or None, got '2'"),
        (2.0, "TypeError", "got 2.0"),
    ],
)
def test_bad_gpus(runs, gpus, error, match):
    kind, message = runs["errors"][str(gpus)]
    assert kind == error
    assert match in message
