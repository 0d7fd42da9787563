"""Checkpoints: the whole state (every variable and the random-number state) in one ``.npz`` file.

The format is NumPy's ``.npz`` (a zip of ``.npy`` arrays), readable anywhere NumPy is, loaded
with ``allow_pickle=False``: entry ``meta`` holds JSON (format, version, each variable's name,
dtype, shape and sparsity, and the random-number state); entries ``v0``, ``v1``, ... hold the
values (dtypes NumPy cannot store, such as bfloat16, as their raw bits). Optimizer state lives
in variables, so it is included. Writes are atomic: a temporary file in the same folder, flushed
and fsynced, then renamed over the target, so a crash mid-write leaves the previous checkpoint.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse

from jaxkeras import state
from jaxkeras.state import STORE, Variable

FORMAT = "jaxkeras.checkpoint"
VERSION = 1


def _names(variables: Sequence[Variable | str] | None) -> list[str] | None:
    if variables is None:
        return None
    names = []
    for v in variables:
        if not isinstance(v, (Variable, str)):
            raise TypeError(f"checkpoint: variables must be variables or names, got {v!r}")
        names.append(v.name if isinstance(v, Variable) else v)
    return names


def _storable(array: np.ndarray) -> np.ndarray:
    """``array``, or its raw bits when NumPy cannot store its dtype (ml_dtypes types)."""
    if array.dtype.kind == "V" or array.dtype.type.__module__.startswith("ml_dtypes"):
        return array.view(f"u{array.dtype.itemsize}")
    return array


def save_checkpoint(
    path: str | os.PathLike, variables: Sequence[Variable | str] | None = None
) -> None:
    """Saves every variable (or the given ones) and the random-number state to ``path``.

    The write is atomic: the file at ``path`` is either the previous checkpoint or this one,
    whatever happens meanwhile.

    Args:
        path: the file to write (conventionally ``*.npz``; the name is used as given).
        variables: the variables (or their names) to save; default every live variable.

    Raises:
        ValueError: naming a variable that does not exist.
    """
    names = _names(variables)
    with STORE.lock.read():
        names = sorted(STORE.names()) if names is None else names
        missing = [n for n in names if not STORE.has(n)]
        if missing:
            raise ValueError(f"save_checkpoint: no live variable is named {missing[0]!r}")
        values = [STORE.read(n) for n in names]
        arrays = [state.to_numpy(v) for v in values]
        rng = STORE.rng_state()
    entries = {
        name: {
            "dtype": jnp.dtype(value.dtype).name,
            "shape": list(value.shape),
            "sparse": isinstance(value, sparse.BCOO),
        }
        for name, value in zip(names, values)
    }
    meta = {"format": FORMAT, "version": VERSION, "variables": list(entries.items()), "rng": rng}
    payload = {f"v{i}": _storable(a) for i, a in enumerate(arrays)}
    payload["meta"] = np.array(json.dumps(meta))
    _write_atomically(os.fspath(path), payload)


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


def _read(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            if meta.get("format") != FORMAT:
                raise ValueError(f"it is not a jaxkeras checkpoint (format {meta.get('format')!r})")
            if meta.get("version") != VERSION:
                raise ValueError(f"it has version {meta.get('version')!r}; expected {VERSION}")
            arrays = {name: data[f"v{i}"] for i, (name, _) in enumerate(meta["variables"])}
    except (OSError, KeyError, ValueError, json.JSONDecodeError) as err:
        raise ValueError(f"restore_checkpoint: cannot read checkpoint {path!r}: {err}") from None
    return meta, arrays


def _restored(name: str, saved: dict[str, Any], bits: np.ndarray, current: Any) -> Any:
    """The value to store for variable ``name`` (now ``current``), after checking that the
    saved entry has its shape and dtype."""
    shape, dtype = tuple(saved["shape"]), saved["dtype"]
    if shape != tuple(current.shape):
        raise ValueError(
            f"restore_checkpoint: variable {name!r} has shape {tuple(current.shape)}, but the "
            f"checkpoint holds shape {shape}"
        )
    if dtype != jnp.dtype(current.dtype).name:
        raise ValueError(
            f"restore_checkpoint: variable {name!r} has dtype {jnp.dtype(current.dtype).name}, "
            f"but the checkpoint holds dtype {dtype}"
        )
    array = bits.view(jnp.dtype(dtype)) if bits.dtype != jnp.dtype(dtype) else bits
    value = jnp.array(array, dtype=dtype, copy=True)
    return sparse.BCOO.fromdense(value) if saved["sparse"] else state.place_like(value, current)


def restore_checkpoint(
    path: str | os.PathLike, variables: Sequence[Variable | str] | None = None
) -> None:
    """Restores the variables and the random-number state saved by :func:`save_checkpoint`.

    Everything is checked before anything is written: on error the store is unchanged.

    Args:
        path: the checkpoint file.
        variables: the variables (or their names) to restore, each of which must be in the
            checkpoint; default: exactly the live variables, which must be the checkpoint's.

    Raises:
        ValueError: naming the variable when the sets of variables, or a shape or dtype, do
            not match, or naming the file when it is not a readable checkpoint.
    """
    path = os.fspath(path)
    meta, arrays = _read(path)
    saved = dict(meta["variables"])
    names = _names(variables)
    with STORE.lock.write():
        live = {n: STORE.read(n) for n in STORE.names()}
        if names is None:
            names = sorted(live)
            extra = sorted(set(saved) - set(live))
            if extra:
                raise ValueError(
                    f"restore_checkpoint: the checkpoint holds variable {extra[0]!r}, which "
                    "does not exist here (pass variables=[...] to restore some of them)"
                )
        for name in names:
            if name not in live:
                raise ValueError(f"restore_checkpoint: no live variable is named {name!r}")
            if name not in saved:
                raise ValueError(f"restore_checkpoint: variable {name!r} is not in the checkpoint")
        new = {n: _restored(n, saved[n], arrays[n], live[n]) for n in names}
        STORE.write(new)
        STORE.set_rng_state(meta["rng"])
