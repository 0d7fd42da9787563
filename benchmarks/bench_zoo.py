"""The ``keras.applications`` zoo on jaxkeras against TF-Keras: same predictions, training, speed.

Every model of Keras-Applications 1.0.8 (the package Keras 2.3.1 installs) is built by Keras
2.3.1 on jaxkeras with ``weights=None`` at its smallest allowed input and 10 classes. Its
weights, a batch of inputs and its outputs go to a file; TF-Keras then builds the same model,
takes the weights in layer order and predicts the same batch. Checked (an error when not met):

- softmax outputs within ``1e-5`` of TF-Keras's, and the classifier's input (the pooled
  features) within ``1e-4`` relative (largest difference over the largest magnitude);
- ``train_on_batch`` on one batch (SGD): every loss finite, and the last below the first
  wherever TF-Keras's is (at these tiny inputs the deepest models' losses need not fall on
  either side: ResNet152V2's end above where they start on both); the first loss (a forward
  pass in training mode, before any update) within ``1e-3`` relative of TF-Keras's. Later
  losses are reported, not checked: at the smallest inputs the last
  BatchNormalization layers normalize one value per sample (1x1), which makes a float32
  gradient only a few percent exact on either side (ResNet50V2 at batch 4: TF-Keras's and ours
  both 3-4% from a float64 gradient), so the trajectories part. A batch of 16 keeps them
  falling.

MobileNet is built with ``dropout=0`` on both sides, so that no model draws random numbers.

TF-Keras's model is ``tf_keras.applications``'s where its weights have the same shapes in the
same order as ours; otherwise (ResNeXt, which ``tf_keras`` lacks, and ResNet50, whose Keras
2.3.1 version is the older ``resnet50`` module) it is Keras-Applications 1.0.8's own builder
given TF-Keras's backend, layers, models and utils, so the architecture is the same code.

Timed, both sides in their own processes: the first ``train_on_batch`` (it compiles) and the
median later step. One row each per family (its first model run). ``make bench`` runs each
family's first model; ``--all`` checks all twenty. Keras 2.3.1 needs its own
environment (``.venv``), TF-Keras ``.venv-bench`` (``make bench`` creates both). Run ``python
benchmarks/bench_zoo.py [--quick] [--models A B ...]`` for the table, ``--side jaxkeras|tf_keras
--model NAME --data FILE`` for one side (prints JSON).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_keras2 import _keras
from common import Row, json_of_process, markdown_table, ratio_row

ROOT = Path(__file__).resolve().parent.parent
BATCH = 16
CLASSES = 10
STEPS = 5  # train_on_batch calls on one batch (the first compiles)
SOFTMAX_TOLERANCE = 1e-5
FEATURE_TOLERANCE = 1e-4
LOSS_TOLERANCE = 1e-3

# name: (family, Keras-Applications module, builder, smallest input side)
ZOO = {
    "VGG16": ("VGG", "vgg16", "VGG16", 32),
    "VGG19": ("VGG", "vgg19", "VGG19", 32),
    "ResNet50": ("ResNet", "resnet50", "ResNet50", 32),
    "ResNet101": ("ResNet", "resnet", "ResNet101", 32),
    "ResNet152": ("ResNet", "resnet", "ResNet152", 32),
    "ResNet50V2": ("ResNetV2", "resnet_v2", "ResNet50V2", 32),
    "ResNet101V2": ("ResNetV2", "resnet_v2", "ResNet101V2", 32),
    "ResNet152V2": ("ResNetV2", "resnet_v2", "ResNet152V2", 32),
    "ResNeXt50": ("ResNeXt", "resnext", "ResNeXt50", 32),
    "ResNeXt101": ("ResNeXt", "resnext", "ResNeXt101", 32),
    "InceptionV3": ("InceptionV3", "inception_v3", "InceptionV3", 75),
    "InceptionResNetV2": ("InceptionResNetV2", "inception_resnet_v2", "InceptionResNetV2", 75),
    "Xception": ("Xception", "xception", "Xception", 71),
    "MobileNet": ("MobileNet", "mobilenet", "MobileNet", 32),
    "MobileNetV2": ("MobileNetV2", "mobilenet_v2", "MobileNetV2", 32),
    "DenseNet121": ("DenseNet", "densenet", "DenseNet121", 32),
    "DenseNet169": ("DenseNet", "densenet", "DenseNet169", 32),
    "DenseNet201": ("DenseNet", "densenet", "DenseNet201", 32),
    "NASNetMobile": ("NASNet", "nasnet", "NASNetMobile", 32),
    "NASNetLarge": ("NASNet", "nasnet", "NASNetLarge", 32),
}
QUICK = ["MobileNetV2", "ResNet50V2", "Xception"]
FAMILY_FIRST = list({family: name for name, (family, *_) in reversed(ZOO.items())}.values())[::-1]
"""The first model of each family (what ``make bench`` runs; ``--all`` runs every model)."""


def build(keras, name: str, side: str):
    """A fresh model ``name`` (10 classes, no weights) and what built it.

    Args:
        keras: Keras 2.3.1 or TF-Keras.
        name: a key of :data:`ZOO`.
        side: ``'jaxkeras'`` or ``'tf_keras'``.

    Returns:
        ``(model, source)``: ``source`` is ``'keras.applications'``, ``'tf_keras.applications'``
        or ``'keras_applications'`` (Keras-Applications 1.0.8 given the side's modules).
    """
    _, module, builder, side_length = ZOO[name]
    kwargs = {"weights": None, "input_shape": (side_length, side_length, 3), "classes": CLASSES}
    if name == "MobileNet":
        kwargs["dropout"] = 0.0
    modules = {"backend": keras.backend, "layers": keras.layers, "models": keras.models}
    modules["utils"] = keras.utils

    def ours(**arguments):  # (imported when called: TF-Keras's side may not need it)
        return getattr(importlib.import_module(f"keras_applications.{module}"), builder)(
            **arguments
        )

    if side == "jaxkeras":
        if hasattr(keras.applications, builder) and module != "resnext":
            return getattr(keras.applications, builder)(**kwargs), "keras.applications"
        return ours(**kwargs, **modules), "keras_applications"
    return getattr(keras.applications, builder, None), ours, kwargs, modules


def _timed_steps(model, x, y, steps: int) -> tuple[list[float], list[float]]:
    """``train_on_batch`` ``steps`` times: the times and the losses."""
    times, losses = [], []
    for _ in range(steps):
        start = time.perf_counter()
        loss = model.train_on_batch(x, y)
        times.append(time.perf_counter() - start)
        losses.append(float(np.asarray(loss).ravel()[0]))
    return times, losses


def _outputs(keras, model, x) -> tuple[np.ndarray, np.ndarray]:
    """The softmax outputs and the classifier's input for ``x``."""
    features = keras.backend.function([model.input], [model.layers[-1].input])
    return model.predict(x), np.asarray(features([x])[0])


def run_side(side: str, name: str, data: str, steps: int) -> dict:
    """One side for one model: jaxkeras writes the weights, inputs and outputs to ``data``;
    TF-Keras reads the weights and inputs from it and writes its outputs beside.

    Returns:
        The times, losses and the model's source, for JSON.
    """
    keras = _keras(side)
    if side == "jaxkeras":
        import jaxkeras

        # the same weights in every run: Keras seeds its initializers from NumPy's generator
        np.random.seed(0)
        jaxkeras.set_random_seed(0)
    rng = np.random.default_rng(0)
    started = time.perf_counter()
    if side == "jaxkeras":
        model, source = build(keras, name, side)
        side_length = ZOO[name][3]
        x = rng.standard_normal((BATCH, side_length, side_length, 3)).astype("float32")
        y = np.eye(CLASSES, dtype="float32")[rng.integers(0, CLASSES, BATCH)]
        weights = model.get_weights()
    else:
        saved = np.load(data)
        x, y = saved["x"], saved["y"]
        weights = [saved[f"w{i}"] for i in range(int(saved["count"]))]
        model, source = _reference(keras, name, [w.shape for w in weights])
        model.set_weights(weights)
    built = time.perf_counter() - started
    probs, features = _outputs(keras, model, x)
    if side == "jaxkeras":
        arrays = {f"w{i}": w for i, w in enumerate(weights)}
        np.savez(data, x=x, y=y, probs=probs, features=features, count=len(weights), **arrays)
    else:
        np.savez(data + ".tf.npz", probs=probs, features=features)
    model.compile(keras.optimizers.SGD(learning_rate=0.001), "categorical_crossentropy")
    times, losses = _timed_steps(model, x, y, steps)
    return {"source": source, "build_s": built, "steps_s": times, "losses": losses}


def _reference(keras, name: str, shapes: list[tuple]):
    """TF-Keras's model: ``tf_keras.applications``'s when its weights' shapes are ``shapes``,
    else Keras-Applications' builder on TF-Keras's modules."""
    theirs, ours, kwargs, modules = build(keras, name, "tf_keras")
    if theirs is not None:
        model = theirs(**kwargs)
        if [tuple(w.shape) for w in model.get_weights()] == [tuple(s) for s in shapes]:
            return model, "tf_keras.applications"
        keras.backend.clear_session()
    return ours(**kwargs, **modules), "keras_applications"


def _side_in_subprocess(side: str, python: Path, args: list[str]) -> dict:
    """Runs one side in a fresh process; raises with its error output when it fails."""
    if not python.exists():
        raise RuntimeError(f"bench_zoo: {python} is missing (make bench creates it)")
    return json_of_process([python, __file__, "--side", side, *args], {"JAX_PLATFORMS": "cpu"})


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    """The largest difference over the largest magnitude of ``b``."""
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def compare(name: str, steps: int) -> dict:
    """Both sides for one model, and the checks of the module docstring.

    Returns:
        Both sides' results, the differences and the reference's source.

    Raises:
        AssertionError: a check failed (the message names the model and the figures).
    """
    ours_python = Path(sys.executable)  # the interpreter running the benchmark
    theirs_python = Path(os.environ.get("BENCH_TF_PYTHON", ROOT / ".venv-bench" / "bin" / "python"))
    with tempfile.TemporaryDirectory() as folder:
        data = str(Path(folder) / f"{name}.npz")
        args = ["--model", name, "--data", data, "--steps", str(steps)]
        ours = _side_in_subprocess("jaxkeras", ours_python, args)
        theirs = _side_in_subprocess("tf_keras", theirs_python, args)
        a, b = np.load(data), np.load(data + ".tf.npz")
        softmax = float(np.max(np.abs(a["probs"] - b["probs"])))
        features = _relative(a["features"], b["features"])
    losses, reference = ours["losses"], theirs["losses"]
    falling = all(np.isfinite(losses)) and losses[-1] < losses[0]
    reference_falls = all(np.isfinite(reference)) and reference[-1] < reference[0]
    loss = _relative(np.float64(losses[0]), np.float64(theirs["losses"][0]))
    result = {"ours": ours, "theirs": theirs, "softmax": softmax, "features": features}
    result["loss"] = loss
    problems = []
    if softmax > SOFTMAX_TOLERANCE:
        problems.append(f"softmax outputs differ by {softmax:.2e} (> {SOFTMAX_TOLERANCE})")
    if features > FEATURE_TOLERANCE:
        problems.append(f"features differ by {features:.2e} relative (> {FEATURE_TOLERANCE})")
    if loss > LOSS_TOLERANCE:
        problems.append(f"first loss {losses[0]} vs TF-Keras's {theirs['losses'][0]}")
    if not falling and (reference_falls or not all(np.isfinite(losses))):
        problems.append(f"losses {losses} are not finite and falling (TF-Keras's {reference})")
    assert not problems, f"{name} vs {theirs['source']}: " + "; ".join(problems)
    return result


def main(quick: bool = False, names: list[str] | None = None) -> list[Row]:
    """Compares and times each family's first model (three models with ``quick``).

    Args:
        quick: only :data:`QUICK`, with fewer steps.
        names: the models to run (default: :data:`FAMILY_FIRST`, or :data:`QUICK`).

    Returns:
        Two rows per family (its first model run): the train step and the first step.
    """
    names = names or (QUICK if quick else FAMILY_FIRST)
    steps = 3 if quick else STEPS
    rows, families = [], set()
    for name in names:
        result = compare(name, steps)
        print(
            f"{name}: softmax {result['softmax']:.1e}, features {result['features']:.1e}, "
            f"losses {result['loss']:.1e} "
            f"vs {result['theirs']['source']}; losses {result['ours']['losses']}, "
            f"TF-Keras's {result['theirs']['losses']}",
            file=sys.stderr,
        )
        family = ZOO[name][0]
        if family in families:
            continue
        families.add(family)
        ours, theirs = result["ours"], result["theirs"]
        side = ZOO[name][3]
        note = (
            f"batch {BATCH} at {side}x{side}, SGD; vs {theirs['source']}; softmax within "
            f"{result['softmax']:.0e}, features {result['features']:.0e} rel., first loss "
            f"{result['loss']:.0e} rel.; "
            f"losses {ours['losses'][0]:.3f} -> {ours['losses'][-1]:.3f}"
        )
        rows.append(
            ratio_row(
                f"zoo {name}: train step", ours["steps_s"][1:], theirs["steps_s"][1:], 1.0, note
            )
        )
        rows.append(
            ratio_row(
                f"zoo {name}: build + first train step (compiles)",
                [ours["build_s"] + ours["steps_s"][0]],
                [theirs["build_s"] + theirs["steps_s"][0]],
                None,
                "no persistent compilation cache; TF-Keras builds and traces",
            )
        )
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--side", choices=["jaxkeras", "tf_keras"])
    parser.add_argument("--quick", action="store_true", help="three models, fewer steps")
    parser.add_argument("--models", nargs="*", help="models to run (default: each family's first)")
    parser.add_argument("--all", action="store_true", help="every model of the zoo")
    parser.add_argument("--model", help="the model of one side")
    parser.add_argument("--data", help="the file the sides exchange")
    parser.add_argument("--steps", type=int, default=STEPS)
    cli = parser.parse_args()
    if cli.side:
        print(json.dumps(run_side(cli.side, cli.model, cli.data, cli.steps)))
    else:
        print(markdown_table(main(cli.quick, list(ZOO) if cli.all else cli.models)))
