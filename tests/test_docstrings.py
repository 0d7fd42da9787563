"""Every name in the ``K`` namespace has a docstring that documents it (Args, Returns).

The rendered API reference (``make docs``) is built from these docstrings.
"""

import functools
import inspect
import re
import types
from pathlib import Path

import pytest

import jaxkeras as K

# The Keras backend API that jaxkeras implements: the names of the Keras 2 backend docs
API_NAMES = (Path(__file__).parent / "api_names.txt").read_text().split()

NAMES = sorted(
    {
        name
        for name in dir(K)
        if not name.startswith("_") and not isinstance(getattr(K, name), types.ModuleType)
    }
    | set(API_NAMES)
)
# ... and the public names of its public submodules (K.optimizers.OptaxOptimizer)
NAMES += [
    f"{module}.{name}"
    for module in ["optimizers", "distribution"]
    for name in getattr(K, module).__all__
]


def _section(doc, title):
    """The lines of a Google-style section (``Args:``) of ``doc``, or None without one."""
    lines = doc.splitlines()
    for start, line in enumerate(lines):
        if line.strip() == title + ":" and not line.startswith(" "):
            body = []
            for item in lines[start + 1 :]:
                if item and not item.startswith(" "):  # the next section, or prose
                    break
                body.append(item)
            return body
    return None


def _callable_parts(obj):
    """(docstring, signature) of a function, or of a class with its constructor."""
    if inspect.isclass(obj):
        doc = (inspect.getdoc(obj) or "") + "\n\n" + (inspect.getdoc(obj.__init__) or "")
        return doc, inspect.signature(obj)
    return inspect.getdoc(obj) or "", inspect.signature(obj)


def _returns_nothing(annotation):
    """Whether a return annotation (a string, under postponed evaluation) says "nothing"."""
    return str(annotation) in ("None", "Iterator[None]")


def test_api_names_are_all_in_the_namespace():
    assert len(API_NAMES) == 158
    missing = [name for name in API_NAMES if not hasattr(K, name)]
    assert missing == []


@pytest.mark.parametrize("name", NAMES)
def test_docstring_documents_arguments_and_result(name):
    obj = functools.reduce(getattr, name.split("."), K)
    assert callable(obj), f"K.{name} is not a function or class"
    if inspect.isclass(obj) and issubclass(obj, Warning):  # raised, never constructed by users
        assert (inspect.getdoc(obj) or "").strip(), f"K.{name} has no docstring"
        return
    doc, signature = _callable_parts(obj)
    assert doc.strip(), f"K.{name} has no docstring"
    params = [p.name for p in signature.parameters.values() if p.name != "self"]
    if params:
        args = _section(doc, "Args")
        assert args is not None, f"K.{name} takes {params} but its docstring has no Args: section"
        documented = {m.group(1) for m in map(re.compile(r"^ {4}\**(\w+)\b").match, args) if m}
        undocumented = [p for p in params if p not in documented]
        assert undocumented == [], f"K.{name}: Args: does not describe {undocumented}"
    if inspect.isclass(obj):
        return
    annotation = signature.return_annotation
    assert annotation is not inspect.Signature.empty, f"K.{name} has no return annotation"
    if not _returns_nothing(annotation):
        assert _section(doc, "Returns") is not None or _section(doc, "Yields") is not None, (
            f"K.{name} returns {annotation} but its docstring has no Returns: section"
        )
