"""The demo pipeline: DSGD kernel PCA on 1-D Gaussian data converges to the Hermite eigenfunctions at O(1/t)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import zarr
from conftest import ROOT


def _pipeline():
    spec = importlib.util.spec_from_file_location("kpca_1d_gaussian", ROOT / "pipelines" / "kpca_1d_gaussian.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_default_pipeline_potential_falls_as_one_over_t(tmp_path):
    summary = _pipeline().run(tmp_path, verbose=False)
    # O(1/t): a log-log slope of about -1 over the second half of the run, and over the last decade
    assert -1.5 < summary["loglog_slope_second_half"] < -0.7
    assert -1.5 < summary["loglog_slope_last_decade"] < -0.6
    assert summary["final_potential"] < 1e-3
    # the eigenvalues E[h_i^2] against the closed form sqrt(2a/A) B^i
    np.testing.assert_allclose(summary["eigenvalues"], summary["eigenvalues_analytic"], rtol=0.06)
    # the outputs a user gets: the Zarr data store, the figure, the JSON summary
    assert zarr.open_array(str(tmp_path / "data.zarr"), mode="r").shape == (summary["n_samples"], 1)
    assert (tmp_path / "kpca_1d_gaussian.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "kpca_1d_gaussian.json").read_text())["final_potential"] == summary["final_potential"]
