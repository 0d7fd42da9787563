"""Keras 2.3.1's ``TensorBoard`` callback for models trained on jaxkeras, without TensorFlow.

Multi-backend Keras 2.3.1 gives every backend but TensorFlow its ``tensorboard_v1`` callback,
which imports TensorFlow to write its logs. ``TensorBoard`` here takes the same arguments and
writes the same event files with tensorboardX (``pip install jaxkeras[tensorboard]``), which
needs no TensorFlow. ``keras2.install`` calls :func:`use_in_keras`, so ``keras.callbacks
.TensorBoard`` is this class when Keras loads jaxkeras::

    model.fit(x, y, validation_data=(x_val, y_val),
              callbacks=[keras.callbacks.TensorBoard("logs", histogram_freq=1)])

What it writes (``tensorboard --logdir logs`` shows it):

- Scalars: every value of the logs Keras passes at each epoch's end (loss, metrics, ``val_*``,
  ``lr`` when a learning-rate callback sets it), tagged with its name, at step ``epoch``, and
  the optimizer's learning rate (``K.get_value`` of its ``learning_rate``), tagged
  ``learning_rate`` as TF-Keras tags it, when the optimizer has one. With ``update_freq``
  ``'batch'`` or a number of samples, the batch logs too, under the same names, every
  ``update_freq`` samples, at step "samples seen so far"; the epoch's scalars are then
  written at that step too. These are ``tensorboard_v1``'s tags and steps.
- Histograms, every ``histogram_freq`` epochs at step ``epoch``: each layer weight, tagged with
  its name with ``:`` replaced by ``_`` (``dense_1/kernel``: jaxkeras names have no ``:0``
  suffix); each layer's output on the validation data
  (``<layer>_out``, or ``<layer>_out_<i>`` for a layer with several outputs); with
  ``write_grads``, each trainable weight's gradient of the loss on the validation data
  (``<weight tag>_grad``). Buckets are TensorFlow's histogram buckets.
- Images (``write_images``, at the histogram epochs): 1-D, 2-D and 3-D weights as grayscale
  images, shaped and scaled as ``tensorboard_v1`` and ``tf.summary.image`` do (tags
  ``<weight tag>/image/<i>``, the first three images of a weight).
- The model (``write_graph``): its Keras JSON config, as TF-Keras writes it, which TensorBoard's
  Graphs tab draws as the model's layer graph (a jaxkeras model has no TensorFlow op graph).
- Embeddings (``embeddings_freq``): the outputs of the chosen layers on ``embeddings_data``, as
  ``<layer>_embedding.tsv`` files in ``log_dir``, listed in its ``projector_config.pbtxt`` for
  TensorBoard's Projector tab (which reads tab-separated tensors without TensorFlow); each
  write replaces the previous one, as the Projector shows a checkpoint's latest embeddings.

Where it differs from ``tensorboard_v1`` on TensorFlow: each histogram is written once per
histogram epoch over all of the validation data (``tensorboard_v1`` writes one per validation
batch, at the same step); weight histograms and images need no validation data (without it
only the output and gradient histograms are left out, with a warning, where
``tensorboard_v1`` raises ValueError); a gradient histogram is of the gradient of the mean
loss over the validation data (the batches' gradients averaged, weighted by batch size), not
of each batch's, and before any clipping the optimizer does (``tensorboard_v1`` asked the
optimizer's ``get_gradients``).

``TensorBoard`` subclasses ``keras.callbacks.Callback``, so it is built on first access (this
module's ``__getattr__``): importing jaxkeras or this module never imports Keras, which would
load whatever backend Keras is configured with.
"""

from __future__ import annotations

import functools
import numbers
import os
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np

_INSTALL_HINT = "pip install jaxkeras[tensorboard]"


def _tensorboardx() -> Any:
    """The tensorboardX package, or ImportError saying how to install it."""
    try:
        import tensorboardX
    except ImportError as error:
        raise ImportError(
            f"TensorBoard writes its event files with tensorboardX, which is not installed: "
            f"{_INSTALL_HINT}"
        ) from error
    return tensorboardX


def _tensorflow_bucket_limits() -> np.ndarray:
    """TensorFlow's default histogram bucket limits: 0, +-1e-12 * 1.1**k below 1e20, +-DBL_MAX.

    A bucket counts the values from the previous limit (included) to its own (excluded).
    """
    positive = [1e-12]
    while positive[-1] * 1.1 < 1e20:
        positive.append(positive[-1] * 1.1)
    largest = np.finfo(np.float64).max
    return np.array([-largest, *(-v for v in reversed(positive)), 0.0, *positive, largest])


_BUCKET_LIMITS = _tensorflow_bucket_limits()


class _Histogram:
    """Counts values in TensorFlow's buckets, batch after batch, with their min, max and sums.

    Example:
        >>> h = _Histogram()
        >>> h.add(np.array([0.5, -2.0]))
        >>> h.add(np.array([[0.5], [3.0]]))
        >>> h.num, h.min, h.max, h.sum
        (4, -2.0, 3.0, 2.0)
        >>> limits, counts = h.buckets()
        >>> [(round(float(limit), 4), int(count)) for limit, count in zip(limits, counts) if count]
        [(-1.9662, 1), (0.5178, 2), (3.1666, 1)]
    """

    def __init__(self) -> None:
        self.counts = np.zeros(len(_BUCKET_LIMITS), dtype=np.int64)
        self.num = 0
        self.min = np.inf
        self.max = -np.inf
        self.sum = 0.0
        self.sum_squares = 0.0

    def add(self, values: np.ndarray) -> None:
        """Counts ``values`` (any shape) in."""
        values = np.asarray(values, dtype=np.float64).ravel()
        if not values.size:
            return
        index = np.searchsorted(_BUCKET_LIMITS, values, side="right")
        self.counts += np.bincount(
            np.minimum(index, len(_BUCKET_LIMITS) - 1), minlength=len(_BUCKET_LIMITS)
        )
        self.num += values.size
        self.min = min(self.min, float(values.min()))
        self.max = max(self.max, float(values.max()))
        self.sum += float(values.sum())
        self.sum_squares += float(np.dot(values, values))

    def buckets(self) -> tuple[np.ndarray, np.ndarray]:
        """The bucket limits and counts to write: each run of empty buckets as one bucket,
        as TensorFlow writes them."""
        following = np.append(self.counts[1:], 1)
        kept = (self.counts > 0) | (following > 0)
        return _BUCKET_LIMITS[kept], self.counts[kept]


def _weight_images(value: np.ndarray, channels_last: bool) -> np.ndarray | None:
    """A weight as ``tensorboard_v1`` draws it: a batch of 2-D images, or None for a weight it
    does not draw (four or more dimensions after squeezing)."""
    value = np.squeeze(value)
    if value.ndim == 1:  # a bias: one column
        return value.reshape(1, -1, 1)
    if value.ndim == 2:  # a dense kernel: one image, wider than high
        return (value.T if value.shape[0] > value.shape[1] else value)[None]
    if value.ndim == 3:  # a 1-D convolution kernel: an image per channel
        return np.transpose(value, (2, 0, 1)) if channels_last else value
    return None


def _to_uint8(image: np.ndarray) -> np.ndarray:
    """Maps a float image to 0-255 as ``tf.summary.image`` does, in float32: the largest value
    to 255 if none is negative, else 0 to 128 and the largest magnitude to 1 or 255 (scale 0
    when that is below 1e-6), truncated; non-finite pixels 255."""
    image = np.asarray(image, dtype=np.float32)
    finite = np.isfinite(image)
    values = image[finite]
    low = values.min() if values.size else np.float32(0)
    high = values.max() if values.size else np.float32(0)
    top, offset = (max(-low, high), 128) if low < 0 else (high, 0)
    scale = np.float32(0) if top < 1e-6 else np.float32((127 if offset else 255) / top)
    scaled = np.where(finite, image * scale + np.float32(offset), np.float32(255))
    return np.clip(scaled, 0, 255).astype(np.uint8)


def _png(image: np.ndarray) -> bytes:
    """A 2-D uint8 array as a grayscale PNG."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(image).save(out, format="PNG")
    return out.getvalue()


def _pbtxt_string(text: str) -> str:
    """``text`` as a protobuf text-format string literal.

    Example:
        >>> print(_pbtxt_string('a "b"\\\\é'))
        "a \\"b\\"\\\\\\303\\251"
    """
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


class _EventWriter:
    """One events file in ``log_dir`` (tensorboardX's ``FileWriter``) and the summaries that
    the callback writes to it."""

    def __init__(self, log_dir: str) -> None:
        from tensorboardX.proto import summary_pb2, tensor_pb2, tensor_shape_pb2

        self._pb = summary_pb2
        self._tensor_pb = tensor_pb2
        self._shape_pb = tensor_shape_pb2
        self._file = _tensorboardx().FileWriter(log_dir)

    def _write(self, values: list, step: int) -> None:
        self._file.add_summary(self._pb.Summary(value=values), global_step=step)

    def scalars(self, values: dict[str, float], step: int) -> None:
        """Writes each value at ``step``, tagged with its name."""
        summary_values = [
            self._pb.Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()
        ]
        if summary_values:
            self._write(summary_values, step)

    def histogram(self, tag: str, histogram: _Histogram, step: int) -> None:
        """Writes a histogram (if it counted any value) at ``step``."""
        if not histogram.num:
            return
        limits, counts = histogram.buckets()
        proto = self._pb.HistogramProto(
            min=histogram.min,
            max=histogram.max,
            num=histogram.num,
            sum=histogram.sum,
            sum_squares=histogram.sum_squares,
            bucket_limit=limits.tolist(),
            bucket=counts.astype(np.float64).tolist(),
        )
        self._write([self._pb.Summary.Value(tag=tag, histo=proto)], step)

    def images(self, tag: str, images: np.ndarray, step: int) -> None:
        """Writes the first three of a batch of 2-D float images at ``step``, tagged
        ``<tag>/image/<i>`` as ``tf.summary.image`` tags them."""
        values = []
        for i, image in enumerate(images[:3]):
            pixels = _to_uint8(image)
            proto = self._pb.Summary.Image(
                height=pixels.shape[0],
                width=pixels.shape[1],
                colorspace=1,
                encoded_image_string=_png(pixels),
            )
            values.append(self._pb.Summary.Value(tag=f"{tag}/image/{i}", image=proto))
        self._write(values, step)

    def keras_model(self, config_json: str) -> None:
        """Writes a Keras model's JSON config at step 0 as TF-Keras does (tag ``keras``, plugin
        ``graph_keras_model``): TensorBoard's Graphs tab draws it as the model's graph."""
        metadata = self._pb.SummaryMetadata(
            plugin_data=self._pb.SummaryMetadata.PluginData(
                plugin_name="graph_keras_model", content=b"1"
            )
        )
        tensor = self._tensor_pb.TensorProto(
            dtype="DT_STRING",
            tensor_shape=self._shape_pb.TensorShapeProto(),
            string_val=[config_json.encode("utf-8")],
        )
        self._write([self._pb.Summary.Value(tag="keras", metadata=metadata, tensor=tensor)], 0)

    def flush(self) -> None:
        """Writes out what is queued."""
        self._file.flush()

    def close(self) -> None:
        """Flushes and closes the events file."""
        self._file.close()


def _write_embeddings(
    log_dir: str, embeddings: dict[str, np.ndarray], metadata: dict[str, str]
) -> None:
    """Writes each layer's embedding matrix to ``<layer>_embedding.tsv`` in ``log_dir`` (each
    file replaced at once) and lists them in ``projector_config.pbtxt``."""
    entries = []
    for layer_name, matrix in embeddings.items():
        file_name = f"{layer_name}_embedding.tsv"
        path = os.path.join(log_dir, file_name)
        np.savetxt(path + ".tmp", matrix, fmt="%.9g", delimiter="\t")
        os.replace(path + ".tmp", path)
        entry = [
            f"  tensor_name: {_pbtxt_string(f'{layer_name}_embedding')}",
            f"  tensor_path: {_pbtxt_string(file_name)}",
        ]
        if layer_name in metadata:
            entry.append(f"  metadata_path: {_pbtxt_string(metadata[layer_name])}")
        entries.append("embeddings {\n" + "\n".join(entry) + "\n}\n")
    config = os.path.join(log_dir, "projector_config.pbtxt")
    with open(config + ".tmp", "w", encoding="ascii") as f:
        f.write("".join(entries))
    os.replace(config + ".tmp", config)


def _count(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int of at least ``minimum``, else ValueError naming ``name``."""
    if not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return int(value)


def _batches(arrays: list[np.ndarray], batch_size: int) -> Iterable[tuple[int, list]]:
    """Each batch's size and slices of ``arrays`` (along their first axis)."""
    total = len(arrays[0])
    for start in range(0, total, batch_size):
        stop = min(start + batch_size, total)
        yield stop - start, [array[start:stop] for array in arrays]


@functools.cache
def _tensorboard_class() -> type:
    """Defines ``TensorBoard`` on ``keras.callbacks.Callback`` (importing Keras)."""
    from keras import backend as K
    from keras.callbacks import Callback
    from keras.engine.training_utils import standardize_input_data

    class TensorBoard(Callback):
        """Writes TensorBoard logs (scalars, histograms, images, the model, embeddings).

        Keras 2.3.1's ``TensorBoard`` arguments, without TensorFlow; the module docstring of
        ``jaxkeras.tensorboard`` lists what is written under which tags and steps.

        Args:
            log_dir: the directory to write the event files (and embeddings) to.
            histogram_freq: write weight, layer output and gradient histograms every this
                many epochs (0: never). Output and gradient histograms need validation data
                (arrays or ``validation_split``).
            batch_size: the batch size for computing output and gradient histograms and
                embeddings.
            write_graph: write the model's Keras config (TensorBoard's Graphs tab draws it).
            write_grads: also write each trainable weight's gradient histogram (only with
                ``histogram_freq`` > 0).
            write_images: also write the 1-D to 3-D weights as images (only with
                ``histogram_freq`` > 0; needs Pillow).
            embeddings_freq: write the embeddings every this many epochs (0: never).
            embeddings_layer_names: the layers whose outputs to embed; None or empty: every
                ``Embedding`` layer.
            embeddings_metadata: a metadata file name for each layer (a dict), or one for all
                (a string), relative to ``log_dir`` or absolute.
            embeddings_data: the model inputs whose layer outputs are embedded (an array, or a
                list of arrays for a model with several inputs).
            update_freq: ``'epoch'``, ``'batch'`` or a number of samples: how often to write
                the logs' scalars.

        Raises:
            ImportError: tensorboardX (or, with ``write_images``, Pillow) is not installed.
            ValueError: an argument is out of its range, or ``embeddings_freq`` is set
                without ``embeddings_data``.
        """

        def __init__(
            self,
            log_dir: str = "./logs",
            histogram_freq: int = 0,
            batch_size: int = 32,
            write_graph: bool = True,
            write_grads: bool = False,
            write_images: bool = False,
            embeddings_freq: int = 0,
            embeddings_layer_names: list[str] | None = None,
            embeddings_metadata: dict[str, str] | str | None = None,
            embeddings_data: Any = None,
            update_freq: str | int = "epoch",
        ) -> None:
            super().__init__()
            _tensorboardx()
            if write_images:
                try:
                    import PIL.Image  # noqa: F401
                except ImportError as error:
                    raise ImportError(
                        f"write_images=True needs Pillow, which is not installed: {_INSTALL_HINT}"
                    ) from error
            self.log_dir = os.fspath(log_dir)
            self.histogram_freq = _count("histogram_freq", histogram_freq, 0)
            self.batch_size = _count("batch_size", batch_size, 1)
            self.embeddings_freq = _count("embeddings_freq", embeddings_freq, 0)
            if update_freq == "batch":
                self.update_freq: str | int = 1
            elif update_freq == "epoch":
                self.update_freq = "epoch"
            elif isinstance(update_freq, str):
                raise ValueError(
                    f"update_freq must be 'epoch', 'batch' or a number of samples; "
                    f"got {update_freq!r}"
                )
            else:
                self.update_freq = _count("update_freq", update_freq, 1)
            if self.embeddings_freq and embeddings_data is None:
                raise ValueError(
                    f"embeddings_freq={embeddings_freq} needs embeddings_data (the inputs whose "
                    "layer outputs to embed); got None"
                )
            for name, asked in (("write_grads", write_grads), ("write_images", write_images)):
                if asked and not self.histogram_freq:
                    warnings.warn(
                        f"TensorBoard: {name}=True writes nothing while histogram_freq=0",
                        stacklevel=2,
                    )
            self.write_graph = write_graph
            self.write_grads = write_grads
            self.write_images = write_images
            self.embeddings_layer_names = embeddings_layer_names
            self.embeddings_metadata = embeddings_metadata or {}
            self.embeddings_data = embeddings_data
            self.samples_seen = 0
            self.samples_seen_at_last_write = 0
            self._writer: _EventWriter | None = None

        def set_model(self, model: Any) -> None:
            """Picks the layers to embed, opens a new events file in ``log_dir`` for ``model``
            (closing the previous one), and writes the model's config with ``write_graph``.

            Args:
                model: the Keras model being trained.

            Raises:
                ValueError: ``embeddings_layer_names`` names layers the model does not have,
                    or no layer is left to embed.
            """
            super().set_model(model)
            if self.embeddings_freq:
                self._embedding_layers = self._layers_to_embed()
            if self._writer is not None:
                self._writer.close()
            self._writer = _EventWriter(self.log_dir)
            self._histogram_functions: tuple | None = None
            self._embedding_function: Any = None
            self._warned_no_validation = False
            if self.write_graph:
                try:
                    self._writer.keras_model(model.to_json())
                except (NotImplementedError, TypeError, ValueError) as error:
                    warnings.warn(
                        f"TensorBoard: write_graph=True, but the model has no JSON config "
                        f"({error}); no graph written",
                        stacklevel=2,
                    )
            self._writer.flush()

        def _layers_to_embed(self) -> list:
            """The layers ``embeddings_layer_names`` names, or else every Embedding layer."""
            names = self.embeddings_layer_names
            if not names:
                layers = [
                    layer for layer in self.model.layers if type(layer).__name__ == "Embedding"
                ]
                if not layers:
                    raise ValueError(
                        f"embeddings_freq={self.embeddings_freq}, but the model has no "
                        "Embedding layer: name the layers to embed in embeddings_layer_names"
                    )
                return layers
            by_name = {layer.name: layer for layer in self.model.layers}
            missing = [name for name in names if name not in by_name]
            if missing:
                raise ValueError(
                    f"embeddings_layer_names={names!r}: the model has no layer named {missing}"
                )
            return [by_name[name] for name in names]

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            """Writes the epoch's histograms, images and embeddings when due, then its
            scalars and the learning rate.

            Args:
                epoch: the epoch's index, from 0.
                logs: the epoch's logs (loss, metrics, ``val_*``).
            """
            logs = logs or {}
            if self.histogram_freq and epoch % self.histogram_freq == 0:
                self._write_histograms(epoch)
            if self.embeddings_freq and epoch % self.embeddings_freq == 0:
                self._write_embeddings()
            step = epoch if self.update_freq == "epoch" else self.samples_seen
            scalars = self._scalars(logs)
            if "learning_rate" not in scalars:
                scalars.update(self._learning_rate())
            self._writer.scalars(scalars, step)
            self._writer.flush()

        def on_batch_end(self, batch: int, logs: dict | None = None) -> None:
            """Counts the batch's samples; writes its logs' scalars when ``update_freq``
            samples have been seen since the last write.

            Args:
                batch: the batch's index in the epoch.
                logs: the batch's logs (``size``, loss, metrics).
            """
            if self.update_freq == "epoch":
                return
            logs = logs or {}
            self.samples_seen += int(logs.get("size", 1))
            if self.samples_seen - self.samples_seen_at_last_write >= self.update_freq:
                self._writer.scalars(self._scalars(logs), self.samples_seen)
                self._writer.flush()
                self.samples_seen_at_last_write = self.samples_seen

        def on_train_end(self, logs: dict | None = None) -> None:
            """Closes the events file.

            Args:
                logs: unused.
            """
            if self._writer is not None:
                self._writer.close()
                self._writer = None

        @staticmethod
        def _scalars(logs: dict) -> dict[str, float]:
            """The logs' values (but ``batch`` and ``size``) as floats."""
            return {
                name: float(np.asarray(value).item())
                for name, value in logs.items()
                if name not in ("batch", "size")
            }

        def _learning_rate(self) -> dict[str, float]:
            """``{'learning_rate': value}`` of the optimizer's learning rate, or {} without
            one (an optax transform's)."""
            optimizer = getattr(self.model, "optimizer", None)
            rate = getattr(optimizer, "learning_rate", None)
            if rate is None:
                rate = getattr(optimizer, "lr", None)
            if rate is None:
                return {}
            if not isinstance(rate, numbers.Real):
                rate = K.get_value(rate)
            return {"learning_rate": float(np.asarray(rate).item())}

        def _phase(self) -> list:
            """The learning phase input the model's functions take, if any."""
            dynamic = self.model.uses_learning_phase and not isinstance(K.learning_phase(), int)
            return [K.learning_phase()] if dynamic else []

        def _weights(self) -> list[tuple[str, Any, bool]]:
            """(tag, weight, trainable) of each layer weight, each weight once."""
            seen: set[int] = set()
            weights = []
            for layer in self.model.layers:
                trainable = {id(w) for w in layer.trainable_weights}
                for weight in layer.weights:
                    if id(weight) not in seen:
                        seen.add(id(weight))
                        tag = weight.name.replace(":", "_")
                        weights.append((tag, weight, id(weight) in trainable))
            return weights

        def _validation_arrays(self) -> list[np.ndarray] | None:
            """The validation inputs, targets and sample weights, or None without them."""
            model = self.model
            feeds = model._feed_inputs + model._feed_targets + model._feed_sample_weights
            data = list(self.validation_data or [])[: len(feeds)]
            if len(data) < len(feeds) or any(not hasattr(a, "shape") for a in data):
                return None
            return data

        def _functions(self) -> tuple:
            """(output tags, outputs function, gradient tags, gradients function), the
            functions of the validation inputs, targets and sample weights."""
            if self._histogram_functions is None:
                model = self.model
                feeds = model._feed_inputs + model._feed_targets + model._feed_sample_weights
                out_tags, outputs = [], []
                for layer in model.layers:
                    if not hasattr(layer, "output"):  # shared: several outputs per output
                        continue
                    if isinstance(layer.output, list):
                        for i, output in enumerate(layer.output):
                            out_tags.append(f"{layer.name}_out_{i}")
                            outputs.append(output)
                    else:
                        out_tags.append(f"{layer.name}_out")
                        outputs.append(layer.output)
                inputs = model._feed_inputs + self._phase()
                grad_tags, grads_fn = [], None
                if self.write_grads:
                    trainable = [(tag, w) for tag, w, t in self._weights() if t]
                    grads = K.gradients(model.total_loss, [w for _, w in trainable])
                    pairs = [(f"{tag}_grad", g) for (tag, _), g in zip(trainable, grads)]
                    pairs = [(tag, g) for tag, g in pairs if g is not None]
                    grad_tags = [tag for tag, _ in pairs]
                    grads_fn = K.function(feeds + self._phase(), [g for _, g in pairs])
                self._histogram_functions = (
                    out_tags,
                    K.function(inputs, outputs),
                    grad_tags,
                    grads_fn,
                )
            return self._histogram_functions

        def _write_histograms(self, epoch: int) -> None:
            """Writes the weight histograms (and images), and the output and gradient
            histograms over the validation data."""
            weights = self._weights()
            values = K.batch_get_value([w for _, w, _ in weights])
            channels_last = K.image_data_format() == "channels_last"
            for (tag, _, _), value in zip(weights, values):
                histogram = _Histogram()
                histogram.add(value)
                self._writer.histogram(tag, histogram, epoch)
                if self.write_images:
                    images = _weight_images(value, channels_last)
                    if images is not None and images.size:
                        self._writer.images(tag, images, epoch)
            data = self._validation_arrays()
            if data is None:
                if not self._warned_no_validation:
                    warnings.warn(
                        f"TensorBoard: histogram_freq={self.histogram_freq} without "
                        "validation data (arrays or validation_split): only weight histograms "
                        "are written",
                        stacklevel=2,
                    )
                    self._warned_no_validation = True
                return
            out_tags, outputs_fn, grad_tags, grads_fn = self._functions()
            phase = [0] if self._phase() else []
            n_inputs = len(self.model._feed_inputs)
            histograms = {tag: _Histogram() for tag in out_tags}
            mean_grads = None
            total = len(data[0])
            for size, batch in _batches(data, self.batch_size):
                for tag, value in zip(out_tags, outputs_fn(batch[:n_inputs] + phase)):
                    histograms[tag].add(value)
                if grads_fn is not None:
                    grads = grads_fn(batch + phase)
                    weighted = [np.asarray(g, np.float64) * (size / total) for g in grads]
                    mean_grads = (
                        weighted
                        if mean_grads is None
                        else [m + g for m, g in zip(mean_grads, weighted)]
                    )
            for tag, grad in zip(grad_tags, mean_grads or []):
                histograms[tag] = _Histogram()
                histograms[tag].add(grad)
            for tag, histogram in histograms.items():
                self._writer.histogram(tag, histogram, epoch)

        def _write_embeddings(self) -> None:
            """Writes the chosen layers' outputs on ``embeddings_data`` for the Projector."""
            model = self.model
            data = standardize_input_data(self.embeddings_data, model._feed_input_names)
            layers = self._embedding_layers
            if self._embedding_function is None:
                self._embedding_function = K.function(
                    model._feed_inputs + self._phase(), [layer.output for layer in layers]
                )
            phase = [0] if self._phase() else []
            parts: list[list[np.ndarray]] = [[] for _ in layers]
            for size, batch in _batches(data, self.batch_size):
                for part, value in zip(parts, self._embedding_function(batch + phase)):
                    part.append(np.reshape(value, (size, -1)))
            metadata = self.embeddings_metadata
            if isinstance(metadata, str):
                metadata = {layer.name: metadata for layer in layers}
            _write_embeddings(
                self.log_dir,
                {layer.name: np.concatenate(part) for layer, part in zip(layers, parts)},
                metadata,
            )

    TensorBoard.__module__ = __name__
    TensorBoard.__qualname__ = "TensorBoard"
    return TensorBoard


def __getattr__(name: str) -> Any:
    """Builds ``TensorBoard`` on first access (it subclasses ``keras.callbacks.Callback``).

    Args:
        name: the attribute asked for.

    Returns:
        The ``TensorBoard`` class (the same one each time).

    Raises:
        AttributeError: for any other name.
    """
    if name == "TensorBoard":
        return _tensorboard_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def use_in_keras(callbacks_module: Any) -> None:
    """Makes ``TensorBoard`` the ``TensorBoard`` of Keras's ``keras.callbacks`` module.

    Args:
        callbacks_module: the imported ``keras.callbacks`` module.
    """
    callbacks_module.TensorBoard = _tensorboard_class()
