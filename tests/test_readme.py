"""The README's code blocks run as written, and its links lead somewhere.

The recipes that moved to the guides in ``docs/`` (functional JAX, checkpoints and export, the
Keras 2 optimizer) run in ``tests/test_docs.py``.
"""

import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _python_blocks(marker: str) -> list[str]:
    """The README's ``python`` code blocks that contain ``marker``, in order."""
    return [b for b in re.findall(r"```python\n(.*?)```", README, re.S) if marker in b]


def test_readme_tour_runs():
    (tour,) = _python_blocks("# Keras-2 style")
    namespace: dict = {}
    exec(compile(tour, "README.md", "exec"), namespace)
    assert float(namespace["values"][namespace["counter"].name]) == 1.0
    w = namespace["K"].get_value(namespace["w"])
    assert w.shape == (3, 1) and np.all(np.isfinite(w))


def test_readme_is_short_and_its_links_exist():
    assert len(README.splitlines()) <= 200  # the rest lives in docs/
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if "://" not in t]
    assert "docs/k-api.md" in local and "docs/layout.md" in local
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to missing files: {missing}"
