"""Workarounds for XLA, each scoped to what jaxkeras compiles and each naming what it works around.

Private. ``options`` holds the XLA compiler options ``K.function`` passes to its own compiles;
``conv_lowering`` the convolution lowerings chosen per platform; ``siblings`` runs ops on one
input with several kernels as one; ``summation`` gives small full reductions an
order-independent sum; ``cpu_memory`` the opt-in CPU memory reuse. Every one cites its upstream
issue and the ``benchmarks/RESULTS.md`` row that measures it; see ``docs/performance.md``.
"""
