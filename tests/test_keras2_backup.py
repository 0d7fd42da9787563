"""``BackupAndRestore`` for Keras 2's fit (jaxkeras/_keras2_backup.py): a fit killed with SIGKILL
at random batches, three times, and started again with the same call each time, ends with the
weights (optimizer state included) and last epoch's logs of an uninterrupted fit, bit for bit;
a kill between a backup's writing and its renaming leaves the previous backup restorable.

Keras runs in subprocesses (``tests/keras2_backup_worker.py``), with tiered compilation off
(bit-for-bit deterministic on CPU). The argument checks run here, without Keras.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jaxkeras.keras2 import BackupAndRestore

WORKER = str(Path(__file__).with_name("keras2_backup_worker.py"))
TOTAL_BATCHES = 5 * 7  # the worker's epochs times batches per epoch


def _run(tmp: Path, out: str, save_freq: str, kill_at: int = -1, kill_in_write: int = -1):
    env = dict(
        os.environ,
        KERAS_BACKEND="jaxkeras",
        KERAS_HOME=str(tmp / "keras"),
        JAXKERAS_TIERED_COMPILATION="0",
    )
    args = [str(tmp / out), str(tmp / "backup"), save_freq, str(kill_at), str(kill_in_write)]
    return subprocess.run(
        [sys.executable, WORKER, *args], env=env, capture_output=True, text=True, timeout=300
    )


def _load(path: Path) -> dict[str, np.ndarray]:
    """The weights, optimizer state and last logs a worker wrote (without ``start``)."""
    with np.load(path) as saved:
        return {k: v for k, v in saved.items() if k != "start"}


def _start(path: Path) -> int:
    """The optimizer's step count when the worker's fit began: where it resumed."""
    with np.load(path) as saved:
        return int(saved["start"])


def _assert_bitwise_equal(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        assert np.array_equal(got[name], want[name]), name


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, np.ndarray]:
    tmp = tmp_path_factory.mktemp("reference")
    proc = _run(tmp, "out.npz", "none")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return _load(tmp / "out.npz")


@pytest.mark.keras2
@pytest.mark.slow
@pytest.mark.parametrize("save_freq, seed", [("epoch", 0), ("3", 1), ("5", 2)])
def test_killed_three_times_resumes_bit_for_bit(tmp_path, uninterrupted, save_freq, seed):
    kills = sorted(np.random.default_rng(seed).choice(TOTAL_BATCHES - 1, 3, replace=False))
    for kill_at in kills:
        proc = _run(tmp_path, "out.npz", save_freq, kill_at=int(kill_at))
        assert proc.returncode == -signal.SIGKILL, (kill_at, proc.stderr[-4000:])
        assert not (tmp_path / "out.npz").exists()
    proc = _run(tmp_path, "out.npz", save_freq)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # it resumed at the last backup before the last kill: a batch's backup is made before the
    # kill at that batch's end, an epoch's after its last batch ends
    last = kills[-1]
    want = last // 7 * 7 if save_freq == "epoch" else (last + 1) // int(save_freq) * int(save_freq)
    assert _start(tmp_path / "out.npz") == want, kills
    _assert_bitwise_equal(_load(tmp_path / "out.npz"), uninterrupted)
    assert not (tmp_path / "backup").exists()  # delete_checkpoint=True after a normal end


@pytest.mark.keras2
@pytest.mark.slow
def test_kill_during_backup_write_leaves_previous_backup(tmp_path, uninterrupted):
    proc = _run(tmp_path, "out.npz", "3", kill_in_write=2)  # killed before backup 2's rename
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-4000:]
    backup = tmp_path / "backup"
    assert sorted(p.name for p in backup.iterdir()) == [".tmp-backup-2", "backup-1"]
    assert {p.name for p in (backup / ".tmp-backup-2").iterdir()} >= {"state.npz"}
    progress = json.loads((backup / "backup-1" / "progress.json").read_text())
    assert (progress["epoch"], progress["batches"]) == (0, 3)
    proc = _run(tmp_path, "out.npz", "3")  # resumes from backup-1
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert _start(tmp_path / "out.npz") == 3
    _assert_bitwise_equal(_load(tmp_path / "out.npz"), uninterrupted)
    assert not backup.exists()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"backup_dir": ""}, ValueError, "backup_dir must not be empty"),
        ({"backup_dir": 3}, TypeError, "backup_dir must be a path, got 3"),
        ({"backup_dir": "b", "save_freq": 0}, ValueError, "save_freq must be .* got 0"),
        ({"backup_dir": "b", "save_freq": "batch"}, ValueError, "got 'batch'"),
        ({"backup_dir": "b", "save_freq": True}, ValueError, "got True"),
        ({"backup_dir": "b", "delete_checkpoint": "yes"}, TypeError, "got 'yes'"),
    ],
)
def test_arguments_checked(kwargs, error, match):
    with pytest.raises(error, match=match):
        BackupAndRestore(**kwargs)


def test_arguments_kept(tmp_path):
    backup = BackupAndRestore(tmp_path, save_freq=10, delete_checkpoint=False)
    assert (backup.backup_dir, backup.save_freq, backup.delete_checkpoint) == (
        str(tmp_path),
        10,
        False,
    )
    assert "save_freq=10" in repr(backup)


def test_outside_keras_fit_loop_raises(tmp_path):
    with pytest.raises(ValueError, match="fit_generator cannot be resumed"):
        BackupAndRestore(tmp_path).on_train_begin()
