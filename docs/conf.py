"""Sphinx configuration for the torchrl API reference."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "torchrl"
author = "the torchrl developers"
release = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Optional dependencies are imported lazily inside functions, so autodoc needs no mocks.
nitpicky = False
suppress_warnings = ["ref.python"]
html_theme = "alabaster"
exclude_patterns = ["_build"]


def _skip_tensordict_members(app, what, name, obj, skip, options):
    """Leave out the methods a ``@tensorclass`` copies onto our classes from tensordict (their
    docstrings link to tensordict's own docs, which this build does not have)."""
    if what == "class" and (getattr(obj, "__module__", None) or "").startswith("tensordict"):
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_tensordict_members)
