"""Bad input across the API: each mistake raises ValueError/TypeError naming the function, the
argument and the bad value; a malformed keras.json names the file and the setting; non-finite
feeds follow one documented rule; and a compiled call that fails (at feed checking, while
tracing, or while running, with the updated variables' buffers donated) leaves every variable
bit-identical and the function usable."""

import json
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

import jaxkeras as K
from jaxkeras._engine.store import STORE


def ph(shape, dtype="float32"):
    return K.placeholder(shape, dtype=dtype)


def var(shape, value=1.0, dtype=None):
    return K.variable(np.full(shape, value), dtype=dtype)


IMG = (1, 8, 8, 3)  # channels_last image batch
KERNEL = (3, 3, 3, 2)


def esc(*parts):
    """A regex matching the literal ``parts`` in order (the function, argument, bad value)."""
    return ".*".join(re.escape(p) for p in parts)


def _identity_step(x, states):
    return x, states


# (call, exception, what the message must name) -- each call builds its own tensors.
CASES = {
    # ---- wrong rank or shape
    "conv2d x rank": (
        lambda: K.conv2d(ph((None, 3)), var(KERNEL)),
        ValueError,
        esc("conv2d", "x must have rank 4", "(None, 3)"),
    ),
    "conv2d kernel rank": (
        lambda: K.conv2d(ph(IMG), var((3, 3, 3))),
        ValueError,
        esc("conv2d", "kernel must have rank 4", "(3, 3, 3)"),
    ),
    "conv2d channels": (
        lambda: K.conv2d(ph(IMG), var((3, 3, 4, 2))),
        ValueError,
        esc("conv2d", "input channels", "3 vs 4"),
    ),
    "conv1d x rank": (
        lambda: K.conv1d(ph((5, 2)), var((3, 2, 2))),
        ValueError,
        esc("conv1d", "x must have rank 3", "(5, 2)"),
    ),
    "pool2d x rank": (
        lambda: K.pool2d(ph((None, 3)), (2, 2)),
        ValueError,
        esc("pool2d", "x must have rank 4", "(None, 3)"),
    ),
    "temporal_padding rank": (
        lambda: K.temporal_padding(ph((None, 3))),
        ValueError,
        esc("temporal_padding", "x must have rank 3", "(None, 3)"),
    ),
    "dot shapes": (
        lambda: K.dot(ph((None, 3)), ph((4, 5))),
        ValueError,
        esc("dot", "(None, 3)", "(4, 5)", "3 != 4"),
    ),
    "concatenate shapes": (
        lambda: K.concatenate([ph((None, 3)), ph((2, 3, 4))]),
        ValueError,
        esc("concatenate", "(None, 3)", "(2, 3, 4)"),
    ),
    "reshape size": (
        lambda: K.reshape(np.ones((2, 3)), (4, 4)),
        ValueError,
        esc("reshape", "(2, 3)", "(4, 4)"),
    ),
    "squeeze non-unit axis": (
        lambda: K.squeeze(np.ones((2, 3)), 1),
        ValueError,
        esc("squeeze", "axis 1", "size 3"),
    ),
    "bias_add bias shape": (
        lambda: K.bias_add(ph(IMG), var((4,))),
        ValueError,
        esc("bias_add", "bias of shape (4,)", "(1, 8, 8, 3)"),
    ),
    "categorical_crossentropy shapes": (
        lambda: K.categorical_crossentropy(ph((None, 3)), ph((None, 4))),
        ValueError,
        esc("categorical_crossentropy", "target of shape (None, 3)", "output of shape (None, 4)"),
    ),
    "binary_crossentropy shapes": (
        lambda: K.binary_crossentropy(ph((None, 3)), ph((None, 4))),
        ValueError,
        esc("binary_crossentropy", "target of shape (None, 3)", "output of shape (None, 4)"),
    ),
    "sparse_categorical_crossentropy labels": (
        lambda: K.sparse_categorical_crossentropy(ph((2, 3, 2)), ph((2, 5))),
        ValueError,
        esc("sparse_categorical_crossentropy", "target of shape (2, 3, 2)"),
    ),
    "switch condition rank": (
        lambda: K.switch(ph((2, 3, 4), "bool"), ph((None, 3)), ph((None, 3))),
        ValueError,
        esc("switch", "condition", "(2, 3, 4)"),
    ),
    "slice start length": (
        lambda: K.slice(ph((None, 3)), (0, 0, 0), (1, 1)),
        ValueError,
        esc("slice", "start", "(0, 0, 0)"),
    ),
    "update shape": (
        lambda: K.update(var((2, 3)), np.ones((3, 3))),
        ValueError,
        esc("update", "(3, 3)", "(2, 3)"),
    ),
    "set_value shape": (
        lambda: K.set_value(var((2, 3)), np.ones((3, 2))),
        ValueError,
        esc("set_value", "(3, 2)", "(2, 3)"),
    ),
    "batch_set_value shape": (
        lambda: K.batch_set_value([(var((2, 3)), np.ones(2))]),
        ValueError,
        esc("batch_set_value", "(2,)", "(2, 3)"),
    ),
    "conv2d_transpose output_shape": (
        lambda: K.conv2d_transpose(ph(IMG), var((3, 3, 2, 3)), (1, 9, 9)),
        ValueError,
        esc("conv2d_transpose", "output_shape", "(1, 9, 9)"),
    ),
    "spatial_2d_padding padding": (
        lambda: K.spatial_2d_padding(ph(IMG), padding=((1, 1),)),
        ValueError,
        esc("spatial_2d_padding", "padding", "((1, 1),)"),
    ),
    "placeholder negative dimension": (
        lambda: K.placeholder(shape=(2, -3)),
        ValueError,
        esc("placeholder", "shape", "(2, -3)"),
    ),
    "random_normal shape": (
        lambda: K.random_normal((2, -1)),
        ValueError,
        esc("random_normal", "shape=(2, -1)"),
    ),
    "eye size": (lambda: K.eye(-2), ValueError, esc("eye", "(-2, -2)")),
    # ---- axis out of range
    **{
        f"{name} axis": (
            lambda fn=fn: fn(ph((None, 3)), axis=5),
            ValueError,
            esc(name, "axis=5 is out of range for 2 axes"),
        )
        for name, fn in [
            ("sum", K.sum),
            ("mean", K.mean),
            ("max", K.max),
            ("std", K.std),
            ("any", K.any),
            ("argmax", K.argmax),
            ("argmin", K.argmin),
            ("cumsum", K.cumsum),
            ("cumprod", K.cumprod),
            ("logsumexp", K.logsumexp),
            ("softmax", K.softmax),
            ("l2_normalize", K.l2_normalize),
        ]
    },
    "concatenate axis": (
        lambda: K.concatenate([ph((None, 3))] * 2, axis=3),
        ValueError,
        esc("concatenate", "axis=3", "[-2, 2)"),
    ),
    "stack axis": (
        lambda: K.stack([ph((None, 3))] * 2, axis=4),
        ValueError,
        esc("stack", "axis=4", "[-3, 3)"),
    ),
    "expand_dims axis": (
        lambda: K.expand_dims(ph((None, 3)), -4),
        ValueError,
        esc("expand_dims", "axis=-4", "[-3, 3)"),
    ),
    "repeat_elements axis": (
        lambda: K.repeat_elements(ph((None, 3)), 2, 3),
        ValueError,
        esc("repeat_elements", "axis=3"),
    ),
    "reverse axes": (
        lambda: K.reverse(ph((None, 3)), 4),
        ValueError,
        esc("reverse", "axes=4"),
    ),
    "permute_dimensions pattern": (
        lambda: K.permute_dimensions(ph((None, 3)), (0, 2)),
        ValueError,
        esc("permute_dimensions", "pattern=2"),
    ),
    "batch_dot axes": (
        lambda: K.batch_dot(ph((2, 3, 4)), ph((2, 3, 4)), axes=(5, 1)),
        ValueError,
        esc("batch_dot", "axes[0]=5"),
    ),
    "batch_normalization axis": (
        lambda: K.batch_normalization(ph((None, 3)), 0.0, 1.0, 0.0, 1.0, axis=5),
        ValueError,
        esc("batch_normalization", "axis=5"),
    ),
    "categorical_crossentropy axis": (
        lambda: K.categorical_crossentropy(ph((None, 3)), ph((None, 3)), axis=4),
        ValueError,
        esc("categorical_crossentropy", "axis=4"),
    ),
    "var axis twice": (
        lambda: K.var(ph((None, 3)), axis=(1, -1)),
        ValueError,
        esc("var", "axis=(1, -1)", "twice"),
    ),
    "sum axis not an int": (
        lambda: K.sum(ph((None, 3)), axis=1.5),
        TypeError,
        esc("sum", "axis", "1.5"),
    ),
    # ---- unknown dtype, data_format, padding, pool_mode, interpolation
    "variable dtype": (
        lambda: K.variable(1.0, dtype="float65"),
        TypeError,
        esc("variable", "'float65'"),
    ),
    "placeholder dtype": (
        lambda: K.placeholder((2,), dtype="floaty"),
        TypeError,
        esc("placeholder", "'floaty'"),
    ),
    "cast dtype": (lambda: K.cast(np.ones(2), "nope"), TypeError, esc("cast", "'nope'")),
    "zeros dtype": (lambda: K.zeros((2,), dtype="strx"), TypeError, esc("zeros", "'strx'")),
    "random_uniform integer dtype": (
        lambda: K.random_uniform((2,), dtype="int32"),
        ValueError,
        esc("random_uniform", "floating-point", "'int32'"),
    ),
    "conv2d data_format": (
        lambda: K.conv2d(ph(IMG), var(KERNEL), data_format="nhwc"),
        ValueError,
        esc("conv2d", "data_format", "'nhwc'"),
    ),
    "pool2d data_format": (
        lambda: K.pool2d(ph(IMG), (2, 2), data_format="bad"),
        ValueError,
        esc("pool2d", "data_format", "'bad'"),
    ),
    "bias_add data_format": (
        lambda: K.bias_add(ph(IMG), var((3,)), data_format="x"),
        ValueError,
        esc("bias_add", "data_format", "'x'"),
    ),
    "resize_volumes data_format": (
        lambda: K.resize_volumes(ph((1, 2, 2, 2, 1)), 2, 2, 2, "xx"),
        ValueError,
        esc("resize_volumes", "data_format", "'xx'"),
    ),
    "normalize_data_format": (
        lambda: K.normalize_data_format("nchw"),
        ValueError,
        esc("data_format", "'nchw'"),
    ),
    "set_image_data_format": (
        lambda: K.set_image_data_format("channels_middle"),
        ValueError,
        esc("set_image_data_format", "'channels_middle'"),
    ),
    "conv2d padding": (
        lambda: K.conv2d(ph(IMG), var(KERNEL), padding="full"),
        ValueError,
        esc("conv2d", "padding", "'full'"),
    ),
    "conv1d padding": (
        lambda: K.conv1d(ph((1, 5, 2)), var((3, 2, 2)), padding="reflect"),
        ValueError,
        esc("conv1d", "padding", "'reflect'"),
    ),
    "pool2d padding": (
        lambda: K.pool2d(ph(IMG), (2, 2), padding="full"),
        ValueError,
        esc("pool2d", "padding", "'full'"),
    ),
    "pool2d pool_mode": (
        lambda: K.pool2d(ph(IMG), (2, 2), pool_mode="median"),
        ValueError,
        esc("pool2d", "pool_mode", "'median'"),
    ),
    "pool3d pool_mode": (
        lambda: K.pool3d(ph((1, 4, 4, 4, 1)), (2, 2, 2), pool_mode="sum"),
        ValueError,
        esc("pool3d", "pool_mode", "'sum'"),
    ),
    "resize_images interpolation": (
        lambda: K.resize_images(ph(IMG), 2, 2, "channels_last", interpolation="cubic"),
        ValueError,
        esc("resize_images", "interpolation", "'cubic'"),
    ),
    # ---- settings
    "set_floatx int8": (lambda: K.set_floatx("int8"), ValueError, esc("set_floatx", "'int8'")),
    "set_epsilon negative": (lambda: K.set_epsilon(-1.0), ValueError, esc("set_epsilon", "-1.0")),
    "set_epsilon string": (lambda: K.set_epsilon("abc"), ValueError, esc("set_epsilon", "'abc'")),
    "set_learning_phase 2": (
        lambda: K.set_learning_phase(2),
        ValueError,
        esc("set_learning_phase", "0 or 1", "2"),
    ),
    "learning_phase_scope 3": (
        lambda: K.learning_phase_scope(3).__enter__(),
        ValueError,
        esc("learning_phase_scope", "0 or 1", "3"),
    ),
    # ---- K.function and its feeds
    "placeholder that is not an input": (
        lambda: K.function([ph((None, 3))], [ph((None, 2), "int32") * 2])([np.ones((1, 3))]),
        ValueError,
        r"placeholders not fed: 'placeholder\w*' \(shape \(None, 2\), dtype int32\)",
    ),
    "feed of the wrong shape": (
        lambda: _double()([np.ones((1, 4))]),
        ValueError,
        esc("feed for", "has shape (1, 4)", "(None, 3)"),
    ),
    "feed of the wrong rank": (
        lambda: _double()([np.ones(3)]),
        ValueError,
        esc("feed for", "has shape (3,)", "(None, 3)"),
    ),
    "feed of strings": (
        lambda: _double()([np.array([["a", "b", "c"]])]),
        TypeError,
        esc("feed for", "cannot be cast to float32", "'a'"),
    ),
    "ragged feed": (
        lambda: _double()([[[1.0, 2.0, 3.0], [1.0]]]),
        TypeError,
        esc("feed for", "cannot be read as an array"),
    ),
    "wrong number of feeds": (
        lambda: _double()([np.ones((1, 3)), np.ones((1, 3))]),
        ValueError,
        esc("expects a list of 1 values", "got"),
    ),
    "NaN feed for an integer input": (
        lambda: K.function([p := ph((2,), "int32")], [p * 1])([np.array([np.nan, 1.0])]),
        ValueError,
        esc("feed for", "NaN or infinity", "int32"),
    ),
    "learning phase feed 2": (
        lambda: K.function([p := ph((2,)), K.learning_phase()], [p * 2])([np.ones(2), 2]),
        ValueError,
        esc("learning phase", "0 or 1", "got 2"),
    ),
    "function inputs not a list": (
        lambda: K.function(p := ph((3,)), [p]),
        TypeError,
        esc("function", "inputs must be a list", "placeholder"),
    ),
    "function unknown argument": (
        lambda: K.function([p := ph((3,))], [p], fetches=[]),
        ValueError,
        esc("function", "unsupported", "fetches"),
    ),
    "function update entry": (
        lambda: K.function([p := ph((3,))], [p], updates=[3]),
        TypeError,
        esc("updates", "got 3"),
    ),
    "session feed key": (
        lambda: K.get_session().run(ph((2,)) * 2, {"x": np.ones(2)}),
        TypeError,
        esc("feed_dict keys", "'x'"),
    ),
    "session feed shape": (
        lambda: K.get_session().run((p := ph((2,))) * 2, {p: np.ones(3)}),
        ValueError,
        esc("feed for", "(3,)", "(2,)"),
    ),
    # ---- updating a non-variable
    "update of a placeholder": (
        lambda: K.update(p := ph((None, 3)), p),
        TypeError,
        esc("update", "x must be a variable", "placeholder"),
    ),
    "update_add of an array": (
        lambda: K.update_add(np.ones(2), 1.0),
        TypeError,
        esc("update_add", "x must be a variable", "array"),
    ),
    "update_sub of a tensor": (
        lambda: K.update_sub(var((2,)) * 2, 1.0),
        TypeError,
        esc("update_sub", "x must be a variable", "mul"),
    ),
    "moving_average_update of a tensor": (
        lambda: K.moving_average_update(p := ph((3,)), p, 0.9),
        TypeError,
        esc("moving_average_update", "x must be a variable"),
    ),
    "set_value of an array": (
        lambda: K.set_value(np.ones(2), np.zeros(2)),
        TypeError,
        esc("set_value", "x must be a variable", "array"),
    ),
    # ---- gradients
    "gradients of an integer loss": (
        lambda: K.gradients(K.sum(K.cast(v := var((3,)), "int32")), [v]),
        TypeError,
        esc("gradients", "loss", "int32"),
    ),
    "gradients for an integer variable": (
        lambda: K.gradients(K.sum(var((3,))), [var((3,), dtype="int32")]),
        TypeError,
        esc("gradients", "variables[0]", "int32"),
    ),
    "gradients for an array": (
        lambda: K.gradients(K.sum(var((3,))), [np.ones(3)]),
        TypeError,
        esc("gradients", "variables", "array"),
    ),
    # ---- rnn, map_fn, folds
    "rnn step returns extra states": (
        lambda: K.rnn(lambda x, s: (x, [s[0], s[0]]), ph((2, 4, 3)), [K.zeros((2, 3))]),
        ValueError,
        esc("rnn", "new_states", "returned 2 tensors where 1 were expected"),
    ),
    "rnn step changes a state's shape": (
        lambda: K.rnn(
            lambda x, s: (x, [K.concatenate([s[0], s[0]])]), ph((2, 4, 3)), [K.zeros((2, 3))]
        ),
        ValueError,
        esc("rnn", "new_states", "(2, 6)", "(2, 3)"),
    ),
    "rnn step returns one value": (
        lambda: K.rnn(lambda x, s: x, ph((2, 4, 3)), [K.zeros((2, 3))]),
        ValueError,
        esc("rnn", "(output, new_states)"),
    ),
    "rnn inputs rank": (
        lambda: K.rnn(_identity_step, ph((None, 3)), [K.zeros((2, 3))]),
        ValueError,
        esc("rnn", "inputs must have rank >= 3", "(None, 3)"),
    ),
    "rnn mask length": (
        lambda: K.rnn(_identity_step, ph((2, 4, 3)), [K.zeros((2, 3))], mask=ph((2, 5))),
        ValueError,
        esc("rnn", "mask", "(2, 4)", "(2, 5)"),
    ),
    "rnn step not callable": (
        lambda: K.rnn(None, ph((2, 4, 3)), [K.zeros((2, 3))]),
        TypeError,
        esc("rnn", "step_function must be callable", "None"),
    ),
    "map_fn fn not callable": (
        lambda: K.map_fn(3, np.ones(3)),
        TypeError,
        esc("map_fn", "fn must be callable", "3"),
    ),
    "foldl fn not callable": (
        lambda: K.foldl(None, np.ones(3)),
        TypeError,
        esc("foldl", "fn must be callable", "None"),
    ),
    # ---- values that are not numbers, numbers out of range
    "variable of strings": (
        lambda: K.variable(np.array(["a", "b"])),
        TypeError,
        esc("variable", "numbers", "'a'"),
    ),
    "ragged variable": (
        lambda: K.variable([[1.0, 2.0], [3.0]]),
        TypeError,
        esc("variable", "cannot be read as an array", "[[1.0, 2.0], [3.0]]"),
    ),
    "set_value of strings": (
        lambda: K.set_value(var((2,)), np.array(["a", "b"])),
        TypeError,
        esc("set_value", "numbers", "'a'"),
    ),
    "clip bound string": (
        lambda: K.clip(ph((3,)), "a", 1.0),
        TypeError,
        esc("clip", "min_value", "'a'"),
    ),
    "pow exponent string": (
        lambda: K.pow(ph((3,)), "a"),
        TypeError,
        esc("pow", "a must be", "'a'"),
    ),
    "gather float indices": (
        lambda: K.gather(var((3, 2)), np.array([0.5])),
        TypeError,
        esc("gather", "indices", "float64"),
    ),
    "one_hot classes": (
        lambda: K.one_hot(ph((None,), "int32"), -1),
        ValueError,
        esc("one_hot", "num_classes", "-1"),
    ),
    "tile counts": (lambda: K.tile(np.ones(2), "ab"), ValueError, esc("tile", "n", "'ab'")),
    "dropout level": (
        lambda: K.dropout(ph((None, 3)), 1.5),
        ValueError,
        esc("dropout", "level", "1.5"),
    ),
    "random seed": (
        lambda: K.random_uniform((2,), seed=-1),
        ValueError,
        esc("random_uniform", "seed", "-1"),
    ),
    "in_top_k k": (
        lambda: K.in_top_k(ph((None, 3)), ph((None,), "int32"), -1),
        ValueError,
        esc("in_top_k", "k", "-1"),
    ),
    "arange step": (lambda: K.arange(0, 5, 0), ValueError, esc("arange", "step", "0")),
    "elu alpha": (lambda: K.elu(ph((3,)), alpha="a"), TypeError, esc("elu", "alpha", "'a'")),
    "conv2d strides": (
        lambda: K.conv2d(ph(IMG), var(KERNEL), strides=(0, 1)),
        ValueError,
        esc("conv2d", "strides", "(0, 1)"),
    ),
    "resize_images factor": (
        lambda: K.resize_images(ph(IMG), 0, 2, "channels_last"),
        ValueError,
        esc("resize_images", "height_factor", "0"),
    ),
}


def _double():
    x = ph((None, 3))
    return K.function([x], [x * 2])


def test_the_suite_is_large():
    assert len(CASES) >= 60


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_raises_a_named_error(name):
    call, error, message = CASES[name]
    w = K.variable(np.arange(6.0).reshape(2, 3), name="bystander")
    before = K.get_value(w).tobytes()
    floatx, phase = K.floatx(), K.learning_phase()
    with pytest.raises(error, match=message) as info:
        call()
    assert type(info.value) in (ValueError, TypeError)  # not a subclass from deep inside JAX
    assert K.get_value(w).tobytes() == before  # a failing call changes nothing
    assert (K.floatx(), K.learning_phase()) == (floatx, phase)


# ---------------------------------------------------------------------------------------------
# keras.json


def _import_with(home, content):
    (home / "keras.json").write_text(content)
    env = dict(os.environ, KERAS_HOME=str(home))
    return subprocess.run(
        [sys.executable, "-c", "import jaxkeras"], env=env, capture_output=True, text=True
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "content, named",
    [
        ("{not json", ["keras.json"]),
        ("[1, 2]", ["keras.json", "JSON object"]),
        (json.dumps({"floatx": "int8"}), ["keras.json", "floatx", "'int8'"]),
        (json.dumps({"epsilon": "tiny"}), ["keras.json", "epsilon", "'tiny'"]),
        (json.dumps({"epsilon": -1}), ["keras.json", "epsilon", "-1"]),
        (json.dumps({"image_data_format": "nhwc"}), ["keras.json", "data_format", "'nhwc'"]),
        (json.dumps({"jax_compilation_cache": 3}), ["jax_compilation_cache", "3"]),
    ],
)
def test_malformed_keras_json_fails_import_naming_the_setting(tmp_path, content, named):
    out = _import_with(tmp_path, content)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: "), out.stderr[-2000:]
    for part in named:
        assert part in last, (part, last)


# ---------------------------------------------------------------------------------------------
# non-finite feeds: passed through to floating-point inputs, refused for integer/bool inputs


def test_non_finite_feeds_pass_through_float_inputs():
    x = ph((None, 3))
    f = K.function([x], [x * 2.0, K.sum(x)])
    doubled, total = f([np.array([[np.nan, np.inf, -np.inf]])])
    np.testing.assert_array_equal(doubled, [[np.nan, np.inf, -np.inf]])
    assert np.isnan(total)


@pytest.mark.parametrize("dtype", ["int32", "bool"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_feeds_are_refused_by_integer_and_bool_inputs(dtype, bad):
    x = ph((2,), dtype)
    f = K.function([x], [K.cast(x, "float32")])
    with pytest.raises(ValueError, match=esc("NaN or infinity", dtype)):
        f([np.array([1.0, bad])])
    np.testing.assert_array_equal(f([np.array([1.0, 0.0])])[0], [1.0, 0.0])


# ---------------------------------------------------------------------------------------------
# a failing call changes nothing, with the updated variables' buffers donated

_BOOM = {"on": False}


def _fail_when_asked(a):
    if _BOOM["on"]:
        raise RuntimeError("asked to fail")
    return a


_checked = K.op(
    lambda a: jax.pure_callback(_fail_when_asked, jax.ShapeDtypeStruct(a.shape, a.dtype), a),
    name="checked",
)


def _training_step(with_callback):
    """A function updating a float matrix, a step counter (int32) and a float16 average."""
    w = K.variable(np.arange(6.0).reshape(2, 3), name="w")
    steps = K.variable(0, dtype="int32", name="steps")
    avg = K.variable(np.zeros(3), dtype="float16", name="avg")
    x = ph((None, None))  # unknown widths: a shape conflict shows only when traced
    h = K.dot(x, w)
    loss = K.mean(K.square(h))
    (grad,) = K.gradients(loss, [w])
    watched = _checked(h) if with_callback else h  # callbacks have no derivative
    updates = [
        K.update_sub(w, 0.01 * grad),
        K.update_add(steps, 1),
        K.moving_average_update(avg, K.cast(K.mean(watched, axis=0), "float16"), 0.5),
    ]
    return K.function([x, K.learning_phase()], [loss], updates=updates), [w, steps, avg]


def _snapshot(variables):
    return [a.tobytes() for a in K.batch_get_value(variables)]


def _expected_after_one_step(w0, avg0, x):
    """NumPy reference of one call (float64, then cast as the variables are)."""
    h = x @ w0
    grad = 2.0 * x.T @ h / h.size
    w1 = w0 - 0.01 * grad
    avg1 = avg0 * 0.5 + h.mean(axis=0) * 0.5
    return w1, avg1


@pytest.mark.parametrize(
    "failing_feeds",
    [
        pytest.param([np.ones((1, 3)), 0], id="trace-time shape conflict"),
        pytest.param([np.ones((1, 2, 1)), 0], id="feed of the wrong rank"),
        pytest.param([np.array([["a", "b"]]), 0], id="feed of strings"),
        pytest.param([np.ones((1, 2)), 2], id="learning phase 2"),
    ],
)
def test_a_call_failing_before_it_runs_changes_nothing(failing_feeds):
    step, variables = _training_step(with_callback=False)
    good = np.array([[1.0, -2.0]], np.float32)
    step([good, 1])  # compiled, buffers donated on each call
    before = _snapshot(variables)
    with pytest.raises((ValueError, TypeError)):
        step(failing_feeds)
    assert _snapshot(variables) == before
    w0 = K.get_value(variables[0]).astype(np.float64)
    avg0 = K.get_value(variables[2]).astype(np.float64)
    step([good, 1])  # and the function still works
    w1, avg1 = _expected_after_one_step(w0, avg0, good.astype(np.float64))
    np.testing.assert_allclose(K.get_value(variables[0]), w1, rtol=1e-6)
    assert K.get_value(variables[1]) == 2
    np.testing.assert_allclose(K.get_value(variables[2]), avg1, rtol=1e-3)


def test_a_call_failing_while_it_runs_changes_nothing():
    # An op that calls back into Python can fail after the inputs were handed to XLA; such a
    # function must not donate, or the failure would leave the variables without values.
    step, variables = _training_step(with_callback=True)
    good = np.array([[1.0, -2.0]], np.float32)
    step([good, 0])
    before = _snapshot(variables)
    _BOOM["on"] = True
    try:
        with pytest.raises(Exception, match="asked to fail"):
            step([good, 0])
    finally:
        _BOOM["on"] = False
    assert _snapshot(variables) == before
    w0 = K.get_value(variables[0]).astype(np.float64)
    step([good, 0])
    w1, _ = _expected_after_one_step(w0, np.zeros(3), good.astype(np.float64))
    np.testing.assert_allclose(K.get_value(variables[0]), w1, rtol=1e-6)
    assert K.get_value(variables[1]) == 2
    assert step.trace_count == 1  # looking for callbacks reuses the trace it looked at


def test_functions_without_callbacks_still_donate():
    step, variables = _training_step(with_callback=False)
    step([np.ones((1, 2)), 0])
    held = STORE.values[variables[0].name]
    step([np.ones((1, 2)), 0])
    assert held.is_deleted()  # the previous buffer was handed to XLA for the new value
    assert step.trace_count == 1
