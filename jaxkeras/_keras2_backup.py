"""``BackupAndRestore`` for Keras 2's ``model.fit``: a fit killed part-way (a preempted VM)
and started again with the same call resumes where its last backup was, with the same numbers.

A backup holds what the rest of the fit depends on:

- the model's weights, the optimizer's ``weights`` (its slots and ``iterations``) and the
  optimizer's other variables (learning rate, decay, ... which callbacks may have changed), and
  jaxkeras's random-number state (the global seed and each random op's run count), written by
  :func:`jaxkeras.checkpoint.save_checkpoint` into ``state.npz``;
- the epoch reached and, inside it, the number of batches done; NumPy's global random state as
  it was when that epoch began (Keras shuffles each epoch's samples with it); Keras's sample
  order as it was when that epoch began (below); the values of the model's stateful metrics and
  the outputs (loss, metrics) of the epoch's batches done, into ``progress.npz`` and
  ``progress.json``.

Keras's sample order: Keras's fit loop keeps one index array for the whole fit and shuffles it
*in place* at the start of each epoch (``shuffle=True``; ``shuffle="batch"`` shuffles whole
batches of it), so an epoch's order is the composition of every earlier epoch's shuffle.
The permutation a shuffle makes depends only on NumPy's random state and the array's length,
not on its contents, so the callback keeps a copy of Keras's index array by making each
shuffle again on its copy, from a ``numpy.random.RandomState`` set to the state Keras shuffles
with. A restarted fit starts from a new index array (``arange``): the fit loop then gets its
sample arrays reordered by the saved index array (a copy of the training data), which makes
every later epoch take the samples the interrupted fit would have taken.

Resuming: when ``model.fit`` is given this callback, Keras's fit loop (``training_arrays.
fit_loop``, wrapped by :func:`resume_in_fit_loop`) first restores the latest backup: the
variables and random state at once, ``initial_epoch`` set to the backup's epoch, the sample
arrays reordered. When that epoch
begins, NumPy's random state is set back to the epoch's start, so its shuffle makes the same
permutation, and the metrics' values are restored; the batches done are not run again: the
training function hands back their recorded outputs instead (so callbacks and the epoch's
logs see what the interrupted run saw), and the first new batch continues with the restored
state. The weights at the end are bit-for-bit those of an uninterrupted fit where the fit
itself is deterministic (jaxkeras on CPU with tiered compilation off or ``"reproducible"``).

Atomicity: each backup is written into a temporary folder (``.tmp-backup-<n>``) of
``backup_dir``; each file is flushed and fsynced, then the folder, which is then renamed to
``backup-<n>`` (and ``backup_dir`` fsynced); only then are older backups removed. A process
killed at any point leaves the last renamed backup whole; the latest ``backup-<n>`` is the one
restored, and stale temporary folders are removed.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import re
import shutil
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxkeras.checkpoint import restore_checkpoint, save_checkpoint
from jaxkeras.state import Variable, batch_get_value, batch_set_value

__all__ = ["BackupAndRestore"]

FORMAT = "jaxkeras-keras2-backup"
VERSION = 1
_BACKUP = re.compile(r"^backup-(\d+)$")


def _fsync_path(path: str) -> None:
    """fsyncs a file or folder by path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: str, write: Callable[[Any], None], mode: str = "wb") -> None:
    """Writes ``path`` with ``write(file)``, then flushes and fsyncs it."""
    with open(path, mode) as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def _publish(temporary: str, final: str) -> None:
    """Makes a complete backup folder visible: renames it, then fsyncs its parent folder."""
    os.rename(temporary, final)
    _fsync_path(os.path.dirname(final))


def _unique(variables: Sequence[Any]) -> list[Variable]:
    """``variables`` that are jaxkeras variables, each once, in order."""
    seen: set[int] = set()
    kept = []
    for v in variables:
        if isinstance(v, Variable) and id(v) not in seen:
            seen.add(id(v))
            kept.append(v)
    return kept


def _optimizer_variables(optimizer: Any) -> list[Variable]:
    """An optimizer's ``weights`` (slots, ``iterations``), then its other variables (learning
    rate, decay, ...), in attribute-name order."""
    if optimizer is None:
        return []
    others = [v for _, v in sorted(vars(optimizer).items()) if isinstance(v, Variable)]
    return _unique(list(getattr(optimizer, "weights", [])) + others)


def _metric_variables(model: Any) -> list[Variable]:
    """The variables of a model's stateful metrics (totals and counts)."""
    metrics = getattr(model, "metrics", None) or []
    return _unique([w for m in metrics for w in getattr(m, "weights", [])])


class _Replaying:
    """A training function that hands back recorded outputs for the first batches of a resumed
    epoch (they ran before the interruption), then runs.

    Args:
        function: Keras's training function.
        outputs: the recorded outputs, one list per batch done.
    """

    def __init__(self, function: Callable[..., Any], outputs: list[list[Any]]) -> None:
        self._function = function
        self._pending = list(outputs)

    def __call__(self, inputs: Any) -> Any:
        if self._pending:
            return self._pending.pop(0)
        return self._function(inputs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._function, name)


class BackupAndRestore:
    """Backs up a Keras 2 ``model.fit`` as it runs; a fit started again with the same call
    resumes from the latest backup (TF-Keras's ``BackupAndRestore`` arguments).

    When Keras loads jaxkeras it is ``keras.callbacks.BackupAndRestore``. Pass it to
    ``model.fit(x, y, ..., callbacks=[...])`` on arrays (``fit_generator`` is not supported: a
    generator cannot be rewound). Keep the call the same on a restart (model, compile, data,
    ``batch_size``, ``epochs``, ``shuffle``) and seed alike (``np.random.seed``, or
    ``K.set_random_seed``), so the model gets the same random ops. One process only.

    What a backup holds and how a restart resumes: see :mod:`jaxkeras._keras2_backup` and
    ``docs/keras2.md``.

    Args:
        backup_dir: the folder for backups (made if missing). Use one folder per fit.
        save_freq: ``"epoch"`` (the default): back up at the end of each epoch; a restart
            redoes the interrupted epoch from its start. An int ``n >= 1``: back up after
            every ``n`` batches, counted across epochs; a restart resumes at the batch after
            the backup, in the same epoch.
        delete_checkpoint: remove the backups when the fit ends normally (default ``True``).

    Raises:
        TypeError: for a ``backup_dir`` that is not a path, a ``delete_checkpoint`` that is
            not a bool.
        ValueError: for an empty ``backup_dir`` or a ``save_freq`` other than ``"epoch"`` or an
            int ``>= 1``.

    Example (with Keras 2 loaded: ``KERAS_BACKEND=jaxkeras``, ``import keras``):
        >>> backup = keras.callbacks.BackupAndRestore("/tmp/fit", save_freq=100)  # doctest: +SKIP
        >>> model.fit(x, y, epochs=10, callbacks=[backup])  # doctest: +SKIP
    """

    def __init__(
        self,
        backup_dir: str | os.PathLike,
        save_freq: str | int = "epoch",
        delete_checkpoint: bool = True,
    ) -> None:
        if not isinstance(backup_dir, (str, os.PathLike)):
            raise TypeError(f"BackupAndRestore: backup_dir must be a path, got {backup_dir!r}")
        backup_dir = os.fspath(backup_dir)
        if not backup_dir:
            raise ValueError(f"BackupAndRestore: backup_dir must not be empty, got {backup_dir!r}")
        if save_freq != "epoch" and (
            isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1
        ):
            raise ValueError(
                f"BackupAndRestore: save_freq must be 'epoch' or an int >= 1, got {save_freq!r}"
            )
        if not isinstance(delete_checkpoint, bool):
            raise TypeError(
                f"BackupAndRestore: delete_checkpoint must be a bool, got {delete_checkpoint!r}"
            )
        self.backup_dir = backup_dir
        self.save_freq = save_freq
        self.delete_checkpoint = delete_checkpoint
        self.model: Any = None
        self.params: dict = {}
        self.validation_data: Any = None
        self._fitting = False
        self._out_labels: list[str] = []
        self._resume: dict | None = None
        self._serial = 0
        self._epoch = 0
        self._epoch_numpy: Any = None
        self._outputs: list[list[Any]] = []
        self._replayed = 0
        self._since_backup = 0
        self._shuffle: Any = False
        self._batch_size = 0
        self._index: np.ndarray | None = None
        self._index_before: np.ndarray | None = None

    def __repr__(self) -> str:
        return (
            f"BackupAndRestore(backup_dir={self.backup_dir!r}, save_freq={self.save_freq!r}, "
            f"delete_checkpoint={self.delete_checkpoint!r})"
        )

    # the Keras 2 callback protocol --------------------------------------------------------------

    def set_params(self, params: dict) -> None:
        """Keeps the fit's parameters (Keras calls it).

        Args:
            params: the fit's parameters.
        """
        self.params = params

    def set_model(self, model: Any) -> None:
        """Keeps the model being trained (Keras calls it).

        Args:
            model: the Keras model.
        """
        self.model = model

    def on_train_begin(self, logs: dict | None = None) -> None:
        """Checks that Keras's fit loop on arrays runs this callback.

        Args:
            logs: unused.

        Raises:
            ValueError: in ``fit_generator``, or when Keras has not loaded jaxkeras.
        """
        if not self._fitting:
            raise ValueError(
                "BackupAndRestore: works in model.fit on arrays of Keras 2 with the jaxkeras "
                "backend; fit_generator cannot be resumed (a generator cannot be rewound)"
            )

    def on_train_end(self, logs: dict | None = None) -> None:
        """Removes the backups after a normal end when ``delete_checkpoint`` is true.

        Args:
            logs: unused.
        """
        self._fitting = False
        if self.delete_checkpoint:
            self._remove_backups(keep=None)
            with contextlib.suppress(OSError):  # only if nothing else is there
                os.rmdir(self.backup_dir)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """Sets NumPy's random state (and the metrics) back as the resumed epoch had them, and
        records the state each epoch begins with.

        Args:
            epoch: the epoch's index.
            logs: unused.
        """
        resume = self._resume
        self._replayed = 0
        self._outputs = []
        if resume is not None and resume["epoch"] == epoch:
            self._resume = None
            np.random.set_state(resume["numpy"])
            if resume["outputs"]:
                batch_set_value(list(zip(resume["metrics"], resume["metric_values"])))
                self._outputs = list(resume["outputs"])
                self._replayed = len(resume["outputs"])
        self._epoch = epoch
        self._epoch_numpy = np.random.get_state()
        self._index_before = self._index
        if self._index is not None:
            self._index = self._shuffled(self._index, self._epoch_numpy)

    def _shuffled(self, index: np.ndarray, numpy_state: Any) -> np.ndarray:
        """``index`` shuffled as Keras's fit loop shuffles its index array when NumPy's global
        random state is ``numpy_state`` (the same draws, on a copy)."""
        generator = np.random.RandomState()
        generator.set_state(numpy_state)
        index = index.copy()
        if self._shuffle == "batch":
            whole = len(index) // self._batch_size * self._batch_size
            batches = index[:whole].reshape(-1, self._batch_size)
            generator.shuffle(batches)
            return np.concatenate([batches.reshape(-1), index[whole:]])
        generator.shuffle(index)
        return index

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """Backs up at the end of each epoch when ``save_freq="epoch"``.

        Args:
            epoch: the epoch's index.
            logs: unused.
        """
        if self.save_freq == "epoch":
            self._back_up(epoch + 1, np.random.get_state(), self._index, [])

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """Records the batch's outputs; backs up every ``save_freq`` batches.

        Args:
            batch: the batch's index in its epoch.
            logs: the batch's logs (its outputs by label).
        """
        if self._replayed:
            self._replayed -= 1  # a batch run before the interruption, already recorded
            return
        logs = logs or {}
        self._outputs.append([logs.get(label) for label in self._out_labels])
        if self.save_freq == "epoch":
            return
        self._since_backup += 1
        if self._since_backup >= self.save_freq:
            self._back_up(self._epoch, self._epoch_numpy, self._index_before, self._outputs)

    def on_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        """Nothing (Keras 2.2's name of ``on_train_batch_begin``)."""

    def on_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """Keras 2.2's name of :meth:`on_train_batch_end`: calls it.

        Args:
            batch: the batch's index in its epoch.
            logs: the batch's logs.
        """
        self.on_train_batch_end(batch, logs)

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        """Nothing."""

    def on_test_begin(self, logs: dict | None = None) -> None:
        """Nothing."""

    def on_test_end(self, logs: dict | None = None) -> None:
        """Nothing."""

    def on_test_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        """Nothing."""

    def on_test_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """Nothing."""

    def on_predict_begin(self, logs: dict | None = None) -> None:
        """Nothing."""

    def on_predict_end(self, logs: dict | None = None) -> None:
        """Nothing."""

    def on_predict_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        """Nothing."""

    def on_predict_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """Nothing."""

    # backups -------------------------------------------------------------------------------------

    def _variables(self, model: Any) -> list[Variable]:
        """The model's weights, then its optimizer's variables."""
        return _unique(
            list(model.weights) + _optimizer_variables(getattr(model, "optimizer", None))
        )

    def _backups(self) -> list[tuple[int, str]]:
        """The complete backups in ``backup_dir``, as (number, path), oldest first."""
        if not os.path.isdir(self.backup_dir):
            return []
        found = []
        for name in os.listdir(self.backup_dir):
            match = _BACKUP.match(name)
            if match:
                found.append((int(match.group(1)), os.path.join(self.backup_dir, name)))
        return sorted(found)

    def _remove_backups(self, keep: str | None) -> None:
        """Removes every backup (and temporary folder) but ``keep``."""
        if not os.path.isdir(self.backup_dir):
            return
        for name in os.listdir(self.backup_dir):
            path = os.path.join(self.backup_dir, name)
            if path != keep and (_BACKUP.match(name) or name.startswith(".tmp-backup-")):
                shutil.rmtree(path, ignore_errors=True)

    def _back_up(
        self, epoch: int, numpy_state: Any, index: np.ndarray | None, outputs: list[list[Any]]
    ) -> None:
        """Writes a backup of the state now, resuming at batch ``len(outputs)`` of ``epoch``
        with NumPy's random state ``numpy_state`` and Keras's index array ``index``."""
        self._since_backup = 0
        self._serial += 1
        os.makedirs(self.backup_dir, exist_ok=True)
        temporary = os.path.join(self.backup_dir, f".tmp-backup-{self._serial}")
        shutil.rmtree(temporary, ignore_errors=True)
        os.makedirs(temporary)
        model = self.model
        save_checkpoint(os.path.join(temporary, "state.npz"), self._variables(model))
        metrics = _metric_variables(model)
        arrays = {"numpy_keys": np.asarray(numpy_state[1])}
        if index is not None:
            arrays["index"] = index
        for i, value in enumerate(batch_get_value(metrics)):
            arrays[f"metric_{i}"] = value
        scalar = [not isinstance(v, np.ndarray) for v in (outputs[0] if outputs else [])]
        for b, row in enumerate(outputs):
            for i, value in enumerate(row):
                arrays[f"output_{b}_{i}"] = np.asarray(value)
        _write_synced(os.path.join(temporary, "progress.npz"), lambda f: np.savez(f, **arrays))
        progress = {
            "format": FORMAT,
            "version": VERSION,
            "epoch": epoch,
            "batches": len(outputs),
            "out_labels": list(self._out_labels),
            "scalar_outputs": scalar,
            "metrics": len(metrics),
            "numpy": [numpy_state[0], int(numpy_state[2]), int(numpy_state[3]), numpy_state[4]],
        }
        text = json.dumps(progress)
        _write_synced(os.path.join(temporary, "progress.json"), lambda f: f.write(text), "w")
        _fsync_path(temporary)
        final = os.path.join(self.backup_dir, f"backup-{self._serial}")
        _publish(temporary, final)
        self._remove_backups(keep=final)

    def _read_backup(self, path: str, model: Any) -> dict:
        """Restores a backup's variables and random state; returns what resuming needs."""
        with open(os.path.join(path, "progress.json")) as f:
            progress = json.load(f)
        if progress.get("format") != FORMAT or progress.get("version") != VERSION:
            raise ValueError(
                f"BackupAndRestore: {path!r} is not a backup of this version "
                f"(format {progress.get('format')!r}, version {progress.get('version')!r})"
            )
        if progress["out_labels"] != list(self._out_labels):
            raise ValueError(
                f"BackupAndRestore: the backup in backup_dir={self.backup_dir!r} is of a fit "
                f"with outputs {progress['out_labels']}, this fit has {self._out_labels}: "
                "resume with the same model and compile, or remove the folder"
            )
        metrics = _metric_variables(model)
        if progress["metrics"] != len(metrics):
            raise ValueError(
                f"BackupAndRestore: the backup in backup_dir={self.backup_dir!r} holds "
                f"{progress['metrics']} metric variables, this model has {len(metrics)}"
            )
        try:
            restore_checkpoint(
                os.path.join(path, "state.npz"), self._variables(model), match="order"
            )
        except ValueError as e:
            raise ValueError(
                f"BackupAndRestore: the backup in backup_dir={self.backup_dir!r} does not fit "
                f"this model and optimizer: {e}"
            ) from None
        with np.load(os.path.join(path, "progress.npz"), allow_pickle=False) as saved:
            arrays = dict(saved)
        kind, pos, has_gauss, gauss = progress["numpy"]
        outputs = []
        for b in range(progress["batches"]):
            row = []
            for i, scalar in enumerate(progress["scalar_outputs"]):
                value = arrays[f"output_{b}_{i}"]
                row.append(value[()] if scalar else value)
            outputs.append(row)
        return {
            "epoch": progress["epoch"],
            "numpy": (kind, arrays["numpy_keys"], pos, has_gauss, gauss),
            "metrics": metrics,
            "metric_values": [arrays[f"metric_{i}"] for i in range(len(metrics))],
            "outputs": outputs,
            "index": arrays.get("index"),
        }

    def _prepare(
        self,
        model: Any,
        out_labels: Sequence[str] | None,
        samples: int | None,
        batch_size: int | None,
        shuffle: Any,
    ) -> int | None:
        """Called by Keras's fit loop before it starts: restores the latest backup, if any.

        Args:
            model: the model being trained.
            out_labels: the labels of the training function's outputs.
            samples: the number of training samples (``None`` with ``steps_per_epoch``).
            batch_size: the batch size.
            shuffle: the fit's ``shuffle`` argument.

        Returns:
            The epoch to resume at, or ``None`` when there is no backup.
        """
        self._fitting = True
        self._out_labels = list(out_labels or [])
        self._shuffle = "batch" if shuffle == "batch" else bool(shuffle)
        self._batch_size = batch_size or 0
        mirrored = samples is not None and self._shuffle
        self._index = np.arange(samples) if mirrored else None
        self._resume = None
        self._since_backup = 0
        backups = self._backups()
        self._serial = backups[-1][0] if backups else 0
        self._remove_backups(keep=backups[-1][1] if backups else None)  # stale temporaries
        if not backups:
            return None
        self._resume = self._read_backup(backups[-1][1], model)
        if self._index is not None:
            saved = self._resume["index"]
            if saved is None or saved.shape != self._index.shape:
                raise ValueError(
                    f"BackupAndRestore: the backup in backup_dir={self.backup_dir!r} is of a "
                    f"fit on other data or with another shuffle (this fit: {samples} samples, "
                    f"shuffle={shuffle!r}): resume with the same call, or remove the folder"
                )
            self._index = saved
        return self._resume["epoch"]

    def _reordered(self, inputs: Sequence[Any], samples: int | None) -> list[Any]:
        """The fit's sample arrays, reordered by the restored index array (see the module
        docstring); others (a learning-phase flag) unchanged."""
        index = self._index
        if index is None or self._resume is None or np.array_equal(index, np.arange(len(index))):
            return list(inputs)
        return [
            x[index] if getattr(x, "shape", None) and x.shape[0] == samples else x for x in inputs
        ]

    def _replaying(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """The training function, handing back the resumed epoch's recorded outputs first."""
        if self._resume is None or not self._resume["outputs"]:
            return function
        return _Replaying(function, self._resume["outputs"])


def resume_in_fit_loop(training_arrays: Any) -> None:
    """Makes Keras's fit loop on arrays (``training_arrays.fit_loop``, Keras 2.2.0 to 2.3.1)
    restore the latest backup of a :class:`BackupAndRestore` among its callbacks before it
    starts: ``initial_epoch`` becomes the backup's epoch and the training function replays
    the batches done in it.

    Args:
        training_arrays: the imported ``keras.engine.training_arrays`` module.
    """
    fit_loop = training_arrays.fit_loop
    if getattr(fit_loop, "_jaxkeras", False):
        return
    signature = inspect.signature(fit_loop)
    # (model, f, ins, ...) in 2.2, (model, fit_function, fit_inputs, ...) in 2.3
    _, function_name, inputs_name = list(signature.parameters)[:3]

    @functools.wraps(fit_loop)
    def resuming_fit_loop(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = bound.arguments
        backups = [c for c in arguments.get("callbacks") or [] if isinstance(c, BackupAndRestore)]
        if not backups:
            return fit_loop(*args, **kwargs)
        if len(backups) > 1:
            raise ValueError(
                f"BackupAndRestore: give model.fit one BackupAndRestore, got {len(backups)}"
            )
        backup = backups[0]
        inputs = arguments[inputs_name]
        steps = arguments.get("steps_per_epoch")
        samples = None if steps is not None or not inputs else int(inputs[0].shape[0])
        epoch = backup._prepare(
            arguments["model"],
            arguments.get("out_labels"),
            samples,
            arguments.get("batch_size"),
            arguments.get("shuffle"),
        )
        if epoch is not None:
            arguments["initial_epoch"] = epoch
            arguments[function_name] = backup._replaying(arguments[function_name])
            arguments[inputs_name] = backup._reordered(inputs, samples)
        return fit_loop(*bound.args, **bound.kwargs)

    resuming_fit_loop._jaxkeras = True
    training_arrays.fit_loop = resuming_fit_loop


def use_in_keras(callbacks_module: Any) -> None:
    """Makes :class:`BackupAndRestore` the ``BackupAndRestore`` of Keras's ``keras.callbacks``.

    Args:
        callbacks_module: the imported ``keras.callbacks`` module.
    """
    callbacks_module.BackupAndRestore = BackupAndRestore
