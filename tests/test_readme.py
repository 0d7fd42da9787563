"""The README's tour runs as written."""

import re
from pathlib import Path

import numpy as np


def test_readme_tour_runs():
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    (tour,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "state_scope" in b]
    namespace: dict = {}
    exec(compile(tour, "README.md", "exec"), namespace)
    assert float(namespace["values"][namespace["counter"].name]) == 1.0
    w = namespace["K"].get_value(namespace["w"])
    assert w.shape == (3, 1) and np.all(np.isfinite(w))
