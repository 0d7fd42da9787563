"""The process-wide settings jaxkeras can make for you: each one off unless you ask for it.

jaxkeras is a guest in its user's process: importing and using it changes no global setting of
JAX, XLA, NumPy or the C library. What it needs of XLA is scoped to the functions it compiles
(their compiler options, ``K.function``'s ``compiler_options``), and a 64-bit dtype asked for
while JAX's 64-bit mode is off is narrowed, with one warning (``jaxkeras.checks``), unless
``K.set_floatx('float64')`` or keras.json's ``"floatx": "float64"`` asks for 64-bit floats
everywhere: that turns on ``jax_enable_x64``.

Two process-wide settings help enough to offer, each behind one switch, read at import from
the environment (which wins) and keras.json, or made by calling its function:

- CPU memory reuse (glibc's ``mallopt`` keeps freed blocks, ``jax_cpu_enable_async_dispatch``
  off): ``JAXKERAS_REUSE_CPU_MEMORY=1``, keras.json ``"reuse_cpu_memory": true``, or
  :func:`reuse_cpu_memory`;
- JAX's persistent compilation cache: ``JAXKERAS_COMPILATION_CACHE=<folder>`` (or ``1`` for
  ``jax_cache`` beside keras.json), keras.json ``"jax_compilation_cache": "<folder>"`` (or
  ``true``), or :func:`enable_compilation_cache`.

Both are off by default, also when Keras 2 loads jaxkeras as its backend.
"""

from __future__ import annotations

import os
from typing import Any

import jax
from jax.experimental.compilation_cache import compilation_cache

from jaxkeras._xla import cpu_memory
from jaxkeras.config import keras_home, switch_word

__all__ = [
    "CACHE_ENV",
    "CACHE_KEY",
    "apply_settings",
    "compilation_cache_asked",
    "enable_compilation_cache",
    "reuse_cpu_memory",
    "reusing_cpu_memory",
]

CACHE_ENV = "JAXKERAS_COMPILATION_CACHE"
"""Environment variable: a folder for JAX's persistent compilation cache, a yes (``1``, ``on``,
...) for ``jax_cache`` beside keras.json, a no (``0``, ``off``, ...) for none; empty or unset
leaves it to keras.json (:func:`jaxkeras.config.env_switch` reads the words)."""
CACHE_KEY = "jax_compilation_cache"
"""keras.json key: a folder, ``true`` (``jax_cache`` beside keras.json) or ``false``."""
CACHE_MAX_BYTES = 2 * 2**30
"""The cache's size cap, unless the program set JAX's own: the least recently used entries go
beyond it."""
CACHE_MIN_COMPILE_SECS = 0.05
"""Compilations shorter than this are not written, unless the program set JAX's own threshold
(each write costs a few milliseconds; a read saves the compile)."""


def compilation_cache_asked(settings: dict[str, Any]) -> str | None:
    """The folder the user asked jaxkeras to keep JAX's compilation cache in, or ``None``.

    ``$JAXKERAS_COMPILATION_CACHE`` wins unless empty, then keras.json's
    ``"jax_compilation_cache"``. Each takes a folder or a yes/no word
    (:func:`jaxkeras.config.switch_word`).

    Args:
        settings: the keras.json settings.

    Returns:
        A folder, or ``None`` when not asked for (the default) or turned off.

    Raises:
        ValueError: naming the key and the value when keras.json's is not a folder or a bool;
            naming the variable or key when its value is ``none`` (once read as a no).
    """
    choice = os.environ.get(CACHE_ENV, "")
    where = f"${CACHE_ENV}"
    if not choice.strip():  # not said: keras.json's
        choice, where = settings.get(CACHE_KEY), f"keras.json's {CACHE_KEY!r}"
        if choice is None or choice is False or choice == "":
            return None
        if choice is True:
            return os.path.join(keras_home(), "jax_cache")
        if not isinstance(choice, str) or not choice.strip():
            raise ValueError(
                f"jaxkeras: keras.json's {CACHE_KEY!r} must be a folder, true or false, "
                f"got {choice!r}"
            )
    said = switch_word(choice)
    if said is True:
        return os.path.join(keras_home(), "jax_cache")
    if said is False:
        return None
    if choice.strip().lower() == "none":  # was read as a no before the switches had one rule
        raise ValueError(
            f"jaxkeras: {where} is {choice!r}, which is neither a folder nor a switch word: "
            f"write 0 or off for no compilation cache, or ./{choice.strip()} for a folder of "
            f"that name"
        )
    return os.path.expanduser(choice)


def enable_compilation_cache(folder: str | None = None) -> str:
    """Turns on JAX's persistent compilation cache for the whole process, so that later
    processes load what this one compiles instead of compiling it again.

    This changes JAX's global configuration (``jax_compilation_cache_dir``, and, where the
    program left JAX's defaults, a 2 GiB size cap and a 0.05 s threshold): every ``jax.jit``
    of the process is cached, not only jaxkeras's. A folder the program already gave JAX wins.

    Args:
        folder: where to keep it; default ``jax_cache`` beside keras.json
            (``$KERAS_HOME``, else ``~/.keras``).

    Returns:
        The folder in use.
    """
    if jax.config.jax_compilation_cache_dir:
        return jax.config.jax_compilation_cache_dir
    folder = os.path.expanduser(folder) if folder else os.path.join(keras_home(), "jax_cache")
    jax.config.update("jax_compilation_cache_dir", folder)
    if jax.config.jax_persistent_cache_min_compile_time_secs == 1.0:  # JAX's default
        jax.config.update("jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_SECS)
    if jax.config.jax_compilation_cache_max_size == -1:  # JAX's default: unbounded
        jax.config.update("jax_compilation_cache_max_size", CACHE_MAX_BYTES)
    compilation_cache.reset_cache()  # JAX decides whether to use it at its next compile
    return folder


def reuse_cpu_memory() -> bool:
    """Makes CPU calls reuse the memory earlier calls freed (see :mod:`jaxkeras._xla.cpu_memory`):
    sets glibc's ``malloc`` to keep freed blocks and JAX to run CPU computations on the
    calling thread. Both are process-wide; call it before JAX runs anything.

    Returns:
        Whether it applies (Linux with glibc, JAX on the CPU only, JAX not started yet); a
        warning says why when it does not.
    """
    return cpu_memory.reuse_cpu_memory()


def reusing_cpu_memory() -> bool:
    """Whether :func:`reuse_cpu_memory` has applied in this process.

    Returns:
        ``True`` once it has.
    """
    return cpu_memory.reusing()


def apply_settings(settings: dict[str, Any]) -> None:
    """Makes the process-wide settings the environment and keras.json ask for (``import
    jaxkeras`` calls it); makes none when none is asked for.

    Args:
        settings: the keras.json settings.

    Raises:
        ValueError: naming the variable or key and the value of a malformed switch.
    """
    if cpu_memory.reuse_asked(settings):
        cpu_memory.reuse_cpu_memory()
    folder = compilation_cache_asked(settings)
    if folder is not None:
        enable_compilation_cache(folder)
