"""Pytest plugin for running Keras 2.3.1's backend test suite against jaxkeras.

The suite compares ``KTF`` (the TensorFlow backend module) with Keras's NumPy reference backend
``KNP``; here ``KTF`` is jaxkeras. Loaded with ``-p keras2_suite_plugin`` and
``KERAS_BACKEND=jaxkeras``.

One adjustment to the reference: ``numpy_backend.in_top_k`` ranks with ``numpy.argsort``, whose
default sort was stable for short rows in NumPy 1 (when Keras 2.3.1 was tested), so tied
predictions ranked by index, as TF counts them. NumPy 2's default sort is not stable, so the
reference is given the stable sort it had.
"""

import sys

import keras  # noqa: F401 - loads jaxkeras as Keras's backend
import numpy as np
from keras.backend import numpy_backend

import jaxkeras

sys.modules["keras.backend.tensorflow_backend"] = jaxkeras


def _in_top_k(predictions, targets, k):
    ranked = np.argsort(-predictions, kind="stable")[:, :k]
    return np.any(targets.reshape(-1, 1) == ranked, axis=-1)


numpy_backend.in_top_k = _in_top_k
