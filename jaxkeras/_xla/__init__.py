"""Workarounds for XLA, each scoped to what jaxkeras compiles and each naming what it works around.

Private. ``options`` holds the XLA compiler options ``K.function`` passes to its own compiles;
``conv_lowering`` the convolution lowerings chosen per platform; ``siblings`` runs ops on one
input with several kernels as one; ``summation`` gives small full reductions an
order-independent sum; ``cpu_memory`` the opt-in CPU memory reuse. Every one cites its upstream
issue (or says that none was found, and when) and the ``benchmarks/RESULTS.md`` rows that
measure it, or the group of its hand-kept "Design measurements (by hand)" section; see
``docs/performance.md``.
"""
