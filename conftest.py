"""Doctest set-up for ``pytest --doctest-modules jaxkeras``: examples use ``K`` and ``np``."""

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _doctest_names(request, doctest_namespace):
    """Give every docstring example ``K`` (jaxkeras) and ``np``, and a fresh session."""
    import jaxkeras as K

    doctest_namespace.update(K=K, np=np)
    is_doctest = isinstance(request.node, pytest.DoctestItem)
    if is_doctest:
        K.clear_session()
    yield
    if is_doctest:
        K.clear_session()
