"""jaxkeras.tensorboard.TensorBoard: Keras 2.3.1's TensorBoard callback without TensorFlow.

Small Keras 2.3.1 models train on jaxkeras with the callback (as ``keras.callbacks.TensorBoard``
after ``use_in_keras``, and as ``jaxkeras.tensorboard.TensorBoard``); the event files are read
back with TensorBoard's own reader (``EventAccumulator``), and what they hold is checked
against the History, batch logs, weights, predictions and hand-derived gradients. Keras 2.3.1's
own TensorBoard tests, which it skips on every backend but TensorFlow, run here too.
"""

from __future__ import annotations

import importlib.util
import inspect
import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

os.environ["KERAS_BACKEND"] = "jaxkeras"
os.environ.setdefault("KERAS_HOME", tempfile.mkdtemp(prefix="keras_home_"))
keras = pytest.importorskip("keras")
pytest.importorskip("tensorboardX")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

from keras import layers  # noqa: E402
from keras.callbacks import tensorboard_v1  # noqa: E402
from keras.models import Model, Sequential  # noqa: E402
from PIL import Image  # noqa: E402

import jaxkeras  # noqa: E402
from jaxkeras import tensorboard  # noqa: E402

pytestmark = pytest.mark.keras2

ROOT = Path(__file__).resolve().parent.parent
KERAS_TESTS = Path(os.environ.get("JAXKERAS_KERAS_TESTS", ROOT / ".venv" / "keras-2.3.1-tests"))


@pytest.fixture(autouse=True)
def _keras_uses_it():
    """``keras.callbacks.TensorBoard`` is jaxkeras's during each test, Keras's after it."""
    keras_own = keras.callbacks.TensorBoard
    tensorboard.use_in_keras(keras.callbacks)
    jaxkeras.set_random_seed(0)
    np.random.seed(0)
    yield
    keras.callbacks.TensorBoard = keras_own


def _read(log_dir: Path) -> event_accumulator.EventAccumulator:
    everything = dict.fromkeys(event_accumulator.DEFAULT_SIZE_GUIDANCE, 0)
    events = event_accumulator.EventAccumulator(str(log_dir), size_guidance=everything)
    events.Reload()
    return events


def _scalars(events, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in events.Scalars(tag)]


def _data(samples: int, features: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed)
    x = rng.uniform(-1, 1, (samples, features)).astype("float32")
    y = np.eye(2, dtype="float32")[(x.sum(1) > 0).astype(int)]
    return x, y


def _mlp() -> Model:
    inputs = layers.Input((3,))
    hidden = layers.Dense(4, activation="relu")(inputs)
    hidden = layers.BatchNormalization()(hidden)
    hidden = layers.Dropout(0.1)(hidden)
    outputs = layers.Dense(2, activation="softmax")(hidden)
    model = Model(inputs, outputs)
    model.compile("sgd", "categorical_crossentropy", metrics=["accuracy"])
    return model


def test_importing_the_module_does_not_import_keras():
    code = "import sys, jaxkeras, jaxkeras.tensorboard; print('keras' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_it_is_keras_callbacks_tensorboard_with_keras_arguments():
    assert keras.callbacks.TensorBoard is tensorboard.TensorBoard
    assert issubclass(tensorboard.TensorBoard, keras.callbacks.Callback)
    from jaxkeras.tensorboard import TensorBoard

    assert TensorBoard is tensorboard.TensorBoard
    assert (
        TensorBoard.__module__ == "jaxkeras.tensorboard"
        and TensorBoard.__qualname__ == "TensorBoard"
    )
    ours = inspect.signature(TensorBoard).parameters
    keras_own = inspect.signature(tensorboard_v1.TensorBoard).parameters
    assert [(p.name, p.default) for p in ours.values()] == [
        (p.name, p.default) for p in keras_own.values()
    ]


def test_missing_writer_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    with pytest.raises(ImportError, match=r"pip install jaxkeras\[tensorboard\]"):
        tensorboard.TensorBoard(str(tmp_path))


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"update_freq": "sometimes"}, "update_freq"),
        ({"update_freq": 0}, "update_freq"),
        ({"histogram_freq": -1}, "histogram_freq"),
        ({"batch_size": 0}, "batch_size"),
        ({"embeddings_freq": 1}, "embeddings_data"),
    ],
)
def test_bad_arguments_are_named(arguments, named, tmp_path):
    with pytest.raises(ValueError, match=named):
        tensorboard.TensorBoard(str(tmp_path), **arguments)


@pytest.mark.parametrize("asked", ["write_grads", "write_images"])
def test_histogram_options_without_histograms_warn(asked, tmp_path):
    with pytest.warns(UserWarning, match=f"{asked}=True writes nothing while histogram_freq=0"):
        tensorboard.TensorBoard(str(tmp_path), **{asked: True})


@pytest.mark.parametrize("which", ["keras.callbacks", "jaxkeras.tensorboard"])
def test_epoch_scalars_equal_the_history(which, tmp_path):
    callback_class = keras.callbacks.TensorBoard if which == "keras.callbacks" else None
    callback_class = callback_class or tensorboard.TensorBoard
    x, y = _data(20)
    x_val, y_val = _data(8, seed=1)
    model = _mlp()
    history = model.fit(
        x,
        y,
        batch_size=5,
        epochs=3,
        verbose=0,
        validation_data=(x_val, y_val),
        callbacks=[
            keras.callbacks.LearningRateScheduler(lambda epoch: 0.1 / (epoch + 1)),
            callback_class(str(tmp_path)),
        ],
    )
    events = _read(tmp_path)
    assert set(events.Tags()["scalars"]) == {*history.history, "learning_rate"}
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy", "lr"}
    for name, values in history.history.items():
        steps, written = zip(*_scalars(events, name))
        assert steps == (0, 1, 2)
        np.testing.assert_allclose(written, values, rtol=1e-6)
    steps, rates = zip(*_scalars(events, "learning_rate"))
    assert steps == (0, 1, 2)
    np.testing.assert_array_equal(rates, np.float32([0.1, 0.05, 0.1 / 3]))
    assert rates[-1] == keras.backend.get_value(model.optimizer.lr)


@pytest.mark.parametrize("update_freq", ["batch", 7])
def test_batch_scalars_every_update_freq_samples(update_freq, tmp_path):
    x, y = _data(20)
    model = _mlp()
    batch_logs = []
    record = keras.callbacks.LambdaCallback(on_batch_end=lambda b, logs: batch_logs.append(logs))
    history = model.fit(
        x,
        y,
        batch_size=5,
        epochs=2,
        verbose=0,
        callbacks=[record, tensorboard.TensorBoard(str(tmp_path), update_freq=update_freq)],
    )
    every = 1 if update_freq == "batch" else update_freq
    expected = {"loss": [], "accuracy": [], "learning_rate": []}
    seen = last = 0
    for epoch in range(2):
        for logs in batch_logs[4 * epoch : 4 * epoch + 4]:
            seen += logs["size"]
            if seen - last >= every:
                expected["loss"].append((seen, logs["loss"]))
                expected["accuracy"].append((seen, logs["accuracy"]))
                last = seen
        for name in ("loss", "accuracy"):  # the epoch's values, at the samples seen
            expected[name].append((seen, history.history[name][epoch]))
        expected["learning_rate"].append((seen, 0.01))
    events = _read(tmp_path)
    assert set(events.Tags()["scalars"]) == set(expected)
    assert len(expected["loss"]) == (10 if update_freq == "batch" else 6)
    for name, pairs in expected.items():
        written = _scalars(events, name)
        assert [step for step, _ in written] == [step for step, _ in pairs]
        np.testing.assert_allclose([v for _, v in written], [v for _, v in pairs], rtol=1e-6)


def test_histograms_grads_and_images(tmp_path):
    x, y = _data(20)
    x_val, y_val = _data(7, seed=1)
    model = _mlp()
    penultimate = Model(model.inputs, model.layers[-2].output)
    snapshots = []

    def snapshot(epoch, logs):
        probabilities = model.predict(x_val)
        features = penultimate.predict(x_val)
        # softmax + categorical crossentropy, mean over the samples: d loss / d logits = p - y
        d_logits = (probabilities - y_val) / len(x_val)
        grads = {"kernel": features.T @ d_logits, "bias": d_logits.sum(0)}
        weights = {w.name: keras.backend.get_value(w) for w in model.weights}
        snapshots.append((weights, grads, probabilities))

    model.fit(
        x,
        y,
        batch_size=5,
        epochs=3,
        verbose=0,
        validation_data=(x_val, y_val),
        callbacks=[
            keras.callbacks.LambdaCallback(on_epoch_end=snapshot),
            tensorboard.TensorBoard(
                str(tmp_path), histogram_freq=2, batch_size=3, write_grads=True, write_images=True
            ),
        ],
    )
    events = _read(tmp_path)
    tags = set(events.Tags()["histograms"])
    dense_2 = model.layers[-1]
    weight_tags = {w.name.replace(":", "_") for w in model.weights}
    out_tags = {f"{layer.name}_out" for layer in model.layers}
    grad_tags = {w.name.replace(":", "_") + "_grad" for w in model.trainable_weights}
    assert tags == weight_tags | out_tags | grad_tags
    for tag in tags:
        assert [e.step for e in events.Histograms(tag)] == [0, 2]
    for epoch, index in ((0, 0), (2, 1)):
        weights, grads, probabilities = snapshots[epoch]
        for name, value in weights.items():
            histogram = events.Histograms(name.replace(":", "_"))[index].histogram_value
            assert histogram.num == value.size == sum(histogram.bucket)
            np.testing.assert_allclose(
                [histogram.min, histogram.max, histogram.sum],
                [value.min(), value.max(), value.sum()],
                rtol=1e-6,
            )
        softmax_out = events.Histograms(f"{dense_2.name}_out")[index].histogram_value
        assert softmax_out.num == probabilities.size
        np.testing.assert_allclose(softmax_out.sum, len(x_val), rtol=1e-5)  # rows sum to 1
        inputs_out = events.Histograms(f"{model.layers[0].name}_out")[index].histogram_value
        np.testing.assert_allclose(inputs_out.sum, x_val.sum(), rtol=1e-5)
        for part in ("kernel", "bias"):
            grad = grads[part]
            tag = getattr(dense_2, part).name.replace(":", "_")
            histogram = events.Histograms(tag + "_grad")[index].histogram_value
            assert histogram.num == grad.size
            np.testing.assert_allclose(
                [histogram.min, histogram.max], [grad.min(), grad.max()], rtol=1e-4, atol=1e-7
            )
    kernel = model.layers[1].kernel  # (3, 4): drawn as it is, 3 high and 4 wide
    bias = dense_2.bias  # (2,): a column, 2 high and 1 wide
    for weight, shape in ((kernel, (3, 4)), (dense_2.kernel, (2, 4)), (bias, (2, 1))):
        tag = weight.name.replace(":", "_")
        image_events = events.Images(tag + "/image/0")
        assert [(e.step, e.height, e.width) for e in image_events] == [(0, *shape), (2, *shape)]
        value = snapshots[2][0][weight.name]
        value = value.T if value.ndim == 2 and value.shape[0] > value.shape[1] else value
        value = value.reshape(shape)
        pixels = np.asarray(Image.open(io.BytesIO(image_events[1].encoded_image_string)))
        if value.min() < 0:  # 0 at 128, the largest magnitude at 1 or 255
            expected = value * 127 / np.abs(value).max() + 128
        else:
            expected = value * 255 / value.max()
        assert np.abs(pixels.astype(float) - expected).max() <= 1


def test_convolution_kernels_are_drawn_per_filter_without_validation_data(tmp_path):
    model = Sequential(
        [layers.Conv2D(4, 3, input_shape=(5, 5, 1)), layers.Flatten(), layers.Dense(2)]
    )
    model.compile("sgd", "mse")
    x, y = np.ones((4, 5, 5, 1), "float32"), np.zeros((4, 2), "float32")
    callback = tensorboard.TensorBoard(str(tmp_path), histogram_freq=1, write_images=True)
    with pytest.warns(UserWarning, match="only weight histograms"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[callback])
    events = _read(tmp_path)
    kernel = model.layers[0].kernel.name.replace(":", "_")
    assert set(events.Tags()["histograms"]) == {w.name.replace(":", "_") for w in model.weights}
    drawn = [tag for tag in events.Tags()["images"] if tag.startswith(kernel + "/")]
    assert sorted(drawn) == [f"{kernel}/image/{i}" for i in range(3)]  # 3 of the 4 filters
    assert {(e.height, e.width) for tag in drawn for e in events.Images(tag)} == {(3, 3)}


@pytest.mark.parametrize("kind", ["functional", "sequential"])
def test_model_config_for_the_graphs_tab(kind, tmp_path):
    keras_util = pytest.importorskip("tensorboard.plugins.graph.keras_util")
    if kind == "functional":
        model = _mlp()
    else:
        model = Sequential([layers.Dense(4, input_shape=(3,)), layers.Dense(2)])
        model.compile("sgd", "mse")
    callback = tensorboard.TensorBoard(str(tmp_path))
    callback.set_model(model)
    callback.on_train_end()
    events = _read(tmp_path)
    (written,) = events.Tensors("keras")
    assert written.step == 0
    assert events.SummaryMetadata("keras").plugin_data.plugin_name == "graph_keras_model"
    config = written.tensor_proto.string_val[0].decode()
    assert config == model.to_json()
    graph = keras_util.keras_model_to_graph_def(__import__("json").loads(config))
    names = {node.name.split("/")[-1] for node in graph.node}
    assert {layer.name for layer in model.layers} <= names


def test_embeddings_for_the_projector(tmp_path):
    text_format = pytest.importorskip("google.protobuf.text_format")
    projector = pytest.importorskip("tensorboard.plugins.projector.projector_config_pb2")
    rng = np.random.RandomState(0)
    x = rng.randint(0, 10, (12, 4))
    y = np.eye(2, dtype="float32")[rng.randint(0, 2, 12)]
    model = Sequential([layers.Embedding(10, 3, input_length=4), layers.Flatten(), layers.Dense(2)])
    model.compile("sgd", "mse")
    embedding, dense = model.layers[0], model.layers[2]
    callbacks = [
        tensorboard.TensorBoard(
            str(tmp_path / "default"),
            embeddings_freq=1,
            embeddings_data=x[:5],
            embeddings_metadata="labels.tsv",
            batch_size=2,
        ),
        tensorboard.TensorBoard(
            str(tmp_path / "named"),
            embeddings_freq=2,
            embeddings_data=x[:5],
            embeddings_layer_names=[dense.name],
            embeddings_metadata={dense.name: 'odd "name".tsv'},
        ),
    ]
    model.fit(x, y, batch_size=4, epochs=3, verbose=0, callbacks=callbacks)
    for run, layer, metadata in (
        ("default", embedding, "labels.tsv"),
        ("named", dense, 'odd "name".tsv'),
    ):
        config = text_format.Parse(
            (tmp_path / run / "projector_config.pbtxt").read_text(), projector.ProjectorConfig()
        )
        (entry,) = config.embeddings
        assert entry.tensor_name == f"{layer.name}_embedding"
        assert entry.metadata_path == metadata
        written = np.loadtxt(tmp_path / run / entry.tensor_path, delimiter="\t", ndmin=2)
        expected = Model(model.inputs, layer.output).predict(x[:5]).reshape(5, -1)
        np.testing.assert_allclose(written, expected, rtol=1e-6)  # the last epoch's (2)
    missing = tensorboard.TensorBoard(
        str(tmp_path / "missing"),
        embeddings_freq=1,
        embeddings_data=x,
        embeddings_layer_names=["nope"],
    )
    with pytest.raises(ValueError, match=r"embeddings_layer_names=.*'nope'"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[missing])


def test_optimizer_without_learning_rate(tmp_path):
    optax = pytest.importorskip("optax")
    model = Sequential([layers.Dense(2, input_shape=(3,))])
    model.compile(jaxkeras.optimizers.OptaxOptimizer(optax.sgd(0.1)), "mse")
    x, y = _data(8)
    history = model.fit(
        x, y, epochs=2, verbose=0, callbacks=[tensorboard.TensorBoard(str(tmp_path))]
    )
    events = _read(tmp_path)
    assert events.Tags()["scalars"] == ["loss"]
    np.testing.assert_allclose([v for _, v in _scalars(events, "loss")], history.history["loss"])


def _keras_test(path: str, name: str):
    file = KERAS_TESTS / "tests" / "keras" / "callbacks" / path
    if not file.exists():
        pytest.skip(f"{file} not found: `make test` extracts Keras 2.3.1's tests")
    spec = importlib.util.spec_from_file_location(f"keras_suite_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


@pytest.mark.slow  # the convnet trains on 500 images
@pytest.mark.parametrize(
    ("path", "name", "arguments"),
    [
        ("tensorboard_test.py", "test_TensorBoard", ("batch",)),
        ("tensorboard_test.py", "test_TensorBoard", ("epoch",)),
        ("tensorboard_test.py", "test_TensorBoard", (9,)),
        ("tensorboard_test.py", "test_TensorBoard_multi_input_output", ()),
        ("tensorboard_test.py", "test_TensorBoard_convnet", ()),
        ("tensorboard_test.py", "test_TensorBoard_display_float_from_logs", ()),
        ("callbacks_test.py", "test_TensorBoard_with_ReduceLROnPlateau", ()),
    ],
)
def test_keras_own_tensorboard_tests(path, name, arguments, tmpdir):
    """Keras 2.3.1 marks these TensorFlow-only (they built its TensorFlow callback); they run
    here, unedited, with its skip marks left out."""
    _keras_test(path, name)(tmpdir, *arguments)
