"""Mixed precision: 16-bit products with float32 accumulation, for any graph, with one line.

A *dtype policy* says in which type a graph's products are computed when it is evaluated::

    from jaxkeras import mixed_precision
    mixed_precision.set_global_policy("mixed_bfloat16")   # or keras.json "dtype_policy"

The names are Keras 3's and TF-Keras's:

- ``'float32'`` (the default): everything in the type it has;
- ``'mixed_bfloat16'``: matrix products (``K.dot``, ``K.batch_dot``, and so the products inside
  ``K.rnn`` steps) and every convolution (plain, transposed, depthwise, separable, locally
  connected) take their float32 operands in bfloat16 and accumulate and return float32
  (``preferred_element_type``). One exception, on CPU only: a depthwise convolution's CPU
  lowering is elementwise products (``'taps'``, see
  ``jaxkeras._xla.conv_lowering.depthwise_lowering``), which stay float32 (XLA:CPU has no
  16-bit arithmetic to gain from); other platforms' grouped convolution is cast like every
  product;
- ``'mixed_float16'``: the same in float16, with dynamic loss scaling (below).

Everything else stays float32 under a mixed policy: variables (the master weights) and the
updates applied to them, activations, softmax and logsumexp, the losses, normalization
statistics and reductions. A product's result is float32, so a model's outputs and losses are
float32 as the user sees them. The casts happen inside the compiled function, each where a
product reads a float32 value; XLA computes a value's cast once, however many products read it
(a weight shared by three layers is cast once).

Unlike Keras 3's and TF-Keras's policies, which apply to layers written for them, this policy
rewrites any graph: Keras 2.3.1's layers, ``K`` code and custom layers alike, set before or
after the model is built. It applies when a graph is evaluated: a ``K.function`` compiles once
per policy (changing the policy makes its next call compile again, for the new policy; calling
under the old one again reuses the first compilation), ``f.pure`` and ``K.gradients`` follow
the policy in effect when they are traced, ``K.eval`` and ``K.state_scope`` when they run. Ops
on concrete arrays outside those (eagerly, or inside your own ``jax.jit``) are not rewritten.

Loss scaling (``'mixed_float16'``): float16's range (6e-8 to 65504) loses small gradients, so a
``K.function`` that takes gradients for its updates (a train step: Keras 2's optimizers and
``OptaxOptimizer`` alike) differentiates its loss multiplied by a scale and divides the
gradients by it. When any gradient is not finite, the step is skipped: no update of the
function applies (weights, optimizer slots, ``iterations``, normalization statistics), and the
scale halves; after :data:`GROWTH_PERIOD` finite steps in a row it doubles. The scale and the
count are the state-store variables :func:`loss_scale_variables` returns (checkpointed with
the rest, replicated as scalars are), starting at TF's ``2**15``; the arithmetic is jmp's
``DynamicLossScale`` (DeepMind's mixed-precision library), whose state jaxkeras keeps.

The policy comes from, in order: :func:`set_global_policy`; else ``$JAXKERAS_DTYPE_POLICY``;
else keras.json's ``"dtype_policy"``; else ``'float32'``. :func:`policy` sets it for a block of
code, in the calling thread only.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import jmp

from jaxkeras._engine.graph.context import active_context
from jaxkeras._engine.graph.dtypes import dtype_of

__all__ = [
    "GROWTH_PERIOD",
    "INITIAL_LOSS_SCALE",
    "POLICIES",
    "Policy",
    "global_policy",
    "loss_scale_variables",
    "policy",
    "set_global_policy",
]


class Policy(NamedTuple):
    """A dtype policy.

    Attributes:
        name: ``'float32'``, ``'mixed_bfloat16'`` or ``'mixed_float16'``.
        compute_dtype: the type products take their operands in.
        variable_dtype: the type of variables (float32 under every policy).
        loss_scaling: whether gradients taken for an update use dynamic loss scaling.
    """

    name: str
    compute_dtype: str
    variable_dtype: str
    loss_scaling: bool


POLICIES = {
    "float32": Policy("float32", "float32", "float32", False),
    "mixed_bfloat16": Policy("mixed_bfloat16", "bfloat16", "float32", False),
    "mixed_float16": Policy("mixed_float16", "float16", "float32", True),
}
"""The policies by name."""

ENV_VAR = "JAXKERAS_DTYPE_POLICY"
INITIAL_LOSS_SCALE = 2.0**15
"""The loss scale's first value (TF's ``LossScaleOptimizer``'s)."""
GROWTH_PERIOD = 2000
"""How many finite steps in a row double the loss scale (TF's)."""
_GLOBAL: list[Policy] = [POLICIES["float32"]]


class _PolicyStacks(threading.local):
    """Each thread's :func:`policy` blocks and whether its products are to be transposed
    (attributes set for every thread: reading a missing one would cost a caught exception on
    every call)."""

    def __init__(self) -> None:
        self.stack: list[Policy] = []
        self.transposable = False


_THREAD = _PolicyStacks()
_LOSS_SCALE: list = []  # the scale and the count of finite steps, made on first need
_LOSS_SCALE_LOCK = threading.Lock()


def _named(name: Any, where: str) -> Policy:
    """The policy called ``name`` (a name or a :class:`Policy`); ValueError naming ``where``."""
    if isinstance(name, Policy):
        return name
    if isinstance(name, str) and name in POLICIES:
        return POLICIES[name]
    hint = ""
    if name in ("bfloat16", "float16", "float64"):
        hint = f"; for everything in {name} (weights too) use K.set_floatx({name!r})"
    raise ValueError(f"{where}: unknown dtype policy {name!r}; use one of {list(POLICIES)}{hint}")


def set_global_policy(name: str | Policy) -> None:
    """Sets the dtype policy of every thread (see the module docstring).

    Args:
        name: ``'float32'``, ``'mixed_bfloat16'`` or ``'mixed_float16'`` (or a :class:`Policy`).

    Raises:
        ValueError: for any other name (nothing changes).
    """
    _GLOBAL[0] = _named(name, "set_global_policy")


def global_policy() -> Policy:
    """Returns the policy in effect in this thread: :func:`policy`'s inside one, else the global.

    Returns:
        A :class:`Policy`.
    """
    scoped = _THREAD.stack
    return scoped[-1] if scoped else _GLOBAL[0]


@contextlib.contextmanager
def policy(name: str | Policy) -> Iterator[Policy]:
    """Sets the dtype policy for a block of code, in the calling thread.

    Args:
        name: a policy name (or a :class:`Policy`).

    Yields:
        The policy.

    Raises:
        ValueError: for an unknown name.

    Example:
        >>> from jaxkeras import mixed_precision
        >>> with mixed_precision.policy("mixed_bfloat16"):
        ...     mixed_precision.global_policy().compute_dtype
        'bfloat16'
        >>> mixed_precision.global_policy().name
        'float32'
    """
    chosen = _named(name, "policy")
    stack = _THREAD.stack
    stack.append(chosen)
    try:
        yield chosen
    finally:
        stack.pop()


def evaluation_policy() -> Policy:
    """The policy of the graph evaluation running in this thread: the one its context was
    given (a compiled function's), else the one in effect; float32's outside any evaluation
    (ops on concrete arrays, whose compiled bodies are cached without a policy)."""
    ctx = active_context()
    if ctx is None:
        return POLICIES["float32"]
    return ctx.policy if ctx.policy is not None else global_policy()


def product(fn: Callable[..., Any], *operands: Any) -> Any:
    """Inside an op body: the product ``fn(*operands)`` under the evaluation's policy.

    Under a mixed policy, float32 operands are cast to its compute type and the product
    accumulates and returns float32 (``fn(..., preferred_element_type=float32)``); its
    gradients are the same products of the cotangent cast to the compute type (see
    :func:`_mixed`). Otherwise it is ``fn(*operands)``.

    Args:
        fn: a product that takes ``preferred_element_type`` (``jnp.dot``, a partial
            ``lax.dot_general`` or ``lax.conv_general_dilated``), hashable.
        *operands: arrays.

    Returns:
        The product.
    """
    chosen = evaluation_policy()
    if chosen.compute_dtype == "float32":  # the default: nothing to inspect
        return fn(*operands)
    floats = [dtype_of(x) == "float32" for x in operands]
    if not any(floats):
        return fn(*operands)
    compute = jnp.dtype(chosen.compute_dtype)
    operands = [x.astype(compute) if f else x for x, f in zip(operands, floats)]
    if _THREAD.transposable:
        return fn(*operands, preferred_element_type=jnp.float32)
    return _mixed(fn, *operands)


@contextlib.contextmanager
def transposable_products() -> Iterator[None]:
    """Inside a custom JVP rule's tangent computation: :func:`product` gives products that JAX
    transposes itself (their gradient products in float32). Reverse mode transposes a JVP
    rule's tangents, and JAX cannot transpose a ``custom_vjp`` function ("Transpose rule ...
    for 'custom_vjp_call' not implemented").

    Yields:
        Nothing.
    """
    before = _THREAD.transposable
    _THREAD.transposable = True
    try:
        yield
    finally:
        _THREAD.transposable = before


# JAX transposes a product with preferred_element_type=float32 into products of the float32
# cotangent, computed in float32 (jax-ml/jax#23797: the transpose reuses the forward's types),
# which would leave two thirds of a train step's product work in float32. The backward
# products here take the cotangent in the 16-bit type, as Keras 3's and TF-Keras's policies do
# (their activations are 16-bit); benchmarks/bench_mixed.py measures both.
@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _mixed(fn: Callable[..., Any], *operands: Any) -> Any:
    return fn(*operands, preferred_element_type=jnp.float32)


def _mixed_forward(fn: Callable[..., Any], *operands: Any) -> tuple[Any, tuple]:
    return _mixed(fn, *operands), operands


def _mixed_backward(fn: Callable[..., Any], operands: tuple, cotangent: Any) -> tuple:
    _, transposed = jax.vjp(fn, *operands)  # the product in the operands' 16-bit type
    return transposed(cotangent.astype(operands[0].dtype))


_mixed.defvjp(_mixed_forward, _mixed_backward)


def loss_scale_variables() -> tuple[Any, Any]:
    """The variables of dynamic loss scaling (made by the first call): the scale (float32)
    and the count of finite steps since it last changed (int32).

    Returns:
        ``(scale, count)``, two non-trainable variables.
    """
    with _LOSS_SCALE_LOCK:
        if not _LOSS_SCALE:
            from jaxkeras.state import variable

            scale = variable(INITIAL_LOSS_SCALE, "float32", "loss_scale", trainable=False)
            count = variable(0, "int32", "loss_scale_count", trainable=False)
            _LOSS_SCALE.extend([scale, count])
    return _LOSS_SCALE[0], _LOSS_SCALE[1]


def scaling_of(state: dict[str, Any]) -> Any:
    """Inside a trace: jmp's ``DynamicLossScale`` holding the loss-scale variables' values in
    ``state`` (variable name -> value)."""
    scale, count = loss_scale_variables()
    return jmp.DynamicLossScale(state[scale.name], state[count.name], period=GROWTH_PERIOD)


def skip_unless_finite(scaling: Any, gradients: Any, new: dict, old: dict) -> dict:
    """Inside a trace: a step's new variable values, or the old ones where any gradient is
    not finite, with the loss scale adjusted.

    Args:
        scaling: jmp's ``DynamicLossScale`` the gradients were taken with.
        gradients: a pytree of the step's (unscaled) gradients.
        new: variable name -> new value (the step's updates).
        old: variable name -> value before the step.

    Returns:
        variable name -> value after the step, the loss-scale variables included.
    """
    finite = jmp.all_finite(gradients)
    kept = {name: jnp.where(finite, value, old[name]) for name, value in new.items()}
    with jax.numpy_dtype_promotion("standard"):  # jmp multiplies its int32 count by a bool
        adjusted = scaling.adjust(finite)
    scale, count = loss_scale_variables()
    kept[scale.name], kept[count.name] = adjusted.loss_scale, adjusted.counter
    return kept


def apply_settings(settings: dict[str, Any]) -> None:
    """Sets the global policy from ``$JAXKERAS_DTYPE_POLICY`` or keras.json's
    ``"dtype_policy"`` (at import).

    Args:
        settings: keras.json's settings.

    Raises:
        ValueError: naming the variable or the setting when its policy is unknown.
    """
    if os.environ.get(ENV_VAR):
        _GLOBAL[0] = _named(os.environ[ENV_VAR], f"${ENV_VAR}")
    elif "dtype_policy" in settings:
        _GLOBAL[0] = _named(settings["dtype_policy"], 'keras.json "dtype_policy"')
