"""Sphinx configuration for pyro_dp.

Build (warnings are errors, as in the docs test)::

    python3 -m pip install -e ".[docs]"
    sphinx-build -W -b html docs docs/_build/html
"""
import os
import sys

sys.path.insert(0, os.path.abspath(".."))
sys.path.insert(0, os.path.abspath("_ext"))

import pyro_dp  # noqa: E402

project = "pyro_dp"
author = "pyro_dp developers"
copyright = "pyro_dp developers"
release = pyro_dp.__version__
version = release

extensions = [
    "myst_parser",  # the prose pages (and docs/privacy.md, unchanged) are MyST markdown
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # docstrings mix :param: fields with numpy-style "Example\n-------"
    "sphinx.ext.mathjax",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "tutorial_outputs",  # docs/_ext: runs the tutorials in quick mode, renders output and figures
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_generated", "Thumbs.db", ".DS_Store"]

# No network at build time: no inventories are fetched.
intersphinx_mapping = {}

# MyST: $...$ / $$...$$ maths in the prose pages.
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3

# autodoc: document what a module exports (its __all__), in source order, with the
# signature's type hints in the description rather than in the signature line.
autodoc_default_options = {
    "members": True,
    "member-order": "bysource",
    "show-inheritance": True,
}
autodoc_typehints = "description"
autodoc_class_signature = "mixed"
autodoc_preserve_defaults = True
# Imported heavy dependencies are real (torch, pyro): nothing is mocked, so the API
# pages show the real signatures.

napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_param = True
napoleon_use_rtype = True

# Not nitpicky: references to torch/pyro/numpy types cannot resolve without intersphinx.
nitpicky = False

html_theme = "alabaster"
html_title = f"pyro_dp {release}"
html_static_path = []
