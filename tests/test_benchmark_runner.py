"""The benchmark runner's plumbing: every comparison's ``--quick`` run on the packaged data subsets.

Correctness of what the runner writes (JSON, markdown table, figure) and of the quantities
in it (each in its valid range, every declared method measured); no timing is asserted.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import benchmarks.comparisons  # noqa: E402, F401
from benchmarks.__main__ import main as cli  # noqa: E402
from benchmarks.runner import COMPARISONS, run  # noqa: E402

#: The metric column of each comparison and its valid range.
METRICS = {
    "defaults": ("score", -math.inf, math.inf),
    "kha-usps": ("subspace_last", 0.0, math.inf),
    "qm7-kpca": ("r2", 0.0, 1.0),
    "kpca-scale": ("sin2", 0.0, 1.0),
    "svm-mnist8m": ("test_error", 0.0, 1.0),
    "kcca-mnist8m": ("correlation_sum", 0.0, None),
    "mnist-halves": ("test_correlation_sum", 0.0, None),
    "mnist-machines": ("test_error", 0.0, 1.0),
    "a9a-machines": ("test_accuracy", 0.0, 1.0),
    "qm7-ridge": ("mae", 0.0, math.inf),
}


#: Comparisons whose rows are labelled with the class and solver (ours) or "scikit-learn ..." (the peers).
LABELLED = ("a9a-machines", "mnist-machines", "qm7-ridge", "svm-mnist8m")


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    return tmp_path_factory.mktemp("stores")


def test_every_comparison_is_covered():
    assert set(COMPARISONS) == set(METRICS)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_quick_run_writes_consistent_results(name, tmp_path, stores):
    lines = []
    paths = run(name, quick=True, wait=False, out=tmp_path, stores=stores, log=lines.append)
    assert set(paths) == {"json", "md", "png"}
    assert all(p.exists() and p.stat().st_size > 0 for p in paths.values())
    assert paths["json"].name == f"{name}_quick.json"
    assert not list(tmp_path.glob(".*.tmp*"))  # written in place, no temporary left behind
    assert not list(tmp_path.glob("*.partial.json"))  # the rows kept during the run, removed at its end

    payload = json.loads(paths["json"].read_text())
    assert payload["comparison"] == name
    assert payload["quick"] is True
    assert payload["machine"]["cpu_count"] >= 1
    assert payload["machine"]["versions"]["dsgd_dask"]
    assert payload["command"] == f"python -m benchmarks run {name} --quick"
    rows = payload["rows"]
    assert rows
    column, lo, hi = METRICS[name]
    k = payload["params"].get("k")
    measured = [r for r in rows if not r.get("skipped")]
    assert measured
    for r in measured:
        value = r[column]
        upper = hi if hi is not None else k
        assert lo <= value <= upper, (r["method"], value)
    # every method family declared by the comparison appears in the table
    families = {r["method"].split("(")[0].split(" ")[0] for r in rows}
    declared = {m.split("(")[0].split(" ")[0] for m in COMPARISONS[name].methods}
    assert declared <= families
    if name in LABELLED:
        # ours by class and solver, e.g. KernelRidge(solver="cg"); the peers as scikit-learn's
        for r in rows:
            assert re.match(r'Kernel\w+\(solver="\w+"\)', r["method"]) or r["method"].startswith("scikit-learn "), \
                r["method"]

    for note in payload["notes"]:  # a verdict names one of the two results it compares
        if " is ahead, by " in note:
            compared, verdict = note.rsplit(": ", 1)
            assert verdict.split(" is ahead, by ")[0] in compared, note

    table = paths["md"].read_text()
    assert COMPARISONS[name].title in table
    assert "--quick" in table
    header = "| " + " | ".join(payload["columns"].values()) + " |"
    assert header in table
    assert table.count("\n| ") == len(rows) + 1  # header and one line per row
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_budget_evaluates_every_kth_call_and_at_the_stop():
    from benchmarks.comparisons._digits import Budget, OutOfBudget

    seen = []
    budget = Budget(1e9, lambda model: seen.append(model) or {"score": float(model)}, every=3)
    for n in range(1, 8):
        budget(n, n * 10)
    assert [c["n"] for c in budget.curve] == [3, 6]
    assert [c["score"] for c in budget.curve] == [30.0, 60.0]
    assert seen == [30, 60]
    assert budget.model == 70
    assert not budget.stopped
    budget.limit = 0.0  # spent: the next call is evaluated whatever its count, then stops the fit
    with pytest.raises(OutOfBudget):
        budget(8, 80)
    assert budget.stopped
    assert budget.curve[-1]["n"] == 8
    assert budget.curve[-1]["score"] == 80.0
    assert all(c["seconds"] >= 0 for c in budget.curve)


def test_peak_memory_sees_an_allocation():
    import time

    from benchmarks.runner import PeakMemory

    with PeakMemory(interval=0.005) as mem:
        a = np.ones(64 * 2**20 // 8)  # 64 MiB, touched
        a.sum()
        # held until a sample sees it (at most 5 s): on a busy machine the sampling thread
        # may not run within the few milliseconds the allocation would otherwise live
        deadline = time.monotonic() + 5
        while mem.peak - mem.start < 48 * 2**20 and time.monotonic() < deadline:
            time.sleep(0.01)
        del a
    assert mem.peak - mem.start >= 48 * 2**20


def test_cli_lists_and_rejects_unknown_names(capsys):
    cli(["list"])
    out = capsys.readouterr().out
    assert all(name in out for name in COMPARISONS)
    with pytest.raises(SystemExit):
        cli(["run", "no-such-comparison", "--quick"])
    assert "unknown comparison" in capsys.readouterr().err


def test_unknown_comparison_raises(tmp_path):
    with pytest.raises(ValueError, match="unknown comparison"):
        run("no-such-comparison", quick=True, out=tmp_path)


@pytest.mark.parametrize("pipeline", ["mnist_halves", "mnist_machines", "a9a_machines", "qm7_ridge"])
def test_wrapped_pipelines_keep_their_command_lines(pipeline, capsys):
    import importlib

    module = importlib.import_module(f"pipelines.{pipeline}")
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])
    assert exit_info.value.code == 0
    assert "--data-home" in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["laplacian", "gaussian"])
def test_qm7_exact_ridge_on_many_rows_is_kernel_ridge(kind):
    """The in-place exact solve of ``qm7-ridge`` (for random sortings) is scikit-learn's ``KernelRidge``."""
    from scipy.spatial.distance import cdist
    from sklearn.kernel_ridge import KernelRidge as SkKernelRidge

    from dsgd_dask.datasets import load_qm7
    from dsgd_dask.datasets.coulomb import sorted_coulomb
    from pipelines.qm7_ridge import METRIC, exact_ridge_rows, kernel

    X, y = load_qm7(sample=True)
    # two random sortings of 600 molecules: more rows than one 1024-row chunk of the kernel
    F = np.vstack([sorted_coulomb(X[:600], noise=1.0, random_state=s, dtype="float64") for s in range(2)])
    target = np.tile(y[:600].astype(np.float64) - y[:600].mean(), 2)
    tests = [sorted_coulomb(X[900:950], noise=1.0, random_state=s, dtype="float64") for s in range(2, 5)]
    bandwidth = float(np.median(cdist(F[:200], F[:200], METRIC[kind])))
    pred, _ = exact_ridge_rows(F, target, tests, kind, bandwidth, alpha=1e-6)
    ref = SkKernelRidge(alpha=1e-6 * len(F), kernel="precomputed").fit(
        kernel(kind, cdist(F, F, METRIC[kind]), bandwidth), target)
    expected = np.mean([ref.predict(kernel(kind, cdist(T, F, METRIC[kind]), bandwidth)) for T in tests], axis=0)
    np.testing.assert_allclose(pred, expected, rtol=1e-8, atol=1e-8 * np.abs(expected).max())


def test_verdict_names_the_result_ahead_or_says_level():
    from benchmarks.comparisons.pipelines import _verdict

    assert _verdict(32.0, 30.0, True, "peer", "ours") == "ours is ahead, by 6.7%"
    assert _verdict(30.0, 32.0, True, "peer", "ours") == "peer is ahead, by 6.7%"
    assert _verdict(1.0, 2.0, False, "peer", "ours") == "ours is ahead, by 50.0%"  # of the loser's value
    assert _verdict(5.9701, 5.97, False, "peer", "ours") == "ours and peer are level"  # a gap that prints as 0.0 %
    assert _verdict(0.0, 0.0, False, "peer", "ours") == "ours and peer are level"
