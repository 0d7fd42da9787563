"""Export: a compiled graph to one file that any JAX program can load and call.

:func:`export` serializes a ``K.function`` (or a Keras 2.3.1 model's ``predict``) with
``jax.export``: StableHLO for the platforms asked for, the variables' current values included
as constants, and every ``None`` dimension of a placeholder exported as a symbolic dimension, so
one file serves any batch size. Loading it needs JAX only, not jaxkeras or Keras::

    import jax
    with open("model.jax", "rb") as f:
        exported = jax.export.deserialize(f.read())
    outputs = exported.call(images)        # a list, one array per output

(:func:`load` does the same and returns a callable.) Where TensorFlow is installed,
:func:`to_saved_model` writes the same function as a TF SavedModel (through ``jax2tf``),
which ``tf.saved_model.load`` and TF Serving serve. The batch dimension (the first axis of
every input whose first dimension is ``None``) is one symbol shared by the inputs, as a model's
inputs share their batch; other ``None`` dimensions get a symbol each. The function runs in the
learning phase given (0, test, by default), with the dtype policy in effect when exporting.
Random ops draw from a fixed key: an exported function is deterministic.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from jaxkeras._engine.graph import LearningPhase
from jaxkeras.function import Function
from jaxkeras.function import function as k_function

__all__ = ["DEFAULT_PLATFORMS", "export", "load", "to_saved_model"]

DEFAULT_PLATFORMS = ("cpu", "cuda")
"""The platforms :func:`export` lowers for unless told otherwise."""


def _as_function(target: Any) -> Function:
    """A ``K.function`` as it is, or a Keras model's inputs to its outputs."""
    if isinstance(target, Function):
        return target
    inputs, outputs = getattr(target, "inputs", None), getattr(target, "outputs", None)
    if inputs is None or outputs is None:
        raise TypeError(
            f"export: target must be a K.function or a Keras model (with inputs and outputs), "
            f"got {target!r}"
        )
    return k_function(list(inputs), list(outputs), name="predict_function")


def _input_specs(f: Function) -> list[jax.ShapeDtypeStruct]:
    """The feeds' shapes and dtypes, ``None`` dimensions as symbols (``batch`` for the first
    axis of every input, one symbol for each other)."""
    fed = [x for x in f.inputs if not isinstance(x, LearningPhase)]
    specs = []
    for i, x in enumerate(fed):
        dims = []
        for axis, size in enumerate(x.shape):
            if size is not None:
                dims.append(str(int(size)))
            elif axis == 0:
                dims.append("batch")
            else:
                dims.append(f"d{i}_{axis}")
        specs.append(dims)
    scope = jax.export.SymbolicScope()
    shapes = [
        jax.export.symbolic_shape(", ".join(dims), scope=scope) if dims else () for dims in specs
    ]
    return [jax.ShapeDtypeStruct(shape, x.dtype) for shape, x in zip(shapes, fed)]


def export(
    target: Any,
    path: str | os.PathLike | None = None,
    platforms: Sequence[str] = DEFAULT_PLATFORMS,
    learning_phase: int = 0,
) -> jax.export.Exported:
    """Serializes a ``K.function`` or a Keras model's forward pass with ``jax.export``.

    Args:
        target: a ``K.function``, or a Keras 2.3.1 model (its inputs to its outputs).
        path: the file to write the serialized function to; ``None`` writes nothing.
        platforms: the JAX platforms to lower for (``'cpu'``, ``'cuda'``, ``'rocm'``, ``'tpu'``).
        learning_phase: 0 (test) or 1 (train), the phase the function runs in.

    Returns:
        The ``jax.export.Exported`` object (``.call(*feeds)`` runs it; ``.serialize()`` is what
        was written).

    Raises:
        TypeError: for a target that is neither a ``K.function`` nor a model.
        ValueError: for an unknown platform or a learning phase other than 0 or 1.
    """
    known = ("cpu", "cuda", "rocm", "tpu")
    unknown = [p for p in platforms if p not in known]
    if unknown or not platforms:
        raise ValueError(f"export: platforms must be some of {known}, got {platforms!r}")
    f, serving = _serving(target, learning_phase)
    exported = jax.export.export(jax.jit(serving), platforms=tuple(platforms))(*_input_specs(f))
    if path is not None:
        with open(path, "wb") as file:
            file.write(exported.serialize())
    return exported


def _serving(target: Any, learning_phase: int) -> tuple[Function, Callable[..., list[Any]]]:
    """The function and its pure forward pass over the feeds, the state and key fixed."""
    if learning_phase not in (0, 1):
        raise ValueError(f"export: learning_phase must be 0 or 1, got {learning_phase!r}")
    f = _as_function(target)
    state = f.state()
    key = jax.random.PRNGKey(0)

    def serving(*feeds: Any) -> list[Any]:
        outputs, _ = f.pure(state, key, list(feeds), learning_phase=learning_phase)
        return outputs

    return f, serving


def to_saved_model(target: Any, directory: str | os.PathLike, learning_phase: int = 0) -> None:
    """Writes a ``K.function`` or a Keras model's forward pass as a TensorFlow SavedModel.

    The function is converted with ``jax.experimental.jax2tf`` (its StableHLO embedded, as
    :func:`export` serializes it), with ``None`` dimensions polymorphic and the variables'
    values included; its ``serving_default`` signature takes the inputs in order
    (``input_0``, ``input_1``, ...) and returns ``output_0``, ``output_1``, ....

    Args:
        target: a ``K.function``, or a Keras 2.3.1 model.
        directory: the SavedModel directory to write.
        learning_phase: 0 (test) or 1 (train).

    Raises:
        ImportError: when TensorFlow is not installed.
        TypeError, ValueError: as :func:`export`.
    """
    try:
        import tensorflow as tf
        from jax.experimental import jax2tf
    except ImportError as err:
        raise ImportError(
            "to_saved_model needs TensorFlow (pip install tensorflow); export() needs JAX only"
        ) from err
    f, serving = _serving(target, learning_phase)
    fed = [x for x in f.inputs if not isinstance(x, LearningPhase)]
    dims = [
        [
            "b" if a == 0 and d is None else ("_" if d is None else str(d))
            for a, d in enumerate(x.shape)
        ]
        for x in fed
    ]
    polymorphic = [f"({', '.join(d)})" if d else "()" for d in dims]
    converted = jax2tf.convert(serving, polymorphic_shapes=polymorphic, with_gradient=False)
    specs = [
        tf.TensorSpec(x.shape, tf.as_dtype(np.dtype(x.dtype)), name=f"input_{i}")
        for i, x in enumerate(fed)
    ]

    def call(*feeds: Any) -> dict[str, Any]:
        return {f"output_{i}": y for i, y in enumerate(converted(*feeds))}

    module = tf.Module()
    module.serve = tf.function(call, input_signature=specs, autograph=False)
    tf.saved_model.save(module, os.fspath(directory), signatures={"serving_default": module.serve})


def _device_for(exported: jax.export.Exported, path: Any) -> jax.Device | None:
    """Where a loaded function runs: ``None`` (JAX's default device) when the export covers
    the default device's platform, else the first device of the first platform it covers that
    this process has (a function exported for ``'cpu'`` alone, loaded on a GPU machine, runs
    on its CPU).

    Raises:
        ValueError: when this process has no device of any platform the export covers.
    """
    default = jax.devices()[0]
    others = []
    for platform in exported.platforms:
        try:
            devices = jax.devices(platform)
        except RuntimeError:  # JAX's error for a platform this process has no backend for
            continue
        if default in devices:
            return None
        others.append(devices[0])
    if not others:
        raise ValueError(
            f"load: {os.fspath(path)!r} was exported for platforms {list(exported.platforms)}, "
            f"and this process has none of them (its devices: {jax.devices()}); export it again "
            "with platforms=[...] naming this machine's"
        )
    return others[0]


def load(path: str | os.PathLike) -> Callable[..., list[np.ndarray]]:
    """Loads a function written by :func:`export` (this needs JAX only).

    Args:
        path: the file.

    Returns:
        A callable taking one array per input, in order, and returning a list of NumPy arrays,
        one per output. It runs on JAX's default device when the export covers its platform,
        else on a device of a platform it covers (a CPU-only export on a GPU machine runs on
        its CPU).

    Raises:
        ValueError: when this process has no device of any platform the export covers.
    """
    with open(path, "rb") as file:
        exported = jax.export.deserialize(bytearray(file.read()))
    device = _device_for(exported, path)

    def call(*feeds: Any) -> list[np.ndarray]:
        if device is not None:
            feeds = tuple(jax.device_put(x, device) for x in feeds)
        return [np.asarray(y) for y in exported.call(*feeds)]

    call.exported = exported
    return call
