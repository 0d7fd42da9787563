"""What multi-backend Keras (2.2.0 to 2.3.1) needs when it loads jaxkeras as its backend.

Keras 2.2.0 is the first release that loads an external backend. Releases differ in *how*
(:func:`keras_loader` recognizes each by what its backend package does, not by its version):
2.2.0 to 2.2.4 import the backend in the package ``keras.backend`` itself and copy every name of
it that the package lacks; 2.2.5 to 2.3.1 import it in ``keras.backend.load_backend``, from which
``keras.backend`` imports a fixed list of names. Both keep the backend's name in ``_BACKEND``.

These releases predate Python 3.10 and NumPy 2 and use names they removed. When (and only when)
Keras imports jaxkeras as its backend (``KERAS_BACKEND=jaxkeras`` or keras.json), or imports it
after a program imported jaxkeras first, :func:`install` puts back exactly these names, each
only if it is missing:

- ``collections.Container``, ``collections.Mapping``, ``collections.Sequence``,
  ``collections.Iterable`` (aliases of ``collections.abc``; callbacks import ``Iterable``,
  training_utils checks losses, metrics and validation_freq with the others);
- ``inspect.ArgSpec`` and ``inspect.getargspec`` (``utils.generic_utils.has_arg``, image
  preprocessing and model loading inspect functions with them);
- ``numpy.Inf`` (callbacks), ``numpy.string_`` (HDF5 utilities), ``numpy.bool`` and
  ``numpy.int`` (Keras's NumPy reference backend), ``numpy.unicode_`` (``pad_sequences`` of
  keras_preprocessing, which Keras re-exports).

HDF5 (:mod:`jaxkeras._keras2_hdf5`): when h5py is installed, Keras's own modules read the bytes
attributes they wrote as bytes and empty attributes as empty lists, and open a file they name
without a mode as h5py 2 did (read-write, else read-only, else created); every other caller
gets h5py's behaviour.

Keras gives some of its backend's functions, layers' behaviours and callbacks only to
TensorFlow (and CNTK); :func:`install` gives them to jaxkeras too:

- ``keras.backend`` has ``clear_session``, ``get_session``, ``set_session`` and
  ``manual_variable_initialization`` (:data:`TF_ONLY_BACKEND_NAMES`: 2.2.5 to 2.3.1 re-export
  them in their TensorFlow branch only; 2.2.0 to 2.2.4 copy them with every other name);
- ``keras.layers.Lambda`` without ``output_shape`` infers its output shape by running its
  function on placeholders of the input's shape and dtype (floatx where Keras records none),
  as it does on TensorFlow (else it warns and records the input's shape);
- ``keras.callbacks.TensorBoard`` is :class:`jaxkeras.tensorboard.TensorBoard` (Keras's own
  imports TensorFlow);
- ``keras.utils.multi_gpu_model`` trains data-parallel through :mod:`jaxkeras.distribution`
  (:func:`multi_gpu_model`, in ``jaxkeras/_keras2_multi_gpu.py``).

Keras 2 has no ``BackupAndRestore``; :func:`install` adds jaxkeras's
(:class:`BackupAndRestore`, in ``jaxkeras/_keras2_backup.py``) as
``keras.callbacks.BackupAndRestore`` and has Keras's fit loop on arrays resume from its backup.

keras-contrib's ``keras_contrib.backend`` gets its TensorFlow branch's functions, and its CRF a
Viterbi decoding that runs on jaxkeras (:mod:`jaxkeras._keras_contrib`).

Theano's ``pattern_broadcast`` is not given: Keras (``PReLU``) calls it only when its backend is
Theano, and its TensorFlow backend has none either.

It also makes jaxkeras follow Keras's own floatx / epsilon / image_data_format settings, which
Keras keeps in ``keras.backend.common``, and makes ``keras.optimizers.get`` (which
``model.compile`` calls) return unchanged any object with the Keras 2 optimizer protocol
(``get_updates``, ``weights``, ``get_weights``, ``set_weights``, ``get_config``), such as
``jaxkeras.optimizers.OptaxOptimizer``; Keras accepts only its own subclasses otherwise.
Keras's fit, evaluate and predict loops announce their batch sizes to
:func:`jaxkeras._engine.ahead.plan_batch_sizes`, so an epoch's smaller last batch compiles while the
first batch does.
Nothing changes for programs that do not load jaxkeras through Keras.
"""

from __future__ import annotations

import collections
import collections.abc
import functools
import importlib.abc
import importlib.util
import inspect
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from jaxkeras import _keras2_backup, _keras2_hdf5, _keras2_multi_gpu, _keras_contrib, config
from jaxkeras._engine.ahead import plan_batch_sizes
from jaxkeras.checks import unannounced_narrowing

BackupAndRestore = _keras2_backup.BackupAndRestore
multi_gpu_model = _keras2_multi_gpu.multi_gpu_model


class ArgSpec(NamedTuple):
    """The record ``inspect.getargspec`` returned before Python 3.11."""

    args: list
    varargs: str | None
    keywords: str | None
    defaults: tuple | None


def getargspec(func: Any) -> ArgSpec:
    """``inspect.getargspec`` as it was: the positional names, ``*args``, ``**kwargs``, defaults.

    Args:
        func: a callable.

    Returns:
        An :class:`ArgSpec`.
    """
    full = inspect.getfullargspec(func)
    return ArgSpec(full.args, full.varargs, full.varkw, full.defaults)


RESTORED: dict[Any, dict[str, Any]] = {
    collections: {
        "Container": collections.abc.Container,
        "Mapping": collections.abc.Mapping,
        "Sequence": collections.abc.Sequence,
        "Iterable": collections.abc.Iterable,
    },
    inspect: {"ArgSpec": ArgSpec, "getargspec": getargspec},
    np: {"Inf": np.inf, "string_": np.bytes_, "unicode_": np.str_, "bool": bool, "int": int},
}


LOADER_MODULES = ("keras.backend.load_backend", "keras.backend")
"""Where multi-backend Keras keeps the module that imports an external backend: Keras 2.2.5
and later import it in the submodule ``keras.backend.load_backend``; Keras 2.2.0 to 2.2.4 in
the package ``keras.backend`` itself (its ``__init__`` imports the backend and copies every name
of it the package does not have yet). Both record the backend's name in ``_BACKEND``."""


def keras_loader() -> Any:
    """The module of multi-backend Keras that loads jaxkeras as its backend, or ``None``.

    The release is recognized by what its backend package does, not by its version: the first
    of :data:`LOADER_MODULES` that is imported (or being imported) and whose ``_BACKEND`` names
    jaxkeras.

    Returns:
        ``keras.backend.load_backend`` (Keras 2.2.5 to 2.3.1), ``keras.backend`` (Keras 2.2.0
        to 2.2.4), or ``None`` when Keras has not chosen jaxkeras.
    """
    for name in LOADER_MODULES:
        module = sys.modules.get(name)
        chosen = getattr(module, "__dict__", {}).get("_BACKEND")
        if chosen is not None:
            return module if "jaxkeras" in str(chosen) else None
    return None


def loaded_by_keras() -> bool:
    """Returns whether Keras's backend loader is importing (or has imported) jaxkeras."""
    return keras_loader() is not None


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``then(module)`` right after the module ``fullname`` is first imported.

    Args:
        fullname: the module's dotted name.
        then: the function to call with the module, once.
    """

    def __init__(self, fullname: str, then: Callable[[Any], None]) -> None:
        self.fullname = fullname
        self.then = then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.fullname:
            return None
        sys.meta_path.remove(self)  # once: let the ordinary finders do the finding
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            self.then(module)

        spec.loader.exec_module = exec_module
        return spec


def _install_if_loaded_by_keras(module: Any) -> None:
    if loaded_by_keras():
        install()


def watch_for_keras() -> None:
    """Arranges for :func:`install` to run if Keras later loads jaxkeras as its backend (the
    loader then gets the cached jaxkeras module, which runs no code): right after each of
    :data:`LOADER_MODULES` is imported, whichever the release has. Keras 2.2.0 to 2.2.4 import
    nothing that needs the restored names before their ``keras.backend`` is complete."""
    for name in LOADER_MODULES:
        if name not in sys.modules:
            sys.meta_path.insert(0, _AfterImport(name, _install_if_loaded_by_keras))


def _speaks_optimizer_protocol(identifier: Any) -> bool:
    """Whether ``identifier`` is an optimizer object with the Keras 2 optimizer protocol."""
    methods = ("get_updates", "get_weights", "set_weights", "get_config")
    return (
        not isinstance(identifier, (type, str, dict))
        and hasattr(identifier, "weights")
        and all(callable(getattr(identifier, m, None)) for m in methods)
    )


def _accept_protocol_optimizers(optimizers: Any) -> None:
    """Makes ``keras.optimizers.get`` return unchanged any optimizer object with the Keras 2
    protocol (such as ``jaxkeras.optimizers.OptaxOptimizer``), not only its own subclasses."""
    get = optimizers.get
    if getattr(get, "_jaxkeras", False):
        return

    @functools.wraps(get)
    def get_optimizer(identifier: Any) -> Any:
        return identifier if _speaks_optimizer_protocol(identifier) else get(identifier)

    get_optimizer._jaxkeras = True
    optimizers.get = get_optimizer


def _quiet_step_counters(optimizers: Any) -> None:
    """Makes Keras's own optimizers create their int64 step counter (``iterations``) without a
    :class:`~jaxkeras.checks.NarrowedDtypeWarning`: every ``model.compile`` makes one, which
    the user did not ask for and cannot change; in int32 it counts exactly to ``2**31 - 1``
    steps. The ``__init__`` of each optimizer class of ``keras.optimizers`` runs in
    :func:`~jaxkeras.checks.unannounced_narrowing`; a 64-bit request of the user's own still
    warns."""
    for cls in list(vars(optimizers).values()):
        if (
            isinstance(cls, type)
            and issubclass(cls, optimizers.Optimizer)
            and cls.__module__ == optimizers.__name__
            and "__init__" in vars(cls)
            and not getattr(cls.__init__, "_jaxkeras", False)
        ):
            cls.__init__ = _unannounced(cls.__init__)


def _unannounced(init: Callable[..., None]) -> Callable[..., None]:
    """``init``, its 64-bit requests narrowed without the warning."""

    @functools.wraps(init)
    def init_quietly(self: Any, *args: Any, **kwargs: Any) -> None:
        with unannounced_narrowing():
            init(self, *args, **kwargs)

    init_quietly._jaxkeras = True
    return init_quietly


_installed_for: list[Any] = []
"""The ``keras.backend.common`` module :func:`install` last ran for (a Keras imported anew
gets a new one)."""


def install() -> None:
    """Restores the names listed in the module docstring, gives jaxkeras what Keras gives
    TensorFlow only, follows Keras's settings, and lets ``keras.optimizers.get`` accept
    optimizer objects of the Keras 2 protocol. Runs once per imported Keras."""
    common = sys.modules["keras.backend.common"]
    if _installed_for and _installed_for[0] is common:
        return
    _installed_for[:] = [common]
    for module, names in RESTORED.items():
        for name, value in names.items():
            if name not in module.__dict__:
                setattr(module, name, value)
    _keras2_hdf5.restore_for_keras()
    config.follow(common)
    _complete_backend(sys.modules["keras.backend"])
    _once_imported("keras.layers.core", _infer_lambda_shapes)
    _once_imported("keras.callbacks", _use_our_tensorboard)
    _once_imported("keras.optimizers", _accept_protocol_optimizers)
    _once_imported("keras.optimizers", _quiet_step_counters)
    _once_imported("keras.engine.training_arrays", _announce_batch_sizes)
    _once_imported("keras.callbacks", _keras2_backup.use_in_keras)
    _once_imported("keras.engine.training_arrays", _keras2_backup.resume_in_fit_loop)
    _once_imported("keras.utils.multi_gpu_utils", _keras2_multi_gpu.use_in_keras)
    _once_imported("keras_contrib.backend", _keras_contrib.complete_backend)
    _once_imported("keras_contrib.layers.crf", _keras_contrib.decode_crf)


def _once_imported(fullname: str, then: Callable[[Any], None]) -> None:
    """Calls ``then(module)`` now if the module ``fullname`` is imported, else right after."""
    if fullname in sys.modules:
        then(sys.modules[fullname])
    else:
        sys.meta_path.insert(0, _AfterImport(fullname, then))


def _announce_batch_sizes(training_arrays: Any) -> None:
    """Makes Keras's fit, evaluate and predict loops announce their batch sizes (the batch
    size, and the last batch's when it is smaller) to
    :func:`jaxkeras._engine.ahead.plan_batch_sizes`, so that the last batch's compile overlaps
    the first's."""
    make_batches = training_arrays.make_batches
    if getattr(make_batches, "_jaxkeras", False):
        return

    @functools.wraps(make_batches)
    def announcing(size: int, batch_size: int) -> list:
        batches = make_batches(size, batch_size)
        plan_batch_sizes({end - start for start, end in batches})
        return batches

    announcing._jaxkeras = True
    training_arrays.make_batches = announcing


# What Keras 2.2.5-2.3.1's keras/backend/__init__.py re-exports from its backend only on TensorFlow
TF_ONLY_BACKEND_NAMES = (
    "clear_session",
    "manual_variable_initialization",
    "get_session",
    "set_session",
)


def _complete_backend(backend_package: Any) -> None:
    """Adds jaxkeras's :data:`TF_ONLY_BACKEND_NAMES` to ``keras.backend`` (which is still
    being imported: the names it imports later do not replace these)."""
    from jaxkeras import compat

    for name in TF_ONLY_BACKEND_NAMES:
        if name not in backend_package.__dict__:
            setattr(backend_package, name, getattr(compat, name))


def _symbolic_output_shape(layer: Any, input_shape: Any) -> Any:
    """The output shape(s) of a Keras ``Lambda`` layer: its function run on placeholders of
    ``input_shape`` and of the dtypes its last call saw (floatx before any call)."""
    from jaxkeras.tensors import int_shape, placeholder

    dtypes = getattr(layer, "_input_dtypes", None)  # Keras 2.2 records none: floatx
    if isinstance(input_shape, list):
        dtypes = dtypes if isinstance(dtypes, list) else [dtypes] * len(input_shape)
        inputs = [placeholder(shape=s, dtype=d) for s, d in zip(input_shape, dtypes)]
    else:
        inputs = placeholder(shape=input_shape, dtype=dtypes)
    outputs = layer.call(inputs)
    if isinstance(outputs, list):
        return [int_shape(x) for x in outputs]
    return int_shape(outputs)


def _infer_lambda_shapes(core: Any) -> None:
    """Makes ``keras.layers.Lambda`` infer a missing ``output_shape`` by running its function
    on placeholders (Keras does so only on TensorFlow and CNTK)."""
    given = core.Lambda.compute_output_shape
    if getattr(given, "_jaxkeras", False):
        return

    @functools.wraps(given)
    def compute_output_shape(self: Any, input_shape: Any) -> Any:
        if self._output_shape is None:
            return _symbolic_output_shape(self, input_shape)
        return given(self, input_shape)

    compute_output_shape._jaxkeras = True
    core.Lambda.compute_output_shape = compute_output_shape


def _use_our_tensorboard(callbacks: Any) -> None:
    """Makes ``keras.callbacks.TensorBoard`` jaxkeras's (Keras's own imports TensorFlow)."""
    from jaxkeras import tensorboard

    tensorboard.use_in_keras(callbacks)
