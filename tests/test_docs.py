"""The documentation: it builds with Sphinx without a warning, and its examples run as doctests."""

from __future__ import annotations

import doctest
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(DOCS.rglob("*.rst"))
#: Pages that must hold at least one example (every page of the user guide).
WITH_EXAMPLES = {"quickstart.rst", "cluster.rst", "choosing.rst", "guide/kpca.rst", "guide/two_view.rst",
                 "guide/sir.rst", "guide/machines.rst", "guide/baselines.rst"}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def test_pages_exist():
    missing = WITH_EXAMPLES - {p.relative_to(DOCS).as_posix() for p in PAGES}
    assert not missing, f"missing pages: {sorted(missing)}"


def test_sphinx_build_has_no_warnings(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("numpydoc")
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-d", str(tmp_path / "doctrees"),
           str(DOCS), str(tmp_path / "html")]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, f"sphinx-build failed:\n{result.stdout}\n{result.stderr}"
    assert (tmp_path / "html" / "index.html").exists()


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_examples(page, capsys):
    failed, attempted = doctest.testfile(str(page), module_relative=False, optionflags=FLAGS, encoding="utf-8",
                                         raise_on_error=False)
    out = capsys.readouterr().out
    assert failed == 0, f"{failed} of {attempted} examples of {page.name} failed:\n{out}"
    if page.relative_to(DOCS).as_posix() in WITH_EXAMPLES:
        assert attempted > 0, f"{page.name} has no examples"
