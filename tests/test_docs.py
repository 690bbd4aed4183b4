"""The documentation and the README.

The docs build with Sphinx without a warning, their examples run as doctests, the solver
tables of ``docs/solvers.rst`` and of the README list exactly the combinations of
:data:`dsgd_dask.estimators._solvers.SOLVERS`, and the README stays an entry point.
"""

from __future__ import annotations

import doctest
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dsgd_dask.estimators._solvers import ITERATION, MEASURE, SOLVERS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted(DOCS.rglob("*.rst"))
#: Pages that must hold at least one example (every page of the user guide).
WITH_EXAMPLES = {"quickstart.rst", "solvers.rst", "cluster.rst", "choosing.rst", "datasets.rst", "guide/kpca.rst",
                 "guide/two_view.rst", "guide/sir.rst", "guide/machines.rst", "guide/baselines.rst"}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
#: The two set-up commands the README must give, verbatim.
SETUP_COMMANDS = ("python -m pip install -e . && python pipelines/kpca_1d_gaussian.py",
                  'python -m pip install -e ".[test]" && python -m pytest')
README_MAX_LINES = 200
#: Names and values that left the API: no user-facing text may use them.
REMOVED = ("DSGDKernel", "NystroemPCA", "RandomFeaturePCA", "NystroemCCA", "RandomFeatureCCA", "ExactKernelPCA",
           "ExactKernelCCA", "ExactKernelSVD", "ExactKernelSIR", "n_passes_", 'solver="oja"', 'solver="passes"',
           'solver="steps"', 'solver="sgd"')


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


def simple_table(text: str, label: str) -> list[list[str]]:
    """The body rows of the first reST simple table after ``.. _label:``, as stripped cells.

    A row whose first cell is ``\\`` (reST's escaped empty cell) gets an empty first cell;
    continuation lines (blank first column) are joined to the row above.
    """
    lines = text[text.index(f".. _{label}:"):].splitlines()
    borders = [i for i, line in enumerate(lines) if re.fullmatch(r"=+( +=+)+", line)]
    assert len(borders) >= 3, f"no simple table after the label {label}"
    top, head, bottom = borders[:3]
    spans = [m.span() for m in re.finditer("=+", lines[top])]
    rows: list[list[str]] = []
    for line in lines[head + 1:bottom]:
        cells = [line[a:b if k < len(spans) - 1 else None].strip() for k, (a, b) in enumerate(spans)]
        if not cells[0] and rows:  # a continuation line
            rows[-1] = [f"{old} {new}".strip() for old, new in zip(rows[-1], cells, strict=True)]
            continue
        rows.append(["" if cells[0] == "\\" else cells[0], *cells[1:]])
    return rows


def quoted(cell: str) -> list[str]:
    return re.findall(r'"(\w+)"', cell)


def test_solver_table_lists_exactly_the_solvers():
    """``docs/solvers.rst``: one row per (estimator, solver) with its features, as in ``SOLVERS``."""
    combos, estimator = set(), None
    for cell, solver, features in simple_table((DOCS / "solvers.rst").read_text(encoding="utf-8"), "solver-table"):
        if cell:
            estimator = re.search(r"(Kernel\w+)", cell).group(1)
        (name,) = quoted(solver)
        combos |= {(estimator, name, f) for f in quoted(features)}
    expected = {(e, s, f) for e, table in SOLVERS.items() for s, fs in table.items() for f in fs}
    assert combos == expected, f"missing: {sorted(expected - combos)}, not in SOLVERS: {sorted(combos - expected)}"


def test_iteration_table_lists_every_solver():
    """``docs/solvers.rst``: what an iteration and the measure are, for every solver of ``ITERATION``."""
    rows = simple_table((DOCS / "solvers.rst").read_text(encoding="utf-8"), "iteration-table")
    solvers = [quoted(row[0])[0] for row in rows]
    assert sorted(solvers) == sorted(ITERATION) == sorted(MEASURE)
    used = {s for table in SOLVERS.values() for s in table}
    assert used == set(ITERATION)


def test_readme_is_an_entry_point():
    text = README.read_text(encoding="utf-8")
    n_lines = len(text.splitlines())
    assert n_lines <= README_MAX_LINES, f"README.md has {n_lines} lines"
    for command in SETUP_COMMANDS:
        assert command in text, f"README.md lacks the set-up command {command!r}"


def test_readme_solver_table_lists_exactly_the_solvers():
    """The README's estimator x solver table: a column per solver, a row per estimator, cells naming features."""
    lines = [line for line in README.read_text(encoding="utf-8").splitlines() if line.startswith("| `Kernel")
             or line.startswith("| estimator |")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    solvers = [quoted(c.replace("`", ""))[0] if quoted(c.replace("`", "")) else c for c in header]
    names = {"Nyström": "nystroem", "Fourier": "fourier", "Fourier pairs": "fourier_pairs"}
    combos = set()
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        estimator = cells[0].strip("`")
        for solver, cell in zip(solvers[1:], cells[1:], strict=True):
            if solver in ITERATION:
                combos |= {(estimator, solver, names[w]) for w in re.findall(r"Nyström|Fourier pairs|Fourier", cell)}
    expected = {(e, s, f) for e, table in SOLVERS.items() for s, fs in table.items() for f in fs}
    assert combos == expected, f"missing: {sorted(expected - combos)}, not in SOLVERS: {sorted(combos - expected)}"


def test_readme_links_resolve():
    """Every relative link of the README names a file of the repository, and every #anchor into
    ``docs/results.rst`` a section title of it."""
    text = README.read_text(encoding="utf-8")
    results = (DOCS / "results.rst").read_text(encoding="utf-8")
    titles = {line.strip() for line, under in zip(results.splitlines(), results.splitlines()[1:], strict=False)
              if re.fullmatch(r"-{3,}", under) and len(under) == len(line)}
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"\w+://", target):
            continue
        path, _, anchor = target.partition("#")
        assert (ROOT / path).exists(), f"README.md links to a missing {path}"
        if anchor:
            assert path == "docs/results.rst", f"README.md links into {path}: only docs/results.rst anchors are checked"
            assert anchor in titles, f"README.md links to a missing section {target}"


@pytest.mark.parametrize("path", [README, *PAGES], ids=["README.md", *(str(p.relative_to(DOCS)) for p in PAGES)])
def test_no_removed_names(path):
    text = path.read_text(encoding="utf-8")
    used = [name for name in REMOVED if name in text]
    assert not used, f"{path.name} still uses {used}"
