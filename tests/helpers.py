"""Shared checks: an op must agree with a NumPy reference in every way it can be run; code run
in a fresh interpreter (Keras 2.3.1 on jaxkeras included)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import jax
import numpy as np

import jaxkeras as K


def run_all_ways(op: Callable, inputs: Sequence[np.ndarray], batch_none: bool = True) -> dict:
    """Runs ``op(*inputs)`` eagerly, through placeholders + K.function, on variables via K.eval,
    and inside jax.jit; returns the results by way.

    Args:
        op: a function of tensors (usually a lambda around a K op with static arguments fixed).
        inputs: NumPy arrays.
        batch_none: give each placeholder an unknown first dimension.
    """
    inputs = [np.asarray(a) for a in inputs]
    out = {"eager": op(*inputs)}
    phs = [
        K.placeholder(
            shape=(None, *a.shape[1:]) if batch_none and a.ndim else a.shape,
            dtype=a.dtype.name,
        )
        for a in inputs
    ]
    sym = op(*phs)
    f = K.function(phs, sym if isinstance(sym, (list, tuple)) else [sym])
    res = f(inputs)
    out["function"] = res if isinstance(sym, (list, tuple)) else res[0]
    variables = [K.variable(a, dtype=a.dtype.name) for a in inputs]
    out["variable"] = (
        K.eval(op(*variables))
        if not isinstance(sym, (list, tuple))
        else [K.eval(t) for t in op(*variables)]
    )
    out["jit"] = jax.jit(lambda *xs: op(*xs))(*inputs)
    out["symbolic"] = sym
    return out


def check_op(
    op: Callable,
    reference: Callable,
    inputs: Sequence[np.ndarray],
    rtol: float = 1e-5,
    atol: float = 1e-6,
    batch_none: bool = True,
) -> None:
    """Asserts ``op`` agrees with ``reference(*inputs)`` (NumPy, ideally float64) every way, and
    that the symbolic result's static shape agrees with the value's (``None`` allowed)."""
    expected = reference(*[np.asarray(a) for a in inputs])
    results = run_all_ways(op, inputs, batch_none)
    sym = results.pop("symbolic")
    for way, value in results.items():
        if isinstance(expected, (list, tuple)):
            for e, v in zip(expected, value):
                np.testing.assert_allclose(np.asarray(v), e, rtol=rtol, atol=atol, err_msg=way)
        else:
            np.testing.assert_allclose(
                np.asarray(value), expected, rtol=rtol, atol=atol, err_msg=way
            )
    syms = sym if isinstance(sym, (list, tuple)) else [sym]
    exps = expected if isinstance(expected, (list, tuple)) else [expected]
    for s, e in zip(syms, exps):
        shape = K.int_shape(s)
        assert len(shape) == np.ndim(e), (shape, np.shape(e))
        for d, n in zip(shape, np.shape(e)):
            assert d is None or d == n, (shape, np.shape(e))


def numeric_grad(f: Callable, x: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    """Central finite differences of scalar ``f`` at ``x`` (float64)."""
    x = np.asarray(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def check_grad(
    op: Callable,
    reference: Callable,
    x: np.ndarray,
    rtol: float = 2e-3,
    atol: float = 2e-4,
    eps: float = 1e-5,
) -> None:
    """Asserts K.gradients of ``sum(op(x))`` (float32, through K.function) agrees with central
    finite differences of ``sum(reference(x))`` computed in float64 NumPy."""
    x = np.asarray(x, dtype=np.float64)
    xp = K.placeholder(shape=x.shape, dtype="float32")
    (g,) = K.gradients(op(xp), [xp])
    got = K.function([xp], [g])([x.astype(np.float32)])[0]
    want = numeric_grad(lambda v: float(np.sum(reference(v))), x, eps=eps)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


EXECUTABLES: list = []
"""One entry per XLA executable this process compiled or read from the persistent cache."""
jax.monitoring.register_event_duration_secs_listener(
    lambda event, seconds, **kw: (
        EXECUTABLES.append(event) if event == "/jax/core/compile/backend_compile_duration" else None
    )
)


@contextlib.contextmanager
def compile_threads() -> Iterator[list[str]]:
    """Collects the names of the threads that run XLA compiles inside the block, with JAX's
    persistent compilation cache off (a cache hit would compile nothing)."""
    threads: list[str] = []

    def listener(event: str, duration: float, **kwargs) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            threads.append(threading.current_thread().name)

    cache = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield threads
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
        jax.config.update("jax_enable_compilation_cache", cache)


def run_python(code: str, *args: str, **env: str) -> str:
    """Runs ``code`` in a fresh interpreter, with ``args`` as its ``sys.argv[1:]`` and ``env``
    set over this process's environment; fails the test with its error output unless it exits
    with 0.

    Returns:
        What it printed.
    """
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def run_on_keras2(code: str, home: Path, *args: str) -> str:
    """:func:`run_python` with multi-backend Keras 2.3.1 loading jaxkeras
    (``KERAS_BACKEND=jaxkeras``) and keeping its settings in ``home``.

    Returns:
        What it printed.
    """
    return run_python(code, *args, KERAS_HOME=str(home), KERAS_BACKEND="jaxkeras")


def run_hosts(
    worker: str, args: Sequence[str], folder: Path, env: Mapping[str, str], timeout: float
) -> list[dict]:
    """Runs two processes of ``worker`` as the hosts of one JAX job, coordinated on a free
    local port: host ``i`` runs ``worker host i port *args folder/i.json``; fails the test with
    a host's error output unless both exit with 0.

    Returns:
        Each host's results, read from the JSON file it wrote.
    """
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    procs = [
        subprocess.Popen(
            [sys.executable, worker, "host", str(i), str(port), *args, str(folder / f"{i}.json")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    errors = [p.communicate(timeout=timeout)[1] for p in procs]
    for p, err in zip(procs, errors):
        assert p.returncode == 0, err[-4000:]
    return [json.loads((folder / f"{i}.json").read_text()) for i in range(2)]


def run_test_tree(
    tree: Path,
    tests: str | Path,
    env: Mapping[str, str],
    report: Path,
    *args: str,
    cwd: Path | None = None,
    timeout: int = 3600,
) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """Runs another project's pytest tree (Keras 2.3.1's, Keras 2.2.4's backend tests,
    keras-contrib's) against jaxkeras in a subprocess, through ``tests/keras2_suite_plugin.py``.

    Args:
        tree: the tree's root (pytest's rootdir).
        tests: what pytest collects, relative to ``cwd``.
        env: the subprocess's environment (``KERAS_BACKEND``, ``PYTHONPATH`` with this folder,
            ``JAXKERAS_SUITE_REPORT=report``, ``JAXKERAS_SUITE_EXCLUSIONS`` where not Keras
            2.3.1's).
        report: where the plugin writes each test's outcome.
        *args: more pytest arguments (``-n 2``, ``-p no:xdist``).
        cwd: the working folder (default: ``tree``).
        timeout: seconds.

    Returns:
        The finished process and the outcome of each test by name.
    """
    command = [sys.executable, "-m", "pytest", str(tests), "-p", "keras2_suite_plugin", "-q"]
    command += ["-p", "no:cacheprovider", "-c", os.devnull, f"--rootdir={tree}"]
    command += ["-W", "ignore::DeprecationWarning", *args]
    out = subprocess.run(
        command, env=dict(env), capture_output=True, text=True, cwd=cwd or tree, timeout=timeout
    )
    assert report.exists(), out.stdout[-3000:] + out.stderr[-3000:]
    return out, json.loads(report.read_text())


def check_tree(
    what: str,
    out: subprocess.CompletedProcess,
    outcomes: Mapping[str, str],
    excluded: Mapping[str, str],
    passed: int,
) -> dict[str, int]:
    """Asserts that a tree run by :func:`run_test_tree` passed: no failure, every excluded
    test (a key with ``::``) run as an expected failure, at least ``passed`` passes.

    Args:
        what: the tree's name, for the messages.
        out: the finished process.
        outcomes: each test's outcome.
        excluded: the exclusions (test or file -> reason).
        passed: the fewest passes expected.

    Returns:
        The count of each outcome.
    """
    counts: dict[str, int] = {}
    for outcome in outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    failed = sorted(name for name, outcome in outcomes.items() if outcome == "failed")
    assert not failed, "\n".join(
        [f"{len(failed)} {what} tests failed:", *failed, out.stdout[-5000:]]
    )
    tests = [key for key in excluded if "::" in key]
    not_excluded = [key for key in tests if outcomes.get(key) != "xfailed"]
    assert not not_excluded, f"excluded tests not run as expected failures: {not_excluded}"
    assert counts.get("passed", 0) >= passed, f"only {counts.get('passed', 0)} {what} tests passed"
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-3000:]
    print(
        f"{what}: {counts.get('passed', 0)} passed, {counts.get('xfailed', 0)} excluded tests "
        f"and {len(excluded) - len(tests)} excluded files, {counts.get('skipped', 0)} skipped"
    )
    return counts
