"""jaxkeras.distribution: the Keras-3-style API in this process (one CPU device), and training
on 8 CPU devices and on two hosts in subprocesses (tests/distribution_worker.py).

JAX fixes its device count when it starts (conftest.py asks for one device), so the checks that
need 8 devices run in one subprocess started with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``, which writes what it measured to a JSON
file; the assertions are here. XLA dumps every module that process compiles, so the tests can
check that no compiled computation gathers a value (no all-gather). The two-host checks run two
processes of 4 CPU devices each, connected by ``jax.distributed`` on localhost.

References: each distributed run is compared with the same program run on one device (to 1e-5,
the brief's tolerance; partitioned sums change float32 rounding), and the one-device run is
checked to learn; shard shapes are the variable's shape divided by the mesh axis sizes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxkeras as K
from jaxkeras import distribution as D
from tests.helpers import run_hosts

WORKER = str(Path(__file__).with_name("distribution_worker.py"))


@pytest.fixture(autouse=True)
def _no_distribution():
    D.set_distribution(None)
    yield
    D.set_distribution(None)


def _env(tmp: Path, devices: int, dump: bool) -> dict:
    flags = f"--xla_force_host_platform_device_count={devices}"
    if dump:
        flags += f" --xla_dump_to={tmp / 'hlo'} --xla_dump_hlo_as_text"
    return dict(
        os.environ,
        XLA_FLAGS=flags,
        KERAS_BACKEND="jaxkeras",
        KERAS_HOME=str(tmp / "keras"),
        JAXKERAS_COMPILATION_CACHE="off",  # every module compiles (and is dumped) here
    )


@pytest.fixture(scope="module")
def eight(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("distribution")
    out = tmp / "out.json"
    proc = subprocess.run(
        [sys.executable, WORKER, "devices", str(out)],
        env=_env(tmp, 8, dump=True),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(out.read_text())
    results["hlo"] = {p.name: p.read_text() for p in (tmp / "hlo").glob("*after_optimizations.txt")}
    return results


@pytest.fixture(scope="module")
def hosts(tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("hosts")
    return run_hosts(WORKER, [], tmp, _env(tmp, 4, dump=False), timeout=300)


# ---------------------------------------------------------------------------------------------
# 8 devices


MODELS = ("mlp", "convnet")
# shard shapes under the model-parallel layouts of the worker (mesh batch=2, model=4)
MODEL_PARALLEL_SHARDS = {
    "mlp": {
        "dense_1/kernel": [64, 8],
        "dense_1/bias": [8],
        "dense_2/kernel": [8, 10],
        "dense_2/bias": [10],
    },
    "convnet": {
        "conv_1/kernel": [3, 3, 1, 2],
        "conv_1/bias": [2],
        "dense_3/kernel": [32, 10],
        "dense_3/bias": [10],
    },
}
FULL_SHAPES = {
    "mlp": {"dense_1/kernel": [64, 32], "dense_1/bias": [32], "dense_2/kernel": [32, 10]},
    "convnet": {"conv_1/kernel": [3, 3, 1, 8], "conv_1/bias": [8], "dense_3/kernel": [128, 10]},
}


@pytest.mark.slow
def test_eight_devices_listed(eight):
    assert eight["devices"] == [f"cpu:{i}" for i in range(8)]


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_single_device_run_learns(eight, model):
    losses = eight[model]["single"]["losses"]
    assert len(losses) == 20
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("how", ["data_parallel", "model_parallel"])
def test_distributed_training_matches_one_device(eight, model, how):
    single, run = eight[model]["single"], eight[model][how]
    np.testing.assert_allclose(run["losses"], single["losses"], rtol=1e-5, atol=1e-5)
    assert run["weights"].keys() == single["weights"].keys()
    for name, value in single["weights"].items():
        np.testing.assert_allclose(run["weights"][name], value, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("when", ["placed", "trained"])
def test_data_parallel_replicates_variables(eight, model, when):
    layouts = eight[model]["data_parallel"][when]
    single = eight[model]["single"]["weights"]
    assert layouts.keys() == single.keys()
    for name, layout in layouts.items():
        assert layout["devices"] == 8
        assert layout["replicated"]
        assert layout["shard_shape"] == list(np.shape(single[name]))


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("when", ["placed", "trained"])
def test_model_parallel_splits_variables_by_layout_map(eight, model, when):
    layouts = eight[model]["model_parallel"][when]
    assert {n: v["shard_shape"] for n, v in layouts.items()} == MODEL_PARALLEL_SHARDS[model]
    for name, layout in layouts.items():
        assert layout["devices"] == 8
        assert layout["replicated"] == (name not in FULL_SHAPES[model])


@pytest.mark.slow
def test_one_device_run_is_on_one_device(eight):
    for model in MODELS:
        for layout in eight[model]["single"]["trained"].values():
            assert layout["devices"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("how", ["single", "data_parallel", "model_parallel"])
def test_get_value_is_numpy_copy_of_get_state(eight, how):
    assert eight["mlp"][how]["state_matches_value"]


@pytest.mark.slow
@pytest.mark.parametrize("how,axis", [("data_parallel", 8), ("model_parallel", 2)])
def test_batch_the_axis_does_not_divide_raises(eight, how, axis):
    message = eight["mlp"][how]["odd_batch_error"]
    assert "batch size 13" in message
    assert f"multiple of {axis}" in message
    assert "'batch'" in message


@pytest.mark.slow
def test_random_numbers_fresh_per_call_and_independent_of_device_count(eight):
    single, split = eight["random"]["single"], eight["random"]["data_parallel"]
    assert single[0] != single[1]  # each call draws fresh numbers
    np.testing.assert_array_equal(split, single)
    kept = np.asarray(single[0]) != 0  # dropout(0.5) of ones: 0 or 2
    assert 0.2 < kept.mean() < 0.8
    np.testing.assert_array_equal(np.asarray(single[0])[kept], 2.0)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["set_value", "set_state", "eval_update", "restore_checkpoint"])
def test_writes_keep_a_variables_layout(eight, how):
    layout = eight["writes"][how]
    assert layout["devices"] == 8
    assert layout["shard_shape"] == [4, 2]
    assert eight["writes"]["value"] == np.full((4, 8), 3.0).tolist()


@pytest.mark.slow
def test_optax_optimizer_slots_are_placed_like_their_params(eight):
    single, split = eight["mlp_optax"]["single"], eight["mlp_optax"]["model_parallel"]
    np.testing.assert_allclose(split["losses"], single["losses"], rtol=1e-5, atol=1e-5)
    for name, value in single["weights"].items():
        np.testing.assert_allclose(split["weights"][name], value, rtol=1e-5, atol=1e-5)
    assert len(split["slots"]) == 8  # Adam's mu and nu of each of the four params
    for slot, layout in split["slots"].items():
        (param,) = [p for p in split["trained"] if slot.endswith(p)]
        assert layout["shard_shape"] == split["trained"][param]["shard_shape"], slot


@pytest.mark.slow
def test_nothing_gathers(eight):
    hlo = eight["hlo"]
    steps = [name for name, text in hlo.items() if "all-reduce(" in text]
    assert steps, "no compiled module sums over devices: the dump missed the distributed steps"
    gathered = [name for name, text in hlo.items() if "all-gather" in text]
    assert gathered == []


@pytest.mark.slow
@pytest.mark.parametrize("how", ["scope", "set_distribution"])
def test_keras2_fit_data_parallel_matches_one_device(eight, how):
    single, run = eight["keras"]["single"], eight["keras"][how]
    assert len(single["losses"]) == 2
    assert single["losses"][1] < single["losses"][0]
    np.testing.assert_allclose(run["losses"], single["losses"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run["predictions"], single["predictions"], atol=1e-5)
    assert run["trained"].keys() == single["trained"].keys()
    for layout in run["trained"].values():
        assert layout["devices"] == 8
        assert layout["replicated"]


# ---------------------------------------------------------------------------------------------
# two hosts


@pytest.mark.slow
@pytest.mark.parametrize("how", ["data_parallel", "model_parallel"])
def test_two_hosts_train_as_one_device(hosts, how):
    for host in hosts:
        assert host["devices"] == 8
        assert host["local"] == 4
        np.testing.assert_allclose(host[how]["losses"], host["single"]["losses"], rtol=1e-5)
        np.testing.assert_allclose(host[how]["value"], host["single"]["value"], rtol=1e-5)
        assert host[how]["outputs_shape"] == [64, 2]  # the whole batch, on every host
        assert host[how]["sharding"]["devices"] == 8
    shard = [2, 2] if how == "model_parallel" else [8, 2]
    assert [h[how]["sharding"]["shard_shape"] for h in hosts] == [shard, shard]


# ---------------------------------------------------------------------------------------------
# the API, on this process's one device


@pytest.fixture
def mesh() -> D.DeviceMesh:
    return D.DeviceMesh((1,), ("batch",))


def test_list_devices():
    assert D.list_devices() == [f"{d.platform}:{d.id}" for d in jax.devices()]
    assert D.list_devices("CPU") == [f"cpu:{d.id}" for d in jax.devices("cpu")]
    with pytest.raises(ValueError, match="'nope'"):
        D.list_devices("nope")


def test_device_mesh(mesh):
    assert mesh.shape == (1,)
    assert mesh.axis_names == ("batch",)
    assert mesh.devices.tolist() == jax.devices()
    assert mesh.backend_mesh.shape == {"batch": 1}
    assert D.DeviceMesh((1, 1), ("a", "b"), ["cpu:0"]).devices.shape == (1, 1)


@pytest.mark.parametrize(
    "args,error,match",
    [
        (((2,), ("batch",)), ValueError, "holds 2 devices, but 1"),
        (((1,), ("a", "b")), ValueError, r"\('a', 'b'\)"),
        (((1, 1), ("a", "a")), ValueError, "distinct"),
        (((1,), "batch"), TypeError, "axis_names"),
        (((0,), ("batch",)), ValueError, "shape"),
        ((3, ("batch",)), TypeError, "shape"),
        (((1,), ("batch",), ["cpu:99"]), ValueError, "'cpu:99'"),
        (((1,), ("batch",), [0]), TypeError, "devices"),
    ],
)
def test_device_mesh_bad_arguments(args, error, match):
    with pytest.raises(error, match=match):
        D.DeviceMesh(*args)


def test_tensor_layout(mesh):
    layout = D.TensorLayout((None, "batch"))
    assert layout.device_mesh is None
    with pytest.raises(ValueError, match="device_mesh is not set"):
        layout.backend_layout  # noqa: B018
    layout.device_mesh = mesh
    sharding = layout.backend_layout
    assert sharding.mesh is mesh.backend_mesh
    assert tuple(sharding.spec) == (None, "batch")
    with pytest.raises(ValueError, match="'model'"):
        D.TensorLayout(("model",), mesh)
    with pytest.raises(ValueError, match="twice"):
        D.TensorLayout(("batch", "batch"))
    with pytest.raises(TypeError, match="axes"):
        D.TensorLayout("batch")


def test_layout_map_first_matching_key_wins(mesh):
    layout_map = D.LayoutMap(mesh)
    layout_map["dense.*kernel"] = (None, "batch")
    layout_map["dense_1/kernel$"] = ("batch", None)  # matches too, but comes second
    layout_map["dense_2/kernel"] = D.TensorLayout(("batch", None))
    assert layout_map["dense_1/kernel"].axes == (None, "batch")
    assert layout_map["dense_2/kernel"].axes == ("batch", None)  # an equal key comes first
    assert layout_map["dense_3/kernel/velocity"].axes == (None, "batch")  # re.search
    assert layout_map["conv/kernel"] is None
    assert layout_map["dense_1/kernel"].device_mesh is mesh
    assert list(layout_map) == ["dense.*kernel", "dense_1/kernel$", "dense_2/kernel"]
    del layout_map["dense.*kernel"]
    assert layout_map["dense_1/kernel"].axes == ("batch", None)
    assert len(layout_map) == 2


def test_layout_map_bad_entries(mesh):
    layout_map = D.LayoutMap(mesh)
    with pytest.raises(ValueError, match=r"'dense\['"):
        layout_map["dense["] = (None,)
    with pytest.raises(ValueError, match="another device mesh"):
        layout_map["x"] = D.TensorLayout((None,), D.DeviceMesh((1,), ("batch",)))
    with pytest.raises(TypeError, match="keys"):
        layout_map[3] = (None,)
    with pytest.raises(TypeError, match="device_mesh"):
        D.LayoutMap("mesh")


def test_data_parallel_arguments(mesh):
    assert D.DataParallel().device_mesh.shape == (len(jax.devices()),)
    assert D.DataParallel().batch_dim_name == "batch"
    assert D.DataParallel(devices=["cpu:0"]).device_mesh.devices.tolist() == [jax.devices()[0]]
    two_axes = D.DeviceMesh((1, 1), ("data", "model"))
    assert D.DataParallel(device_mesh=two_axes).batch_dim_name == "data"
    with pytest.raises(ValueError, match="not both"):
        D.DataParallel(device_mesh=mesh, devices=["cpu:0"])
    with pytest.raises(TypeError, match="device_mesh"):
        D.DataParallel(device_mesh=(1,))


def test_model_parallel_arguments():
    mesh = D.DeviceMesh((1, 1), ("data", "model"))
    layout_map = D.LayoutMap(mesh)
    assert D.ModelParallel(layout_map=layout_map).batch_dim_name == "data"
    old_form = D.ModelParallel(mesh, layout_map, batch_dim_name="model")  # Keras 3.0's form
    assert old_form.batch_dim_name == "model"
    assert old_form.device_mesh is mesh
    with pytest.raises(ValueError, match="layout_map"):
        D.ModelParallel(device_mesh=mesh)
    with pytest.raises(ValueError, match=r"layout_map\.device_mesh"):
        D.ModelParallel(D.DeviceMesh((1, 1), ("data", "model")), layout_map)
    with pytest.raises(ValueError, match="'rows'"):
        D.ModelParallel(layout_map=layout_map, batch_dim_name="rows")


def test_layouts_of_data_and_variables():
    mesh = D.DeviceMesh((1, 1), ("data", "model"))
    layout_map = D.LayoutMap(mesh)
    layout_map["kernel"] = (None, "model")
    distribution = D.ModelParallel(layout_map=layout_map)
    assert distribution.get_data_layout((16, 3, 2)).axes == ("data", None, None)
    assert distribution.get_data_layout(()).axes == ()
    variable = K.variable(np.zeros((2, 3)), name="bias")
    assert distribution.get_variable_layout(variable).axes == (None, None)
    kernel = K.variable(np.zeros((2, 3)), name="dense/kernel")
    assert distribution.get_variable_layout(kernel).axes == (None, "model")
    assert D.DataParallel(device_mesh=mesh).get_variable_layout(kernel).axes == (None, None)


def test_model_parallel_layout_must_fit_the_variable():
    mesh = D.DeviceMesh((1,), ("model",))
    layout_map = D.LayoutMap(mesh)
    layout_map["kernel"] = (None, "model")
    with D.ModelParallel(layout_map=layout_map).scope(), pytest.raises(ValueError) as info:
        K.variable(np.zeros(3), name="kernel")
    assert "'kernel'" in str(info.value)
    assert "(3,)" in str(info.value)


def test_variables_and_functions_under_a_distribution(mesh):
    before = K.variable(np.ones(2), name="before")
    distribution = D.DataParallel(device_mesh=mesh)
    with distribution.scope() as active:
        assert active is distribution
        assert D.distribution() is distribution
        w = K.variable(np.arange(6.0).reshape(3, 2), name="w")
        x = K.placeholder((None, 3))
        f = K.function([x], [K.dot(x, w) + before], updates=[K.update_add(w, K.ones((3, 2)))])
        out = f([np.ones((4, 3), "float32")])[0]
    assert D.distribution() is None
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, np.full((4, 2), [7.0, 10.0]))
    state = K.get_state([w, before])
    assert isinstance(state[w.name].sharding, jax.sharding.NamedSharding)
    assert state[w.name].sharding.mesh is mesh.backend_mesh
    assert not isinstance(state[before.name].sharding, jax.sharding.NamedSharding)
    value = K.get_value(w)
    assert isinstance(value, np.ndarray)
    np.testing.assert_allclose(value, np.arange(6.0).reshape(3, 2) + 1)


def test_set_distribution_is_process_wide_and_survives_clear_session(mesh):
    distribution = D.DataParallel(device_mesh=mesh)
    D.set_distribution(distribution)
    K.clear_session()
    assert D.distribution() is distribution
    seen = []
    thread = threading.Thread(target=lambda: seen.append(D.distribution()))
    thread.start()
    thread.join()
    assert seen == [distribution]
    other = D.DataParallel(device_mesh=mesh)
    with other.scope():
        assert D.distribution() is other
        thread = threading.Thread(target=lambda: seen.append(D.distribution()))
        thread.start()
        thread.join()
    assert seen[-1] is distribution  # a scope is this thread's only
    D.set_distribution(None)
    assert D.distribution() is None
    with pytest.raises(TypeError, match="Distribution"):
        D.set_distribution("data_parallel")


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"num_processes": 2, "process_id": 2}, ValueError, "process_id 2"),
        ({"num_processes": 0}, ValueError, "num_processes"),
        ({"process_id": -1}, ValueError, "process_id"),
        ({"job_addresses": 1234}, TypeError, "job_addresses"),
    ],
)
def test_initialize_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        D.initialize(**kwargs)


def test_initialize_hands_its_arguments_to_jax(monkeypatch):
    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kwargs: calls.append(kwargs))
    D.initialize("10.0.0.1:1234, 10.0.0.2:1234", num_processes=2, process_id=1)
    monkeypatch.setenv("KERAS_DISTRIBUTION_JOB_ADDRESSES", "host:99")
    monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "4")
    monkeypatch.setenv("KERAS_DISTRIBUTION_PROCESS_ID", "3")
    D.initialize()
    monkeypatch.delenv("KERAS_DISTRIBUTION_JOB_ADDRESSES")
    monkeypatch.delenv("KERAS_DISTRIBUTION_NUM_PROCESSES")
    monkeypatch.delenv("KERAS_DISTRIBUTION_PROCESS_ID")
    D.initialize()  # JAX finds them itself (cluster environments)
    assert calls == [
        {"coordinator_address": "10.0.0.1:1234", "num_processes": 2, "process_id": 1},
        {"coordinator_address": "host:99", "num_processes": 4, "process_id": 3},
        {"coordinator_address": None, "num_processes": None, "process_id": None},
    ]


@pytest.mark.parametrize("how", ["data_parallel", "model_parallel"])
def test_mixed_float16_training_distributes(eight, how):
    """A loss-scaled train step under a distribution learns as on one device, with the loss
    scale replicated as a scalar."""
    single, run = eight["mixed"]["single"], eight["mixed"][how]
    np.testing.assert_allclose(run["losses"], single["losses"], rtol=2e-2)
    assert run["losses"][-1] < run["losses"][0]
    assert run["loss_scale"]["replicated"] and run["loss_scale"]["devices"] == 8
