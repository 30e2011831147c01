"""Sphinx configuration of the torchrl documentation site.

Built by ``make docs`` (warnings are errors). Besides the hand-written pages it builds:

* the tutorials gallery (sphinx-gallery) from ``tutorials/`` into ``docs/tutorials/``; a
  tutorial is executed again only when its source changed (its MD5 is kept beside the
  generated page), so ``docs/tutorials/`` is the execution cache;
* autosummary pages for every name of the API reference, into ``docs/api/generated/``;
* pages generated from recorded data, into ``docs/_generated/``: one source page per example
  script, the algorithm pages' result blocks (from ``docs/results/*.json``, written by
  ``tools/docs_record.py``) and the benchmark tables (from ``docs/benchmarks/*.json``,
  written by ``tools/docs_record.py``).
"""

import os
import sys

DOCS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(DOCS)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import docs_pages  # noqa: E402  (tools/docs_pages.py)

project = "torchrl"
author = "the torchrl developers"
copyright = "the torchrl developers"
release = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx_gallery.gen_gallery",
]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_default_options = {"show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autosummary_generate = False  # tools/docs_pages.py writes the per-name pages (orphans)
# Optional dependencies are imported lazily inside functions, so autodoc needs no mocks.
nitpicky = False
suppress_warnings = ["ref.python", "config.cache"]
exclude_patterns = ["_build", "_*.rst.txt", "tutorials/*.ipynb", "tutorials/*.py"]

html_theme = "furo"
html_title = "torchrl"
html_static_path: list[str] = []
html_theme_options = {"navigation_with_keys": True}

sphinx_gallery_conf = {
    "examples_dirs": os.path.join(ROOT, "tutorials"),
    "gallery_dirs": "tutorials",
    "filename_pattern": r".*\.py$",  # execute every tutorial
    # TORCHRL_DOCS_SKIP_TUTORIALS="name1|name2" leaves tutorials out (e.g. one being written)
    "ignore_pattern": r"(^|/)_"
    + (
        rf"|(^|/)({os.environ['TORCHRL_DOCS_SKIP_TUTORIALS']})\.py$"
        if os.environ.get("TORCHRL_DOCS_SKIP_TUTORIALS")
        else ""
    ),
    "within_subsection_order": "FileNameSortKey",
    "run_stale_examples": False,  # reuse the cached run of an unchanged tutorial
    "abort_on_example_error": True,
    "download_all_examples": False,
    "image_scrapers": ("matplotlib",),
    "show_memory": False,
    "show_signature": False,
    "write_computation_times": True,
    "min_reported_time": 0,
    "plot_gallery": "True",
    "remove_config_comments": True,
    "default_thumb_file": None,
}


def setup(app):
    docs_pages.setup_directives(app)
