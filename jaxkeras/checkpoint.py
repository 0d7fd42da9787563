"""Checkpoints: every variable of the state store (optimizer slots, loss-scale variables and
``iterations`` included: they are variables) and the random-number state (the global seed, the
count of keys drawn at once, and each seed's run count).

One API, :func:`save_checkpoint` / :func:`restore_checkpoint`, with two formats chosen by the
path:

- **a path ending in** ``.npz``: one NumPy ``.npz`` file (a zip of ``.npy`` arrays, loaded with
  ``allow_pickle=False``): entry ``meta`` holds JSON (format, version, each variable's name,
  dtype, shape and sparsity, and the random-number state); entries ``v0``, ``v1``, ... hold the
  values (dtypes NumPy cannot store, such as bfloat16, as their raw bits). Writes are atomic: a
  temporary file in the same folder, flushed and fsynced, then renamed over the target. Each
  value is gathered whole into the process, so it is for one process only: saving it in a
  job of several processes raises ``ValueError``.
- **any other path**: a directory written by Orbax (``orbax-checkpoint``), an Orbax
  ``CheckpointManager`` directory keeping one step (``path/<step>/``). A step holds two Orbax
  items: ``meta``, the same JSON as above, and ``state``, a PyTree of the values keyed ``v0``,
  ``v1``, ... in the order of ``meta``'s variables (variable names hold ``/``, which Orbax
  would read as a path). Each process writes only its own shards of each variable (the sharded
  ``jax.Array`` s of the store go to Orbax as they are; nothing is gathered), and a restore
  reads, for each variable, only the shards of the sharding it has now, so a checkpoint written
  on one mesh or device count restores onto another (8 devices onto 1, a ``(2, 4)`` mesh onto
  ``(4, 2)``). Each process's resident memory grows with its own shards while saving and
  restoring, far less than gathering the variables whole (as a ``.npz`` save must) costs it
  (measured by hand in a job of two processes: ``benchmarks/RESULTS.md``, "Design
  measurements (by hand)", "Orbax checkpoints"). A new save writes a new step, which Orbax
  finalizes by renaming its temporary directory, and only then deletes the old one: a crash
  mid-save leaves the previous checkpoint restorable.

Why the ``.npz`` format stays: it needs nothing beyond NumPy, every tool can read it, and
existing checkpoints keep loading; a single-process user gives up nothing with it. Choosing by
the suffix keeps one API (the existing calls with ``*.npz`` paths behave as before) and cannot
be ambiguous: Orbax always writes a directory, never a file named ``*.npz``.

:class:`CheckpointManager` keeps numbered steps (``max_to_keep`` of them) in a directory, on
Orbax's ``CheckpointManager``, and saves asynchronously: :meth:`CheckpointManager.save` takes
a snapshot and returns while the files are written in the background. The snapshot is a copy
of each variable's value (``jax.device_put(value, may_alias=False)``: on the same devices,
with the same sharding, nothing compiled), taken under the store's read lock and waited for,
so no update is half-seen and a later call of a compiled function, which donates the buffers
of the variables it updates, cannot reach the values being written: the save owns its copies.
The copies cost one extra copy of each process's shards until Orbax has moved them to the
host (on a CPU, until they are written).

Both formats record the variables' names, dtypes and shapes; a restore checks them all before
anything is written, and a mismatch raises ``ValueError`` naming every variable that is
missing, extra, or of another shape or dtype, leaving the store unchanged. A restore pairs each
variable with the checkpoint's of its name, or, with ``match="order"``, the i-th variable it is
given with the i-th saved (for a model built again, whose variables have other names), checked
by shape and dtype.

orbax-checkpoint is an extra (``pip install jaxkeras[orbax]``), not a dependency: it brings
packages that jaxkeras does not otherwise install (tensorstore, uvloop, protobuf, msgpack,
PyYAML, fsspec, etils, ...), adding markedly to an install's size and to the import time
(measured by hand for orbax-checkpoint 0.12.8: ``benchmarks/RESULTS.md``, "Design
measurements (by hand)", "Orbax checkpoints"). The ``.npz`` format covers the single-process
case without it. Nothing here imports Orbax until a directory checkpoint or a
:class:`CheckpointManager` is used (``import jaxkeras`` never does); without it those raise
``ImportError`` naming ``pip install jaxkeras[orbax]``.

Every process of a multi-process job must make the same calls (saving and restoring are
collective), on a directory they all see (a shared file system). The JSON meta, and the
values that no distribution placed (each process holds its own copy, on its default device),
are written by the first process: they are the same in every process of an SPMD program.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse

from jaxkeras import state
from jaxkeras._engine import graph
from jaxkeras._engine.store import STORE
from jaxkeras.checks import check_choice, check_int
from jaxkeras.state import Variable

FORMAT = "jaxkeras.checkpoint"
VERSION = 1
INSTALL_ORBAX = "pip install jaxkeras[orbax]"
MATCHES = ("name", "order")
"""How :func:`restore_checkpoint` pairs its variables with the checkpoint's."""
_STATE, _META = "state", "meta"  # the items of an Orbax step: the values, and the JSON meta


# ---------------------------------------------------------------------------------------------
# what both formats share


def _names(fn: str, variables: Sequence[Variable | str] | None) -> list[str] | None:
    if variables is None:
        return None
    names = []
    for v in variables:
        if not isinstance(v, (Variable, str)):
            raise TypeError(f"{fn}: variables must be variables or names, got {v!r}")
        names.append(v.name if isinstance(v, Variable) else v)
    return names


def _entry(value: Any) -> dict[str, Any]:
    """What a checkpoint records of a variable besides its value."""
    return {
        "dtype": jnp.dtype(value.dtype).name,
        "shape": list(value.shape),
        "sparse": graph.is_bcoo(value),
    }


def _snapshot(
    fn: str, variables: Sequence[Variable | str] | None, take: Callable[[Any], Any]
) -> tuple[dict[str, Any], list[Any]]:
    """The meta (format, variables, random-number state) and ``take`` of each value, all read
    under the store's read lock, so that they belong to one state.

    Raises:
        ValueError: naming a variable that does not exist.
    """
    names = _names(fn, variables)
    with STORE.lock.read():
        names = sorted(STORE.names()) if names is None else names
        missing = [n for n in names if not STORE.has(n)]
        if missing:
            raise ValueError(f"{fn}: no live variable is named {missing[0]!r}")
        values = [STORE.read(n) for n in names]
        taken = jax.block_until_ready([take(v) for v in values])
        rng = STORE.rng_state()
    entries = [(name, _entry(value)) for name, value in zip(names, values)]
    return {"format": FORMAT, "version": VERSION, "variables": entries, "rng": rng}, taken


def _check_meta(meta: Any) -> None:
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise ValueError(f"it is not a jaxkeras checkpoint (format {found!r})")
    if meta.get("version") != VERSION:
        raise ValueError(f"it has version {meta.get('version')!r}; expected {VERSION}")


def _listed(names: Sequence[str]) -> str:
    return ", ".join(repr(n) for n in names)


def _differs(current: Any, entry: Mapping[str, Any]) -> str | None:
    """How a live value differs from a checkpoint entry (shape first, then dtype), or ``None``."""
    shape, dtype = tuple(entry["shape"]), entry["dtype"]
    if shape != tuple(current.shape):
        return f"has shape {tuple(current.shape)}, but the checkpoint holds shape {shape}"
    if dtype != jnp.dtype(current.dtype).name:
        return f"has dtype {jnp.dtype(current.dtype).name}, but the checkpoint holds dtype {dtype}"
    return None


def _by_name(
    saved: Mapping[str, Mapping[str, Any]], live: Mapping[str, Any], names: list[str] | None
) -> tuple[list[tuple[str, str]], list[str]]:
    """``match="name"``: each variable takes the checkpoint's variable of its name.

    Args:
        saved: variable name -> its entry in the checkpoint (dtype, shape).
        live: variable name -> its stored value, for every live variable.
        names: the variables asked for, or ``None``: exactly the live ones, which must be
            the checkpoint's.

    Returns:
        The (live name, checkpoint name) pairs to restore, and the problems found.
    """
    problems = []
    if names is None:
        names = sorted(live)
        extra = sorted(set(saved) - set(live))
        if extra:
            problems.append(
                f"the checkpoint holds variable{'s' * (len(extra) > 1)} {_listed(extra)}, which "
                "does not exist here (pass variables=[...] to restore some of them)"
            )
    for name in names:
        if name not in live:
            problems.append(f"no live variable is named {name!r}")
        elif name not in saved:
            problems.append(
                f"variable {name!r} is not in the checkpoint (a model built again has other "
                "names: pass its variables in the order they were saved, with match='order')"
            )
        else:
            differs = _differs(live[name], saved[name])
            if differs:
                problems.append(f"variable {name!r} {differs}")
    return [(name, name) for name in names], problems


def _by_order(
    saved: Sequence[tuple[str, Mapping[str, Any]]],
    live: Mapping[str, Any],
    names: list[str] | None,
) -> tuple[list[tuple[str, str]], list[str]]:
    """``match="order"``: the i-th variable takes the checkpoint's i-th variable.

    Args:
        saved: the checkpoint's (name, entry) pairs, in the order they were saved.
        live: variable name -> its stored value, for every live variable.
        names: the variables asked for, as many as the checkpoint holds.

    Returns:
        The (live name, checkpoint name) pairs to restore, and the problems found.
    """
    if names is None:
        return [], [
            "match='order' needs variables=[...], listed in the order they were saved "
            "(save_checkpoint(path, model.weights), then restore_checkpoint(path, "
            "other_model.weights, match='order'))"
        ]
    problems = []
    if len(names) != len(saved):
        problems.append(
            f"variables lists {len(names)} variable{'s' * (len(names) != 1)}, but the "
            f"checkpoint holds {len(saved)}: pass the same list as was saved"
        )
    seen = set()
    for i, (name, (saved_name, entry)) in enumerate(zip(names, saved)):
        if name in seen:
            problems.append(f"variables[{i}] {name!r} is listed twice")
        seen.add(name)
        if name not in live:
            problems.append(f"variables[{i}]: no live variable is named {name!r}")
            continue
        differs = _differs(live[name], entry)
        if differs:
            problems.append(
                f"variables[{i}] {name!r} {differs} (the checkpoint's variable {i}, saved as "
                f"{saved_name!r})"
            )
    return list(zip(names, (saved_name for saved_name, _ in saved))), problems


def _paired(
    fn: str,
    where: str,
    saved: Sequence[tuple[str, Mapping[str, Any]]],
    live: Mapping[str, Any],
    names: list[str] | None,
    match: str,
) -> list[tuple[str, str]]:
    """The variables to restore, paired with the checkpoint's, after checking them all.

    Args:
        fn: the caller's name, for messages.
        where: the checkpoint's path (and step), for messages.
        saved: the checkpoint's (name, entry) pairs, in the order they were saved.
        live: variable name -> its stored value, for every live variable.
        names: the variables asked for, or ``None``.
        match: ``"name"`` or ``"order"`` (see :func:`restore_checkpoint`).

    Returns:
        (live name, checkpoint name) pairs.

    Raises:
        ValueError: naming every variable that is missing, extra, or of another shape or dtype.
    """
    if match == "name":
        pairs, problems = _by_name(dict(saved), live, names)
    else:
        pairs, problems = _by_order(saved, live, names)
    if problems:
        raise ValueError(
            f"{fn}: checkpoint {where} does not match the variables (nothing was restored): "
            + "; ".join(problems)
        )
    return pairs


def _match(fn: str, match: Any) -> str:
    return check_choice(fn, "match", match, MATCHES)


def _from_host(array: np.ndarray, current: Any) -> Any:
    """The value to store from a host array holding it, placed as ``current`` is."""
    value = jax.device_put(np.array(array, dtype=current.dtype))  # a copy; nothing compiled
    return (
        sparse.BCOO.fromdense(value) if graph.is_bcoo(current) else state.place_like(value, current)
    )


# ---------------------------------------------------------------------------------------------
# the .npz format


def _is_npz(path: str) -> bool:
    return path.lower().endswith(".npz")


def _storable(array: np.ndarray) -> np.ndarray:
    """``array``, or its raw bits when NumPy cannot store its dtype (ml_dtypes types)."""
    if array.dtype.kind == "V" or array.dtype.type.__module__.startswith("ml_dtypes"):
        return array.view(f"u{array.dtype.itemsize}")
    return array


def _save_npz(path: str, variables: Sequence[Variable | str] | None) -> None:
    if jax.process_count() > 1:
        raise ValueError(
            f"save_checkpoint: a .npz checkpoint holds each variable whole, which would gather "
            f"every variable into each of the {jax.process_count()} processes; pass a directory "
            f"path (an Orbax checkpoint, {INSTALL_ORBAX}) instead of path={path!r}"
        )
    meta, arrays = _snapshot("save_checkpoint", variables, state.to_numpy)
    payload = {f"v{i}": _storable(a) for i, a in enumerate(arrays)}
    payload["meta"] = np.array(json.dumps(meta))
    _write_atomically(path, payload)


def _write_atomically(path: str, payload: dict[str, np.ndarray]) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    if hasattr(os, "O_DIRECTORY"):  # make the rename itself durable
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _read_npz(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            _check_meta(meta)
            arrays = {name: data[f"v{i}"] for i, (name, _) in enumerate(meta["variables"])}
    except (OSError, KeyError, ValueError, json.JSONDecodeError) as err:
        raise ValueError(f"restore_checkpoint: cannot read checkpoint {path!r}: {err}") from None
    return meta, arrays


def _restore_npz(path: str, variables: Sequence[Variable | str] | None, match: str) -> None:
    names = _names("restore_checkpoint", variables)
    meta, arrays = _read_npz(path)
    saved = dict(meta["variables"])
    with STORE.lock.write():
        live = {n: STORE.read(n) for n in STORE.names()}
        pairs = _paired("restore_checkpoint", repr(path), meta["variables"], live, names, match)
        new = {}
        for name, saved_name in pairs:
            bits, dtype = arrays[saved_name], jnp.dtype(saved[saved_name]["dtype"])
            new[name] = _from_host(bits.view(dtype) if bits.dtype != dtype else bits, live[name])
        STORE.write(new)
        STORE.set_rng_state(meta["rng"])


# ---------------------------------------------------------------------------------------------
# Orbax


def _orbax(fn: str) -> ModuleType:
    """Returns ``orbax.checkpoint``, imported now.

    Raises:
        ImportError: naming the extra to install when it is not installed.
    """
    try:
        import orbax.checkpoint as ocp
    except ImportError as err:
        raise ImportError(
            f"{fn}: checkpoints in a directory (any path not ending in .npz) are written by "
            f"orbax-checkpoint, which is not installed: {INSTALL_ORBAX}"
        ) from err
    return ocp


def _owned(value: Any) -> Any:
    """A copy of a stored value that only the checkpoint holds, so that no later update can
    donate its buffers: a ``jax.Array`` on the same devices with the same sharding (a sparse
    value densified); or, in a job of several processes, for a value on the process's default
    device (not placed by a distribution, so alike in every process), a NumPy array, which
    Orbax writes from the first process only."""
    if jax.process_count() > 1 and not (isinstance(value, jax.Array) and value.committed):
        return state.to_numpy(value)
    if graph.is_bcoo(value):
        return value.todense()  # a new array
    return jax.device_put(value, value.sharding, may_alias=False)


def _target(ocp: ModuleType, value: Any) -> tuple[Any, Any]:
    """How Orbax should restore a variable whose stored value is ``value``: as a ``jax.Array``
    with its sharding (each process reads its shards only) when a distribution placed it, else
    as a NumPy array to put on the default device.

    Returns:
        ``(item, restore_args)`` for ``ocp.args.PyTreeRestore``.
    """
    shape, dtype = tuple(value.shape), value.dtype
    if isinstance(value, jax.Array) and value.committed:
        sharding = value.sharding
        item = jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
        return item, ocp.ArrayRestoreArgs(sharding=sharding, global_shape=shape, dtype=dtype)
    return jax.ShapeDtypeStruct(shape, dtype), ocp.RestoreArgs(restore_type=np.ndarray)


class CheckpointManager:
    """Numbered checkpoints (steps) in a directory, saved asynchronously, on Orbax's
    ``CheckpointManager``.

    :meth:`save` takes a snapshot of the variables and the random-number state (a copy the
    save owns: updates made afterwards, which donate their variables' buffers, cannot change
    what is written) and returns while Orbax writes it in the background; the training loop
    goes on. A save started while another is being written first waits for it. :meth:`wait`
    blocks until the save in flight is on disk (finalized: its step directory renamed into
    place, older steps beyond ``max_to_keep`` deleted), and raises its error if writing it
    failed. :meth:`close` waits likewise, then releases Orbax's threads; a closed manager
    refuses further calls. A process that exits without :meth:`close` (or :meth:`wait`) may
    leave the last save unfinished: Orbax then ignores its temporary directory, and the
    previous step is the latest. Use it as a context manager to close it on leaving.

    Several threads may call one manager (its calls take turns). In a job of several
    processes, every process makes the same calls, on a directory they all see.

    Args:
        directory: where the steps go (``directory/<step>/``); created when missing.
        max_to_keep: how many of the newest steps to keep (older ones are deleted once a newer
            one is finalized), or ``None`` to keep every step.
        asynchronous: ``False`` to write each save before :meth:`save` returns.
        read_only: ``True`` to restore only: nothing in the directory is created or deleted
            (for a process that reads steps another job writes). Otherwise the temporary
            directories of saves that never finished are deleted (before the first save).

    Raises:
        ImportError: when orbax-checkpoint is not installed (``pip install jaxkeras[orbax]``).

    Example:
        >>> w = K.variable([1.0, 2.0], name="w")
        >>> folder = tempfile.TemporaryDirectory()
        >>> with CheckpointManager(folder.name, max_to_keep=2) as manager:
        ...     for step in range(3):
        ...         K.set_value(w, [step, step])
        ...         manager.save(step)
        ...     manager.wait()
        ...     manager.all_steps()
        [1, 2]
        >>> with CheckpointManager(folder.name) as manager:
        ...     manager.restore()  # the latest step
        2
        >>> K.get_value(w)
        array([2., 2.], dtype=float32)
        >>> folder.cleanup()
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        max_to_keep: int | None = None,
        asynchronous: bool = True,
        read_only: bool = False,
    ) -> None:
        ocp = _orbax("CheckpointManager")
        if max_to_keep is not None:
            max_to_keep = check_int("CheckpointManager", "max_to_keep", max_to_keep, minimum=1)
        for arg, value in (("asynchronous", asynchronous), ("read_only", read_only)):
            if not isinstance(value, bool):
                raise TypeError(f"CheckpointManager: {arg} must be a bool, got {value!r}")
        self._ocp = ocp
        self._directory = os.path.abspath(os.fspath(directory))
        self._lock = threading.RLock()
        self._closed = False
        self._read_only = read_only
        registry = ocp.handlers.DefaultCheckpointHandlerRegistry()
        for args in (ocp.args.PyTreeSave, ocp.args.PyTreeRestore):
            registry.add(_STATE, args)
        for args in (ocp.args.JsonSave, ocp.args.JsonRestore):
            registry.add(_META, args)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep,
            enable_async_checkpointing=asynchronous,
            create=not read_only,
            cleanup_tmp_directories=not read_only,  # what a killed save left (at the next save)
        )
        self._manager = ocp.CheckpointManager(
            self._directory, options=options, handler_registry=registry
        )

    @property
    def directory(self) -> str:
        """The directory, as an absolute path."""
        return self._directory

    def __repr__(self) -> str:
        return f"<jaxkeras CheckpointManager {self._directory!r}>"

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _open(self, fn: str) -> Any:
        if self._closed:
            raise RuntimeError(
                f"CheckpointManager.{fn}: the manager of {self._directory!r} is closed"
            )
        return self._manager

    def save(self, step: int, variables: Sequence[Variable | str] | None = None) -> None:
        """Saves the variables and the random-number state as ``step``, in the background.

        Args:
            step: the step's number, greater than every step saved in the directory.
            variables: the variables (or their names) to save; default every live variable.

        Raises:
            ValueError: when ``step`` is not greater than the latest step, naming a variable
                that does not exist, or when the manager is read-only.
            RuntimeError: when the manager is closed.
        """
        step = check_int("CheckpointManager.save", "step", step)
        with self._lock:
            manager = self._open("save")
            if self._read_only:
                raise ValueError(
                    f"CheckpointManager.save: the manager of {self._directory!r} is read-only"
                )
            latest = manager.latest_step()
            if latest is not None and step <= latest:
                raise ValueError(
                    f"CheckpointManager.save: step must be greater than the latest step "
                    f"{latest} in {self._directory!r}, got {step!r}"
                )
            meta, values = _snapshot("CheckpointManager.save", variables, _owned)
            items = {_META: self._ocp.args.JsonSave(meta)}
            if values:  # (Orbax refuses an empty tree)
                tree = {f"v{i}": v for i, v in enumerate(values)}
                items[_STATE] = self._ocp.args.PyTreeSave(tree)
            del values  # Orbax holds what it still needs
            manager.save(step, args=self._ocp.args.Composite(**items))

    def restore(
        self,
        step: int | None = None,
        variables: Sequence[Variable | str] | None = None,
        match: str = "name",
    ) -> int:
        """Restores the variables and the random-number state saved as ``step``.

        Waits for a save in flight first. Each variable is read onto the devices, with the
        sharding, its value has now (whatever mesh or device count the checkpoint was written
        on). Everything is checked before anything is written: on error the store is unchanged.

        Args:
            step: the step to restore; default the latest.
            variables: the variables (or their names) to restore; default exactly the live
                variables, which must be the checkpoint's.
            match: how ``variables`` find theirs in the checkpoint: ``"name"`` (the default)
                or ``"order"`` (see :func:`restore_checkpoint`).

        Returns:
            The step restored.

        Raises:
            ValueError: when there is no such step, for an unknown ``match``, or naming every
                variable that is missing, extra, or of another shape or dtype.
        """
        return self._restore("CheckpointManager.restore", step, variables, match)

    def _restore(
        self,
        fn: str,
        step: int | None,
        variables: Sequence[Variable | str] | None,
        match: str,
    ) -> int:
        """:meth:`restore`, its messages naming ``fn``."""
        match = _match(fn, match)
        with self._lock:
            manager = self._open("restore")
            manager.wait_until_finished()
            steps = manager.all_steps()
            if step is None:
                if not steps:
                    raise ValueError(f"{fn}: {self._directory!r} holds no checkpoint")
                step = max(steps)
            else:
                step = check_int(fn, "step", step)
                if step not in steps:
                    raise ValueError(
                        f"{fn}: {self._directory!r} holds no step {step!r} (its steps: "
                        f"{sorted(steps)})"
                    )
            self._restore_step(fn, step, variables, match)
            return step

    def _restore_step(
        self, fn: str, step: int, variables: Sequence[Variable | str] | None, match: str
    ) -> None:
        ocp = self._ocp
        where = f"{os.path.join(self._directory, str(step))!r}"
        names = _names(fn, variables)
        try:
            meta = self._manager.restore(
                step, args=ocp.args.Composite(**{_META: ocp.args.JsonRestore()})
            )[_META]
            _check_meta(meta)
        except (OSError, KeyError, ValueError) as err:
            raise ValueError(f"{fn}: cannot read checkpoint {where}: {err}") from None
        index = {name: i for i, (name, _) in enumerate(meta["variables"])}
        with STORE.lock.write():
            live = {n: STORE.read(n) for n in STORE.names()}
            pairs = _paired(fn, where, meta["variables"], live, names, match)
            targets = {f"v{index[saved]}": _target(ocp, live[n]) for n, saved in pairs}
            restored = {}
            if targets:
                args = ocp.args.PyTreeRestore(
                    item={key: item for key, (item, _) in targets.items()},
                    restore_args={key: r for key, (_, r) in targets.items()},
                    partial_restore=True,
                )
                restored = self._manager.restore(step, args=ocp.args.Composite(**{_STATE: args}))[
                    _STATE
                ]
            new = {}
            for name, saved_name in pairs:
                value, current = restored[f"v{index[saved_name]}"], live[name]
                new[name] = value if isinstance(value, jax.Array) else _from_host(value, current)
            STORE.write(new)
            STORE.set_rng_state(meta["rng"])

    def latest_step(self) -> int | None:
        """Returns the newest step (a save in flight included), or ``None`` when there is none."""
        with self._lock:
            return self._open("latest_step").latest_step()

    def all_steps(self) -> list[int]:
        """Returns the steps kept, oldest first (a save in flight included)."""
        with self._lock:
            return sorted(self._open("all_steps").all_steps())

    def is_saving(self) -> bool:
        """Returns whether a save is still being written (in the background)."""
        with self._lock:
            return self._open("is_saving").is_saving_in_progress()

    def wait(self) -> None:
        """Blocks until the save in flight is written and finalized (see the class docstring).

        Raises:
            Exception: the error that writing it raised, if any.
        """
        with self._lock:
            self._open("wait").wait_until_finished()

    def close(self) -> None:
        """Waits for the save in flight, then releases Orbax's resources (calling it again
        does nothing)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._manager.close()


# ---------------------------------------------------------------------------------------------
# the API


def save_checkpoint(
    path: str | os.PathLike, variables: Sequence[Variable | str] | None = None
) -> None:
    """Saves every variable (or the given ones) and the random-number state to ``path``.

    A path ending in ``.npz`` is one NumPy file (one process only); any other path is an Orbax
    checkpoint directory, to which each process writes its own shards (needs
    ``pip install jaxkeras[orbax]``; see the module docstring). Either way the write is atomic:
    ``path`` holds the previous checkpoint or this one, whatever happens meanwhile.

    Args:
        path: the ``.npz`` file or the directory to write.
        variables: the variables (or their names) to save; default every live variable.

    Raises:
        ValueError: naming a variable that does not exist, or a ``.npz`` path in a job of
            several processes.
        ImportError: for a directory, when orbax-checkpoint is not installed.
    """
    path = os.fspath(path)
    if _is_npz(path):
        _save_npz(path, variables)
        return
    with CheckpointManager(path, max_to_keep=1, asynchronous=False) as manager:
        latest = manager.latest_step()
        manager.save(0 if latest is None else latest + 1, variables)


def restore_checkpoint(
    path: str | os.PathLike,
    variables: Sequence[Variable | str] | None = None,
    match: str = "name",
) -> None:
    """Restores the variables and the random-number state saved by :func:`save_checkpoint`
    (from a directory: its latest step, so a :class:`CheckpointManager`'s directory works too).

    Each variable is read onto the devices, with the sharding, its value has now. Everything
    is checked before anything is written: on error the store is unchanged.

    A model built again in the same process has other variable names (``dense_2/kernel`` for
    ``dense_1/kernel``): save its variables as a list, and restore them into the new model's
    list, in the same order, with ``match="order"``:

    .. code-block:: python

        K.save_checkpoint(path, model.weights)
        K.restore_checkpoint(path, twin.weights, match="order")

    Args:
        path: the checkpoint's ``.npz`` file or directory.
        variables: the variables (or their names) to restore; default exactly the live
            variables, which must be the checkpoint's.
        match: ``"name"`` (the default): each variable takes the checkpoint's variable of its
            name, which must be there. ``"order"``: ``variables`` (required) lists as many
            variables as the checkpoint holds, and the i-th takes the i-th saved, whatever
            their names; each pair must agree in shape and dtype.

    Raises:
        ValueError: for an unknown ``match``, naming every variable that is missing, extra, or
            of another shape or dtype (with ``match="order"``, every pair that disagrees and a
            count that differs), or naming the path when it holds no readable checkpoint.
        ImportError: for a directory, when orbax-checkpoint is not installed.
    """
    path = os.fspath(path)
    match = _match("restore_checkpoint", match)
    if _is_npz(path):
        _restore_npz(path, variables, match)
        return
    if not os.path.isdir(path):
        raise ValueError(f"restore_checkpoint: no checkpoint directory at path={path!r}")
    with CheckpointManager(path, read_only=True) as manager:
        manager._restore("restore_checkpoint", None, variables, match)
