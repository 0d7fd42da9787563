"""Keras's settings (floatx, epsilon, image data format), read once from keras.json, and the
one reading of the ``JAXKERAS_*`` yes/no switches (:func:`env_switch`).

The XLA options of the functions jaxkeras compiles live in :mod:`jaxkeras._xla.options`."""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import numpy as np

_FLOATX_CHOICES = ("float16", "bfloat16", "float32", "float64")
_DATA_FORMATS = ("channels_last", "channels_first")

_settings: dict[str, Any] = {
    "floatx": "float32",
    "epsilon": 1e-7,
    "image_data_format": "channels_last",
}

# When Keras 2 loads jaxkeras as its backend, Keras's own settings module is the source of truth.
_source: dict[str, Any] = {"module": None}


def follow(module: Any) -> None:
    """Makes the getters and setters here use ``module``'s (Keras's ``backend.common``).

    Args:
        module: an object with ``floatx``, ``epsilon``, ``image_data_format`` and their setters.
    """
    _source["module"] = module
    enable_x64_for(module.floatx())


YES_WORDS = ("1", "true", "yes", "on")
"""The words a ``JAXKERAS_*`` switch reads as yes (any case, surrounding spaces ignored)."""
NO_WORDS = ("0", "false", "no", "off")
"""The words a ``JAXKERAS_*`` switch reads as no (any case, surrounding spaces ignored)."""


def switch_word(value: str) -> bool | None:
    """Reads one word of a yes/no switch.

    Args:
        value: the text, e.g. an environment variable's value.

    Returns:
        ``True`` for one of :data:`YES_WORDS`, ``False`` for one of :data:`NO_WORDS`, ``None``
        for anything else (an empty value included).
    """
    lowered = value.strip().lower()
    if lowered in YES_WORDS:
        return True
    if lowered in NO_WORDS:
        return False
    return None


def env_switch(name: str) -> bool | None:
    """Reads the yes/no environment variable ``name``: the one rule of every ``JAXKERAS_*``
    switch.

    An unset or empty (blank) variable is not said, so the default applies; a yes or no word
    (:data:`YES_WORDS`, :data:`NO_WORDS`, any case) says it; anything else is an error.

    Args:
        name: the variable, e.g. ``"JAXKERAS_EXACT_SUMS"``.

    Returns:
        ``True`` (yes), ``False`` (no) or ``None`` (not said).

    Raises:
        ValueError: naming the variable and its value when it is neither empty nor a yes or a
            no word.
    """
    value = os.environ.get(name, "")
    if not value.strip():
        return None
    said = switch_word(value)
    if said is None:
        raise ValueError(
            f"jaxkeras: ${name} must be a yes ({'/'.join(YES_WORDS)}) or a no "
            f"({'/'.join(NO_WORDS)}), or empty for the default; got {value!r}. "
            f"Set it to one of those words or unset it."
        )
    return said


def keras_home() -> str:
    """Returns the folder holding keras.json: ``$KERAS_HOME``, else ``~/.keras``."""
    return os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")


def enable_x64_for(floatx_name: Any) -> None:
    """Turns on JAX's 64-bit mode (``jax_enable_x64``, process-wide) when floatx is set to
    ``'float64'``: the user asked for 64-bit floats everywhere. Any other 64-bit request is
    narrowed instead (``jaxkeras.checks.check_dtype``).

    Args:
        floatx_name: the new floatx.
    """
    if str(floatx_name) == "float64" and not jax.config.jax_enable_x64:
        jax.config.update("jax_enable_x64", True)


def floatx() -> str:
    """Returns the default float type, as a string.

    Returns:
        One of ``'float16'``, ``'bfloat16'``, ``'float32'``, ``'float64'``.
    """
    if _source["module"] is not None:
        value = _source["module"].floatx()
        enable_x64_for(value)  # Keras's set_floatx may have asked for float64 since
        return value
    return _settings["floatx"]


def set_floatx(value: str) -> None:
    """Sets the default float type.

    ``'float64'`` turns on JAX's 64-bit mode (``jax_enable_x64``), for the whole process, so
    that float64 arrays really are 64-bit: the one process-wide setting jaxkeras makes
    without a switch of its own, since asking for float64 everywhere is that switch.

    Args:
        value: ``'float16'``, ``'bfloat16'``, ``'float32'`` or ``'float64'``.

    Raises:
        ValueError: for any other value.
    """
    value = str(np.dtype(value).name) if value in ("half", "float", "double") else value
    if value not in _FLOATX_CHOICES:
        raise ValueError(f"set_floatx: unknown floatx {value!r}; expected one of {_FLOATX_CHOICES}")
    enable_x64_for(value)
    _settings["floatx"] = str(value)
    if _source["module"] is not None:
        _source["module"].set_floatx(value)


def epsilon() -> float:
    """Returns the fuzz factor used to keep numeric expressions finite (default 1e-7).

    Returns:
        A float.
    """
    if _source["module"] is not None:
        return _source["module"].epsilon()
    return _settings["epsilon"]


def set_epsilon(value: float) -> None:
    """Sets the fuzz factor returned by :func:`epsilon`.

    Args:
        value: a non-negative number.

    Raises:
        ValueError: if ``value`` is not a non-negative real number.
    """
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"set_epsilon: epsilon must be a number, got {value!r}") from None
    if not value >= 0:
        raise ValueError(f"set_epsilon: epsilon must be >= 0, got {value!r}")
    _settings["epsilon"] = value
    if _source["module"] is not None:
        _source["module"].set_epsilon(value)


def image_data_format() -> str:
    """Returns the default image data format.

    Returns:
        ``'channels_last'`` or ``'channels_first'``.
    """
    if _source["module"] is not None:
        return _source["module"].image_data_format()
    return _settings["image_data_format"]


def set_image_data_format(data_format: str) -> None:
    """Sets the default image data format.

    Args:
        data_format: ``'channels_last'`` or ``'channels_first'``.

    Raises:
        ValueError: for any other value.
    """
    if data_format not in _DATA_FORMATS:
        raise ValueError(
            f"set_image_data_format: unknown data_format {data_format!r}; "
            f"expected one of {_DATA_FORMATS}"
        )
    _settings["image_data_format"] = str(data_format)
    if _source["module"] is not None:
        _source["module"].set_image_data_format(data_format)


def normalize_data_format(value: str | None) -> str:
    """Resolves a ``data_format`` argument: ``None`` means :func:`image_data_format`.

    Args:
        value: ``None``, ``'channels_last'`` or ``'channels_first'`` (any case).

    Returns:
        ``'channels_last'`` or ``'channels_first'``.

    Raises:
        ValueError: for any other value.
    """
    if value is None:
        return image_data_format()
    lowered = str(value).lower()
    if lowered not in _DATA_FORMATS:
        raise ValueError(f"data_format must be one of {_DATA_FORMATS}, got {value!r}")
    return lowered


def read_keras_json(path: str | None = None) -> dict[str, Any]:
    """Reads a keras.json file, when it exists; never writes it.

    Args:
        path: the file; default ``keras_home()/keras.json``.

    Returns:
        The settings (empty when there is no file).

    Raises:
        ValueError: naming the file when it is not a valid JSON object.
    """
    path = path or os.path.join(keras_home(), "keras.json")
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as err:
        raise ValueError(f"jaxkeras: cannot read Keras config file {path}: {err}") from err
    if not isinstance(data, dict):
        raise ValueError(
            f"jaxkeras: cannot read Keras config file {path}: the top level must be a JSON object"
        )
    return data


def load_keras_json(path: str | None = None) -> dict[str, Any]:
    """Applies the settings of a keras.json file, when it exists; never writes it.

    Args:
        path: the file; default ``keras_home()/keras.json``.

    Returns:
        The settings read (empty when there is no file).

    Raises:
        ValueError: naming the file when it is not valid JSON or holds an invalid setting.
    """
    path = path or os.path.join(keras_home(), "keras.json")
    data = read_keras_json(path)
    try:
        if "floatx" in data:
            set_floatx(data["floatx"])
        if "epsilon" in data:
            set_epsilon(data["epsilon"])
        if "image_data_format" in data:
            set_image_data_format(data["image_data_format"])
    except ValueError as err:
        raise ValueError(f"jaxkeras: cannot read Keras config file {path}: {err}") from err
    return data
