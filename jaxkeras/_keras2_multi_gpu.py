"""``keras.utils.multi_gpu_model`` for Keras 2 on jaxkeras: data parallelism through
:mod:`jaxkeras.distribution`.

Keras 2's own ``multi_gpu_model`` (TensorFlow only) builds a replica of the template model per
GPU, feeds each a slice of the batch and concatenates the outputs. On jaxkeras the returned
model is a Keras ``Model`` over the template's own inputs, layers and outputs (so its weights
*are* the template's: ``save``/``save_weights`` on the template save what the parallel model
trained), whose training, evaluation and prediction functions run under a
:class:`~jaxkeras.distribution.DataParallel` over the chosen devices: each batch is split
over them, every variable is replicated on them, and XLA inserts the gradient all-reduce. The
numbers are the one-device model's (up to the order of the sums).

``gpus`` counts or names entries of ``jax.devices()``, the default backend's devices: GPUs on
a GPU machine, TPU cores on a TPU VM, CPU devices on a CPU-only machine (several with
``XLA_FLAGS=--xla_force_host_platform_device_count=N``). ``cpu_merge`` and
``cpu_relocation`` are accepted and change nothing: there is no merge step to place (outputs
come back whole, as NumPy arrays) and the weights are not bound to a device when they are made.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from jaxkeras.distribution import DataParallel, Distribution

__all__ = ["multi_gpu_model"]


def _device_name(device: Any) -> str:
    return f"{device.platform}:{device.id}"


def _device_indices(gpus: Any, available: int) -> list[int]:
    """The indices into ``jax.devices()`` that ``gpus`` asks for (checked as Keras checks it).

    Raises:
        TypeError: for a ``gpus`` that is not an int, a list of ints or ``None``.
        ValueError: for fewer than two devices, repeated ids, or more devices than there are.
    """
    if (
        gpus is None
        or (isinstance(gpus, (list, tuple)) and not gpus)
        or (isinstance(gpus, int) and not isinstance(gpus, bool) and gpus == 0)
    ):
        gpus = available  # as Keras: every visible device when not given
    if isinstance(gpus, (list, tuple)):
        if len(gpus) <= 1:
            raise ValueError(
                "multi_gpu_model: for multi-gpu usage to be effective, call it with "
                f"len(gpus) >= 2. Received: gpus={list(gpus)}"
            )
        for g in gpus:
            if isinstance(g, bool) or not isinstance(g, (int, np.integer)):
                raise TypeError(
                    f"multi_gpu_model: gpus must list device ids (ints), got {g!r} in {gpus!r}"
                )
        ids = [int(g) for g in gpus]
        if len(set(ids)) != len(ids):
            raise ValueError(f"multi_gpu_model: gpus lists a device twice: gpus={list(gpus)}")
    elif isinstance(gpus, (int, np.integer)) and not isinstance(gpus, bool):
        if gpus <= 1:
            raise ValueError(
                "multi_gpu_model: for multi-gpu usage to be effective, call it with "
                f"gpus >= 2. Received: gpus={int(gpus)}"
            )
        ids = list(range(int(gpus)))
    else:
        raise TypeError(
            f"multi_gpu_model: gpus must be an int, a list of device ids or None, got {gpus!r}"
        )
    return ids


class _Distributed:
    """A Keras training/evaluation/prediction function run under a distribution: a batch the
    devices divide is split over them; any other (an epoch's smaller last batch) runs whole
    on each of them, which gives the same numbers.

    Args:
        function: the ``K.function`` Keras made.
        distribution: the data-parallel distribution.
    """

    def __init__(self, function: Callable[..., Any], distribution: Distribution) -> None:
        self.function = function
        self.distribution = distribution
        self._parts = distribution.device_mesh.axis_size(distribution.batch_dim_name)

    def _splits(self, inputs: Sequence[Any]) -> bool:
        return all(
            np.ndim(x) == 0 or np.shape(x)[0] % self._parts == 0
            for x in inputs
            if isinstance(x, (np.ndarray, jax.Array))
        )

    def __call__(self, inputs: Sequence[Any]) -> Any:
        if self._splits(inputs):
            with self.distribution.scope():
                return self.function(inputs)
        return self.function(inputs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.function, name)


_classes: dict[Any, type] = {}


def _parallel_class(model_class: type) -> type:
    """The subclass of Keras's ``Model`` whose functions run under a distribution (one per
    imported Keras)."""
    if model_class in _classes:
        return _classes[model_class]

    class DataParallelModel(model_class):
        """A Keras model over a template's layers that trains data-parallel (made by
        ``multi_gpu_model``)."""

        def _distributed(self, name: str, make: Callable[[], None]) -> None:
            distribution = self._jaxkeras_distribution
            with distribution.scope():  # variables made now (optimizer slots) are replicated
                make()
            function = getattr(self, name)
            if function is not None and not isinstance(function, _Distributed):
                setattr(self, name, _Distributed(function, distribution))

        def _make_train_function(self) -> None:
            self._distributed("train_function", super()._make_train_function)

        def _make_test_function(self) -> None:
            self._distributed("test_function", super()._make_test_function)

        def _make_predict_function(self) -> None:
            self._distributed("predict_function", super()._make_predict_function)

    DataParallelModel.__module__ = __name__
    _classes[model_class] = DataParallelModel
    return DataParallelModel


def multi_gpu_model(
    model: Any,
    gpus: int | Sequence[int] | None = None,
    cpu_merge: bool = True,
    cpu_relocation: bool = False,
) -> Any:
    """Returns a model that trains ``model`` data-parallel over several devices
    (``keras.utils.multi_gpu_model`` when Keras loads jaxkeras).

    The returned model shares the template's layers and weights: compile and fit it, then save
    the template (``model.save`` / ``model.save_weights``). Each batch is split over the
    devices, so choose a ``batch_size`` they divide (a batch they do not divide, such as an
    epoch's smaller last one, runs whole on each device, with the same numbers).

    Args:
        model: a Keras 2 model (the template).
        gpus: how many devices (the first ``gpus`` of ``jax.devices()``), or a list of indices
            into ``jax.devices()``; default (``None``) every device. At least two.
        cpu_merge: accepted for Keras's API; changes nothing (outputs come back whole).
        cpu_relocation: accepted for Keras's API; changes nothing (the template's weights are
            used as they are, not cloned).

    Returns:
        A Keras ``Model`` with the template's inputs, layers and outputs.

    Raises:
        ValueError: for fewer than two devices, or more (or other) devices than
            ``jax.devices()`` has, in Keras's words; when Keras is not imported.
        TypeError: for a ``model`` that is not a Keras model or a bad ``gpus``.

    Example:
        >>> parallel = keras.utils.multi_gpu_model(model, gpus=8)  # doctest: +SKIP
        >>> parallel.compile("adam", "categorical_crossentropy")  # doctest: +SKIP
        >>> parallel.fit(x, y, batch_size=256)  # doctest: +SKIP
        >>> model.save("model.h5")  # doctest: +SKIP
    """
    training = sys.modules.get("keras.engine.training")
    if training is None:
        raise ValueError(
            "multi_gpu_model: needs Keras 2 loaded with the jaxkeras backend (import keras "
            "with KERAS_BACKEND=jaxkeras first)"
        )
    if not isinstance(model, training.Model):
        raise TypeError(f"multi_gpu_model: model must be a Keras Model, got {model!r}")
    devices = jax.devices()
    ids = _device_indices(gpus, len(devices))
    if any(i < 0 or i >= len(devices) for i in ids):
        wanted = [f"{devices[0].platform}:{i}" for i in ids]
        raise ValueError(
            f"To call `multi_gpu_model` with `gpus={gpus}`, we expect the following devices "
            f"to be available: {wanted}. However this machine only has: "
            f"{[_device_name(d) for d in devices]}. Try reducing `gpus`."
        )
    if not model.built or not getattr(model, "inputs", None):
        raise ValueError(
            f"multi_gpu_model: model {model.name!r} has no inputs yet: build it first (give its "
            "first layer an input_shape, or call it on data)"
        )
    distribution = DataParallel(devices=[devices[i] for i in ids])
    parallel = _parallel_class(training.Model)(
        model.inputs, model.outputs, name=f"{model.name}_data_parallel"
    )
    parallel._jaxkeras_distribution = distribution
    return parallel


def use_in_keras(multi_gpu_utils: Any) -> None:
    """Makes :func:`multi_gpu_model` Keras's ``keras.utils.multi_gpu_model``.

    Args:
        multi_gpu_utils: the imported ``keras.utils.multi_gpu_utils`` module.
    """
    original = multi_gpu_utils.__dict__.get("multi_gpu_model")
    multi_gpu_utils.multi_gpu_model = multi_gpu_model
    utils = sys.modules.get("keras.utils")
    if utils is not None and utils.__dict__.get("multi_gpu_model") is original:
        utils.multi_gpu_model = multi_gpu_model
