"""Nyström feature blocks and the full-data subspace solver against dense references."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from conftest import KERNEL_CASES, kernel_id

from dsgd_dask import KernelPCA, load
from dsgd_dask.engine import driver
from dsgd_dask.engine.checkpoint import Checkpointer, fit_fingerprint
from dsgd_dask.engine.passes import covariance_request, covariance_times, reduce_pass
from dsgd_dask.engine.steps import StepState
from dsgd_dask.features import KernelSpec, RandomFeatures, kernel_matrix
from dsgd_dask.features.nystroem import NystroemFeatures, kernel_sections
from dsgd_dask.metrics import principal_angle_sin2
from dsgd_dask.rules.subspace import (
    contraction,
    nystroem_extension,
    orthonormal,
    residual_sin2,
    ritz_step,
    subspace_sin2,
)
from dsgd_dask.streams.batches import chunk_subset
from dsgd_dask.streams.inputs import DataView

#: Every kernel family at a bandwidth keeping kernel values of order one (the float32
#: tolerances below are absolute).
SECTION_CASES = [spec.with_bandwidth(2.0) for spec in KERNEL_CASES]


def _dense_spectrum(seed: int, n: int, decay: float):
    """A random generator, and a dense SPD matrix ``C = Q diag(decay^i) Q^T`` with its eigenpairs."""
    rng = np.random.default_rng(seed)
    Q = np.linalg.qr(rng.normal(size=(n, n)))[0]
    lam = decay ** np.arange(n)
    return rng, Q, lam, (Q * lam) @ Q.T


# -- the rule -----------------------------------------------------------------------------------

def test_ritz_steps_converge_at_the_predicted_rate():
    # A dense SPD matrix with known spectrum: the top-k Ritz space approaches the top-k
    # eigenvectors geometrically, sin^2 shrinking by about (lam_{p+1}/lam_k)^2 per step.
    n, k, p = 200, 4, 8
    rng, Q, lam, C = _dense_spectrum(0, n, 0.8)
    V = orthonormal(rng.normal(size=(n, p)))
    errs = []
    for _ in range(12):
        R, vals, V = ritz_step(V, C @ V)
        errs.append(subspace_sin2(R[:, :k], Q[:, :k]))
    rate = (lam[p] / lam[k - 1]) ** 2
    assert errs[-1] < 1e-8
    observed = (errs[8] / errs[4]) ** (1 / 4)
    assert observed <= 1.5 * rate  # at least as fast as the bound predicts (up to constants)
    np.testing.assert_allclose(vals[:k], lam[:k], rtol=1e-8)
    assert contraction(vals, k) == pytest.approx((vals[-1] / vals[k - 1]) ** 2)


@pytest.mark.parametrize("seed", [3, 4])
def test_nystroem_extension_is_a_step_ahead_of_the_ritz_vectors(seed):
    # From the one product C V: the top of C V (V^T C V)^+ V^T C lies in span(C V), is as
    # accurate as the Ritz vectors of the next block (a product later) and its eigenvalues
    # are at most C's. Once the block's smallest Ritz value has settled (six steps here),
    # "residual estimate x contraction" estimates its error to a factor of two from above
    # and four from below (before that it can be far too small: the solver starts from a warm start
    # iterated to convergence on a sample).
    n, k, p = 300, 5, 12
    rng, Q, lam, C = _dense_spectrum(seed, n, 0.85)
    V = orthonormal(rng.normal(size=(n, p)))
    for _ in range(6):
        _, _, V = ritz_step(V, C @ V)
    CV = C @ V
    U, vals_ext = nystroem_extension(V, CV, k)
    R, vals, V_next = ritz_step(V, CV)
    R_next, _, _ = ritz_step(V_next, C @ V_next)
    e_ritz = subspace_sin2(R[:, :k], Q[:, :k])
    e_ext = subspace_sin2(U, Q[:, :k])
    e_next = subspace_sin2(R_next[:, :k], Q[:, :k])
    assert e_ext < 0.2 * e_ritz
    assert e_ext <= 2 * e_next
    estimate = residual_sin2(V, CV, R, vals, k) * contraction(vals, k)
    assert 0.25 * estimate <= e_ext <= 2 * estimate
    np.testing.assert_allclose(U.T @ U, np.eye(k), atol=1e-12)
    P = orthonormal(CV)
    assert np.linalg.norm(U - P @ (P.T @ U)) < 1e-10
    assert np.all(vals_ext <= lam[:k] * (1 + 1e-12))
    np.testing.assert_allclose(vals_ext, lam[:k], rtol=1e-6)


def test_nystroem_extension_needs_rank_k():
    # C of rank 3 cannot give 5 directions: None, and the solver falls back on Ritz vectors
    rng = np.random.default_rng(0)
    B = rng.normal(size=(50, 3))
    C = B @ B.T
    V = orthonormal(rng.normal(size=(50, 8)))
    assert nystroem_extension(V, C @ V, 5) is None
    assert nystroem_extension(V, C @ V, 3) is not None


def test_chunk_subset_is_seeded_and_covers_the_rows():
    sizes = [100] * 37 + [40]
    a = chunk_subset(sizes, 1000, seed=7, key=1)
    assert np.array_equal(a, chunk_subset(sizes, 1000, seed=7, key=1))
    assert not np.array_equal(a, chunk_subset(sizes, 1000, seed=7, key=2))
    assert np.all(np.diff(a) > 0)
    held = np.asarray(sizes)[a].sum()
    assert held >= 1000
    assert held - np.asarray(sizes)[a].max() < 1000  # no more chunks than needed
    assert len(chunk_subset(sizes, 10**6, seed=7, key=1)) == len(sizes)


def test_residual_estimate_tracks_the_true_error():
    # Once the block holds the top p directions, the residual estimate of the top-k Ritz
    # space's sin^2 is within a small factor of the true error, pass after pass.
    n, k, p = 300, 5, 12
    rng, Q, _, C = _dense_spectrum(3, n, 0.85)
    V = orthonormal(rng.normal(size=(n, p)))
    pairs = []
    for _ in range(10):
        CV = C @ V
        R, vals, V_next = ritz_step(V, CV)
        pairs.append((residual_sin2(V, CV, R, vals, k), subspace_sin2(R[:, :k], Q[:, :k])))
        V = V_next
    for est, true in pairs[3:]:
        assert true / 4 <= est <= 4 * true, (est, true)


def test_orthonormal_keeps_width_on_dependent_columns():
    rng = np.random.default_rng(1)
    A = rng.normal(size=(30, 4))
    A = np.hstack([A, A[:, :2]])  # two dependent columns
    Q = orthonormal(A)
    assert Q.shape == (30, 6)
    np.testing.assert_allclose(Q.T @ Q, np.eye(6), atol=1e-12)
    assert subspace_sin2(Q[:, :4], np.linalg.qr(A[:, :4])[0]) < 1e-12  # round-off of 1 - cos^2


# -- Nyström features ---------------------------------------------------------------------------

@pytest.mark.parametrize("spec", SECTION_CASES, ids=kernel_id)
def test_kernel_sections_match_the_exact_kernel(spec):
    rng = np.random.default_rng(2)
    X, L = rng.normal(size=(50, 6)), rng.normal(size=(20, 6))
    f = NystroemFeatures(spec, L, 20, 0, "float64", center=X.mean(axis=0))
    lt, lsq, _ = f._pages()[0]
    K = kernel_sections(spec, f.prepare(X), lt, lsq)
    np.testing.assert_allclose(K, kernel_matrix(spec, X, L), rtol=1e-9, atol=1e-12)
    f32 = NystroemFeatures(spec, L, 20, 0, "float32", center=X.mean(axis=0))
    lt, lsq, _ = f32._pages()[0]
    K32 = kernel_sections(spec, f32.prepare(X), lt, lsq)
    assert K32.dtype == np.float32
    np.testing.assert_allclose(K32, kernel_matrix(spec, X, L), atol=2e-5)


@pytest.mark.parametrize("spec", [SECTION_CASES[0], SECTION_CASES[4], SECTION_CASES[7]], ids=kernel_id)
def test_nystroem_block_on_all_rows_reproduces_the_kernel(spec):
    # With every row a landmark, z(x).z(y) is the kernel itself on those rows.
    X = np.random.default_rng(3).normal(size=(60, 4))
    f = NystroemFeatures(spec, X, 60, 0, "float64")
    Z = f.transform(X, 0, 1)
    np.testing.assert_allclose(Z @ Z.T, kernel_matrix(spec, X), atol=1e-7)


def test_fold_and_unfold_are_the_whitening():
    X = np.random.default_rng(4).normal(size=(80, 5))
    f = NystroemFeatures(KernelSpec("gaussian", 2.0), X[:48], 16, 0, "float64", center=X.mean(axis=0))
    A = np.random.default_rng(5).normal(size=(48, 3))
    np.testing.assert_allclose(f.raw_transform(X, 0, 3) @ f.fold(A), f.transform(X, 0, 3) @ A, rtol=1e-10)
    G = f.raw_transform(X, 0, 3).T @ X[:, :3]
    np.testing.assert_allclose(f.unfold(G), f.transform(X, 0, 3).T @ X[:, :3], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", ["nystroem", "fourier"])
@pytest.mark.parametrize("center", [True, False])
@pytest.mark.parametrize("lazy", [False, True])
def test_covariance_pass_is_the_dense_covariance_product(kind, center, lazy):
    rng = np.random.default_rng(6)
    X = rng.normal(size=(700, 5)).astype(np.float32) + 3.0
    spec = KernelSpec("gaussian", 2.5)
    if kind == "nystroem":
        f = NystroemFeatures(spec, X[:64].astype(np.float64), 32, 0, "float32", center=X.mean(axis=0))
    else:
        f = RandomFeatures(spec, 5, 32, 0, "float32", center=X.mean(axis=0))
    V = orthonormal(rng.normal(size=(64, 4)))
    Z = f.transform(X, 0, 2).astype(np.float64)
    mean = Z.mean(axis=0)
    Zc = Z - mean if center else Z
    dense = Zc.T @ (Zc @ V) / len(Z)
    shift = f.raw_transform(X[:100], 0, 2).mean(axis=0)
    data = da.from_array(X, chunks=(128, 5)) if lazy else X
    sums = covariance_times(reduce_pass(DataView(data), covariance_request(f, 2, V, shift)), f, V, shift, center)
    assert sums.n == 700
    scale = np.abs(dense).max()
    np.testing.assert_allclose(sums.cov_times, dense, atol=2e-5 * scale)
    np.testing.assert_allclose(sums.mean, mean, atol=2e-6)


# -- the estimator against dense references -----------------------------------------------------

def _rows_read(est) -> list:
    """The rows each pass of a fit read (the records' ``rows`` count all the rows read so far)."""
    return np.diff([0] + [e["rows"] for e in est.convergence_]).tolist()


@pytest.fixture(scope="module")
def mnist_exact(mnist_small):
    X, Xt = mnist_small
    exact = KernelPCA(6, solver="exact", random_state=0).fit(X)
    return X, Xt, exact, exact.transform(Xt)


@pytest.mark.parametrize("k", [3, 5])
def test_default_fit_matches_exact_kernel_pca(mnist_exact, k):
    # 3000 MNIST digits: the default (Nyström blocks, full-data passes) lands on the exact
    # kernel PCA subspace to far below the 1e-3 that separates the components
    # (eigengap after 3 and 5 checked in test_baselines), eigenvalues to 1%.
    X, Xt, exact, E = mnist_exact
    est = KernelPCA(k, random_state=0).fit(X)
    assert est.solver_ == "subspace"  # what "auto" runs in fit
    assert principal_angle_sin2(est.transform(Xt), E[:, :k]) < 1e-3
    np.testing.assert_allclose(est.eigenvalues_, exact.eigenvalues_[:k], rtol=1e-2)
    assert est.convergence_[-1]["measure"] <= est.tol
    assert 1 <= est.n_iter_ == len([r for r in _rows_read(est) if r == X.shape[0]])
    assert [e["iteration"] for e in est.convergence_ if not e["stage"]] == list(range(1, est.n_iter_ + 1))


def test_converged_single_block_equals_nystroem_pca(mnist_small):
    # One block of m landmarks, converged: the same problem the rca solver solves exactly
    # (same seeded landmark rows), so the subspaces agree to the convergence tolerance.
    X, Xt = mnist_small
    m = 400
    ny = KernelPCA(4, solver="rca", n_features=m, random_state=3).fit(X)
    est = KernelPCA(4, n_features=m, block_size=m, compute_dtype="float64", tol=1e-12, max_iter=60,
                        random_state=3).fit(X)
    assert np.array_equal(np.sort(est.model_.features.landmarks, axis=0),
                          np.sort(ny.model_.features.landmarks, axis=0))
    assert principal_angle_sin2(est.transform(Xt), ny.transform(Xt)) < 1e-8
    np.testing.assert_allclose(est.eigenvalues_, ny.eigenvalues_, rtol=1e-8)


def test_fourier_subspace_equals_random_feature_pca(mnist_small):
    # Fourier blocks with the subspace solver: linear PCA of the same random features.
    X, Xt = mnist_small
    rf = KernelPCA(3, solver="rca", features="fourier", n_features=512, block_size=128, random_state=5).fit(X)
    est = KernelPCA(3, features="fourier", n_features=512, block_size=128, tol=1e-12, max_iter=100,
                        random_state=5).fit(X)
    assert principal_angle_sin2(est.transform(Xt), rf.transform(Xt)) < 1e-6
    np.testing.assert_allclose(est.eigenvalues_, rf.eigenvalues_, rtol=1e-5)


@pytest.mark.parametrize("kernel", ["laplacian", "matern", "arccos"])
def test_other_kernels_match_exact_kernel_pca(kernel, blobs):
    exact = KernelPCA(3, solver="exact", kernel=kernel, random_state=0).fit(blobs)
    est = KernelPCA(3, kernel=kernel, random_state=0).fit(blobs)
    # 600 rows: the landmark blocks hold every row, so only the block-wise whitening differs
    assert principal_angle_sin2(est.transform(blobs), exact.transform(blobs)) < 1e-3


def test_uncentred_fit_matches_uncentred_exact(blobs):
    exact = KernelPCA(3, solver="exact", center=False, random_state=0).fit(blobs)
    est = KernelPCA(3, center=False, random_state=0).fit(blobs)
    assert principal_angle_sin2(est.transform(blobs), exact.transform(blobs)) < 1e-3
    np.testing.assert_allclose(est.eigenvalues_, exact.eigenvalues_, rtol=1e-2)


# -- streams, persistence, resumption -------------------------------------------------------------

@pytest.fixture(scope="module")
def mnist_store(tmp_path_factory, mnist_small):
    path = str(tmp_path_factory.mktemp("mnist") / "X.zarr")
    zarr.create_array(store=path, data=mnist_small[0].astype(np.float32), chunks=(250, 784))
    return path


def test_lazy_fit_same_model_on_every_local_scheduler(mnist_store, mnist_exact):
    params = dict(n_components=3, n_features=1024, block_size=512, random_state=2)
    with dask.config.set(scheduler="sync"):
        ref = KernelPCA(**params).fit(da.from_zarr(mnist_store))
    with dask.config.set(scheduler="threads"):
        thr = KernelPCA(**params).fit(da.from_zarr(mnist_store))
    assert np.array_equal(ref.model_.coef, thr.model_.coef)
    assert np.array_equal(ref.eigenvalues_, thr.eigenvalues_)
    _, Xt, _, E = mnist_exact
    assert principal_angle_sin2(ref.transform(Xt), E[:, :3]) < 1e-3


def test_save_and_load_nystroem_model(mnist_small, tmp_path):
    X, Xt = mnist_small
    est = KernelPCA(3, n_features=1024, block_size=512, random_state=0).fit(X[:1500])
    est.save(tmp_path / "m.zarr")
    back = load(tmp_path / "m.zarr")
    assert np.array_equal(back.transform(Xt), est.transform(Xt))
    assert back.get_params() == est.get_params()


def test_resume_after_an_interrupted_pass(mnist_store, tmp_path, monkeypatch):
    params = dict(n_components=3, n_features=1024, block_size=512, tol=0.0, max_iter=4, random_state=4)
    ckpt = str(tmp_path / "ckpt.zarr")
    reference = KernelPCA(**params).fit(da.from_zarr(mnist_store))
    calls = {"n": 0}
    real = driver.reduce_pass

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("interrupted")
        return real(*args, **kwargs)

    monkeypatch.setattr(driver, "reduce_pass", failing)  # the pass driver's one reduction
    with pytest.raises(KeyboardInterrupt):
        KernelPCA(**params, checkpoint=ckpt).fit(da.from_zarr(mnist_store))
    monkeypatch.setattr(driver, "reduce_pass", real)
    assert zarr.open_group(ckpt, mode="r").attrs["n_passes"] == 2
    resumed = KernelPCA(**params, checkpoint=ckpt).fit(da.from_zarr(mnist_store))
    assert resumed.n_iter_ == reference.n_iter_ == 4
    assert np.array_equal(resumed.model_.coef, reference.model_.coef)
    assert np.array_equal(resumed.eigenvalues_, reference.eigenvalues_)


def test_partial_fit_takes_steps_from_the_first_call(mnist_small):
    # "auto" streams by doubly stochastic steps, from the first call on: one pass of steps
    # over the rows given, the blocks whitened together, the budget exactly.
    X, Xt = mnist_small
    est = KernelPCA(3, n_features=1024, block_size=512, random_state=0)
    est.partial_fit(X[:1500])
    assert est.solver_ == "dsgd"
    assert est._params["whitening"] == "joint"
    assert est.n_iter_ == -(-1500 // 256)
    assert est.convergence_[-1]["iteration"] == est.n_iter_
    first = est.transform(Xt)
    est.partial_fit(X[1500:])
    assert est.n_iter_ == 2 * -(-1500 // 256)
    assert est.n_features_ == 1024
    assert np.isfinite(est.transform(Xt)).all()
    assert principal_angle_sin2(est.transform(Xt), first) < 0.1  # steps refine, they do not wander off


@pytest.mark.parametrize("solver", ["subspace", "rca", "exact"])
def test_partial_fit_refuses_the_solvers_that_do_not_stream(blobs, solver):
    with pytest.raises(ValueError, match=f"solver='{solver}' needs all the data at once"):
        KernelPCA(2, solver=solver).partial_fit(blobs)


def test_partial_fit_does_not_continue_a_fit_of_another_solver(blobs):
    # solver="auto" fits by passes and streams by steps: steps on a model of passes would
    # switch algorithm silently, so they are refused
    est = KernelPCA(2, n_features=256, random_state=0).fit(blobs)
    assert est.solver_ == "subspace"
    with pytest.raises(ValueError, match="fitted by solver='subspace'"):
        est.partial_fit(blobs)


@pytest.mark.parametrize(("params", "error", "match"), [
    (dict(features="landmarks"), ValueError, "features"),
    (dict(solver="lanczos"), ValueError, "solver"),
    # the steps are "dsgd"
    (dict(solver="oja"), ValueError, "'solver' parameter of KernelPCA must be a str among .*Got 'oja'"),
    (dict(solver="exact", features="fourier"), ValueError, "features"),
    (dict(tol=-1.0), ValueError, "tol"),
    (dict(n_oversamples=-2), ValueError, "n_oversamples"),
    (dict(n_oversamples=1.5), TypeError, "n_oversamples"),
    (dict(block_size="big"), TypeError, "block_size"),
])
def test_bad_solver_parameters(blobs, params, error, match):
    with pytest.raises(error, match=match):
        KernelPCA(2, **params).fit(blobs)


def test_too_many_components_for_the_landmarks(blobs):
    with pytest.raises(ValueError, match="n_components"):
        KernelPCA(700).fit(blobs)


# -- budgets -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("params", "blocks"), [
    (dict(n_features=1000), (1, 1000)),
    (dict(n_features=6000), (2, 3000)),
    (dict(n_features=10_000), (4, 2500)),  # 3 blocks do not divide it: 4
    (dict(n_features=1000, block_size=250), (4, 250)),
    (dict(n_features=256, solver="dsgd"), (1, 256)),  # once 1024 features: a block of the default size
    (dict(n_features=3000, solver="dsgd"), (3, 1000)),
    (dict(n_features=1000, features="fourier"), (4, 250)),
    (dict(n_features=1024, features="fourier"), (4, 256)),
    (dict(n_features=100, features="fourier", solver="dsgd"), (1, 100)),
    (dict(n_features=1000, solver="rca"), (1, 1000)),
    (dict(n_features=4099, solver="rca"), (1, 4099)),  # one set of landmarks: no blocks to split into
    (dict(n_features=768, features="fourier", solver="rca"), (3, 256)),
    (dict(n_features=5, solver="exact"), (1, 20_000)),  # every row a landmark: the budget is ignored
])
def test_budgets_are_met_exactly(params, blocks):
    p = KernelPCA(2, **params)._check_params(20_000)
    assert (p["n_blocks"], p["block_size"]) == blocks


@pytest.mark.parametrize(("params", "match"), [
    (dict(n_features=1000, block_size=64), "not a multiple of block_size=64: use n_features=960 or 1024"),
    (dict(n_features=4099), "does not split into equal blocks of at most 4096: use n_features=4098 or 4100"),
    (dict(n_features=1031, solver="dsgd"), "at most 1024: use n_features=1030 or 1032"),
    (dict(n_features=20_001), "n_features=20001 exceeds the 20000 rows"),
    (dict(n_features=20_001, solver="rca"), "n_features=20001 exceeds the 20000 rows"),
])
def test_budgets_that_cannot_be_met_are_refused(params, match):
    with pytest.raises(ValueError, match=match):
        KernelPCA(2, **params)._check_params(20_000)


@pytest.mark.parametrize("solver", ["subspace", "dsgd"])
def test_fitted_model_has_the_budget(blobs, solver):
    est = KernelPCA(2, solver=solver, n_features=256, max_iter=5, random_state=0).fit(blobs)
    assert est.n_features_ == est.model_.coef.shape[0] == 256


def test_lazy_transform_carries_the_model_once(mnist_small):
    # A Nyström model carries its landmark rows; the lazy transform puts it in the graph
    # as one key, not into each of the 30 chunk tasks.
    import pickle

    X, Xt = mnist_small
    est = KernelPCA(3, n_features=1024, block_size=512, random_state=0).fit(X[:1500])
    Z = est.transform(da.from_array(Xt.astype(np.float32), chunks=(34, 784)))
    assert Z.numblocks[0] == 30
    graph_bytes = len(pickle.dumps(dict(Z.__dask_graph__())))
    model_bytes = len(pickle.dumps(est.model_))
    assert graph_bytes < 2 * model_bytes + len(pickle.dumps(Xt.astype(np.float32)))
    eager = est.transform(Xt.astype(np.float32))
    # float32 features: chunks of 34 rows against slices of 1024 may round differently
    np.testing.assert_allclose(Z.compute(), eager, rtol=0, atol=1e-6 * np.abs(eager).max())


# -- sampled stages before the passes ------------------------------------------------------------

@pytest.fixture(scope="module")
def mixture_rows():
    """200,000 rows of an 8-cluster Gaussian mixture in 6-D: enough rows for sampled stages."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(8, 6)) * 2.0
    return (centres[rng.integers(8, size=200_000)] + rng.normal(size=(200_000, 6))).astype(np.float32)


def test_sampled_stages_then_passes_reach_the_converged_subspace(mixture_rows):
    # The warm start's 10,000 rows are 1/20 of the data, so a stage of 40,000 rows (whole
    # 32,768-row slabs: 65,536) runs before the passes. The fit lands on the converged
    # subspace of the same features (same seed: same landmarks) within the error it
    # estimates, which is below tol.
    X = mixture_rows
    n = X.shape[0]
    params = dict(n_components=4, n_features=512, block_size=256, compute_dtype="float64", random_state=0)
    est = KernelPCA(**params).fit(X)
    read = _rows_read(est)
    stages = [e for e, rows in zip(est.convergence_, read, strict=True) if rows < n]
    assert stages
    assert stages == [e for e in est.convergence_ if e["stage"]]
    assert stages[0]["iteration"] == 0
    assert stages[0]["rows"] >= 40_000
    assert all(rows <= n // 4 + 32_768 for rows in read[:len(stages)])
    last = est.convergence_[-1]
    assert read[-1] == n
    assert last["measure"] <= est.tol
    assert est.n_iter_ == len(est.convergence_) - len(stages)
    ref = KernelPCA(**params, tol=1e-13, max_iter=30).fit(X)
    assert ref.convergence_[-1]["measure"] <= 1e-13
    Xs = X[:5000]
    assert principal_angle_sin2(est.transform(Xs), ref.transform(Xs)) <= last["measure"]
    np.testing.assert_allclose(est.eigenvalues_, ref.eigenvalues_, rtol=1e-4)


def test_sampled_stages_on_a_zarr_store_are_the_same_on_any_scheduler(mixture_rows, tmp_path):
    # Stages over seeded subsets of the store's chunks: the same model, bit for bit, on
    # the threaded and the synchronous scheduler (the cluster case is in test_distributed).
    X = mixture_rows
    zarr.create_array(store=tmp_path / "x.zarr", data=X, chunks=(8192, 6))
    params = dict(n_components=3, n_features=512, block_size=256, random_state=2)
    with dask.config.set(scheduler="threads"):
        a = KernelPCA(**params).fit(da.from_zarr(str(tmp_path / "x.zarr")))
    with dask.config.set(scheduler="sync"):
        b = KernelPCA(**params).fit(da.from_zarr(str(tmp_path / "x.zarr")))
    rows = _rows_read(a)
    assert rows == _rows_read(b)
    assert 40_000 <= rows[0] < 40_000 + 8192
    assert rows[-1] == X.shape[0]
    assert np.array_equal(a.model_.coef, b.model_.coef)
    assert np.array_equal(a.eigenvalues_, b.eigenvalues_)


@pytest.mark.parametrize("interrupt_at", [2, 3])
def test_resume_after_a_stage_or_a_pass(mixture_rows, tmp_path, monkeypatch, interrupt_at):
    # One stage and two passes, interrupted in the first pass (call 2) or the second
    # (call 3): the resumed fit takes only the calls left and ends on the same model.
    params = dict(n_components=3, n_features=512, block_size=256, tol=0.0, max_iter=2, random_state=4)
    ckpt = str(tmp_path / "ckpt.zarr")
    reference = KernelPCA(**params).fit(mixture_rows)
    assert len(reference.convergence_) == 3
    assert reference.convergence_[0]["rows"] < mixture_rows.shape[0]
    calls = {"n": 0, "stop": interrupt_at}
    real = driver.reduce_pass

    def counting(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == calls["stop"]:
            raise KeyboardInterrupt("interrupted")
        return real(*args, **kwargs)

    monkeypatch.setattr(driver, "reduce_pass", counting)
    with pytest.raises(KeyboardInterrupt):
        KernelPCA(**params, checkpoint=ckpt).fit(mixture_rows)
    assert zarr.open_group(ckpt, mode="r").attrs["n_passes"] == interrupt_at - 1
    calls.update(n=0, stop=None)
    resumed = KernelPCA(**params, checkpoint=ckpt).fit(mixture_rows)
    assert calls["n"] == 3 - (interrupt_at - 1)
    assert resumed.n_iter_ == reference.n_iter_ == 2
    assert np.array_equal(resumed.model_.coef, reference.model_.coef)
    assert np.array_equal(resumed.eigenvalues_, reference.eigenvalues_)
    assert np.array_equal(resumed.model_.offset, reference.model_.offset)
    # the records: those saved, then the passes left (the seconds are the runs' own)
    untimed = [[{k: v for k, v in e.items() if k != "seconds"} for e in est.convergence_]
               for est in (resumed, reference)]
    assert untimed[0] == untimed[1]


def test_checkpoint_of_the_old_pass_loop_is_refused(blobs, tmp_path):
    # the subspace loop before the pass driver saved its state with the step engine's
    # checkpointer (a StepState and extra arrays): refused, not misread
    params = dict(n_components=2, n_features=256, tol=0.0, max_iter=2, random_state=4)
    ckpt = tmp_path / "ckpt.zarr"
    est = KernelPCA(**params, checkpoint=str(ckpt))
    old = Checkpointer(ckpt, 100, fit_fingerprint("KernelPCA", {k: v for k, v in est.get_params().items()
                                                                if k not in ("verbose", "checkpoint_every")},
                                                  blobs.shape))
    old.seed = 4
    old.save(StepState(np.zeros((256, 14)), 1, 0.0), {"lam": np.ones(2), "mean": np.zeros(256),
                                                      "done": np.array([False]), "stage": np.array([0, 600, 1]),
                                                      "shift": np.zeros(256)})
    with pytest.raises(ValueError, match="written by steps, not by the pass driver"):
        est.fit(blobs)
