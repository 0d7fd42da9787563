"""Keeping the memory a compiled CPU call frees, so that the next call reuses it.

XLA:CPU allocates a compiled call's temporaries as one block with ``malloc`` when the call
starts, on the thread that runs the call, and frees it when the call ends. glibc's ``malloc``
serves a block over 32 MiB with a fresh ``mmap`` and unmaps it on ``free``, so every call
touches all of its temporaries anew: one page fault per 4 KiB (counted by hand for the
conv_lstm example's and ResNet20's train steps: ``benchmarks/RESULTS.md``, "Design
measurements (by hand)", "CPU memory reuse"). No upstream issue found for XLA:CPU's
allocation of a call's temporaries (checked 2026-11-27).

:func:`reuse_cpu_memory` (opt-in, see :mod:`jaxkeras.process`) changes three things so that a
freed block is reused by the next call, without faults, as TensorFlow's allocator does:

- glibc never ``mmap`` s a block (``M_MMAP_MAX=0``) and keeps up to :data:`KEEP_BYTES` of
  freed memory at the top of its heap (``M_TRIM_THRESHOLD``);
- JAX runs a CPU computation on the thread that calls it (``jax_cpu_enable_async_dispatch``
  off). With asynchronous dispatch it runs on one of XLA's worker threads, whose malloc arena
  grows in heaps of at most 64 MiB and ``mmap`` s any larger block whatever the settings;
  the calling thread (the main one, for a training loop) allocates from glibc's main heap,
  which grows to any size. ``K.function`` returns NumPy arrays, so it waits for the result
  either way;
- ``K.function`` hands XLA each NumPy feed over 100 KiB 64-byte aligned
  (:func:`borrowable`), so that XLA reads it where it is instead of copying it on a worker
  thread: a call whose argument is still being copied waits for the copy and runs there.
  This part changes nothing outside jaxkeras and is always on. (Zero-copy of aligned host
  arrays on CPU is JAX's intended behaviour: jax-ml/jax#4486, closed.)

The first two are process-wide (every NumPy array and every ``jax.jit`` of the program is
affected), so they are off unless asked for: ``JAXKERAS_REUSE_CPU_MEMORY=1``, keras.json's
``"reuse_cpu_memory": true``, or ``jaxkeras.process.reuse_cpu_memory()``.

Measured: ``benchmarks/RESULTS.md``, row "same, jaxkeras with ``JAXKERAS_REUSE_CPU_MEMORY=1``"
(the conv_lstm example's train step, reuse on, against TF-Keras; the row above it is reuse
off), and by hand when written ("Design measurements (by hand)", "CPU memory reuse": the
conv_lstm, cifar10_cnn and ResNet20 train steps, reuse on and off).

The cost is memory: the process keeps what it frees. A freed block stays resident until the
process allocates again (from it), instead of going back to the system, within
:data:`KEEP_BYTES` at the top of the heap and without bound below it (freeing an 800 MB NumPy
array leaves the resident size where it was). Compiled calls' temporaries are what it is for;
that is why it is opt-in.

It applies only where it can work: Linux with glibc, JAX running on CPU alone, and no JAX
computation run yet in the process (ask for it before anything runs). Elsewhere it does
nothing and warns why.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import os
import sys
import warnings
from typing import Any

import jax
import numpy as np

from jaxkeras.config import env_switch

REUSE_ENV = "JAXKERAS_REUSE_CPU_MEMORY"
"""Environment variable: ``1``/``on``/``true`` asks for memory reuse, ``0``/``off``/``false``
(the default) leaves malloc and JAX's dispatch as they are."""
REUSE_KEY = "reuse_cpu_memory"
"""keras.json key: ``true`` asks for memory reuse."""
KEEP_BYTES = 2**30
"""How much freed memory glibc keeps at the top of its heap: 1 GiB, over the temporaries of a
CPU train step of a Keras-sized model (the conv_lstm example's: ``benchmarks/RESULTS.md``,
"Design measurements (by hand)", "CPU memory reuse")."""
BORROWED_BYTES = 100 * 2**10
"""XLA:CPU copies a host array of up to 100 KiB that it cannot borrow at once, on the calling
thread; a larger one on a worker thread."""
ALIGNMENT = 64
"""The alignment at which XLA:CPU borrows a host array instead of copying it."""

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's <malloc.h>
_ACCELERATOR_MODULES = ("jax_plugins", "libtpu")
_state = {"reusing": False}


def reuse_asked(settings: dict[str, Any]) -> bool | None:
    """What the user says of memory reuse: ``$JAXKERAS_REUSE_CPU_MEMORY`` wins, then
    keras.json's ``"reuse_cpu_memory"``.

    Args:
        settings: the keras.json settings.

    Returns:
        ``True`` (asked for), ``False`` (turned off) or ``None`` (not said: off).

    Raises:
        ValueError: naming the variable or key and the value, when it is not a yes or a no (an
            empty variable is not said: keras.json's setting applies).
    """
    said = env_switch(REUSE_ENV)
    if said is not None:
        return said
    value = settings.get(REUSE_KEY)
    if value is not None and not isinstance(value, bool):
        raise ValueError(
            f"jaxkeras: keras.json's {REUSE_KEY!r} must be true or false, got {value!r}"
        )
    return value


def runs_on_cpu_only() -> bool:
    """Whether JAX can only run on CPU in this process: ``jax_platforms`` (``$JAX_PLATFORMS``)
    names the CPU first, or, left unset, no accelerator plugin (``jax_plugins``, ``libtpu``) is
    installed. Decided without starting JAX's backends.

    Returns:
        ``True`` when computations will run on the CPU.
    """
    platforms = jax.config.jax_platforms
    if platforms:
        return platforms.split(",")[0].strip().lower() == "cpu"
    if any(importlib.util.find_spec(name) for name in _ACCELERATOR_MODULES):
        return False
    return not importlib.metadata.entry_points(group="jax_plugins")


def _jax_started() -> bool:
    """Whether JAX has started a backend (and its threads, with their own malloc arenas)."""
    from jax._src import xla_bridge  # JAX offers no public test that leaves backends unstarted

    return xla_bridge.backends_are_initialized()


def _mallopt() -> Any:
    """glibc's ``mallopt``, or ``None`` under another C library or system."""
    if not sys.platform.startswith("linux") or not hasattr(os, "confstr"):
        return None
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
        return ctypes.CDLL(None).mallopt
    except (OSError, ValueError, AttributeError):
        return None


def _obstacle(mallopt: Any) -> str | None:
    """Why memory reuse cannot apply in this process, with what to do; ``None`` when it can."""
    if mallopt is None:
        return "it needs glibc's malloc (Linux)"
    if _jax_started():
        return "JAX has already run: import jaxkeras before any JAX computation"
    if not runs_on_cpu_only():
        return "JAX may run on an accelerator: set JAX_PLATFORMS=cpu to run on the CPU only"
    return None


def reuse_cpu_memory() -> bool:
    """Sets glibc's malloc to keep and reuse freed blocks and JAX to run CPU computations on
    the calling thread (see the module); warns, changing nothing, where it cannot work.

    Both are process-wide: call it (or ask for it through :mod:`jaxkeras.process`'s switches)
    before JAX runs anything.

    Returns:
        Whether freed memory is reused.
    """
    if _state["reusing"]:
        return True
    mallopt = _mallopt()
    reason = _obstacle(mallopt)
    if reason is not None:
        warnings.warn(f"jaxkeras: CPU memory reuse is not applied: {reason}", stacklevel=2)
        return False
    options = ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, KEEP_BYTES))
    _state["reusing"] = all(mallopt(option, value) == 1 for option, value in options)
    if _state["reusing"]:
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    return _state["reusing"]


def reusing() -> bool:
    """Whether :func:`reuse_cpu_memory` has set glibc's malloc to reuse freed blocks.

    Returns:
        ``True`` once it has.
    """
    return _state["reusing"]


def borrowable(array: np.ndarray) -> np.ndarray:
    """``array``, or a copy at an address XLA:CPU borrows, when it is over
    :data:`BORROWED_BYTES` and is not there: XLA then reads it in place, and the call that
    takes it runs on the calling thread (see the module).

    Args:
        array: a NumPy array.

    Returns:
        An array equal to ``array``, C-contiguous at a multiple of :data:`ALIGNMENT` when it
        is over :data:`BORROWED_BYTES`.
    """
    if array.nbytes <= BORROWED_BYTES or (
        array.flags.c_contiguous and array.ctypes.data % ALIGNMENT == 0
    ):
        return array
    block = np.empty(array.nbytes + ALIGNMENT, np.uint8)
    start = -block.ctypes.data % ALIGNMENT
    aligned = block[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    np.copyto(aligned, array)
    return aligned
