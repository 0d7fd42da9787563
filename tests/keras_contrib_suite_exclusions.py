"""The keras-contrib tests (its last commit, 3fc5ef7 of 2019-12-19) not required to pass against
jaxkeras, with reasons (``tests/test_keras_contrib_suite.py`` runs the tree).

Keys are pytest node ids relative to the tree (``tests/...``). Every reason holds on Keras
2.3.1's TensorFlow backend too, in this environment (Python 3.10+, NumPy 2, TensorFlow 2 the
only TensorFlow that installs there, no network) — except the two marked *TensorFlow-only*,
which import TensorFlow itself (keras-contrib's CI installed TensorFlow for its Theano job too,
so they never met a machine without it): the test imports a backend that no longer installs,
assigns what Keras 2.3 made read-only, meets a Keras 2.3 behaviour its code predates, or needs
the network.

- A key naming a file (no ``::``) is not collected (the file cannot be imported here).
- A key naming a test is run as a strict expected failure: if it starts passing, the run
  fails, so the list stays minimal.
"""

from __future__ import annotations

_READ_ONLY_LR = (
    "the optimizer's __init__ assigns self.lr, which Keras 2.3 made a read-only property "
    "(Optimizer.lr returns self.learning_rate): AttributeError on every backend"
)

EXCLUDED: dict[str, str] = {
    # --- files that are not collected
    "tests/keras_contrib/backend/backend_test.py": "imports Keras's Theano backend and "
    "keras-contrib's Theano and TensorFlow branches at module level and compares them with "
    "each other; Theano does not install on Python 3.10+ / NumPy 2, whatever the backend "
    "(tests/test_keras_contrib.py checks jaxkeras's versions of the same functions)",
    "tests/tooling/test_codeowners.py": "imports PyGithub and asks the GitHub API (the "
    "network) about the repository's CODEOWNERS file, which is not in the tests tree",
    # --- tests that run and must fail
    "tests/keras_contrib/optimizers/ftml_test.py::test_ftml": _READ_ONLY_LR,
    "tests/keras_contrib/optimizers/lars_test.py::test_base_lars": _READ_ONLY_LR,
    "tests/keras_contrib/optimizers/lars_test.py::test_nesterov_lars": _READ_ONLY_LR,
    "tests/keras_contrib/optimizers/padam_test.py::test_padam": _READ_ONLY_LR,
    "tests/keras_contrib/optimizers/yogi_test.py::test_yogi": _READ_ONLY_LR,
    "tests/keras_contrib/optimizers/yogi_test.py::test_yogi_change_lr": _READ_ONLY_LR,
    "tests/keras_contrib/layers/convolutional/test_cosineconvolution2d.py::"
    "test_cosineconvolution_2d_correctness": "Keras 2.3 tracks variables set as layer "
    "attributes: the layer's kernel_norm (a trainable K.variable, as on TensorFlow) becomes "
    "its second weight, so the test's W[1] = [1.], meant for the bias, is set on kernel_norm "
    "of shape (5, 5, 3, 1): ValueError on every backend",
    "tests/keras_contrib/layers/test_crf.py::test_CRF": "its last model (learn_mode="
    "'marginal', which passes the (batch, time) mask on, with metric crf_accuracy) fails in "
    "Keras 2.3's metric wrapper: the mask becomes the sample weights of crf_accuracy's scalar, "
    "and broadcast_weights rejects weights of higher rank than the values (static shapes: "
    "ValueError on every backend); its first three models train, decode and save here, "
    "and tests/test_keras_contrib.py checks the CRF with masks",
    "tests/keras_contrib/callbacks/tensorboard_test.py::test_TensorBoard": "TensorFlow-only: "
    "TensorBoardGrouped.set_model imports TensorFlow and makes a tf.summary.FileWriter, "
    "which TensorFlow 2 no longer has (AttributeError there too)",
    "tests/tooling/test_documentation.py::test_doc[keras_contrib.backend.tensorflow_backend]": (
        "TensorFlow-only: imports keras-contrib's TensorFlow branch, which imports TensorFlow "
        "(not installed: jaxkeras does not use it); on jaxkeras that branch's functions are "
        "jaxkeras's, checked by tests/test_keras_contrib.py"
    ),
}

X64_TESTS: tuple[str, ...] = ()
"""No keras-contrib test asks for 64-bit dtypes."""
