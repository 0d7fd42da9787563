"""XLA's compiler options for the functions ``K.function`` compiles, and nothing else.

Scoped: they go to ``jax.jit(compiler_options=...)`` of jaxkeras's own compiles, never to
``XLA_FLAGS`` or a process-wide setting, and a name in the user's ``XLA_FLAGS`` wins.

Which XLA:CPU accepts each option (a one-op compile with the option alone, as
:func:`accepted_options` probes; checked 2026-12-06 on jaxlib 0.10.2, 0.11.2 and 0.12.1):

=========================================  ======  ======  ======
option                                     0.10.2  0.11.2  0.12.1
=========================================  ======  ======  ======
``xla_cpu_use_fusion_emitters=false``      yes     no      no
``xla_backend_optimization_level=1``       yes     yes     yes
``xla_cpu_parallel_codegen_split_count``   yes     yes     yes
``xla_cpu_experimental_ynn_fusion_type``   yes     yes     yes
``xla_disable_hlo_passes``                 yes     yes     yes
=========================================  ======  ======  ======

From jaxlib 0.11 the quick tier therefore compiles with XLA's MLIR fusion emitters at LLVM
level 1. With jaxlib 0.12 that level can round differently from XLA's default level 3: a small
fusion computing ``w - lr * g`` got one multiply-add (one rounding) at level 1 and a multiply
then a subtraction (two) at level 3, so ``jax.jit(f.pure)`` without ``f.compiler_options``
differed from ``f`` by one ulp (``tests/test_mixed_precision.py``). Related upstream:
openxla/xla#22116 (XLA:CPU's results change with the backend optimization level; open on
2026-12-06).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import jax
import numpy as np

CPU_FUSION_FLAG = "xla_cpu_use_fusion_emitters"
"""XLA:CPU's choice between its MLIR fusion emitters (XLA's default) and its classic ones."""

CPU_LEVEL_FLAG = "xla_backend_optimization_level"
"""How hard LLVM optimizes the code XLA:CPU generates for its fusions: 0 to 3 (XLA's default)."""

CPU_SPLIT_FLAG = "xla_cpu_parallel_codegen_split_count"
"""How many LLVM modules XLA:CPU splits a program's fusions into, to compile them in parallel
(XLA's default: 32)."""


CPU_LIBRARY_FLAG = "xla_cpu_experimental_ynn_fusion_type"
"""Which ops XLA:CPU hands to its YNNPACK library: by default convolutions, reductions and
matrix products each (an unknown name makes every compile fail: probed, see accepted_options)."""

CPU_LIBRARY_OPS = "LIBRARY_FUSION_TYPE_REDUCE,LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"
"""What K.function hands YNNPACK: reductions and matrix products, not convolutions (XLA's own
convolution kernels are the faster at Keras convnets' channel counts; see
:func:`compiler_options`). No upstream issue found (checked 2026-11-27)."""

CPU_PASSES_FLAG = "xla_disable_hlo_passes"
"""The XLA passes a compile skips (XLA's default: none)."""

CPU_SKIPPED_PASSES = "tree_reduction_rewriter"
"""What K.function skips: the pass that splits a large reduction into a reduce-window and a
reduce before YNNPACK is offered it (see :func:`compiler_options`). No upstream issue found
(checked 2026-11-27)."""


def _cores() -> int:
    """The number of CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_options() -> dict[str, Any]:
    """The options ``K.function`` compiles with on CPU, unless ``XLA_FLAGS`` names them (why
    each: :func:`compiler_options`).

    Returns:
        A dict from XLA option names to values.
    """
    return {
        CPU_FUSION_FLAG: False,
        CPU_LEVEL_FLAG: 1,
        CPU_SPLIT_FLAG: min(32, _cores()),
        CPU_LIBRARY_FLAG: CPU_LIBRARY_OPS,
        CPU_PASSES_FLAG: CPU_SKIPPED_PASSES,
    }


def compiler_options() -> dict[str, Any] | None:
    """XLA options for the functions ``K.function`` compiles on the default backend.

    On CPU, convolutions run in XLA's own (Eigen) kernels rather than YNNPACK's, which are
    slower at the channel counts of most Keras convnets (the train steps of Keras's
    cifar10_cnn and cifar10_resnet examples; the conv_lstm example's is as long either way).
    YNNPACK keeps the reductions and matrix products, where it is the faster, and is offered
    every reduction whole: XLA's tree-reduction rewrite, which would split a large one into a
    reduce-window and a reduce first, is skipped. Split, a reduction whose operand XLA
    transposes stays XLA's own, and its reduce-window reads with a large stride: the
    gradient of BatchNormalization after a ConvLSTM2D (the RNN's outputs are time-major, their
    cotangent batch-major) took several times as long in the conv_lstm example's train step,
    as did ``sum(x.T * 2, axis=1)`` of a large array. Reductions YNNPACK takes anyway compute
    the same; of those it does not, some get faster (a product), some slower (an int32
    minimum), and all are as exact. Measured by hand when chosen: ``benchmarks/RESULTS.md``,
    "Design measurements (by hand)", group "XLA:CPU options". No upstream issue found for
    either choice (checked 2026-11-27).

    Three more options make compiling quicker at a small cost in the compiled fusions' speed,
    which tiered compilation wins back (:mod:`jaxkeras.tiers` drops these three once a
    function has been called a while):

    - XLA's classic fusion emitters, not the MLIR ones it uses by default: they compile
      markedly quicker.
    - LLVM's optimization level 1 for the fusions, not XLA's default 3. The heavy ops (matrix
      products, convolutions) are library calls that no level changes, and the fusions' loops
      are vectorized at level 1 too; level 0 would compile quicker still but run a convnet's
      step several times slower.
    - The fusions' code split into as many LLVM modules as there are cores (at most XLA's
      32): each module costs a few milliseconds of its own, and more modules than cores
      compile no sooner.

    Measured by hand on Keras's digits convnet train step: ``benchmarks/RESULTS.md``, "Design
    measurements (by hand)", group "compile-time options"; a whole cold start is the rows
    "digits convnet: build + compile + first epoch, cold" and "digits lstm: ..., cold"
    (``benchmarks/bench_keras2.py``). No upstream issue found for XLA:CPU's compile time at
    these sizes (checked 2026-11-27).

    A program whose ``XLA_FLAGS`` sets any of these five options keeps its choice for that
    one; other backends get no options. Some of these options are experimental and may be
    renamed by a later XLA: they are probed once per process (:func:`accepted_options`), and
    one XLA rejects is dropped, costing speed, never a failed compile (the XLA of jaxlib 0.11
    and later has no classic fusion emitters, and rejects that option; the module docstring
    lists the releases that accept each).

    Returns:
        A dict for ``jax.jit(compiler_options=...)``, or ``None``.
    """
    if jax.default_backend() != "cpu":
        return None
    flags = os.environ.get("XLA_FLAGS", "")
    wanted = {name: value for name, value in cpu_options().items() if name not in flags}
    return accepted_options(wanted) or None


_ACCEPTED: dict[tuple, dict[str, Any]] = {}


def _compiles_with(options: dict[str, Any]) -> bool:
    """Whether XLA compiles a one-op program with ``options``."""
    try:
        jax.jit(lambda x: x + 1, compiler_options=options).lower(np.float32(0)).compile()
    except Exception:  # XLA's error for an unknown option or value has no type of its own
        return False
    return True


def accepted_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` less those this XLA rejects, found by compiling a one-op program with them
    (once per process and set of options: a few milliseconds), then with each alone when
    that fails.

    Args:
        options: XLA option names -> values.

    Returns:
        The options XLA accepts.
    """
    signature = tuple(sorted(options.items()))
    accepted = _ACCEPTED.get(signature)
    if accepted is None:
        if not options or _compiles_with(options):
            accepted = dict(options)
        else:
            accepted = {k: v for k, v in options.items() if _compiles_with({k: v})}
        _ACCEPTED[signature] = accepted
    return accepted


_HELPERS: dict[tuple, Any] = {}


def compiled_helper(fn: Any, **jit_kwargs: Any) -> Any:
    """``jax.jit(fn, **jit_kwargs)`` compiled with ``K.function``'s options, made once per
    function, JAX's PRNG implementation and set of options: the one cache of the small helpers
    jaxkeras compiles outside graphs (eager random draws, eager keys), whose first compile a
    fresh process pays (XLA:CPU's classic emitters compile them in a third of the time of its
    defaults). JAX's own cache of a function's compilations tells neither the PRNG
    implementation (a key's shape) nor the options apart.

    Made at the first call, not at import (the options depend on the backend, which importing
    must not start).

    Args:
        fn: the function.
        **jit_kwargs: more arguments of ``jax.jit`` (hashable: ``static_argnames``, ...).

    Returns:
        The ``jax.jit`` object.
    """
    options = compiler_options()
    key = (
        fn,
        jax.config.jax_default_prng_impl,
        None if options is None else tuple(sorted(options.items())),
        tuple(sorted(jit_kwargs.items())),
    )
    helper = _HELPERS.get(key)
    if helper is None:
        # a function object of its own: JAX shares a function's traces between its jits, and
        # a key traced under one PRNG implementation has another's shape
        @functools.wraps(fn)
        def own(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        helper = _HELPERS[key] = jax.jit(own, compiler_options=options, **jit_kwargs)
    return helper
