"""KernelRidge(alpha="auto"): the held-out choice against dense references, numeric alpha untouched, saved models."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from sklearn.kernel_ridge import KernelRidge as SkKernelRidge
from sklearn.utils._param_validation import InvalidParameterError

import dsgd_dask.estimators.machines as machines
from dsgd_dask import KernelRidge, kernel_matrix, load
from dsgd_dask.cli._commands import parse_set
from dsgd_dask.engine.ridge import (
    AUTO_ALPHA_DECADES,
    AlphaPath,
    BlockJacobi,
    LeaveOneOutPath,
    PrimalRidgePath,
    feature_path,
    held_out_split,
    relative_score,
    search_alpha,
)
from dsgd_dask.features.kernels import parse_kernel
from dsgd_dask.features.nystroem import NystroemFeatures

SOLVERS = ["cg", "exact", "dsgd"]


@pytest.fixture(scope="module")
def problem():
    """A smooth function of two inputs with noise 0.3: 1,200 rows to fit, 600 noiseless rows to test."""
    rng = np.random.default_rng(0)

    def f(X):
        return np.sin(2 * X[:, 0]) + X[:, 1] ** 2 / 3

    X = rng.uniform(-3, 3, size=(1200, 2))
    Xt = rng.uniform(-3, 3, size=(600, 2))
    return X, f(X) + 0.3 * rng.normal(size=len(X)), Xt, f(Xt)


def _params(solver):
    params = {"solver": solver, "random_state": 0}
    if solver != "exact":
        params.update(n_features=256, block_size=128)
    if solver == "dsgd":
        params["max_iter"] = 200
    return params


def _no_selection(*args, **kwargs):
    raise AssertionError("a numeric alpha must not run the held-out selection")


# -- the selection's parts against dense references --------------------------------------------

def test_held_out_split():
    assert held_out_split(10) == 8
    assert held_out_split(2) == 1
    assert held_out_split(3) == 2
    with pytest.raises(ValueError, match="at least 2 rows"):
        held_out_split(1)


def test_search_alpha_finds_the_maximum_and_refines():
    calls = []

    def score(a):  # a concave score of log10(a), highest at a = 10^-3.4
        calls.append(a)
        return -(np.log10(a) + 3.4) ** 2

    found = search_alpha(score, 2.0)
    assert len(calls) == len(AUTO_ALPHA_DECADES) + 2
    assert np.all(np.diff(found.grid) > 0)
    np.testing.assert_allclose(found.grid[np.argmax(found.scores)], found.alpha)
    # the decade best is 2e-3 (log 10 -2.7), then the half decades 2e-3.5 (-3.2) and 2e-2.5 (-2.2)
    np.testing.assert_allclose(found.alpha, 2.0 * 10 ** -3.5)
    # ties go to the larger alpha; failed solves (-inf) are never chosen
    flat = search_alpha(lambda a: -np.inf if a < 1e-6 else 0.0, 1.0, refine=False)
    assert flat.alpha == pytest.approx(0.1)
    with pytest.raises(np.linalg.LinAlgError, match="finite"):
        search_alpha(lambda a: -np.inf, 1.0)
    with pytest.raises(ValueError, match="positive kernel scale"):
        search_alpha(lambda a: 0.0, 0.0)


def test_primal_path_against_a_dense_solve():
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(300, 20))
    Y = Z @ rng.normal(size=(20, 2)) + rng.normal(size=(300, 2))
    L = rng.normal(size=(20, 20))
    P = L @ L.T
    path = PrimalRidgePath(Z, Y, 240, P, ridge=1e-3)
    for alpha in (1e-3, 1e-1, 10.0):
        A = np.linalg.solve(Z[:240].T @ Z[:240] / 240 + alpha * P + 1e-3 * np.eye(20), Z[:240].T @ Y[:240] / 240)
        F = Z[240:] @ A
        ref = np.mean(1 - np.mean((Y[240:] - F) ** 2, axis=0) / Y.var(axis=0))
        # float64 normal equations of condition below 1e6: agreement to 1e-9
        assert path(alpha) == pytest.approx(ref, abs=1e-9)
    assert relative_score(Y[:, :1], Y[:, :1], np.zeros(1)) == 0.0  # no variance: minus the mean square error


def test_leave_one_out_path_is_scikit_learns_kernel_ridge_refitted_without_each_row():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(60, 3))
    Y = np.column_stack([np.sin(X[:, 0]), X[:, 1] * X[:, 2]]) + 0.1 * rng.normal(size=(60, 2))
    K = kernel_matrix(parse_kernel("gaussian", 1.5), X)
    path = LeaveOneOutPath(K, Y)
    for alpha in (1e-6, 1e-3, 1e-1):
        F = np.empty_like(Y)
        for i in range(60):
            rest = np.arange(60) != i
            # the same penalty alpha n on the n - 1 other rows
            sk = SkKernelRidge(alpha=alpha * 60, kernel="precomputed").fit(K[np.ix_(rest, rest)], Y[rest])
            F[i] = sk.predict(K[i:i + 1, rest])[0]
        ref = np.mean(1 - np.mean((Y - F) ** 2, axis=0) / Y.var(axis=0))
        # K's condition number is below 1e7 at alpha = 1e-6: the eigendecomposition's and the
        # 60 Cholesky solves' round-off agree to 1e-8
        assert path(alpha) == pytest.approx(ref, abs=1e-8)
    # interpolating rows (alpha 0 on a kernel matrix of full rank) have no leave-one-out fit of their own
    assert path(0.0) == -np.inf


def test_nystroem_path_is_the_passes_objective_in_the_sections_basis():
    # the whitened blocks' system (C + alpha W^T K_LL W + ridge W^T W) A = b of the passes and the
    # sections' (C_s + alpha K_LL + ridge I) c = b_s have the same solution f = z A = r c
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 2))
    y = np.cos(X[:, 0]) + X[:, 1] + 0.1 * rng.normal(size=400)
    features = NystroemFeatures(parse_kernel("gaussian", 1.0), X[rng.choice(400, 96, replace=False)], 32, 0,
                                "float64")
    path, scale = feature_path(features, 3, X, y, 320)
    assert scale == pytest.approx(1.0)
    Z = features.transform(X, 0, 3)
    W = np.zeros((96, 96))
    for j in range(3):
        W[j * 32:(j + 1) * 32, j * 32:(j + 1) * 32] = features.normalization[j]
    K = features.landmark_kernel(0, 96, 3)
    for alpha in (1e-2, 1.0):
        system = Z[:320].T @ Z[:320] / 320 + alpha * W.T @ K @ W + path.floor * W.T @ W
        A = np.linalg.solve(system, Z[:320].T @ y[:320] / 320)
        ref = 1 - np.mean((y[320:] - Z[320:] @ A) ** 2) / y.var()
        # both systems have condition numbers near 1e14 (the precision ridge alone holds the redundant
        # directions up); where alpha holds the function, the two bases agree to 1e-9, and a wrong
        # penalty (the identity for K_LL, or no W) moves the score by more than 1e-3
        assert path(alpha) == pytest.approx(ref, abs=1e-6)
        wrong = Z[:320].T @ Z[:320] / 320 + alpha * np.eye(96)
        A = np.linalg.solve(wrong, Z[:320].T @ y[:320] / 320)
        assert abs(path(alpha) - (1 - np.mean((y[320:] - Z[320:] @ A) ** 2) / y.var())) > 1e-3


# -- the estimator ------------------------------------------------------------------------------

@pytest.mark.parametrize("solver", SOLVERS)
def test_numeric_alpha_is_bit_for_bit_the_fit_without_selection(problem, solver, monkeypatch):
    X, y, Xt, _ = problem
    # a numeric alpha never reaches the selection ...
    for name in ("feature_path", "search_alpha", "LeaveOneOutPath", "held_out_split"):
        monkeypatch.setattr(machines, name, _no_selection)
    numeric = KernelRidge(alpha=3e-4, **_params(solver)).fit(X, y)
    assert numeric.alpha_ == 3e-4
    assert not hasattr(numeric, "alpha_grid_")
    assert not hasattr(numeric, "alpha_scores_")
    monkeypatch.undo()
    # ... and "auto" whose selection returns that value fits the same coefficients, bit for bit
    monkeypatch.setattr(machines, "search_alpha", lambda score, scale: AlphaPath(3e-4, np.array([3e-4]),
                                                                                np.array([0.0])))
    auto = KernelRidge(**_params(solver)).fit(X, y)
    assert auto.alpha_ == 3e-4
    assert np.array_equal(auto.model_.coef, numeric.model_.coef)
    assert np.array_equal(auto.predict(Xt), numeric.predict(Xt))


@pytest.mark.parametrize("solver", SOLVERS)
def test_auto_alpha_is_the_best_of_the_grid_on_held_out_rows(problem, solver):
    X, y, Xt, yt = problem
    est = KernelRidge(**_params(solver)).fit(X, y)
    assert est.get_params()["alpha"] == "auto"
    assert est.alpha_grid_.ndim == 1
    assert est.alpha_scores_.shape == est.alpha_grid_.shape
    assert np.all(np.diff(est.alpha_grid_) > 0)
    assert est.alpha_ == est.alpha_grid_[np.nanargmax(est.alpha_scores_)]
    assert est._params["alpha"] == est.alpha_
    # the choice is that of the estimator's own problem: a fit at each decade of the grid does no better
    # on the test rows than 0.98 of the chosen fit (the held-out rows are 240 noisy rows, not the test set)
    chosen = est.score(Xt, yt)
    for d in (-8, -6, -4, -2):
        fixed = KernelRidge(alpha=10.0 ** d, **_params(solver)).fit(X, y).score(Xt, yt)
        assert chosen >= 0.98 * fixed, (d, chosen, fixed)


def test_auto_alpha_beats_the_former_default_where_it_was_too_large(problem):
    X, y, Xt, yt = problem
    auto = KernelRidge(**_params("cg")).fit(X, y)
    old = KernelRidge(alpha=1e-4, **_params("cg")).fit(X, y)
    assert auto.alpha_ < 1e-4
    assert auto.score(Xt, yt) > old.score(Xt, yt) + 0.05


def test_auto_alpha_is_the_same_on_dask_chunks(problem):
    X, y, _, _ = problem
    ref = KernelRidge(**_params("cg")).fit(X, y)
    lazy = KernelRidge(**_params("cg")).fit(da.from_array(X, chunks=(100, -1)), da.from_array(y, chunks=100))
    assert np.array_equal(lazy.alpha_scores_, ref.alpha_scores_)
    assert lazy.alpha_ == ref.alpha_


def test_partial_fit_keeps_a_fixed_alpha(problem):
    X, y, _, _ = problem
    params = {"n_features": 256, "block_size": 128, "random_state": 0}
    streamed = KernelRidge(**params).partial_fit(X, y)
    fixed = KernelRidge(alpha=machines.STREAM_ALPHA, **params).partial_fit(X, y)
    assert streamed.alpha_ == machines.STREAM_ALPHA
    assert not hasattr(streamed, "alpha_grid_")
    assert np.array_equal(streamed.model_.coef, fixed.model_.coef)
    # a fit chooses; a partial_fit after it continues at the chosen value
    est = KernelRidge(**_params("dsgd")).fit(X, y)
    chosen = est.alpha_
    est.partial_fit(X[:256], y[:256])
    assert est.alpha_ == chosen
    assert est._rule.alpha == chosen


def test_refit_forgets_the_earlier_choice(problem):
    X, y, _, _ = problem
    est = KernelRidge(**_params("cg")).fit(X, y)
    est.set_params(alpha=1e-3).fit(X, y)
    assert est.alpha_ == 1e-3
    assert not hasattr(est, "alpha_grid_")


@pytest.mark.parametrize("solver", ["cg", "exact"])
def test_saved_model_keeps_the_choice(problem, solver, tmp_path):
    X, y, Xt, _ = problem
    est = KernelRidge(**_params(solver)).fit(X, y)
    est.save(tmp_path / "m.zarr")
    back = load(tmp_path / "m.zarr")
    assert back.get_params()["alpha"] == "auto"
    assert back.alpha_ == est.alpha_
    assert np.array_equal(back.alpha_grid_, est.alpha_grid_)
    assert np.array_equal(back.alpha_scores_, est.alpha_scores_)
    np.testing.assert_array_equal(back.predict(Xt), est.predict(Xt))
    numeric = KernelRidge(alpha=1e-3, **_params(solver)).fit(X, y)
    numeric.save(tmp_path / "n.zarr")
    back = load(tmp_path / "n.zarr")
    assert back.alpha_ == 1e-3
    assert not hasattr(back, "alpha_grid_")


def test_bad_alpha_and_the_command_line():
    X = np.zeros((10, 2))
    with pytest.raises(InvalidParameterError, match="alpha"):
        KernelRidge(alpha="best").fit(X, X[:, 0])
    with pytest.raises(InvalidParameterError, match="alpha"):
        KernelRidge(alpha=-1.0).fit(X, X[:, 0])
    assert parse_set(["alpha=auto"], KernelRidge().get_params()) == {"alpha": "auto"}
    assert parse_set(["alpha=1e-3"], KernelRidge().get_params()) == {"alpha": 1e-3}


def test_block_jacobi_raises_a_floor_that_does_not_hold_a_block_up():
    # a block whose float32 sums left an eigenvalue below zero: the first factorisation fails and the
    # floor becomes float32's eps times the mean eigenvalue, which holds it up
    block = np.diag([1.0, 1.0, -1e-9])
    pre = BlockJacobi(block[None], 0.0)
    floor = np.finfo(np.float32).eps * np.trace(block) / 3
    R = np.array([[1.0], [2.0], [3.0]])
    np.testing.assert_allclose(pre(R), R / (np.diag(block) + floor)[:, None], rtol=1e-12)
    # a block the floor holds up is factored as before: the floor alpha itself
    np.testing.assert_allclose(BlockJacobi(np.eye(3)[None], 0.5)(R), R / 1.5, rtol=1e-15)
