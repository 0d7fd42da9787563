"""Keeping the memory a compiled CPU call frees, so that the next call reuses it.

XLA:CPU allocates a compiled call's temporaries as one block with ``malloc`` when the call
starts and frees it when the call ends. glibc's ``malloc`` serves a block over 32 MiB with a
fresh ``mmap`` and unmaps it on ``free``, so every call touches all of its temporaries anew:
one page fault per 4 KiB (the conv_lstm example's train step: 375 MB, 95,000 faults per
call).

:func:`reuse_cpu_memory` tells glibc, before JAX starts its threads, to serve every block from
one heap (``M_ARENA_MAX=1``: a worker thread's own arena would ``mmap`` the block anyway) and
never to ``mmap`` one (``M_MMAP_MAX=0``), and to keep up to 2 GiB of freed memory at the top
of that heap (``M_TRIM_THRESHOLD``). A block freed by one call is then reused by the next,
without faults, as TensorFlow's allocator and JAX's GPU memory pool do (the conv_lstm step:
1.57 s of CPU time instead of 1.61 s, in ``make bench``).

It is off unless asked for (``"reuse_cpu_memory": true`` in keras.json or
``JAXKERAS_REUSE_CPU_MEMORY=1``; the environment wins), because all threads then share one
malloc lock: two compilations side by side contend for it (Keras's digits convnet, build +
compile + first epoch: 1.1 s instead of 0.86 s), and most models' temporaries stay under
32 MiB, where malloc reuses them anyway. The process also keeps what it freed, and small
blocks that settle inside a freed block make the next call take another, until the heap holds
a few (the conv_lstm step's peak resident memory: 0.66 or 1.03 GB, against 0.67 GB without
reuse and 1.56 GB for TF-Keras). It suits long CPU training of models with large temporaries.

It applies only where it can work: Linux with glibc, JAX running on CPU alone, and no JAX
computation run yet in the process; asked for elsewhere, it warns and does nothing.
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

REUSE_ENV = "JAXKERAS_REUSE_CPU_MEMORY"
"""Environment variable: ``1``/``on``/``true`` asks for memory reuse, ``0``/``off``/``false``
keeps glibc's malloc as it is."""
REUSE_KEY = "reuse_cpu_memory"
"""keras.json key: ``true`` asks for memory reuse."""
KEEP_BYTES = 2**31 - 1
"""How much freed memory glibc keeps at the top of its heap (``mallopt``'s largest value)."""

_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8  # glibc's <malloc.h>
_ACCELERATOR_MODULES = ("jax_plugins", "libtpu")
_OFF = ("0", "off", "false", "no")
_ON = ("1", "on", "true", "yes")
_state = {"reusing": False}


def reuse_wanted(settings: dict[str, Any]) -> bool:
    """Whether the user asks for memory reuse: ``$JAXKERAS_REUSE_CPU_MEMORY`` wins, then
    keras.json's ``"reuse_cpu_memory"``; it is off by default.

    Args:
        settings: the keras.json settings.

    Returns:
        ``True`` when asked for.

    Raises:
        ValueError: naming the variable or key and the value, when it is not a yes or a no.
    """
    choice = os.environ.get(REUSE_ENV)
    if choice is not None:
        lowered = choice.strip().lower()
        if lowered not in _OFF + _ON:
            raise ValueError(f"jaxkeras: ${REUSE_ENV} must be one of {_ON + _OFF}, got {choice!r}")
        return lowered in _ON
    value = settings.get(REUSE_KEY, False)
    if not isinstance(value, bool):
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


def reuse_cpu_memory(settings: dict[str, Any]) -> bool:
    """Sets glibc's malloc to keep and reuse freed blocks, when asked for (see the module);
    warns when asked for where it cannot work.

    Call it before JAX runs anything: ``import jaxkeras`` does.

    Args:
        settings: the keras.json settings.

    Returns:
        Whether freed memory is reused.
    """
    if _state["reusing"] or not reuse_wanted(settings):
        return _state["reusing"]
    mallopt = _mallopt()
    reason = _obstacle(mallopt)
    if reason is not None:
        message = f"jaxkeras: {REUSE_KEY} was asked for but is not applied: {reason}"
        warnings.warn(message, stacklevel=2)
        return False
    options = ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, KEEP_BYTES))
    _state["reusing"] = all(mallopt(option, value) == 1 for option, value in options)
    return _state["reusing"]


def reusing() -> bool:
    """Whether :func:`reuse_cpu_memory` has set glibc's malloc to reuse freed blocks.

    Returns:
        ``True`` once it has.
    """
    return _state["reusing"]
