"""The tensor operations of the Keras backend API, gathered from ``jaxkeras._ops``.

Each op is a pure ``jax.numpy``/``lax`` function wrapped by :func:`jaxkeras._engine.graph.op`:
it runs at once on arrays and records a graph node on placeholders and variables.

| module | holds |
| --- | --- |
| ``_ops/math.py`` | element-wise math, comparisons, clip, round, cast |
| ``_ops/reduce.py`` | reductions, arg-max/min, cumulative sums, logsumexp, l2_normalize, in_top_k |
| ``_ops/linalg.py`` | dot, batch_dot |
| ``_ops/shape.py`` | reshape, permute, concatenate, stack, tile, slice, gather, one_hot, size |
| ``_ops/create.py`` | zeros, ones, eye (variables), zeros_like, ones_like, arange |
| ``_ops/random.py`` | random tensors and randomly initialized variables |
| ``_ops/control.py`` | switch, identity, print_tensor, py_all, py_sum |
"""

from jaxkeras._ops import control as _control
from jaxkeras._ops import create as _create
from jaxkeras._ops import linalg as _linalg
from jaxkeras._ops import math as _math
from jaxkeras._ops import random as _random
from jaxkeras._ops import reduce as _reduce
from jaxkeras._ops import shape as _shape
from jaxkeras._ops.control import *  # noqa: F403
from jaxkeras._ops.create import *  # noqa: F403
from jaxkeras._ops.linalg import *  # noqa: F403
from jaxkeras._ops.math import *  # noqa: F403
from jaxkeras._ops.random import *  # noqa: F403
from jaxkeras._ops.reduce import *  # noqa: F403
from jaxkeras._ops.shape import *  # noqa: F403

__all__ = sorted(
    _control.__all__
    + _create.__all__
    + _linalg.__all__
    + _math.__all__
    + _random.__all__
    + _reduce.__all__
    + _shape.__all__
)
