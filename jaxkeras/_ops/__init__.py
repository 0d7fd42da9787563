"""The implementations of the tensor operations that :mod:`jaxkeras.ops` re-exports.

Private: import them as ``jaxkeras.ops`` (or ``K``). One module per theme: ``math``,
``reduce``, ``linalg``, ``shape``, ``create``, ``random``, ``control``, the helpers they share
in ``common``, and ``spatial``'s window arithmetic for convolution and pooling.
"""
