"""Segmented compilation of a train step: does compiling repeated blocks once cut the compile?

A large Keras model's first train step waits for XLA:CPU to compile the whole training graph.
This measures the alternative of compiling the train step's jaxpr in pieces ("chunks"), the
structurally identical ones (same primitives, params, shapes and dtypes: ResNet's, Xception's
and Inception-ResNet's repeated blocks) compiled once and the executable reused, the chunks
then run one after the other from Python.

For one ``bench_zoo`` model (Keras 2.3.1 on jaxkeras, built and compiled as ``bench_cold``
does, SGD, one batch of :data:`bench_zoo.BATCH`), in a fresh process:

1. The train function's traced step (``jaxkeras.function.Function._compile``'s ``run`` and
   arguments) is captured during the first ``train_on_batch``, before the library compiles it.
2. Whole graph: ``jax.jit(run, compiler_options=jaxkeras.tiers.quick_options(1))`` traced,
   lowered and compiled, each timed apart; its step (median of :data:`STEPS` runs after a
   warm-up).
3. Segmented: the traced jaxpr's top-level equations are split into consecutive chunks, by
   Keras layer (``layer``: equal layer names in the equations' ``name_stack``, forward and
   backward apart) or by block (``block``: equal block prefixes such as ``conv2_block1``,
   ``block35_3``, ``block5``, ResNet50's ``2a``; a layer without one joins the chunk before
   it); or ``block+opt``: by block, the optimizer's update split into its independent parts
   (one per variable, alike for variables of one shape). Each chunk reads the values defined
   before it and returns those read after it. Chunks with the same structural key
   (:func:`chunk_key`) share one executable, compiled once (tracing + lowering and XLA's
   compile timed apart, serially); then the chain's step (executables called directly, values
   kept in a dict; timed interleaved with the whole graph's) and its results against the whole
   graph's.

Compile times are given as wall seconds and as the process's CPU seconds (all threads): XLA:CPU
compiles a large program's code in parallel (``xla_cpu_parallel_codegen_split_count``), a
chunk's mostly on one thread, and the CPU figure is the steadier where other work shares the
machine. Also given: the compile split by kind (the optimizer's update, the state's unpacking
and packing outside any layer, the layers) and the compile of a one-operation function (what
any compile costs at least).

Run ``python benchmarks/study_segments.py`` for the table (every model of :data:`MODELS` at
every granularity, each in its own process), or ``--model NAME --granularity
layer|block|block+opt`` for one (prints JSON); ``--no-whole`` skips the whole graph's compile
(NASNetMobile's takes minutes). Needs ``.venv`` (Keras 2.3.1 on jaxkeras); runs on CPU.

A study, not one of ``run_all.py``'s benchmarks (it takes about ten minutes and measures a
design that jaxkeras does not use): its findings are in ``RESULTS.md``, "Design measurements
(by hand)", "segmented compilation".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
MODELS = ["ResNet50", "Xception", "InceptionResNetV2", "DenseNet121"]
GRANULARITIES = ("layer", "block", "block+opt")
STEPS = 10  # timed steps (after one warm-up) of each of the whole graph and the chain
TOP = 5  # the distinct chunks listed by compile time

# a layer's block: ResNet v2 / DenseNet (conv2_block1), Inception-ResNet (block35_3), Xception
# (block5), DenseNet's transitions (pool2), Keras 2.3.1's ResNet50 (res2a_branch2a -> 2a)
_BLOCK_PATTERNS = [
    re.compile(r"^(conv\d+_block\d+)_"),
    re.compile(r"^(block\d+_\d+)(?:_|$)"),
    re.compile(r"^(block\d+)_"),
    re.compile(r"^(pool\d+)_"),
    re.compile(r"^(?:res|bn)(\d+[a-z])_branch"),
    # NASNet's cells: normal_left1_5, separable_conv_1_reduction_left1_reduce_4, adjust_bn_stem_1
    re.compile(r"^(?:normal|reduction|adjust|separable_conv).*?_((?:stem_|reduce_)?\d+)$"),
]
_WRAPPER = re.compile(r"^(?:\w+\()+")  # transpose(jvp(...)) around a name


def _keras() -> Any:
    """Keras 2.3.1 on jaxkeras, on CPU."""
    os.environ["KERAS_BACKEND"] = "jaxkeras"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import keras

    return keras


class _Captured(Exception):
    """Raised where the library would compile the train step: its traced step is captured."""


def capture_train_step(keras: Any, name: str) -> tuple[Callable[..., Any], tuple, str, float]:
    """The train function's step function and arguments, caught in the first ``train_on_batch``.

    ``jaxkeras.function``'s ``jax`` is replaced, for that call only, by a proxy whose ``jit``
    with ``compiler_options`` (the library's compile, after its trace) raises; the arguments
    are copied before anything could donate them.

    Args:
        keras: Keras 2.3.1 on jaxkeras.
        name: a model of ``bench_zoo.ZOO``.

    Returns:
        ``(run, args, function_name, trace_s)``: ``run(*args)`` is the whole train step
        (outputs, then the new state); ``trace_s`` the library's trace of it (Keras's graph
        interpreted, the gradient and the optimizer's update included).
    """
    import jax
    from bench_zoo import BATCH, CLASSES, ZOO, build

    import jaxkeras.function  # noqa: F401  (the module; ``jaxkeras.function`` is a function)

    module = sys.modules["jaxkeras.function"]
    real_jax, original = module.jax, module.Function._compile
    caught: dict[str, Any] = {}

    class Proxy:
        def __getattr__(self, attribute: str) -> Any:
            return getattr(real_jax, attribute)

        def jit(self, fun: Callable[..., Any], **kwargs: Any) -> Any:
            if "compiler_options" in kwargs:
                caught["run"], caught["trace_s"] = fun, time.perf_counter() - caught["start"]
                raise _Captured
            return real_jax.jit(fun, **kwargs)

    def compile_(self: Any, key: Any, args: tuple) -> Any:
        caught["args"] = tuple(
            jax.numpy.array(a, copy=True) if isinstance(a, jax.Array) else np.array(a) for a in args
        )
        caught["name"], caught["start"] = self.name, time.perf_counter()
        return original(self, key, args)

    np.random.seed(0)
    model = build(keras, name, "jaxkeras")[0]
    model.compile(keras.optimizers.SGD(learning_rate=0.001), "categorical_crossentropy")
    side = ZOO[name][3]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, side, side, 3)).astype("float32")
    y = np.eye(CLASSES, dtype="float32")[rng.integers(0, CLASSES, BATCH)]
    module.jax, module.Function._compile = Proxy(), compile_
    try:
        model.train_on_batch(x, y)
    except _Captured:
        pass
    finally:
        module.jax, module.Function._compile = real_jax, original
    args = tuple(jax.device_put(a) for a in caught["args"])
    return caught["run"], args, caught["name"], caught["trace_s"]


def median_steps(fns: dict[str, Callable[[], Any]], steps: int = STEPS) -> dict[str, float]:
    """Median seconds per call of each function (its results waited for), calls interleaved.

    Args:
        fns: the functions by name.
        steps: the timed calls of each, after one warm-up call each.

    Returns:
        The median seconds by name.
    """
    import jax

    for fn in fns.values():
        jax.block_until_ready(fn())
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(steps):
        for name, fn in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn())
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}


def fixed_compile_s(options: Any, times: int = 5) -> float:
    """The median compile seconds of a one-operation function: what any compile costs.

    Args:
        options: XLA's options.
        times: how many distinct such functions to compile.

    Returns:
        Seconds.
    """
    import jax

    found = []
    for shift in range(times):
        lowered = jax.jit(lambda v, s=shift: v * 2 + s, compiler_options=options).lower(
            jax.ShapeDtypeStruct((16, 64), np.float32)
        )
        start = time.perf_counter()
        lowered.compile()
        found.append(time.perf_counter() - start)
    return float(np.median(found))


def whole_graph(run: Callable[..., Any], args: tuple, options: Any, compile_it: bool) -> dict:
    """The whole train step traced, lowered and (unless ``compile_it`` is false) compiled.

    Args:
        run: the step function.
        args: its arguments.
        options: XLA's options.
        compile_it: whether to lower, compile and run it.

    Returns:
        ``trace_s``, ``lower_s``, ``compile_s`` (wall) and ``compile_cpu_s`` (the process's
        CPU time, all threads), the traced ``closed`` jaxpr, the ``compiled`` executable and the
        ``results`` of one step (the last three for the caller).
    """
    import jax

    jitted = jax.jit(run, compiler_options=options)
    start = time.perf_counter()
    traced = jitted.trace(*args)
    found: dict[str, Any] = {"trace_s": time.perf_counter() - start, "closed": traced.jaxpr}
    if not compile_it:
        return found
    start = time.perf_counter()
    lowered = traced.lower()
    found["lower_s"] = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    compiled = lowered.compile()
    found["compile_s"] = time.perf_counter() - start
    found["compile_cpu_s"] = time.process_time() - cpu
    found["compiled"] = compiled
    found["results"] = jax.block_until_ready(compiled(*args))
    return found


def layer_of(eqn: Any) -> str:
    """The Keras layer (first name scope) an equation comes from, ``''`` for none.

    Args:
        eqn: a jaxpr equation.

    Returns:
        The layer's name, e.g. ``conv2_block1_1_conv`` for ``transpose(jvp(conv2_block1_1_conv/
        conv))``; ``training`` for the optimizer's update, ``loss`` for the loss.
    """
    stack = _WRAPPER.sub("", str(eqn.source_info.name_stack))
    return stack.split("/", 1)[0].rstrip(")")


def block_of(layer: str) -> str | None:
    """The block a layer belongs to (the first of :data:`_BLOCK_PATTERNS` that matches).

    Args:
        layer: a layer name.

    Returns:
        The block's name, ``None`` where the layer has none.
    """
    for pattern in _BLOCK_PATTERNS:
        match = pattern.match(layer)
        if match:
            return match.group(1)
    return None


def labels(eqns: Sequence[Any], granularity: str) -> list[str]:
    """Each equation's chunk label: consecutive equations with equal labels form one chunk.

    Args:
        eqns: the top-level equations.
        granularity: ``'layer'``: the layer and whether it is backward (transposed);
            ``'block'`` (and ``'block+opt'``): the block and direction, an equation whose layer
            has no block taking the label of the block before it (where none comes before it
            since the last of the next: its layer's); the loss, the optimizer (``training``)
            and equations outside any layer (``''``: the state's unpacking and packing) keep
            their own.

    Returns:
        One label per equation.
    """
    found: list[str] = []
    last = None  # the last block's label, while its layers (or layers without one) go on
    for eqn in eqns:
        layer = layer_of(eqn)
        direction = "bwd" if "transpose(" in str(eqn.source_info.name_stack) else "fwd"
        if granularity == "layer":
            found.append(f"{direction}:{layer}")
            continue
        block = block_of(layer)
        if block is not None:
            last = f"{direction}:{block}"
            found.append(last)
        elif layer in ("training", "loss", ""):
            last = None
            found.append(f"{direction}:{layer}")
        else:
            found.append(last or f"{direction}:{layer}")
    return found


@dataclass
class Chunk:
    """Consecutive top-level equations, as a function of what they read from before them."""

    label: str
    eqns: list[Any]
    inputs: list[Any] = field(default_factory=list)  # vars defined before, first read first
    outputs: list[Any] = field(default_factory=list)  # vars defined here and read after
    key: str = ""


def split(closed: Any, granularity: str) -> list[Chunk]:
    """The jaxpr's top-level equations as chunks, with their inputs, outputs and keys.

    Args:
        closed: the train step's ClosedJaxpr.
        granularity: see :func:`labels`.

    Returns:
        The chunks, in order.
    """
    from jax.extend.core import Literal

    jaxpr = closed.jaxpr
    chunks: list[Chunk] = []
    for eqn, label in zip(jaxpr.eqns, labels(jaxpr.eqns, granularity)):
        if not chunks or chunks[-1].label != label:
            chunks.append(Chunk(label, []))
        chunks[-1].eqns.append(eqn)
    if granularity == "block+opt":
        chunks = [
            part
            for chunk in chunks
            for part in (components(chunk) if chunk.label == "fwd:training" else [chunk])
        ]
    last_read: dict[Any, int] = {}
    for index, chunk in enumerate(chunks):
        for eqn in chunk.eqns:
            for var in eqn.invars:
                if not isinstance(var, Literal):
                    last_read[var] = index
    for var in jaxpr.outvars:
        if not isinstance(var, Literal):
            last_read[var] = len(chunks)
    for index, chunk in enumerate(chunks):
        defined: set[Any] = set()
        seen: set[Any] = set()
        for eqn in chunk.eqns:
            for var in eqn.invars:
                if not isinstance(var, Literal) and var not in defined and var not in seen:
                    seen.add(var)
                    chunk.inputs.append(var)
            for var in eqn.outvars:
                defined.add(var)
                if last_read.get(var, -1) > index:
                    chunk.outputs.append(var)
        chunk.key = chunk_key(chunk)
    return chunks


def components(chunk: Chunk) -> list[Chunk]:
    """A chunk's independent parts (equations joined by the values they pass each other), in
    the order of their first equations: the optimizer's update, one part per variable.

    Args:
        chunk: a chunk (inputs, outputs and key not set).

    Returns:
        The parts, labelled ``label#n``.
    """
    from jax.extend.core import Literal

    parent = list(range(len(chunk.eqns)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    defined_by: dict[Any, int] = {}
    for index, eqn in enumerate(chunk.eqns):
        for var in eqn.invars:
            if not isinstance(var, Literal) and var in defined_by:
                parent[root(index)] = root(defined_by[var])
        for var in eqn.outvars:
            defined_by[var] = index
    parts: dict[int, Chunk] = {}
    for index, eqn in enumerate(chunk.eqns):
        key = root(index)
        if key not in parts:
            parts[key] = Chunk(f"{chunk.label}#{len(parts)}", [])
        parts[key].eqns.append(eqn)
    return list(parts.values())


_UNSTABLE: set[str] = set()  # the types of params rendered by their type alone (see _render)


def _render(value: Any) -> str:
    """A param's canonical text: jaxprs by their text (its own variable names, given in order),
    arrays by dtype, shape and a hash, functions by qualified name, the rest by ``repr``
    (where that shows an address, by type, noted in :data:`_UNSTABLE`)."""
    from jax.extend.core import ClosedJaxpr, Jaxpr

    if isinstance(value, ClosedJaxpr):
        return f"{{{value.jaxpr}; consts {_render(tuple(value.consts))}}}"
    if isinstance(value, Jaxpr):
        return f"{{{value}}}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_render(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_render(value[k])}" for k in sorted(value)) + "}"
    if hasattr(value, "shape") and hasattr(value, "dtype") and not np.isscalar(value):
        data = np.asarray(value)
        digest = hashlib.sha1(data.tobytes()).hexdigest()[:16]
        return f"array({data.dtype}{list(data.shape)}#{digest})"
    if callable(value) and not isinstance(value, type):
        inner = getattr(value, "f", value)  # lu.WrappedFun
        return "fn:" + getattr(inner, "__qualname__", type(inner).__name__)
    text = repr(value)
    if " at 0x" in text:
        _UNSTABLE.add(type(value).__name__)
        return f"<{type(value).__name__}>"
    return text


def chunk_key(chunk: Chunk) -> str:
    """The chunk's structural key: equal for chunks that compute the same function.

    Its inputs' avals, each equation (primitive, canonical params, output avals), literals by
    value, and which values it returns, variables renamed by order of first appearance.

    Args:
        chunk: a chunk whose ``inputs`` and ``outputs`` are set.

    Returns:
        A hex digest.
    """
    from jax.extend.core import DropVar, Literal

    names: dict[Any, str] = {}

    def name(var: Any) -> str:
        if isinstance(var, Literal):
            return f"lit({np.asarray(var.val).dtype}:{np.asarray(var.val).tolist()!r})"
        if isinstance(var, DropVar):
            return "_"
        return names.setdefault(var, f"v{len(names)}")

    def aval(var: Any) -> str:
        a = var.aval
        return f"{a.dtype}{list(a.shape)}{'~' if getattr(a, 'weak_type', False) else ''}"

    lines = ["in " + " ".join(f"{name(v)}:{aval(v)}" for v in chunk.inputs)]
    for eqn in chunk.eqns:
        params = _render(dict(eqn.params))
        outs = " ".join(f"{name(v)}:{aval(v)}" for v in eqn.outvars)
        ins = " ".join(name(v) for v in eqn.invars)
        lines.append(f"{outs} = {eqn.primitive.name}[{params}] {ins}")
    lines.append("out " + " ".join(name(v) for v in chunk.outputs))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def chunk_function(chunk: Chunk) -> Callable[..., tuple]:
    """The chunk as a function of its inputs, returning its outputs (an interpreter of its
    equations: ``primitive.bind``, as ``jax.core.eval_jaxpr`` does; nested calls stay whole).

    Args:
        chunk: a chunk.

    Returns:
        A function for ``jax.jit``.
    """
    from jax.extend.core import DropVar, Literal

    def evaluate(*values: Any) -> tuple:
        env = dict(zip(chunk.inputs, values))
        for eqn in chunk.eqns:
            ins = [v.val if isinstance(v, Literal) else env[v] for v in eqn.invars]
            with eqn.ctx.manager:
                outs = eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(eqn.params))
            if not eqn.primitive.multiple_results:
                outs = [outs]
            for var, value in zip(eqn.outvars, outs):
                if not isinstance(var, DropVar):
                    env[var] = value
        return tuple(env[v] for v in chunk.outputs)

    return evaluate


def compile_chunks(chunks: list[Chunk], options: Any) -> tuple[dict[str, Any], list[dict]]:
    """Compiles one executable per distinct key (its first chunk's), serially.

    Args:
        chunks: the chunks.
        options: XLA's options.

    Returns:
        ``(executables, timings)``: the executable of each key, and per distinct key its
        ``label`` (first chunk's), ``uses``, ``eqns``, ``lower_s`` (trace and lowering),
        ``compile_s`` and ``compile_cpu_s`` (the process's CPU time, all threads).
    """
    import jax

    uses: dict[str, int] = {}
    for chunk in chunks:
        uses[chunk.key] = uses.get(chunk.key, 0) + 1
    executables: dict[str, Any] = {}
    timings = []
    for chunk in chunks:
        if chunk.key in executables:
            continue
        specs = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in chunk.inputs]
        start = time.perf_counter()
        lowered = jax.jit(chunk_function(chunk), compiler_options=options).trace(*specs).lower()
        lowered_at, cpu = time.perf_counter(), time.process_time()
        executables[chunk.key] = lowered.compile()
        done, cpu = time.perf_counter(), time.process_time() - cpu
        timings.append(
            {
                "label": chunk.label,
                "uses": uses[chunk.key],
                "eqns": len(chunk.eqns),
                "lower_s": lowered_at - start,
                "compile_s": done - lowered_at,
                "compile_cpu_s": cpu,
            }
        )
    return executables, timings


def run_chain(closed: Any, chunks: list[Chunk], executables: dict[str, Any], args: tuple) -> list:
    """One train step as the chain of chunk executables (results not waited for).

    Args:
        closed: the train step's ClosedJaxpr.
        chunks: its chunks.
        executables: an executable per key.
        args: the step's arguments.

    Returns:
        The step's results, as the whole graph returns them.
    """
    from jax.extend.core import Literal

    jaxpr = closed.jaxpr
    env = dict(zip(jaxpr.constvars, closed.consts))
    env.update(zip(jaxpr.invars, args))
    for chunk in chunks:
        outs = executables[chunk.key](*[env[v] for v in chunk.inputs])
        env.update(zip(chunk.outputs, outs))
    return [v.val if isinstance(v, Literal) else env[v] for v in jaxpr.outvars]


def _largest_difference(ours: Sequence[Any], theirs: Sequence[Any]) -> tuple[float, bool]:
    """The largest absolute difference between two lists of arrays, and whether all are equal."""
    largest, equal = 0.0, True
    for a, b in zip(ours, theirs):
        a, b = np.asarray(a), np.asarray(b)
        equal = equal and a.tobytes() == b.tobytes()
        if a.size:
            difference = np.abs(a.astype(np.float64) - b.astype(np.float64))
            largest = max(largest, float(np.max(difference)))
    return largest, equal


def measure(name: str, granularity: str, whole: bool = True) -> dict:
    """Whole-graph and segmented compile and step of one model's train step, in this process.

    Args:
        name: a model of ``bench_zoo.ZOO``.
        granularity: ``'layer'`` or ``'block'`` (:func:`labels`).
        whole: whether to compile the whole graph too (else no step or result comparison).

    Returns:
        The figures, for JSON (seconds; ``*_ms`` milliseconds).
    """
    keras = _keras()
    import jax

    from jaxkeras import tiers

    options = tiers.quick_options(1)
    # XLA's first compile in a process starts things up: not in either side's time
    jax.jit(lambda v: v + 1, compiler_options=options).lower(np.float32(1)).compile()
    start = time.perf_counter()
    run, args, function, trace_s = capture_train_step(keras, name)
    captured_s = time.perf_counter() - start
    found = whole_graph(run, args, options, whole)
    closed, compiled = found.pop("closed"), found.pop("compiled", None)
    results = found.pop("results", None)
    start = time.perf_counter()
    chunks = split(closed, granularity)
    split_s = time.perf_counter() - start
    start = time.perf_counter()
    executables, timings = compile_chunks(chunks, options)
    segmented_s = time.perf_counter() - start
    chained = jax.block_until_ready(run_chain(closed, chunks, executables, args))
    report = {
        "model": name,
        "granularity": granularity,
        "jax": jax.__version__,
        "function": function,
        "captured_s": captured_s,
        "trace_s": trace_s,
        "eqns": len(closed.jaxpr.eqns),
        "chunks": len(chunks),
        "distinct": len(executables),
        "whole": found,
        "split_s": split_s,
        "seg_lower_s": sum(t["lower_s"] for t in timings),
        "seg_compile_s": sum(t["compile_s"] for t in timings),
        "seg_compile_cpu_s": sum(t["compile_cpu_s"] for t in timings),
        "fixed_compile_s": fixed_compile_s(options),
        "seg_wall_s": segmented_s,
        "by_kind": by_kind(timings),
        "top": sorted(timings, key=lambda t: -(t["lower_s"] + t["compile_s"]))[:TOP],
        "unstable_params": sorted(_UNSTABLE),
        "options": options,
    }
    steps = {"chain_step_s": lambda: run_chain(closed, chunks, executables, args)}
    if compiled is not None:
        steps["whole_step_s"] = lambda: compiled(*args)
    report.update(median_steps(steps))
    if results is not None:
        loss, loss_equal = _largest_difference(chained[:1], results[:1])
        state, state_equal = _largest_difference(chained[1:], results[1:])
        report.update(loss_diff=loss, loss_equal=loss_equal, state_diff=state)
        report.update(state_equal=state_equal, loss=float(np.asarray(results[0]).ravel()[0]))
    return report


def by_kind(timings: Sequence[dict]) -> dict[str, float]:
    """Compile seconds of the distinct chunks by kind: the optimizer's update (``training``),
    the state's unpacking and packing (equations outside any layer), and the layers (the rest).

    Args:
        timings: :func:`compile_chunks`'s timings.

    Returns:
        Seconds (lowering and compile) by kind.
    """
    found = {"optimizer": 0.0, "state": 0.0, "layers": 0.0}
    for t in timings:
        layer = t["label"].split(":", 1)[1]
        kind = "optimizer" if layer.startswith("training") else "state" if not layer else "layers"
        found[kind] += t["lower_s"] + t["compile_s"]
    return found


def _cell(report: dict) -> list[str]:
    """One table row's cells for a report."""
    whole = report["whole"]
    step = report.get("whole_step_s")
    cpu = whole.get("compile_cpu_s")
    cells = [
        report["model"],
        report["granularity"],
        str(report["eqns"]),
        str(report["chunks"]),
        str(report["distinct"]),
        f"{report['trace_s']:.1f}",
        f"{whole['lower_s']:.1f}" if "lower_s" in whole else "-",
        f"{whole['compile_s']:.1f} ({cpu:.1f})" if cpu is not None else "skipped",
        f"{report['split_s']:.2f}",
        f"{report['seg_lower_s']:.1f}",
        f"{report['seg_compile_s']:.1f} ({report['seg_compile_cpu_s']:.1f})",
        f"{report['by_kind']['optimizer']:.1f} + {report['by_kind']['state']:.1f}",
        f"{report['fixed_compile_s'] * 1e3:.0f}",
        f"{step * 1e3:.1f}" if step else "-",
        f"{report['chain_step_s'] * 1e3:.1f}",
    ]
    if "loss_diff" in report:
        cells.append(
            f"{report['loss_diff']:.2g}{' (=)' if report['loss_equal'] else ''} / "
            f"{report['state_diff']:.2g}{' (=)' if report['state_equal'] else ''}"
        )
    else:
        cells.append("-")
    return cells


HEADER = [
    "model",
    "chunks by",
    "eqns",
    "chunks",
    "distinct",
    "trace s",
    "whole lower s",
    "whole XLA compile s (CPU s)",
    "split s",
    "seg lower s",
    "seg XLA compile s (CPU s)",
    "of which optimizer + state s",
    "one-op compile ms",
    "whole step ms",
    "chain step ms",
    "max abs diff loss / state",
]


def table(reports: Sequence[dict]) -> str:
    """The reports as a markdown table, then each one's top distinct chunks by compile time.

    Args:
        reports: :func:`measure`'s results.

    Returns:
        The markdown text.
    """
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    lines += ["| " + " | ".join(_cell(r)) + " |" for r in reports]
    for report in reports:
        lines.append("")
        lines.append(f"{report['model']} by {report['granularity']}: top distinct chunks")
        for t in report["top"]:
            lines.append(
                f"- {t['label']}: {t['eqns']} eqns, used {t['uses']}x, lower "
                f"{t['lower_s']:.2f} s, compile {t['compile_s']:.2f} s"
            )
    return "\n".join(lines)


def main() -> None:
    """Runs one model (``--model``; prints JSON) or every model in fresh processes (a table)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", help="one model of bench_zoo.ZOO, in this process (JSON)")
    parser.add_argument("--granularity", choices=GRANULARITIES, default="block")
    parser.add_argument("--models", nargs="+", default=MODELS, help="the table's models")
    parser.add_argument("--granularities", nargs="+", default=list(GRANULARITIES))
    parser.add_argument("--no-whole", action="store_true", help="skip the whole graph's compile")
    arguments = parser.parse_args()
    sys.path.insert(0, str(HERE))
    if arguments.model:
        print(json.dumps(measure(arguments.model, arguments.granularity, not arguments.no_whole)))
        return
    from common import json_of_process

    reports = []
    for name in arguments.models:
        for granularity in arguments.granularities:
            command = [sys.executable, __file__, "--model", name, "--granularity", granularity]
            if arguments.no_whole:
                command.append("--no-whole")
            env = {"KERAS_BACKEND": "jaxkeras", "JAX_PLATFORMS": "cpu"}
            reports.append(json_of_process(command, env, quiet=False))
            print(json.dumps(reports[-1]), flush=True)
    print(table(reports))


if __name__ == "__main__":
    main()
