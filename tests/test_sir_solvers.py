"""KernelSIR's solvers against the exact kernel SIR: one objective, one destination, exact budgets and records."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest

from dsgd_dask import KernelSIR, load
from dsgd_dask.datasets import load_sarcos
from dsgd_dask.estimators._solvers import RECORD_KEYS, SOLVERS
from dsgd_dask.metrics import principal_angle_sin2
from dsgd_dask.rules.sir import sliced_directions_low_rank
from dsgd_dask.rules.solutions import sliced_directions

K = 4
#: Slices of the solvers compared on one problem: the steps at their default batch of 256 rows
#: take 10 (``n_slices="auto"``), so every solver here does.
SLICES = 10


@pytest.fixture(scope="module")
def sarcos():
    """600 rows of the robot-arm data: 21 standardised joint readings and the 7 torques."""
    X, Y = load_sarcos(sample=True)
    X, Y = X[:600], Y[:600]
    return (X - X.mean(axis=0)) / X.std(axis=0), Y


@pytest.fixture(scope="module")
def exact(sarcos):
    X, Y = sarcos
    return KernelSIR(K, n_slices=SLICES, solver="exact", reg=1e-3, random_state=0).fit(X, Y[:, 0])


def _refuse(*args, **kwargs):
    raise AssertionError("something was computed")


def _aligned(F: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """``F`` with each column's sign that of the matching column of ``ref`` (directions have no sign)."""
    return F * np.sign(np.einsum("ij,ij->j", F, ref))


def test_the_solver_table():
    assert SOLVERS["KernelSIR"] == {"dsgd": ("nystroem", "fourier"), "rca": ("nystroem", "fourier"),
                                    "exact": ("nystroem",)}


# -- every row a landmark: all solvers reach the exact solution -----------------------------------
# 600 rows, one Nyström block of all of them: the features span the exact kernel SIR solution and
# their inner products are the kernel, so the problem of every solver is the exact one.

@pytest.mark.parametrize("outputs", ["one torque", "three torques"])
def test_rca_with_every_row_a_landmark_is_exact(sarcos, outputs):
    # Observed: eigenvalues within 2e-15, functions within 2e-13 of the largest value (the
    # kernel sections in float64, a Cholesky solve with condition <= (1 + reg) / reg = 1e3):
    # 1e-10 and 1e-8 bound round-off, far below any difference of problems (a ridge changed
    # by 1 % moves the eigenvalues by ~1e-4).
    X, Y = sarcos
    y = Y[:, 0] if outputs == "one torque" else Y[:, :3]
    ref = KernelSIR(K, n_slices=8, solver="exact", random_state=0).fit(X, y)
    est = KernelSIR(K, n_slices=8, solver="rca", n_features=600, random_state=0).fit(X, y)
    assert est.slicer_.kind == ref.slicer_.kind == ("quantiles" if outputs == "one torque" else "kmeans")
    assert (est.solver_, est.n_features_, est.n_iter_, ref.n_features_) == ("rca", 600, 1, 600)
    np.testing.assert_allclose(est.eigenvalues_, ref.eigenvalues_, rtol=0, atol=1e-10)
    F, Fe = est.transform(X), ref.transform(X)
    np.testing.assert_allclose(_aligned(F, Fe), Fe, rtol=0, atol=1e-8 * np.abs(Fe).max())


def test_dsgd_reaches_the_exact_subspace(sarcos, exact):
    X, Y = sarcos
    Fe = exact.transform(X)
    # With a batch of every row the step's statistics are the exact ones and the steps converge
    # to the exact solution: observed sin^2 2e-9 and eigenvalues within 4e-6 after 100 steps
    # (the float32 features' round-off); bounds 1e-6 and 1e-4.
    full = KernelSIR(K, n_slices=SLICES, batch_size=600, max_iter=100, solver="dsgd", reg=1e-3,
                     random_state=0).fit(X, Y[:, 0])
    assert (full.solver_, full.n_features_, full.n_iter_) == ("dsgd", 600, 100)
    assert principal_angle_sin2(full.transform(X), Fe) < 1e-6
    np.testing.assert_allclose(full.eigenvalues_, exact.eigenvalues_, rtol=0, atol=1e-4)
    # The stated noise of the defaults (batches of 256 rows): slice means over a batch's few rows
    # per slice, and products of the batch's statistics, bias the steps' estimates at order
    # n_slices / batch_size; more steps do not remove it (observed sin^2 5.3e-4 after 500 steps,
    # 7e-4 after 2000; eigenvalues within 1.3e-4). Bounds 5e-3 and 2e-3.
    est = KernelSIR(K, n_slices=SLICES, reg=1e-3, solver="dsgd", random_state=0).fit(X, Y[:, 0])
    assert est.solver_ == "dsgd"
    # "auto" solves these 600 rows densely: the exact solution itself
    auto = KernelSIR(K, n_slices=SLICES, reg=1e-3, random_state=0).fit(X, Y[:, 0])
    assert auto.solver_ == "exact"
    np.testing.assert_array_equal(auto.transform(X), exact.transform(X))
    assert principal_angle_sin2(est.transform(X), Fe) < 5e-3
    np.testing.assert_allclose(est.eigenvalues_, exact.eigenvalues_, rtol=0, atol=2e-3)


# -- random Fourier features: the same destination for both solvers, near the exact one ------------

def test_fourier_solvers_share_their_destination(sarcos, exact):
    X, Y = sarcos
    Fe = exact.transform(X)
    # The same seeded blocks for both solvers (one block of 256 features): "rca" solves the
    # problem on them exactly, the steps approach it within their noise (observed sin^2 4.8e-4,
    # eigenvalues within 1.1e-4 of rca; bounds 5e-3 and 2e-3, as for Nyström above).
    params = dict(features="fourier", n_features=256, reg=1e-3, random_state=0)
    rca = KernelSIR(K, n_slices=SLICES, solver="rca", **params).fit(X, Y[:, 0])
    dsgd = KernelSIR(K, n_slices=SLICES, solver="dsgd", **params).fit(X, Y[:, 0])
    assert rca.model_.features.to_dict() == dsgd.model_.features.to_dict()
    assert rca.n_features_ == dsgd.n_features_ == 256
    assert principal_angle_sin2(dsgd.transform(X), rca.transform(X)) < 5e-3
    np.testing.assert_allclose(dsgd.eigenvalues_, rca.eigenvalues_, rtol=0, atol=2e-3)
    # both against the exact solution: the Monte Carlo error of 256 random features, observed
    # sin^2 0.05 to 0.08 over three seeds for both solvers; bound 0.2
    for est in (rca, dsgd):
        assert principal_angle_sin2(est.transform(X), Fe) < 0.2
    # Against the exact solution, the Monte Carlo error of the random features: with 2048
    # features observed sin^2 6e-3 to 1e-2 and eigenvalues within 5e-3 to 1e-2 over four
    # seeds (the kernel's error falls as 1 / sqrt(n_features)); bounds 0.03 and 0.03.
    big = KernelSIR(K, n_slices=SLICES, solver="rca", features="fourier", n_features=2048, reg=1e-3,
                    random_state=0).fit(X, Y[:, 0])
    assert principal_angle_sin2(big.transform(X), Fe) < 0.03
    np.testing.assert_allclose(big.eigenvalues_, exact.eigenvalues_, rtol=0, atol=0.03)


def test_low_rank_solve_matches_the_whitened_one():
    # The rca solve (Cholesky and an SVD of M x S) against the eigendecomposition of
    # sliced_directions: observed 3e-12 (eigenvalues) and 2e-13 (directions) on a covariance of
    # condition ~1e5 with the ridge; 1e-9 bounds round-off.
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(500, 80)) @ rng.normal(size=(80, 80)) * 0.1
    cov, G = Z.T @ Z / 500, rng.normal(size=(6, 80)) * 0.05
    for k in (3, 8):  # 8 > 6 slices: directions beyond the rank are zeros
        vals, A = sliced_directions(cov, G, 1e-3, k, factor=True)
        got_vals, got_A = sliced_directions_low_rank(cov, G, 1e-3, k)
        np.testing.assert_allclose(got_vals, vals, rtol=0, atol=1e-9)
        np.testing.assert_allclose(got_A, A, rtol=0, atol=1e-9 * np.abs(A).max())


# -- the contract: budgets, records, partial_fit, lazy inputs, persistence -------------------------

@pytest.mark.parametrize(("solver", "features", "n_features", "block_size"), [
    ("dsgd", "nystroem", 300, "auto"), ("dsgd", "fourier", 384, 128),
    ("rca", "nystroem", 300, "auto"), ("rca", "fourier", 384, 128)])
def test_budgets_are_exact(sarcos, solver, features, n_features, block_size):
    X, Y = sarcos
    est = KernelSIR(2, solver=solver, features=features, n_features=n_features, block_size=block_size,
                    max_iter=20, random_state=0).fit(X, Y[:, 0])
    assert est.n_features_ == n_features == est.model_.coef.shape[0]
    with pytest.raises(ValueError, match="n_features=384 is not a multiple of block_size=256: use n_features=256"):
        KernelSIR(2, solver=solver, features=features, n_features=384, block_size=256).fit(X, Y[:, 0])
    if features == "nystroem":
        with pytest.raises(ValueError, match="n_features=700 asks for more Nyström landmarks than the"):
            KernelSIR(2, solver=solver, n_features=700).fit(X, Y[:, 0])


def test_exact_ignores_the_budget(sarcos):
    X, Y = sarcos
    est = KernelSIR(2, solver="exact", n_features=64, block_size=7, random_state=0).fit(X[:200], Y[:200, 0])
    assert est.n_features_ == 200


@pytest.mark.parametrize("solver", ["dsgd", "rca", "exact"])
def test_convergence_records(sarcos, solver):
    X, Y = sarcos
    est = KernelSIR(2, solver=solver, n_features=256, block_size=64, batch_size=100, max_iter=12,
                    random_state=0).fit(X, Y[:, 0])
    assert est.convergence_, "no records"
    for rec in est.convergence_:
        assert tuple(rec)[:len(RECORD_KEYS)] == RECORD_KEYS
        assert np.isnan(rec["measure"])
    last = est.convergence_[-1]
    assert last["iteration"] == est.n_iter_
    if solver == "dsgd":
        assert est.n_iter_ == 12
        assert last["rows"] == 12 * 100
    else:
        assert len(est.convergence_) == 1
        assert (last["iteration"], last["rows"]) == (1, 600)
    # a refit starts its records afresh
    n_records = len(est.convergence_)
    est.fit(X, Y[:, 0])
    assert len(est.convergence_) == n_records


def test_partial_fit_takes_steps_only(sarcos):
    X, Y = sarcos
    est = KernelSIR(2, n_features=128, block_size=64, batch_size=100, random_state=0)
    est.partial_fit(X, Y[:, 0])
    assert (est.solver_, est.n_iter_) == ("dsgd", 6)
    est.partial_fit(X, Y[:, 0])
    assert est.n_iter_ == 12
    assert est.convergence_[-1]["iteration"] == 12
    for solver in ("rca", "exact"):
        with pytest.raises(ValueError, match=f"solver='{solver}' needs all the data at once"):
            KernelSIR(2, solver=solver).partial_fit(X, Y[:, 0])
    # a model fitted without steps cannot continue by steps, whatever solver says now
    fitted = KernelSIR(2, solver="rca", n_features=128, random_state=0).fit(X, Y[:, 0])
    fitted.set_params(solver="dsgd")
    with pytest.raises(ValueError, match="was fitted by solver='rca', which keeps no step state"):
        fitted.partial_fit(X, Y[:, 0])


def test_wrong_solver_or_features_fail_before_work(sarcos):
    X, Y = sarcos
    Xd, yd = da.from_array(X, chunks=(100, -1)), da.from_array(Y[:, 0], chunks=100)
    with dask.config.set(scheduler=_refuse):
        with pytest.raises(ValueError, match=r"'solver' parameter of KernelSIR must be a str among .*Got 'lobpcg'"):
            KernelSIR(2, solver="lobpcg").fit(Xd, yd)
        with pytest.raises(ValueError, match=r"KernelSIR\(solver='exact'\) takes features in \['nystroem'\]"):
            KernelSIR(2, solver="exact", features="fourier").fit(Xd, yd)
        with pytest.raises(ValueError, match="n_components=5 must be <= n_slices - 1 = 4"):
            KernelSIR(5, n_slices=5, solver="rca").fit(Xd, yd)
        with pytest.raises(ValueError, match=r"'reg' parameter of KernelSIR must be a float in the range \(0\.0"):
            KernelSIR(2, solver="rca", reg=0).fit(Xd, yd)


def test_rca_on_lazy_inputs(sarcos):
    # The pass over dask chunks (a tree of partial sums) against the sums of the numpy rows: the
    # same products added in another order, observed 2e-16 (eigenvalues) and 1.5e-13 (functions
    # of size ~1); 1e-10 and 1e-8 bound round-off.
    X, Y = sarcos
    ref = KernelSIR(3, solver="rca", n_features=256, block_size=128, random_state=0).fit(X, Y[:, 1])
    got = KernelSIR(3, solver="rca", n_features=256, block_size=128, random_state=0).fit(
        da.from_array(X, chunks=(150, -1)), da.from_array(Y[:, 1], chunks=150))
    np.testing.assert_allclose(got.eigenvalues_, ref.eigenvalues_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(got.transform(X), ref.transform(X), rtol=0, atol=1e-8)


@pytest.mark.parametrize(("solver", "features"), [("rca", "nystroem"), ("rca", "fourier"), ("exact", "nystroem")])
def test_models_of_every_solver_save_and_load(sarcos, tmp_path, solver, features):
    X, Y = sarcos
    est = KernelSIR(2, solver=solver, features=features, n_features=128, random_state=0).fit(X[:300], Y[:300, 0])
    back = load(est.save(tmp_path / "sir.zarr"))
    assert (back.solver_, back.n_features_, back.n_iter_) == (solver, est.n_features_, 1)
    np.testing.assert_array_equal(back.transform(X), est.transform(X))
    np.testing.assert_array_equal(back.eigenvalues_, est.eigenvalues_)
    np.testing.assert_array_equal(back.slicer_.assign(Y[:, 0]), est.slicer_.assign(Y[:, 0]))
    with pytest.raises(ValueError, match="keeps no step state"):
        back.set_params(solver="auto").partial_fit(X, Y[:, 0])


def test_auto_slices_follow_the_rows_of_the_means(sarcos):
    # one slice per 25 rows a slice mean is taken over, from 10 to 200: all 600 rows for the
    # dense solve and the one pass, a batch for the steps
    from dsgd_dask.estimators.sir import auto_slices

    assert [auto_slices(n) for n in (5, 256, 600, 4500, 5000, 10**7)] == [10, 10, 24, 180, 200, 200]
    X, Y = sarcos
    y = Y[:, 0]
    assert KernelSIR(2, solver="exact", reg=1e-3, random_state=0).fit(X, y).slicer_.n_slices == 24
    assert KernelSIR(2, solver="rca", n_features=128, reg=1e-3, random_state=0).fit(X, y).slicer_.n_slices == 24
    steps = KernelSIR(2, solver="dsgd", n_features=128, max_iter=2, reg=1e-3, random_state=0)
    assert steps.fit(X, y).slicer_.n_slices == 10
    assert steps.set_params(batch_size=1000).fit(X, y).slicer_.n_slices == 24  # a batch of every row
    # a number is used as given
    assert KernelSIR(2, n_slices=7, solver="exact", reg=1e-3, random_state=0).fit(X, y).slicer_.n_slices == 7


def test_auto_solver_beyond_the_dense_size(sarcos, tmp_path, monkeypatch):
    # beyond the dense solve's rows: one pass of moments while they fit, the steps beyond them
    # or with a checkpoint (which only the steps write)
    from dsgd_dask.estimators import sir as sir_module

    X, Y = sarcos
    monkeypatch.setattr(sir_module, "AUTO_EXACT_ROWS", 500)
    assert KernelSIR(2, reg=1e-3, random_state=0).fit(X, Y[:, 0]).solver_ == "rca"
    steps = KernelSIR(2, reg=1e-3, max_iter=2, checkpoint=tmp_path / "ckpt.zarr", random_state=0)
    assert steps.fit(X, Y[:, 0]).solver_ == "dsgd"
    monkeypatch.setattr(sir_module, "AUTO_RCA_FEATURES", 256)
    assert KernelSIR(2, reg=1e-3, max_iter=2, random_state=0).fit(X, Y[:, 0]).solver_ == "dsgd"
