"""Distribution over several devices and hosts, in Keras 3's ``keras.distribution`` API, on
``jax.sharding``.

A :class:`DeviceMesh` names the axes of an array of devices (a ``jax.sharding.Mesh``). A
distribution says where values go: :class:`DataParallel` replicates every variable and splits
each batch over the devices; :class:`ModelParallel` also splits the variables whose names match
a :class:`LayoutMap`'s regular expressions. Put one in effect with :func:`set_distribution`
(process-wide) or ``with distribution.scope():`` (this thread, inside the block). Then:

- a variable made while it is in effect is placed by it (``jax.device_put`` with a
  ``NamedSharding``) and keeps that layout for its whole life: compiled functions constrain the
  new value of every updated variable to the layout of its stored value, and ``set_value``,
  ``set_state``, ``K.eval`` of an update and ``restore_checkpoint`` put new values there, so no
  call gathers or moves the state;
- every call of a ``K.function`` places each feed of rank >= 1 split along its axis 0 over the
  distribution's batch axis (a 0-d feed is replicated), and ``jax.jit`` compiles for those
  shardings. Outputs still come back as NumPy arrays; ``K.get_state`` gives the sharded
  ``jax.Array`` s and ``K.get_value`` a NumPy copy.

Random numbers do not depend on the number of devices: JAX's partitionable threefry (on by
default) makes every element's bits a function of the key and the element's position only.

Several hosts: call :func:`initialize` first on every host; ``list_devices`` then lists every
host's devices, and each host feeds its own part of the batch (see :class:`Distribution`).

The state store and compiled functions reach the distribution in effect only through
``graph.DISTRIBUTION`` (the ``graph.Distributor`` protocol); this module sets it.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from jaxkeras._engine import graph
from jaxkeras.checks import check_int

__all__ = [
    "DataParallel",
    "DeviceMesh",
    "Distribution",
    "LayoutMap",
    "ModelParallel",
    "TensorLayout",
    "distribution",
    "initialize",
    "list_devices",
    "set_distribution",
]


# ---------------------------------------------------------------------------------------------
# devices and meshes


def list_devices(device_type: str | None = None) -> list[str]:
    """Returns the devices of every process, as ``"platform:id"`` strings.

    Args:
        device_type: ``"cpu"``, ``"gpu"`` or ``"tpu"``; default the default backend's.

    Returns:
        A list such as ``["cpu:0", "cpu:1"]``.

    Raises:
        ValueError: when no device of ``device_type`` exists.
    """
    return [f"{d.platform}:{d.id}" for d in _devices(device_type)]


def _devices(device_type: str | None) -> list[Any]:
    if device_type is None:
        return jax.devices()
    if not isinstance(device_type, str):
        raise TypeError(f"list_devices: device_type must be a string, got {device_type!r}")
    try:
        return jax.devices(device_type.lower())
    except RuntimeError:
        raise ValueError(
            f"list_devices: no device of device_type {device_type!r} is available"
        ) from None


def _to_device(device: Any) -> Any:
    """A ``jax.Device`` from itself or from a ``"platform:id"`` string."""
    if isinstance(device, jax.Device):
        return device
    if isinstance(device, str):
        platform, _, number = device.rpartition(":")
        for candidate in _devices(platform or None):
            if str(candidate.id) == number:
                return candidate
        raise ValueError(f"DeviceMesh: no device is named {device!r} (see list_devices())")
    raise TypeError(
        f"DeviceMesh: devices must be jax devices or 'platform:id' strings, got {device!r}"
    )


class DeviceMesh:
    """An array of devices with named axes (a ``jax.sharding.Mesh``).

    Args:
        shape: the size of each axis, e.g. ``(2, 4)``.
        axis_names: one distinct name per axis, e.g. ``("batch", "model")``.
        devices: the devices (``jax.Device`` s or ``"platform:id"`` strings), as many as the
            shape holds; default every device of :func:`list_devices`.

    Raises:
        ValueError: when the axis names do not match the shape, or the number of devices
            differs from the size of the mesh.

    Example:
        >>> devices = K.distribution.list_devices()  # e.g. 8: a mesh (2, 4) needs 8
        >>> mesh = K.distribution.DeviceMesh((1, len(devices)), ("batch", "model"), devices)
        >>> mesh.axis_names
        ('batch', 'model')
    """

    def __init__(
        self, shape: Sequence[int], axis_names: Sequence[str], devices: Sequence[Any] | None = None
    ) -> None:
        if not isinstance(shape, (list, tuple)):
            raise TypeError(f"DeviceMesh: shape must be a tuple of ints, got {shape!r}")
        shape = tuple(check_int("DeviceMesh", "shape", n, minimum=1) for n in shape)
        if isinstance(axis_names, str) or not all(isinstance(a, str) for a in axis_names):
            raise TypeError(f"DeviceMesh: axis_names must be a list of strings, got {axis_names!r}")
        axis_names = tuple(axis_names)
        if len(axis_names) != len(shape) or len(set(axis_names)) != len(axis_names):
            raise ValueError(
                f"DeviceMesh: axis_names {axis_names} must be {len(shape)} distinct names, one "
                f"per axis of shape {shape}"
            )
        devices = _devices(None) if devices is None else [_to_device(d) for d in devices]
        size = int(np.prod(shape))
        if len(devices) != size:
            raise ValueError(
                f"DeviceMesh: a mesh of shape {shape} holds {size} devices, but {len(devices)} "
                "devices were given"
            )
        self._shape = shape
        self._axis_names = axis_names
        self._devices = np.array(devices, dtype=object).reshape(shape)
        self._mesh = Mesh(self._devices, axis_names, axis_types=(AxisType.Auto,) * len(shape))

    @property
    def shape(self) -> tuple[int, ...]:
        """The size of each axis."""
        return self._shape

    @property
    def axis_names(self) -> tuple[str, ...]:
        """The name of each axis."""
        return self._axis_names

    @property
    def devices(self) -> np.ndarray:
        """The devices, as an array of ``jax.Device`` s of the mesh's shape."""
        return self._devices

    @property
    def backend_mesh(self) -> Mesh:
        """The ``jax.sharding.Mesh``."""
        return self._mesh

    def axis_size(self, name: str) -> int:
        """Returns the size of the axis called ``name``.

        Raises:
            ValueError: when the mesh has no such axis.
        """
        if name not in self._axis_names:
            raise ValueError(f"DeviceMesh: no axis is named {name!r}; axes: {self._axis_names}")
        return self._shape[self._axis_names.index(name)]

    def __repr__(self) -> str:
        return f"<DeviceMesh shape={self._shape} axis_names={self._axis_names}>"


class TensorLayout:
    """How an array is split over a mesh: one mesh axis name (or ``None``) per dimension.

    Args:
        axes: per dimension, the name of the mesh axis it is split over, or ``None`` to keep it
            whole, e.g. ``(None, "model")``.
        device_mesh: the mesh; a :class:`LayoutMap` sets its own when left ``None``.

    Raises:
        ValueError: when an axis name is not one of the mesh's, or is used twice.
    """

    def __init__(self, axes: Sequence[str | None], device_mesh: DeviceMesh | None = None) -> None:
        if isinstance(axes, str) or not isinstance(axes, (list, tuple)):
            raise TypeError(f"TensorLayout: axes must be a tuple of axis names, got {axes!r}")
        for axis in axes:
            if axis is not None and not isinstance(axis, str):
                raise TypeError(f"TensorLayout: each axis must be a name or None, got {axis!r}")
        named = [a for a in axes if a is not None]
        if len(set(named)) != len(named):
            raise ValueError(f"TensorLayout: axes {tuple(axes)} name a mesh axis twice")
        self._axes = tuple(axes)
        self._device_mesh: DeviceMesh | None = None
        if device_mesh is not None:
            self.device_mesh = device_mesh

    @property
    def axes(self) -> tuple[str | None, ...]:
        """The mesh axis (or ``None``) of each dimension."""
        return self._axes

    @property
    def device_mesh(self) -> DeviceMesh | None:
        """The mesh (settable; its axis names must include the layout's)."""
        return self._device_mesh

    @device_mesh.setter
    def device_mesh(self, mesh: DeviceMesh) -> None:
        if not isinstance(mesh, DeviceMesh):
            raise TypeError(f"TensorLayout: device_mesh must be a DeviceMesh, got {mesh!r}")
        for axis in self._axes:
            if axis is not None:
                mesh.axis_size(axis)  # raises for a name the mesh lacks
        self._device_mesh = mesh

    @property
    def backend_layout(self) -> NamedSharding:
        """The ``jax.sharding.NamedSharding``.

        Raises:
            ValueError: when the layout has no mesh yet.
        """
        if self._device_mesh is None:
            raise ValueError(f"TensorLayout {self._axes}: its device_mesh is not set")
        return NamedSharding(self._device_mesh.backend_mesh, PartitionSpec(*self._axes))

    def __repr__(self) -> str:
        return f"<TensorLayout axes={self._axes}>"


class LayoutMap(MutableMapping):
    """Variable layouts keyed by regular expressions over variable names.

    ``layout_map[name]`` is the layout of the key equal to ``name``, else of the first key
    (in insertion order) that ``re.search`` finds in ``name``, else ``None``. Values may be
    :class:`TensorLayout` s or tuples of axis names, e.g.
    ``layout_map["dense.*/kernel"] = (None, "model")``.

    Args:
        device_mesh: the mesh every layout of the map uses.
    """

    def __init__(self, device_mesh: DeviceMesh) -> None:
        if not isinstance(device_mesh, DeviceMesh):
            raise TypeError(f"LayoutMap: device_mesh must be a DeviceMesh, got {device_mesh!r}")
        self._device_mesh = device_mesh
        self._layouts: dict[str, TensorLayout] = {}

    @property
    def device_mesh(self) -> DeviceMesh:
        """The mesh of every layout."""
        return self._device_mesh

    def __getitem__(self, key: str) -> TensorLayout | None:
        if key in self._layouts:
            return self._layouts[key]
        for pattern, layout in self._layouts.items():
            if re.search(pattern, key):
                return layout
        return None

    def __setitem__(self, key: str, layout: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(f"LayoutMap: keys must be regular expressions (str), got {key!r}")
        try:
            re.compile(key)
        except re.error as err:
            raise ValueError(f"LayoutMap: key {key!r} is not a regular expression: {err}") from None
        if not isinstance(layout, TensorLayout):
            layout = TensorLayout(layout)
        if layout.device_mesh is None:
            layout.device_mesh = self._device_mesh
        elif layout.device_mesh is not self._device_mesh:
            raise ValueError(f"LayoutMap: the layout for {key!r} is on another device mesh")
        self._layouts[key] = layout

    def __delitem__(self, key: str) -> None:
        del self._layouts[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._layouts)

    def __len__(self) -> int:
        return len(self._layouts)


# ---------------------------------------------------------------------------------------------
# distributions


class Distribution:
    """Where variables and batches go: the base of :class:`DataParallel` and
    :class:`ModelParallel` (it implements ``graph.Distributor``).

    Batches: every feed of rank >= 1 of a ``K.function`` call is split along its axis 0 over
    the mesh axis ``batch_dim_name`` (a 0-d feed is replicated); the batch size must be a
    multiple of that axis's size. With several processes, each process feeds its own part of
    the batch (``jax.make_array_from_process_local_data``), and outputs come back whole on
    every process.

    Args:
        device_mesh: the mesh.
        batch_dim_name: the mesh axis batches are split over.
    """

    def __init__(self, device_mesh: DeviceMesh, batch_dim_name: str) -> None:
        if not isinstance(device_mesh, DeviceMesh):
            raise TypeError(f"{self._fn}: device_mesh must be a DeviceMesh, got {device_mesh!r}")
        device_mesh.axis_size(batch_dim_name)  # raises for a name the mesh lacks
        self._device_mesh = device_mesh
        self._batch_dim_name = batch_dim_name
        mesh = device_mesh.backend_mesh
        self._replicated = NamedSharding(mesh, PartitionSpec())
        self._batches = NamedSharding(mesh, PartitionSpec(batch_dim_name))
        self._processes = len({d.process_index for d in device_mesh.devices.flat})
        # how many parts of a batch this process feeds: its devices' distinct places on the
        # batch axis (the whole axis with one process)
        axis = device_mesh.axis_names.index(batch_dim_name)
        rows = np.moveaxis(device_mesh.devices, axis, 0).reshape(device_mesh.shape[axis], -1)
        here = sum(any(d.process_index == jax.process_index() for d in row) for row in rows)
        self._parts = max(here, 1)

    @property
    def _fn(self) -> str:
        return type(self).__name__

    @property
    def device_mesh(self) -> DeviceMesh:
        """The mesh."""
        return self._device_mesh

    @property
    def batch_dim_name(self) -> str:
        """The mesh axis batches are split over."""
        return self._batch_dim_name

    def get_data_layout(self, data_shape: Sequence[int]) -> TensorLayout:
        """Returns the layout of a batch of shape ``data_shape``: split along axis 0.

        Args:
            data_shape: the batch's shape.
        """
        axes = [None] * len(data_shape)
        if axes:
            axes[0] = self._batch_dim_name
        return TensorLayout(axes, self._device_mesh)

    def get_variable_layout(self, variable: Any) -> TensorLayout:
        """Returns the layout of a variable (replicated here; see :class:`ModelParallel`).

        Args:
            variable: a variable (anything with ``name`` and ``shape``).
        """
        return TensorLayout([None] * len(variable.shape), self._device_mesh)

    @contextlib.contextmanager
    def scope(self) -> Iterator[Distribution]:
        """A context in which this distribution is in effect in this thread.

        Yields:
            The distribution.
        """
        with graph.DISTRIBUTION.scoped(self):
            yield self

    # graph.Distributor -------------------------------------------------------------------------

    def variable_layout(self, name: str, shape: tuple[int, ...]) -> NamedSharding:
        """Returns the sharding of a new variable (see ``graph.Distributor``).

        Raises:
            ValueError: naming the variable when its layout does not fit its shape.
        """
        layout = self.get_variable_layout(_VariableSpec(name, shape))
        if len(layout.axes) != len(shape):
            raise ValueError(
                f"{self._fn}: layout {layout.axes} has {len(layout.axes)} axes, but variable "
                f"{name!r} has shape {shape}"
            )
        for dim, axis in zip(shape, layout.axes):
            if axis is not None and dim % self._device_mesh.axis_size(axis):
                raise ValueError(
                    f"{self._fn}: variable {name!r} of shape {shape} cannot be split by layout "
                    f"{layout.axes}: {dim} is not a multiple of {self._device_mesh.axis_size(axis)}"
                    f", the size of mesh axis {axis!r}"
                )
        return layout.backend_layout

    def place_feeds(self, feeds: Sequence[Any]) -> list[Any]:
        """Returns the feeds of a call split along their batch axis (see ``graph.Distributor``).

        Raises:
            ValueError: naming the batch size and the axis size when the batch axis does not
                divide a feed's batch.
        """
        return [self._place_feed(value) for value in feeds]

    def _place_feed(self, value: Any) -> Any:
        if not isinstance(value, (np.ndarray, jax.Array)):
            return value  # a sparse feed: JAX places it
        if value.ndim == 0:
            return jax.device_put(value, self._replicated)
        if value.shape[0] % self._parts:
            raise ValueError(
                f"K.function under {self._fn}: the batch size {value.shape[0]} of a feed of "
                f"shape {tuple(value.shape)} is not a multiple of {self._parts}, the size of "
                f"the data-parallel mesh axis {self._batch_dim_name!r}"
                + (" on this process" if self._processes > 1 else "")
            )
        if self._processes > 1:
            return jax.make_array_from_process_local_data(self._batches, np.asarray(value))
        return jax.device_put(value, self._batches)

    def output_layout(self) -> NamedSharding | None:
        """Returns the outputs' sharding: replicated with several processes (so each can read
        them), else ``None`` (see ``graph.Distributor``)."""
        return self._replicated if self._processes > 1 else None

    def __repr__(self) -> str:
        return f"<{self._fn} mesh={self._device_mesh} batch_dim_name={self._batch_dim_name!r}>"


class _VariableSpec:
    """The name and shape of a variable being made (what ``get_variable_layout`` reads)."""

    def __init__(self, name: str, shape: tuple[int, ...]) -> None:
        self.name, self.path, self.shape = name, name, shape


class DataParallel(Distribution):
    """Replicates every variable and splits every batch over the devices.

    Args:
        device_mesh: a mesh whose first axis batches are split over; other axes replicate.
        devices: the devices of a one-axis mesh named ``"batch"`` (when ``device_mesh`` is
            not given); default every device.

    Raises:
        ValueError: when both arguments are given.

    Example:
        >>> with K.distribution.DataParallel().scope():  # or set_distribution(...)
        ...     w = K.variable(np.ones((2, 3)))
        >>> K.get_state([w])[w.name].sharding.is_fully_replicated
        True
    """

    def __init__(
        self, device_mesh: DeviceMesh | None = None, devices: Sequence[Any] | None = None
    ) -> None:
        if device_mesh is not None and devices is not None:
            raise ValueError("DataParallel: give device_mesh or devices, not both")
        if device_mesh is None:
            devices = _devices(None) if devices is None else list(devices)
            device_mesh = DeviceMesh((len(devices),), ("batch",), devices)
        if not isinstance(device_mesh, DeviceMesh):
            raise TypeError(f"DataParallel: device_mesh must be a DeviceMesh, got {device_mesh!r}")
        super().__init__(device_mesh, device_mesh.axis_names[0])


class ModelParallel(Distribution):
    """Splits the variables a :class:`LayoutMap` matches, replicates the others, and splits
    every batch over the mesh axis ``batch_dim_name``.

    Args:
        device_mesh: the mesh (Keras 3's older form); default ``layout_map.device_mesh``.
        layout_map: the variables' layouts, by regular expressions over variable names (the
            first matching key wins).
        batch_dim_name: the mesh axis batches are split over; default the mesh's first axis.

    Raises:
        ValueError: when ``layout_map`` is missing, or ``device_mesh`` is not its mesh.

    Example:
        >>> n = len(K.distribution.list_devices())
        >>> mesh = K.distribution.DeviceMesh((1, n), ("batch", "model"))
        >>> layout_map = K.distribution.LayoutMap(mesh)
        >>> layout_map["dense.*/kernel"] = (None, "model")
        >>> model_parallel = K.distribution.ModelParallel(layout_map=layout_map)
        >>> with model_parallel.scope():
        ...     kernel = K.variable(np.zeros((4, 8 * n)), name="dense_1/kernel")
        >>> K.get_state([kernel])[kernel.name].sharding.shard_shape((4, 8 * n))
        (4, 8)
    """

    def __init__(
        self,
        device_mesh: DeviceMesh | None = None,
        layout_map: LayoutMap | None = None,
        batch_dim_name: str | None = None,
    ) -> None:
        if not isinstance(layout_map, LayoutMap):
            raise ValueError(f"ModelParallel: layout_map must be a LayoutMap, got {layout_map!r}")
        if device_mesh is not None and device_mesh is not layout_map.device_mesh:
            raise ValueError("ModelParallel: device_mesh must be layout_map.device_mesh")
        mesh = layout_map.device_mesh
        if batch_dim_name is not None and not isinstance(batch_dim_name, str):
            raise TypeError(f"ModelParallel: batch_dim_name must be a str, got {batch_dim_name!r}")
        super().__init__(mesh, batch_dim_name or mesh.axis_names[0])
        self._layout_map = layout_map

    @property
    def layout_map(self) -> LayoutMap:
        """The variables' layouts."""
        return self._layout_map

    def get_variable_layout(self, variable: Any) -> TensorLayout:
        """Returns the layout the layout map gives the variable's name, else replicated.

        Args:
            variable: a variable (anything with ``name`` and ``shape``).
        """
        layout = self._layout_map[variable.name]
        return super().get_variable_layout(variable) if layout is None else layout


# ---------------------------------------------------------------------------------------------
# the distribution in effect, and several hosts


def set_distribution(value: Distribution | None) -> None:
    """Puts a distribution in effect for the whole process (``None``: one device again).

    Variables made afterwards are placed by it and ``K.function`` calls split their feeds by
    it; variables made before keep their place. ``clear_session`` does not reset it.

    Args:
        value: a :class:`Distribution`, or ``None``.
    """
    if value is not None and not isinstance(value, Distribution):
        raise TypeError(f"set_distribution: value must be a Distribution or None, got {value!r}")
    graph.DISTRIBUTION.default = value


def distribution() -> Distribution | None:
    """Returns the distribution in effect in this thread.

    Returns:
        The innermost ``scope()``'s distribution, else the one :func:`set_distribution` set,
        else ``None``.
    """
    return graph.DISTRIBUTION.current()


def initialize(
    job_addresses: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> None:
    """Connects this process to the others of a multi-host job (``jax.distributed.initialize``).

    Call it on every host, before anything else uses JAX. Afterwards :func:`list_devices`
    lists every host's devices, and meshes may span them. Left ``None``, each argument comes
    from the environment as JAX finds it (Cloud TPU, SLURM, Open MPI, Kubernetes), or from
    Keras 3's variables ``KERAS_DISTRIBUTION_JOB_ADDRESSES``,
    ``KERAS_DISTRIBUTION_NUM_PROCESSES`` and ``KERAS_DISTRIBUTION_PROCESS_ID``.

    Args:
        job_addresses: the addresses of the job's processes, comma-separated
            (``"10.0.0.1:1234,10.0.0.2:1234"``); the first is the coordinator's. A single
            address is the coordinator's.
        num_processes: how many processes the job has.
        process_id: this process's index, from 0.
    """
    job_addresses = job_addresses or os.environ.get("KERAS_DISTRIBUTION_JOB_ADDRESSES")
    if num_processes is None and "KERAS_DISTRIBUTION_NUM_PROCESSES" in os.environ:
        num_processes = int(os.environ["KERAS_DISTRIBUTION_NUM_PROCESSES"])
    if process_id is None and "KERAS_DISTRIBUTION_PROCESS_ID" in os.environ:
        process_id = int(os.environ["KERAS_DISTRIBUTION_PROCESS_ID"])
    if job_addresses is not None and not isinstance(job_addresses, str):
        raise TypeError(f"initialize: job_addresses must be a string, got {job_addresses!r}")
    if num_processes is not None:
        num_processes = check_int("initialize", "num_processes", num_processes, minimum=1)
    if process_id is not None:
        process_id = check_int("initialize", "process_id", process_id)
        if num_processes is not None and process_id >= num_processes:
            raise ValueError(
                f"initialize: process_id {process_id} must be less than num_processes "
                f"{num_processes}"
            )
    coordinator = job_addresses.split(",")[0].strip() if job_addresses else None
    jax.distributed.initialize(
        coordinator_address=coordinator, num_processes=num_processes, process_id=process_id
    )
