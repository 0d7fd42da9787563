"""Names in compiled code: a K.function compiles to ``jit(<its name>)``, each op's operations
carry the ``K.name_scope`` it was built in and its op name, and ``jaxkeras.profiler.trace``
writes a profile."""

from __future__ import annotations

import importlib.util
import os
import re

import numpy as np
import pytest

import jaxkeras as K
from jaxkeras import profiler
from tests.helpers import run_on_keras2


def _locations(text: str) -> set[str]:
    """The names in the ``loc(...)`` debug metadata of lowered StableHLO text."""
    return set(re.findall(r'loc\("([^"]*)"', text))


def _step(name=None, micro_batches=1):
    x = K.placeholder((None, 3))
    w = K.variable(np.ones((3, 2), "float32"))
    with K.name_scope("outer"), K.name_scope("block"):
        hidden = K.relu(K.dot(x, w))
    loss = K.mean(K.square(hidden))
    (g,) = K.gradients(loss, [w])
    f = K.function([x], [loss], [K.update_sub(w, 0.1 * g)], name=name, micro_batches=micro_batches)
    return f, [np.ones((4, 3), "float32")]


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_ops_carry_their_name_scope_and_op_name(micro_batches):
    f, feeds = _step(micro_batches=micro_batches)
    names = _locations(f.lower(feeds).as_text(debug_info=True))
    scoped = {n for n in names if "outer/block/" in n}
    # the forward ops and their gradients, named after the scope and the op
    assert any(n.endswith("jvp(outer/block/dot)/dot_general") for n in scoped), scoped
    assert any("transpose(jvp(outer/block/dot))" in n for n in scoped), scoped
    assert any("outer/block/relu" in n for n in scoped), scoped
    # the loss, built outside the scopes, is not in them
    assert any(re.search(r"(^|[/(])mean\b", n) for n in names if "block" not in n)


def test_names_reach_the_compiled_hlo():
    f, feeds = _step()
    hlo = f.lower(feeds).compile().as_text()
    assert "outer/block/dot" in hlo


def test_compiled_function_is_named_after_the_k_function():
    named, feeds = _step(name="my_step")
    text = named.lower(feeds).as_text(debug_info=True)
    assert "jit(my_step)" in text
    assert "module @jit_my_step" in text
    unnamed, feeds = _step()
    assert "jit(k_function)" in unnamed.lower(feeds).as_text(debug_info=True)
    assert named.name == "my_step" and unnamed.name is None
    with pytest.raises(TypeError, match="name must be a string or None, got 3"):
        K.function([], [], name=3)


def test_profiler_trace_writes_a_profile(tmp_path):
    f, feeds = _step(name="profiled_step")
    f(feeds)  # compiled before the trace
    with profiler.trace(tmp_path / "logs", create_perfetto_trace=True) as logdir:
        f(feeds)
    runs = os.path.join(logdir, "plugins", "profile")
    files = [name for run in os.listdir(runs) for name in os.listdir(os.path.join(runs, run))]
    assert any(name.endswith(".xplane.pb") for name in files), files
    assert "perfetto_trace.json.gz" in files
    with pytest.raises(TypeError, match="logdir must be a path"), profiler.trace(3):
        pass


KERAS_PROBE = """
import re
import numpy as np, keras
dense = keras.models.Sequential([
    keras.layers.Dense(8, activation="relu", input_shape=(4,)),
    keras.layers.Dense(1),
])
dense.compile(optimizer="sgd", loss="mse")
dense._make_train_function()
dense._make_predict_function()
x, y = np.ones((2, 4), "float32"), np.ones((2, 1), "float32")
train = dense.train_function.lower([x, y, np.ones(2, "float32")]).as_text(debug_info=True)
predict = dense.predict_function.lower([x]).as_text(debug_info=True)
conv = keras.models.Sequential([
    keras.layers.Conv2D(2, 3, input_shape=(6, 6, 1)),
    keras.layers.Flatten(),
    keras.layers.Dense(1),
])
conv.compile(optimizer="adam", loss="mse")
conv._make_train_function()
images = np.ones((2, 6, 6, 1), "float32")
conv_train = conv.train_function.lower([images, y, np.ones(2, "float32")]).as_text(
    debug_info=True
)
print("jit(train_function)" in train, "jit(predict_function)" in predict)
print("dense_1/" in train, "dense_2/" in train, "transpose(jvp(dense_1/" in train)
print("conv2d_1/" in conv_train, "training/Adam/" in conv_train)
"""


@pytest.mark.keras2
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("keras") is None, reason="keras 2.3.1 not installed")
def test_keras_functions_and_layers_are_named(tmp_path):
    assert run_on_keras2(KERAS_PROBE, tmp_path).strip().splitlines()[-3:] == [
        "True True",
        "True True True",
        "True True",
    ]
