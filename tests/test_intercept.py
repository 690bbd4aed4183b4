"""KernelRidge's intercept: the targets' mean on the fit's sample, added to a function fitted to the rest."""

from __future__ import annotations

import numpy as np
import pytest

from dsgd_dask import KernelRidge, load
from dsgd_dask.estimators.machines import KernelRidge as Ridge

SOLVERS = ["exact", "cg", "dsgd"]


@pytest.fixture(scope="module")
def problem():
    """Targets far from zero: 40 plus a smooth function of two inputs and noise 0.3; 800 rows to fit, 300 to test."""
    rng = np.random.default_rng(0)

    def f(X):
        return 40.0 + np.sin(2 * X[:, 0]) + X[:, 1] ** 2 / 3

    X = rng.uniform(-3, 3, size=(800, 2))
    Xt = rng.uniform(-3, 3, size=(300, 2))
    return X, f(X) + 0.3 * rng.normal(size=len(X)), Xt


def _params(solver: str) -> dict:
    params = {"alpha": 1e-3, "solver": solver, "random_state": 0}
    if solver != "exact":
        params.update(n_features=256, block_size=128)
    if solver == "dsgd":
        params["max_iter"] = 100
    return params


@pytest.mark.parametrize("solver", SOLVERS)
def test_the_intercept_is_the_fit_of_the_shifted_targets(problem, solver):
    # fit_intercept=True fits y - b with b the targets' mean on the fit's sample (every row: fewer
    # than 10,000), and predicts f + b: the fit without an intercept on y - b, plus b
    X, y, Xt = problem
    params = _params(solver)
    if solver == "cg":
        # float64 features and block-Jacobi: float32 passes on these 2-D inputs stall at a relative
        # residual near 1e-4 (the features' round-off), where two runs differ by that noise
        params.update(compute_dtype="float64", preconditioner="block", tol=1e-8)
    est = KernelRidge(**params).fit(X, y)
    b = est.intercept_
    assert isinstance(b, float)
    assert b == pytest.approx(y.mean(), rel=1e-12)
    shifted = KernelRidge(fit_intercept=False, **params).fit(X, y - b)
    assert shifted.intercept_ == 0.0
    if solver == "cg":
        # the passes shift the right-hand side by the feature sums, sum z (y - b) = sum z y - b sum z:
        # float64 sums of terms 40 times those of y - b, round-off near 1e-14 of them, carried
        # through the same conjugate gradients (measured 4e-10 of the function after 101 passes)
        f = shifted.predict(Xt)
        np.testing.assert_allclose(est.predict(Xt) - b, f, rtol=0, atol=1e-8 * np.abs(f).max())
    else:  # the same targets, subtracted in float64 in the same order: the same bits
        np.testing.assert_array_equal(est.predict(Xt), shifted.predict(Xt) + b)


@pytest.mark.parametrize("solver", SOLVERS)
def test_far_from_the_data_the_prediction_is_the_intercept(problem, solver):
    # the Gaussian kernel's sections vanish far from every landmark: f = 0 there, so the model
    # predicts the intercept, where the fit without one predicts 0
    X, y, _ = problem
    far = np.full((3, 2), 1e3)
    est = KernelRidge(**_params(solver)).fit(X, y)
    np.testing.assert_array_equal(est.predict(far), np.full(3, est.intercept_))
    none = KernelRidge(fit_intercept=False, **_params(solver)).fit(X, y)
    np.testing.assert_array_equal(none.predict(far), np.zeros(3))


def test_the_intercept_lifts_a_shrunk_fit(problem):
    # with a large ridge the function shrinks to 0: towards the mean with an intercept, towards 0 without
    X, y, Xt = problem
    yt = 40.0 + np.sin(2 * Xt[:, 0]) + Xt[:, 1] ** 2 / 3
    with_b = KernelRidge(alpha=1.0, solver="exact", random_state=0).fit(X, y)
    without = KernelRidge(alpha=1.0, solver="exact", fit_intercept=False, random_state=0).fit(X, y)
    assert with_b.score(Xt, yt) > 0.0 > without.score(Xt, yt)


def test_saved_streamed_and_refitted_intercepts(problem, tmp_path):
    X, y, Xt = problem
    params = {"alpha": 1e-3, "n_features": 256, "block_size": 128, "random_state": 0}
    est = KernelRidge(solver="cg", **params).fit(X, y)
    back = load(est.save(tmp_path / "m.zarr"))
    assert back.fit_intercept is True
    assert back.intercept_ == est.intercept_
    np.testing.assert_array_equal(back.predict(Xt), est.predict(Xt))
    # a stream takes its intercept from the first call's sample and keeps it
    streamed = KernelRidge(**params).partial_fit(X[:400], y[:400])
    first = streamed.intercept_
    assert first == pytest.approx(y[:400].mean(), rel=1e-12)
    streamed.partial_fit(X[400:], y[400:] + 100.0)
    assert streamed.intercept_ == first
    # a refit without an intercept forgets it
    est.set_params(fit_intercept=False).fit(X, y)
    assert est.intercept_ == 0.0
    assert "intercept" not in est._params
    np.testing.assert_array_equal(est.model_.offset, np.zeros(1))


@pytest.mark.parametrize("solver", ["cg", "dsgd"])
def test_the_callback_models_carry_the_intercept(problem, solver):
    X, y, Xt = problem
    seen = []
    est = KernelRidge(**_params(solver)).fit(X, y, callback=lambda n, model: seen.append(model))
    # the last callback's model is the fitted function (the fitted model holds the same
    # coefficients, folded into kernel sections for Nyström features: round-off apart)
    np.testing.assert_allclose(seen[-1].evaluate(Xt)[:, 0], est.predict(Xt), rtol=1e-9)


def test_stores_written_before_the_intercept_load_without_one(problem):
    X, y, Xt = problem
    est = KernelRidge(fit_intercept=False, **_params("cg")).fit(X, y)
    attrs, arrays = est._fitted_payload()
    del attrs["params"]["fit_intercept"]
    back = Ridge._from_payload(attrs, arrays)
    assert back.fit_intercept is False
    assert back.intercept_ == 0.0
    np.testing.assert_array_equal(back.predict(Xt), est.predict(Xt))


def test_a_bad_fit_intercept_is_refused(problem):
    X, y, _ = problem
    with pytest.raises(ValueError, match="fit_intercept"):
        KernelRidge(fit_intercept="yes").fit(X, y)
