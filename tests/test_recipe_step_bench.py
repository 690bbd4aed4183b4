"""The step-throughput benchmark of the block-preconditioned machines: its quick run's plumbing."""

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quick_recipe_step_run_writes_consistent_results(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_recipe_step", ROOT / "benchmarks" / "bench_recipe_step.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_recipe_step"] = bench
    spec.loader.exec_module(bench)
    bench.main(["--quick", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "recipe_step_quick.json").read_text())
    p = bench.QUICK
    assert saved["quick"] is True
    assert [r["active_blocks"] for r in saved["rows"]] == list(p.active)
    for r in saved["rows"]:
        assert r["features"] == (r["active_blocks"] + 1) * p.block_size
        assert r["step_seconds"] > 0
        parts = r["limit_parts"]
        assert set(parts) == {"features_gemm", "cos", "function_values", "block_moment", "solve", "total"}
        assert parts["total"] == sum(v for k, v in parts.items() if k != "total")
        assert r["limit_seconds"] == parts["total"]
        assert r["fraction"] == r["limit_seconds"] / r["step_seconds"]
    assert saved["square_gemm_flops"] > 0
    assert "KernelLogisticRegression" in saved["solver"]
