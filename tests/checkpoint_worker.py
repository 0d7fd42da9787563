"""The checks of tests/test_checkpoint.py that need several devices or processes, run in a
subprocess; each writes what it measured to OUT.json, and the test asserts.

``python checkpoint_worker.py devices FOLDER OUT.json`` runs on 8 CPU devices (the test sets
``XLA_FLAGS=--xla_force_host_platform_device_count=8``): it trains a model whose variables
ModelParallel splits over a ``(2, 4)`` mesh, saves it to ``FOLDER/sharded`` (an Orbax
directory), then restores it onto the same variables made again over a ``(4, 2)`` mesh with
other layouts. The test restores the same checkpoint onto its one device.

``python checkpoint_worker.py host ID PORT FOLDER OUT.json`` is one of two processes of a
``jax.distributed`` job (4 CPU devices each) on localhost: variables split over all 8 devices,
so that each process holds half of each; it saves them and restores them onto another mesh.
(Its peak resident memory while saving, restoring and gathering the variables whole moves with
the machine's load: it is measured by hand, ``benchmarks/RESULTS.md``, "Orbax checkpoints".)
"""

from __future__ import annotations

import gc
import json
import sys

import jax
import numpy as np

MODE = sys.argv[1]
if MODE == "host":  # CPU devices of several processes talk through gloo
    jax.config.update("jax_cpu_collectives_implementation", "gloo")

import jaxkeras as K  # noqa: E402
from jaxkeras import distribution as D  # noqa: E402

SHAPES = {
    "dense_1/kernel": (64, 32),
    "dense_1/bias": (32,),
    "dense_2/kernel": (32, 8),
    "dense_2/bias": (8,),
}


def model_parallel(mesh_shape: tuple[int, int], layouts: dict[str, tuple]) -> D.ModelParallel:
    mesh = D.DeviceMesh(mesh_shape, ("batch", "model"))
    layout_map = D.LayoutMap(mesh)
    for key, axes in layouts.items():
        layout_map[key] = axes
    return D.ModelParallel(layout_map=layout_map, batch_dim_name="batch")


def describe(variable: K.Variable) -> dict:
    """The sharding of a variable's stored value, in JSON."""
    array = K.get_state([variable])[variable.name]
    spec = array.sharding.spec
    return {
        "spec": [list(a) if isinstance(a, tuple) else a for a in spec],
        "devices": len(array.sharding.device_set),
        "shard_shape": list(array.addressable_shards[0].data.shape),
    }


def build(distribution: D.ModelParallel | None) -> tuple[list[K.Variable], K.Function]:
    """The model's variables (zeros: a restore gives them their values) and a train step of
    SGD with momentum, its velocities named after their variables (so placed alike)."""
    K.clear_session()
    scope = distribution.scope() if distribution is not None else None
    if scope is not None:
        scope.__enter__()
    try:
        params = [K.zeros(shape, name=name) for name, shape in SHAPES.items()]
        slots = [K.zeros(p.shape, name=f"{p.name}/velocity") for p in params]
        x, t = K.placeholder((None, 64)), K.placeholder((None, 8))
        hidden = K.dropout(K.relu(K.dot(x, params[0]) + params[1]), 0.2, seed=3)
        loss = K.mean(K.square(K.dot(hidden, params[2]) + params[3] - t))
        updates = []
        for p, v, g in zip(params, slots, K.gradients(loss, params)):
            updates += [K.update(v, 0.9 * v - 0.1 * g), K.update_add(p, 0.9 * v - 0.1 * g)]
        step = K.function([x, t], [loss], updates=updates)
    finally:
        if scope is not None:
            scope.__exit__(None, None, None)
    return params + slots, step


def devices_run(folder: str, out: str) -> None:
    K.set_random_seed(0)
    rng = np.random.default_rng(0)
    variables, step = build(
        model_parallel(
            (2, 4),
            {
                "dense_1/kernel": (None, "model"),
                "dense_1/bias": ("model",),
                "dense_2/kernel": ("model", None),
            },
        )
    )
    K.batch_set_value(
        [(v, rng.normal(0, 0.1, v.shape)) for v in variables]
    )  # a misplaced shard shows
    xs, ts = rng.normal(size=(64, 64)), rng.normal(size=(64, 8))
    for _ in range(3):
        step([xs, ts])
    path = f"{folder}/sharded"
    K.save_checkpoint(path)
    saved = {v.name: K.get_value(v).tolist() for v in variables}
    placed = {v.name: describe(v) for v in variables}
    losses_after = [float(step([xs, ts])[0]) for _ in range(2)]  # dropout draws fresh masks

    # the same model over a (4, 2) mesh with other layouts
    del variables, step
    gc.collect()  # the variables go, so their names are free
    variables, step = build(
        model_parallel(
            (4, 2),
            {
                "dense_1/kernel": ("model", None),
                "dense_1/bias": (None,),
                "dense_2/kernel": (None, "model"),
                "dense_2/bias": ("model",),
            },
        )
    )
    K.restore_checkpoint(path)
    results = {
        "saved": saved,
        "placed": placed,
        "restored": {v.name: K.get_value(v).tolist() for v in variables},
        "replaced": {v.name: describe(v) for v in variables},
        "losses_after": losses_after,
        "losses_after_restore": [float(step([xs, ts])[0]) for _ in range(2)],
    }
    with open(out, "w") as f:
        json.dump(results, f)


def host_run(process_id: int, port: int, folder: str, out: str) -> None:
    """One host of two (4 CPU devices each), connected on localhost."""
    D.initialize(f"localhost:{port}", num_processes=2, process_id=process_id)
    count, size = 8, 2048  # 8 variables of 2048 x 2048 float32: 128 MiB in all
    layouts = {"^w": (None, "model")}
    with model_parallel((1, 8), layouts).scope():  # every variable split over both processes
        variables = [K.zeros((size, size), name=f"w{i}") for i in range(count)]
        tiny = K.zeros((8, 8), name="tiny")
    K.save_checkpoint(f"{folder}/warm-up", [tiny])  # Orbax imported, its threads started
    # random (incompressible) values, alike in both processes
    K.batch_set_value(
        [(v, np.random.default_rng(i).normal(size=v.shape)) for i, v in enumerate(variables)]
    )
    total = count * size * size * 4
    local = sum(
        s.data.nbytes for v in K.get_state(variables).values() for s in v.addressable_shards
    )
    path = f"{folder}/hosts"
    K.save_checkpoint(path, variables)
    expected = [
        np.random.default_rng(i).normal(size=(size, size)).astype("float32") for i in range(2)
    ]
    del variables
    gc.collect()  # the variables go, so their names are free
    with model_parallel((2, 4), {"^w": ("batch", "model")}).scope():  # another mesh and layout
        variables = [K.zeros((size, size), name=f"w{i}") for i in range(count)]
    K.restore_checkpoint(path, variables)
    state = K.get_state(variables[:2])
    restored_local = {
        name: [
            np.array_equal(np.asarray(s.data), expected[int(name[1:])][s.index])
            for s in array.addressable_shards
        ]
        for name, array in state.items()
    }
    results = {
        "total": total,
        "local": local,
        "restored_shards_equal": restored_local,
        "restored_spec": describe(variables[0]),
    }
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    if MODE == "devices":
        devices_run(sys.argv[2], sys.argv[3])
    else:
        host_run(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
