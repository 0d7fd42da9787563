"""``make gpu-check``'s script runs on the CPU too (quick), so it cannot rot before a GPU
machine runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.py"


@pytest.mark.slow
@pytest.mark.keras2
def test_the_gpu_check_prints_its_table_on_cpu(tmp_path):
    output = tmp_path / "RESULTS-gpu.md"
    env = dict(os.environ, JAX_PLATFORMS="cpu", KERAS_HOME=str(tmp_path))
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--output", str(output)],
        env=env,
        capture_output=True,
        text=True,
        cwd=SCRIPT.parent,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    table = output.read_text()
    assert "on cpu" in table
    for figure in (
        "MLP train step",
        "convnet train step",
        "`mixed_bfloat16` vs hand-written JAX",
        "`steps_per_call=32` vs 1",
        "Keras 2.3.1 digits convnet `fit`",
        "cold start, 1 fresh processes: MobileNet (Keras 2.3.1): build + first train step",
    ):
        assert figure in table, figure
