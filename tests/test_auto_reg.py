"""``reg="auto"`` of KernelCCA and KernelSIR: the held-out split, its scores against direct computations on the
rows, the choice, a numeric ``reg`` untouched by it, streams, saved models."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

import dsgd_dask.estimators.sir as sir_module
import dsgd_dask.estimators.two_view as two_view_module
from dsgd_dask import KernelCCA, KernelSIR, load
from dsgd_dask._threads import one_blas_thread
from dsgd_dask.baselines._moments import FourierMap
from dsgd_dask.baselines.rcca import PairedMap
from dsgd_dask.engine.passes import SLAB_ROWS
from dsgd_dask.engine.rca import pooled_moments, rca_moments, split_moments
from dsgd_dask.estimators._auto import (
    FALLBACK,
    best_index,
    held_out_mask,
    held_out_view,
    log_grid,
    split_chunks,
)
from dsgd_dask.features import RandomFeatures
from dsgd_dask.features.kernels import KernelSpec
from dsgd_dask.metrics import paired_correlations
from dsgd_dask.rules.sir import sliced_directions_low_rank
from dsgd_dask.rules.solutions import ridge_cca
from dsgd_dask.streams.inputs import DataView
from dsgd_dask.streams.slices import Slicer


def _two_views(n=600, seed=0):
    rng = np.random.default_rng(seed)
    t = rng.uniform(-2, 2, size=n)
    X = np.c_[np.cos(t), np.sin(t)] + 0.1 * rng.normal(size=(n, 2))
    Y = np.c_[t**2, rng.normal(size=n)] + 0.1 * rng.normal(size=(n, 2))
    return X, Y


def _regression(n=800, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    return X, np.sin(2 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=n)


# -- the split and the grid -------------------------------------------------------------------------
def test_split_chunks_cut_at_group_edges():
    chunks = (7, 30, 3, 60)
    parts = split_chunks(chunks, 20)
    assert sum(parts) == 100
    edges = set(np.cumsum(parts).tolist())
    assert set(np.cumsum(chunks).tolist()) <= edges  # the input's boundaries stay boundaries
    assert {20, 40, 60, 80} <= edges  # and the groups' edges are boundaries
    assert split_chunks((100,), 10) == (10,) * 10


def test_held_out_mask_by_group_index():
    chunks = split_chunks((100,), 10)
    assert np.flatnonzero(held_out_mask(chunks, 10)).tolist() == [2, 7]
    # chunks cut differently but holding the same rows out
    other = split_chunks((25, 75), 10)
    rows = np.repeat(held_out_mask(other, 10), other)
    assert np.array_equal(rows, np.repeat(held_out_mask(chunks, 10), chunks))
    assert held_out_mask((5, 5), 100).tolist() == [False, True]  # one of each at least
    with pytest.raises(ValueError, match="at least 2 row chunks"):
        held_out_mask((5,), 10)


@pytest.mark.parametrize("chunk_rows", [SLAB_ROWS, 1000, 777])
def test_held_out_rows_do_not_depend_on_the_chunks(chunk_rows):
    X = np.arange(2 * (SLAB_ROWS + 350), dtype=np.float64).reshape(-1, 2)
    a, fit_a, held_a = held_out_view(DataView(X))
    b, fit_b, held_b = held_out_view(DataView(da.from_array(X, chunks=(chunk_rows, -1))))
    assert np.array_equal(_rows_of(a, held_a), _rows_of(b, held_b))
    assert np.array_equal(_rows_of(a, fit_a), _rows_of(b, fit_b))
    assert len(_rows_of(a, held_a)) == pytest.approx(len(X) / 5, rel=0.05)
    assert np.array_equal(a.data.compute(), X)
    assert len(np.intersect1d(fit_a, held_a)) == 0
    assert len(fit_a) + len(held_a) == a.data.numblocks[0]
    with pytest.raises(ValueError, match="at least 50 rows"):
        held_out_view(DataView(X[:10]))


def test_log_grid_and_best_index():
    grid = log_grid(1e-8, 1.0, 2)
    assert len(grid) == 17
    assert np.isclose(grid[0], 1e-8)
    assert np.isclose(grid[-1], 1.0)
    assert np.allclose(np.diff(np.log10(grid)), 0.5)
    assert best_index([0.1, 0.5, 0.5, np.nan]) == 2  # ties: the larger ridge
    with pytest.raises(ValueError, match="finite"):
        best_index([np.nan, np.inf])


# -- the moments of the split ---------------------------------------------------------------------
def _fourier_pair(X, Y, seed=0, m=64):
    specs = [KernelSpec("gaussian", 1.0), KernelSpec("gaussian", 2.0)]
    maps = [
        FourierMap(RandomFeatures(s, v.shape[1], m, seed + i, "float64"), 2)
        for i, (s, v) in enumerate(zip(specs, (X, Y), strict=True))
    ]
    return PairedMap(maps[0], maps[1], X.shape[1])


def _rows_of(chunked, chunks):
    return np.concatenate([chunked.data.blocks[int(i)].compute() for i in chunks])


def test_split_moments_are_those_of_their_rows_and_pool_to_all():
    X, Y = _two_views(500)
    XY = np.hstack([X, Y])
    fmap = _fourier_pair(X, Y)
    shift = fmap(XY[:100]).mean(axis=0)
    chunked, fit_chunks, held_chunks = held_out_view(DataView(XY))
    fit, held, run = split_moments(chunked, fmap, shift, fit_chunks, held_chunks)
    for part, chunks in ((fit, fit_chunks), (held, held_chunks)):
        z = fmap(_rows_of(chunked, chunks))
        assert part.n == len(z)
        assert np.allclose(part.mean, z.mean(axis=0), atol=1e-13)
        assert np.allclose(part.cov, np.cov(z.T, bias=True), atol=1e-13)
    n, mean, cov, _ = rca_moments(DataView(XY), fmap, shift)
    pooled = pooled_moments(fit, held)
    assert pooled.n == n == 500
    assert np.allclose(pooled.mean, mean, atol=1e-13)
    assert np.allclose(pooled.cov, cov, atol=1e-13)
    assert len(run.records) == 1
    assert run.records[0]["rows"] == 500


# -- the scores against the rows ------------------------------------------------------------------
def test_cca_scores_are_held_out_correlations():
    X, Y = _two_views(600)
    XY = np.hstack([X, Y])
    fmap = _fourier_pair(X, Y)
    mx = fmap.fx.n_features
    chunked, fit_chunks, held_chunks = held_out_view(DataView(XY))
    fit, held, _ = split_moments(chunked, fmap, fmap(XY[:100]).mean(axis=0), fit_chunks, held_chunks)
    grid = np.array([1e-6, 1e-3, 1e-1])
    k = 3
    with one_blas_thread():
        scores = two_view_module.cca_held_out_scores(fit, held, mx, grid, k)
    z_fit, z_held = fmap(_rows_of(chunked, fit_chunks)), fmap(_rows_of(chunked, held_chunks))
    for reg, score in zip(grid, scores, strict=True):
        cov = np.cov(z_fit.T, bias=True)
        _, A, B = ridge_cca(cov[:mx, :mx], cov[mx:, mx:], cov[:mx, mx:], reg, k)
        direct = paired_correlations(z_held[:, :mx] @ A, z_held[:, mx:] @ B).sum()
        assert score == pytest.approx(direct, abs=1e-8)
    assert scores[0] != scores[-1]


def test_sir_scores_are_held_out_shares_of_variance():
    X, y = _regression(800)
    slicer = Slicer.fit(y, 10, 0)
    spec = KernelSpec("gaussian", 2.0)
    sliced = sir_module.SlicedMap(FourierMap(RandomFeatures(spec, 4, 64, 1, "float64"), 2), slicer, 4)
    Xy = np.c_[X, y]
    chunked, fit_chunks, held_chunks = held_out_view(DataView(Xy))
    fit, held, _ = split_moments(chunked, sliced, sliced(Xy[:100]).mean(axis=0), fit_chunks, held_chunks)
    M, k = 128, 2
    grid = np.array([1e-6, 1e-3, 1e-1])
    with one_blas_thread():
        scores = sir_module.sir_held_out_scores(fit, held, M, grid, k)
    rows = _rows_of(chunked, held_chunks)
    labels = slicer.assign(rows[:, 4:])
    z_held = sliced.fmap(rows[:, :4])
    for reg, score in zip(grid, scores, strict=True):
        _, A = sliced_directions_low_rank(fit.cov[:M, :M], sir_module._slice_factor(fit, M), reg, k)
        f = z_held @ A
        f -= f.mean(axis=0)
        means = np.stack(
            [f[labels == s].mean(axis=0) if (labels == s).any() else np.zeros(k) for s in range(slicer.n_slices)]
        )
        between = (means[labels] ** 2).mean(axis=0)  # the variance of the slice means over the rows
        assert score == pytest.approx((between / (f**2).mean(axis=0)).sum(), abs=1e-8)


# -- the estimators -------------------------------------------------------------------------------
def test_defaults_are_auto():
    assert KernelCCA().reg == "auto"
    assert KernelSIR().reg == "auto"
    with pytest.raises(ValueError, match="reg"):
        KernelCCA(reg="median").fit(*_two_views(100))
    with pytest.raises(ValueError, match="reg"):
        KernelSIR(reg=-1.0).fit(*_regression(100))


def _no_split(*args, **kwargs):
    raise AssertionError("a numeric reg chose on held-out rows")


@pytest.mark.parametrize("solver", ["rca", "lobpcg", "exact", "dsgd"])
def test_numeric_reg_never_touches_the_split(monkeypatch, solver):
    X, Y = _two_views(300)
    kw = {"n_components": 2, "solver": solver, "random_state": 0, "n_features": 128, "max_iter": 40}
    if solver == "exact":
        del kw["n_features"]
    monkeypatch.setattr(two_view_module, "held_out_view", _no_split)
    cca = KernelCCA(reg=1e-3, **kw).fit(X, Y)
    assert cca.reg_ == 1e-3
    assert cca._params["reg"] == 1e-3
    assert cca.reg_grid_.tolist() == [1e-3]
    assert np.isnan(cca.reg_scores_).all()
    monkeypatch.setattr(sir_module, "held_out_view", _no_split)
    sir_solver = "dsgd" if solver == "lobpcg" else solver
    X, y = _regression(300)
    sir = KernelSIR(reg=1e-3, **{**kw, "solver": sir_solver}).fit(X, y)
    assert sir.reg_ == 1e-3
    assert sir._params["reg"] == 1e-3


def test_numeric_rca_is_the_direct_solve_bit_for_bit():
    """A numeric reg solves on the moments of one pass over all the rows, as ``randomized_cca`` alone does."""
    X, Y = _two_views(400)
    cca = KernelCCA(n_components=2, solver="rca", features="fourier", n_features=128, reg=1e-3, random_state=0).fit(
        X, Y
    )
    XY = np.hstack([X, Y])
    J = 128 // cca.models_[0].features.block_size
    fmap = PairedMap(FourierMap(cca.models_[0].features, J), FourierMap(cca.models_[1].features, J), 2)
    sample = two_view_module.sample_rows(DataView(XY), two_view_module.N_SAMPLE, cca.seed_)
    shift = fmap(sample[:1000]).mean(axis=0, dtype=np.float64)
    _, _mean, cov, _ = rca_moments(DataView(XY), fmap, shift)
    rho, A, _ = ridge_cca(cov[:128, :128], cov[128:, 128:], cov[:128, 128:], 1e-3, 2)
    assert np.array_equal(cca.correlations_, rho)
    assert np.array_equal(cca.models_[0].coef, A / np.sqrt(J))


@pytest.mark.parametrize("features", ["fourier", "nystroem"])
def test_rca_auto_solves_on_all_rows_with_the_best_ridge(features):
    X, Y = _two_views(600)
    # float64 features: the two fits add the same rows in other groups, which float32 features
    # would leave apart by their round-off times the conditioning of a small ridge
    kw = {
        "n_components": 2,
        "solver": "rca",
        "features": features,
        "n_features": 128,
        "compute_dtype": "float64",
        "random_state": 0,
    }
    auto = KernelCCA(**kw).fit(X, Y)
    assert auto.reg_grid_.shape == auto.reg_scores_.shape == (17,)
    assert auto.reg_ == auto.reg_grid_[np.nanargmax(auto.reg_scores_)]
    assert auto.reg_scores_.max() > auto.reg_scores_.min()  # the grid matters on these data
    fixed = KernelCCA(reg=auto.reg_, **kw).fit(X, Y)
    # the pooled moments of the two parts are the moments of all the rows, up to round-off
    assert np.allclose(auto.transform(X[:50]), fixed.transform(X[:50]), atol=1e-6)
    assert np.allclose(auto.correlations_, fixed.correlations_, atol=1e-9)
    assert len(auto.convergence_) == 1
    assert auto.convergence_[0]["rows"] == 600


def test_iterative_auto_is_the_numeric_fit_at_the_chosen_ridge():
    X, Y = _two_views(600)
    auto = KernelCCA(n_components=2, n_features=256, random_state=0).fit(X, Y)  # lobpcg
    assert auto.solver_ == "lobpcg"
    assert auto.reg_ in auto.reg_grid_
    fixed = KernelCCA(n_components=2, n_features=256, reg=auto.reg_, random_state=0).fit(X, Y)
    assert np.array_equal(auto.models_[0].coef, fixed.models_[0].coef)
    assert np.array_equal(auto.correlations_, fixed.correlations_)
    X, y = _regression(600)
    auto = KernelSIR(n_components=2, solver="dsgd", n_features=256, max_iter=60, random_state=0).fit(X, y)
    fixed = KernelSIR(n_components=2, solver="dsgd", n_features=256, max_iter=60, reg=auto.reg_,
                      random_state=0).fit(X, y)
    assert np.array_equal(auto.models_[0].coef, fixed.models_[0].coef)


def test_sir_rca_auto_beats_a_far_ridge_on_held_out_rows():
    X, y = _regression(1600, seed=1)
    auto = KernelSIR(n_components=2, solver="rca", n_features=256, random_state=0).fit(X[:1200], y[:1200])
    assert auto.reg_ == auto.reg_grid_[np.nanargmax(auto.reg_scores_)]
    scores = {}
    for name, model in (
        ("auto", auto),
        (
            "far",
            KernelSIR(n_components=2, solver="rca", n_features=256, reg=1.0, random_state=0).fit(X[:1200], y[:1200]),
        ),
    ):
        Z, Zt = model.transform(X[:1200]), model.transform(X[1200:])
        coef = np.linalg.lstsq(np.c_[np.ones(len(Z)), Z], y[:1200], rcond=None)[0]
        resid = y[1200:] - np.c_[np.ones(len(Zt)), Zt] @ coef
        scores[name] = 1 - resid.var() / y[1200:].var()  # test R^2 of a linear regression on the directions
    assert scores["auto"] > scores["far"] + 0.1, scores


def test_partial_fit_keeps_a_fixed_ridge():
    X, Y = _two_views(400)
    stream = KernelCCA(n_components=2, n_features=128, random_state=0).partial_fit(X[:200], Y[:200])
    # the first batch chooses as fit does with steps on it; later batches keep that value
    batch = KernelCCA(n_components=2, solver="dsgd", n_features=128, random_state=0, max_iter=1).fit(X[:200], Y[:200])
    assert stream.reg_ == batch.reg_
    assert np.array_equal(stream.reg_scores_, batch.reg_scores_)
    stream.partial_fit(X[200:], Y[200:])
    assert stream._params["reg"] == stream.reg_ == batch.reg_
    assert stream._rule.reg == batch.reg_
    model = KernelCCA(n_components=2, solver="dsgd", n_features=128, max_iter=40, random_state=0).fit(X, Y)
    chosen = model.reg_
    model.partial_fit(X, Y)
    assert model._params["reg"] == chosen == model.reg_
    assert model._rule.reg == chosen
    sir = KernelSIR(n_components=2, n_features=128, random_state=0).partial_fit(*_regression(300))
    assert sir.reg_ in sir.reg_grid_
    assert sir._params["reg"] == sir.reg_


def test_too_few_rows_take_the_fallback():
    X, Y = _two_views(40)
    for solver in ("rca", "lobpcg"):
        cca = KernelCCA(n_components=1, solver=solver, n_features=16, random_state=0).fit(X, Y)
        assert cca.reg_ == FALLBACK
        assert np.isnan(cca.reg_scores_).all()
    sir = KernelSIR(n_components=1, solver="rca", n_slices=4, n_features=16, random_state=0).fit(*_regression(40))
    assert sir.reg_ == FALLBACK


@pytest.mark.parametrize("solver", ["rca", "dsgd"])
def test_saved_models_keep_the_choice(tmp_path, solver):
    X, y = _regression(500)
    sir = KernelSIR(n_components=2, solver=solver, n_features=128, max_iter=40, random_state=0).fit(X, y)
    sir.save(tmp_path / "sir")
    back = load(tmp_path / "sir")
    assert back.reg == "auto"
    assert back.reg_ == sir.reg_
    assert np.array_equal(back.reg_grid_, sir.reg_grid_)
    assert np.array_equal(back.reg_scores_, sir.reg_scores_)
    assert np.array_equal(back.transform(X[:20]), sir.transform(X[:20]))
    X, Y = _two_views(500)
    cca = KernelCCA(n_components=2, solver=solver, n_features=128, max_iter=40, random_state=0).fit(X, Y)
    cca.save(tmp_path / "cca")
    back = load(tmp_path / "cca")
    assert back.reg_ == cca.reg_
    assert np.array_equal(back.reg_scores_, cca.reg_scores_)
