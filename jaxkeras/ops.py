"""The tensor operations of the Keras backend API, gathered from the ``ops_*`` modules.

Each op is a pure ``jax.numpy``/``lax`` function wrapped by :func:`jaxkeras.graph.op`: it runs
at once on arrays and records a graph node on placeholders and variables.

| module | holds |
| --- | --- |
| ``ops_math`` | element-wise math, comparisons, clip, round, cast |
| ``ops_reduce`` | reductions, arg-max/min, cumulative sums, logsumexp, l2_normalize, in_top_k |
| ``ops_linalg`` | dot, batch_dot |
| ``ops_shape`` | reshape, permute, concatenate, stack, tile, slice, gather, one_hot, size |
| ``ops_create`` | zeros, ones, eye (variables), zeros_like, ones_like, arange |
| ``ops_random`` | random tensors and randomly initialized variables |
| ``ops_control`` | switch, identity, print_tensor, py_all, py_sum |
"""

from jaxkeras import (
    ops_control,
    ops_create,
    ops_linalg,
    ops_math,
    ops_random,
    ops_reduce,
    ops_shape,
)
from jaxkeras.ops_control import *  # noqa: F403
from jaxkeras.ops_create import *  # noqa: F403
from jaxkeras.ops_linalg import *  # noqa: F403
from jaxkeras.ops_math import *  # noqa: F403
from jaxkeras.ops_random import *  # noqa: F403
from jaxkeras.ops_reduce import *  # noqa: F403
from jaxkeras.ops_shape import *  # noqa: F403

__all__ = sorted(
    ops_control.__all__
    + ops_create.__all__
    + ops_linalg.__all__
    + ops_math.__all__
    + ops_random.__all__
    + ops_reduce.__all__
    + ops_shape.__all__
)
