"""``benchmarks/run_all.py`` rewrites ``benchmarks/RESULTS.md`` and keeps its hand-kept section."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _run_all(monkeypatch):
    """``benchmarks/run_all.py`` as a module (it imports ``common`` from beside it)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("bench_run_all", BENCHMARKS / "run_all.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_run_all", module)
    spec.loader.exec_module(module)
    return module


def test_a_rewritten_results_file_keeps_the_hand_kept_section(tmp_path, monkeypatch):
    run_all = _run_all(monkeypatch)
    kept = f"{run_all.HAND_KEPT}\n\nKept by hand.\n\n### a group\n\n- a figure: 1.0 s (abc1234)\n"
    old = tmp_path / "RESULTS.md"
    old.write_text("# Benchmark results\n\n| old table |\n\n" + kept, encoding="utf-8")
    generated = "# Benchmark results\n\n| new table |\n"

    text = run_all.results_text(generated, old)

    assert text == generated + "\n" + kept
    assert "old table" not in text


def test_without_a_hand_kept_section_the_file_is_the_generated_text(tmp_path, monkeypatch):
    run_all = _run_all(monkeypatch)
    generated = "# Benchmark results\n\n| new table |\n"
    old = tmp_path / "RESULTS.md"
    assert run_all.results_text(generated, old) == generated  # no file yet
    old.write_text("# Benchmark results\n\n| old table |\n", encoding="utf-8")
    assert run_all.results_text(generated, old) == generated


def test_the_checked_in_results_file_has_the_section_at_its_end(monkeypatch):
    run_all = _run_all(monkeypatch)
    text = (BENCHMARKS / "RESULTS.md").read_text(encoding="utf-8")
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[-1] == run_all.HAND_KEPT
    assert run_all.results_text("generated\n", BENCHMARKS / "RESULTS.md").startswith(
        "generated\n\n" + run_all.HAND_KEPT
    )
