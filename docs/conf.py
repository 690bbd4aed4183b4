"""Sphinx configuration of the dsgd_dask documentation.

Build with ``sphinx-build -W --keep-going -b html docs docs/_build/html``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# the package itself, when the docs are built from a source checkout without installing it
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dsgd_dask

project = "dsgd_dask"
author = "dsgd_dask contributors"
copyright = "dsgd_dask contributors"
version = release = dsgd_dask.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
]

exclude_patterns = ["_build"]
templates_path: list[str] = []
html_theme = "alabaster"
html_static_path: list[str] = []
html_title = f"dsgd_dask {release}"

# autodoc: members in source order; sklearn's own mixins are not re-documented here
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autosummary_generate = False
add_module_names = False

# numpydoc: the Parameters/Attributes sections render as field lists; class members are
# listed by autodoc's :members: (not by numpydoc's autosummary tables, which would need
# generated stub pages)
numpydoc_show_class_members = False
numpydoc_show_inherited_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = True
numpydoc_xref_ignore = "all"
# numpydoc's default aliases point some words (bool, array-like, iterable, ...) at labels
# and glossary terms of the Python and NumPy documentation, which are not linked here
# (no intersphinx: the build needs no network): they stay plain words
numpydoc_xref_aliases = {word: word for word in (
    "bool", "boolean", "iterable", "sequence", "generator", "array-like", "array_like", "scalar")}
# fitted attributes named in shapes, ``(n_samples, n_features_in_)``: as code, since a
# bare trailing underscore is a reST reference
for _name in ("n_features_", "n_features_in_", "n_features_in_y_", "n_features_x_", "n_features_y_"):
    numpydoc_xref_aliases[_name] = f"``{_name}``"
    numpydoc_xref_aliases[_name + ","] = f"``{_name}``,"  # the token of a 1-tuple, ``(n_features_,)``
numpydoc_validation_checks: set[str] = set()

# docstrings use ``double backticks`` for code and math written in plain text
default_role = "literal"


def _skip_foreign_members(app, what, name, obj, skip, options):
    """Document the package's own methods, inherited ones included, but not scikit-learn's.

    ``get_params``, ``set_params``, ``fit_transform``, ``set_output``, the metadata-routing
    ``set_*_request`` methods and the like are scikit-learn's; their docstrings refer to
    labels of scikit-learn's own documentation.
    """
    module = getattr(obj, "__module__", None) or ""
    if module.split(".")[0] == "sklearn":
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_foreign_members)
