"""Sphinx configuration of the jaxkeras documentation (``make docs`` builds it into site/).

Guides are Markdown (MyST-Parser); the API reference is rendered from the Google-style
docstrings by autodoc and napoleon. ``make docs`` builds with ``-W --keep-going``: any warning
fails the build.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Importing jaxkeras reads keras.json and the environment: keep the build independent of both,
# and on the CPU (the docs compute nothing)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
for _name in ("JAXKERAS_COMPILATION_CACHE", "JAXKERAS_REUSE_CPU_MEMORY", "JAXKERAS_DTYPE_POLICY"):
    os.environ.pop(_name, None)

project = "jaxkeras"
author = "the jaxkeras authors"
copyright = "the jaxkeras authors"
release = version = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]

# MyST: ```{directive} blocks; `# headings` become link targets (guide.md#some-heading)
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# autodoc + napoleon: Google-style sections (Args, Returns, Raises), type hints in the text
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_member_order = "bysource"
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_attr_annotations = True
napoleon_use_ivar = True  # a NamedTuple's "Attributes:" would describe its fields twice

# references to names the docs do not render (private modules, JAX's own types) stay text
nitpicky = False

html_theme = "furo"
html_title = "jaxkeras"
html_static_path: list[str] = []


def _keep_prose_first_lines(app, what, name, obj, options, lines):
    """Napoleon reads ``text: more`` on the first line of an attribute's docstring as
    ``type: description``; jaxkeras's attribute docstrings are prose, so a first line whose
    part before the colon is two words or more is broken after the colon (a line that ends with
    one has no type for napoleon) and renders as written.
    """
    if what in ("attribute", "property", "data") and lines:
        head, colon, rest = lines[0].partition(": ")
        if colon and len(head.split()) >= 2:
            lines[0:1] = [head + ":", rest]


def setup(app):
    app.connect("autodoc-process-docstring", _keep_prose_first_lines, priority=100)
