"""What h5py 3 and NumPy 2 changed under multi-backend Keras 2's HDF5 code, given back to Keras.

:func:`jaxkeras.keras2.install` calls :func:`restore_for_keras` when Keras loads jaxkeras as its
backend. Each change applies only where one of Keras's own modules (``keras.*``) is the caller;
every other reader or writer of HDF5 files in the process sees h5py's behaviour unchanged:

- Reading an attribute: a string Keras wrote as bytes (stored as a variable-length ASCII
  string) comes back as bytes, as h5py 2 gave it (h5py 3 returns ``str``, and object arrays of
  ``str``, on which Keras calls ``.decode``); text written as ``str`` (UTF-8) stays ``str``. An
  empty array attribute (what h5py stores for the empty ``weight_names`` list of a layer without
  weights) comes back as an empty list: Keras 2.2.1 to 2.2.4 test it with ``if weight_names:``,
  which NumPy 1 answered ``False`` and NumPy 2.2 rejects.
- Opening a file without a mode: h5py 2 opened it read-write if it could, else read-only, else
  created it (never overwriting); h5py 3 opens it read-only. Keras 2.2.3's ``H5Dict`` (which
  ``model.save`` and ``load_model`` use) drops the mode it is given, and Keras 2.2.5 to 2.3.1
  create their in-memory file for binary streams without one.
- ``h5py.File.fid``: h5py 3 removed this alias of ``File.id``, through which Keras 2.2.5 to
  2.3.1 take the image of that in-memory file. Like the names :mod:`jaxkeras.keras2` restores,
  it is put back on the class (for every caller) only if it is missing.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

_PASSED_THROUGH = ("h5py.", "collections.abc", "_collections_abc")
"""Modules whose frames :func:`_caller_is_keras` looks past: h5py's own and the ``Mapping``
methods (``attrs.get``, which Keras 2.2.0 calls, reads through ``Mapping.get``)."""

H5PY2_DEFAULT_MODES = ("r+", "r", "w-")
"""The modes h5py 2 tried, in order, for a file opened without a mode: read-write, read-only,
and a new file that never replaces an existing one."""


def _caller_is_keras() -> bool:
    """Whether the code that called the patched h5py method (past h5py's own and
    ``collections.abc``'s frames) is one of Keras's modules."""
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(_PASSED_THROUGH):
            return module.startswith("keras.")
        frame = frame.f_back
    return False


def _as_bytes(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf8")
    if isinstance(value, np.ndarray) and value.dtype == object:
        return np.array(
            [v.encode("utf8") if isinstance(v, str) else v for v in value.ravel()]
        ).reshape(value.shape)
    return value


def _keras_reads_as_before(attribute_manager: Any, h5t: Any) -> None:
    """Makes Keras's reads of HDF5 attributes return bytes and empty lists (module docstring)."""
    read = attribute_manager.__getitem__
    if getattr(read, "_jaxkeras", False):
        return

    @functools.wraps(read)
    def getitem(self: Any, name: str) -> Any:
        value = read(self, name)
        if not _caller_is_keras():
            return value
        if isinstance(value, np.ndarray) and value.size == 0:
            return []
        kind = self.get_id(name).get_type()
        ascii_text = isinstance(kind, h5t.TypeStringID) and kind.get_cset() == h5t.CSET_ASCII
        return _as_bytes(value) if ascii_text else value

    getitem._jaxkeras = True
    attribute_manager.__getitem__ = getitem


def _keras_opens_as_before(file_class: Any) -> None:
    """Makes a file that Keras opens without a mode open as h5py 2 opened it (module
    docstring): the first of :data:`H5PY2_DEFAULT_MODES` that succeeds."""
    init = file_class.__init__
    if getattr(init, "_jaxkeras", False):
        return

    @functools.wraps(init)
    def opening(self: Any, name: Any, *args: Any, **kwargs: Any) -> None:
        if args or "mode" in kwargs or not _caller_is_keras():
            return init(self, name, *args, **kwargs)
        for mode in H5PY2_DEFAULT_MODES[:-1]:
            try:
                return init(self, name, mode, **kwargs)
            except OSError:
                pass
        return init(self, name, H5PY2_DEFAULT_MODES[-1], **kwargs)

    opening._jaxkeras = True
    file_class.__init__ = opening


def restore_for_keras() -> None:
    """Gives Keras's own modules h5py 2's attribute reads and default file mode, and
    ``h5py.File`` its ``fid`` (module docstring); does nothing when h5py is not installed."""
    try:
        import h5py
        from h5py import h5t
        from h5py._hl.attrs import AttributeManager
    except ImportError:
        return
    _keras_reads_as_before(AttributeManager, h5t)
    _keras_opens_as_before(h5py.File)
    if not hasattr(h5py.File, "fid"):
        h5py.File.fid = property(_file_id, doc="The file's id (h5py 2's alias of ``id``).")


def _file_id(file: Any) -> Any:
    return file.id
