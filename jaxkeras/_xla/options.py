"""XLA's compiler options for the functions ``K.function`` compiles, and nothing else.

Scoped: they go to ``jax.jit(compiler_options=...)`` of jaxkeras's own compiles, never to
``XLA_FLAGS`` or a process-wide setting, and a name in the user's ``XLA_FLAGS`` wins.
"""

from __future__ import annotations

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
"""What K.function hands YNNPACK: reductions and matrix products, not convolutions."""

CPU_PASSES_FLAG = "xla_disable_hlo_passes"
"""The XLA passes a compile skips (XLA's default: none)."""

CPU_SKIPPED_PASSES = "tree_reduction_rewriter"
"""What K.function skips: the pass that splits a large reduction into a reduce-window and a
reduce before YNNPACK is offered it."""


def _cores() -> int:
    """The number of CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_options() -> dict[str, Any]:
    """The options ``K.function`` compiles with on CPU, unless ``XLA_FLAGS`` names them.

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
    slower at the channel counts of most Keras convnets: Keras's cifar10_cnn example's train
    step (batch 32) took 49-60 ms instead of 69-86 ms wall-clock (90-109 ms of CPU time instead
    of 102-126 ms), its cifar10_resnet's ResNet20 122-126 ms instead of 151 ms (CPU time
    within 3%), and the conv_lstm example's step as long (three interleaved rounds of each).
    YNNPACK keeps the reductions and matrix products, where it is the faster, and is offered
    every reduction whole: XLA's tree-reduction rewrite, which would split a large one into a
    reduce-window and a reduce first, is skipped. Split, a reduction whose operand XLA
    transposes stays XLA's own, and its reduce-window reads with a large stride: the
    gradient of BatchNormalization after a ConvLSTM2D (the RNN's outputs are time-major, their
    cotangent batch-major) took 27 ms of the conv_lstm example's train step instead of 5 ms;
    ``sum(x.T * 2, axis=1)`` of a 4000x2500 array 24 ms instead of 7 ms. Reductions YNNPACK
    takes anyway compute the same; of those it does not, some get faster (a product along 2,500
    elements, 66 -> 38 ms), some slower (an int32 minimum along 4,000, 14 -> 19 ms), and all
    are as exact (float32 sums of up to 8 million elements within 3e-7 of float64's).

    Three more options make compiling quicker and leave the compiled code as fast
    (``benchmarks/bench_keras2.py``, ``benchmarks/bench_lstm.py``):

    - XLA's classic fusion emitters, not the MLIR ones it uses by default: they compile in
      about half the time (Keras's digits convnet train step: 0.53 s vs 0.86 s).
    - LLVM's optimization level 1 for the fusions, not XLA's default 3: the convnet step
      compiles in 0.39 s instead of 0.44 s. The heavy ops (matrix products, convolutions) are
      library calls that no level changes, and the fusions' loops are vectorized at level 1
      too; level 0 would compile in 0.13 s but run the step 4x slower.
    - The fusions' code split into as many LLVM modules as there are cores (at most XLA's
      32): each module costs a few milliseconds of its own, and more modules than cores
      compile no sooner. On 2 cores the convnet step compiles in 0.29 s instead of 0.32 s.

    A program whose ``XLA_FLAGS`` sets any of these five options keeps its choice for that
    one; other backends get no options. Some of these options are experimental and may be
    renamed by a later XLA: they are probed once per process (:func:`accepted_options`), and
    one XLA rejects is dropped, costing speed, never a failed compile.

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
