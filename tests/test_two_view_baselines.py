"""The dense and one-pass solvers of the two-view estimators against independent references: dense CCA/SVD/SIR
solves, exact kernel CCA, SVD and SIR (``solver="exact"``), randomized (Fourier, Nyström) kernel CCA
(``KernelCCA(solver="rca")``), and the slices of a response."""

from __future__ import annotations

import pickle

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.linalg
import xarray as xr
import zarr
from sklearn.utils.estimator_checks import parametrize_with_checks

from dsgd_dask import KernelCCA, KernelSIR, KernelSVD
from dsgd_dask._threads import one_blas_thread
from dsgd_dask.baselines import MAX_TWO_VIEW_SAMPLES
from dsgd_dask.datasets import load_mnist, load_sarcos
from dsgd_dask.features import RandomFeatures, kernel_matrix
from dsgd_dask.features.nystroem import inverse_sqrt
from dsgd_dask.metrics import principal_angle_sin2
from dsgd_dask.rules.solutions import (
    between_slice_covariance,
    between_slice_factor,
    cross_svd,
    ridge_cca,
    slice_sums,
    sliced_directions,
)
from dsgd_dask.streams.batches import view_seed
from dsgd_dask.streams.slices import Slicer


def _refuse(*args, **kwargs):
    raise AssertionError("something was computed")


def _centred(K):
    return K - K.mean(axis=0) - K.mean(axis=1)[:, None] + K.mean()


def _deflated(K):
    """``H^T K H`` with ``H`` an orthonormal basis of the vectors orthogonal to ``1`` (the null space of ``K~``)."""
    H = scipy.linalg.null_space(np.ones((1, K.shape[0])))
    return H, H.T @ K @ H


def _top_eigvals(lhs, rhs, k):
    """The ``k`` largest generalised eigenvalues by scipy, on one BLAS thread (as the library's dense
    solves: multithreaded LAPACK on a few hundred rows can be 100x slower when the cores are busy)."""
    with one_blas_thread():
        return scipy.linalg.eigh(lhs, rhs, eigvals_only=True)[::-1][:k]


def _align(Z, E):
    """``Z`` with each column's sign flipped to agree with the same column of ``E``."""
    return Z * np.sign((Z * E).sum(axis=0))


@pytest.fixture(scope="module")
def mnist_halves():
    """Left and right 392-pixel halves of the first 1000 training and 300 test MNIST digits, in [0, 1]."""
    def halves(X):
        X = X.reshape(-1, 28, 28) / 255.0
        return X[:, :, :14].reshape(len(X), -1), X[:, :, 14:].reshape(len(X), -1)

    L, R = halves(load_mnist("train", sample=True)[0][:1000])
    Lt, Rt = halves(load_mnist("test", sample=True)[0][:300])
    return L, R, Lt, Rt


@pytest.fixture(scope="module")
def sarcos():
    """The 2000 SARCOS rows shipped with the package: 21 joint states (standardised) -> 7 torques."""
    X, Y = load_sarcos(sample=True)
    return (X - X.mean(axis=0)) / X.std(axis=0), Y


# -- dense solves on moment matrices ------------------------------------------------------

def _moments(rng, n, mx, my):
    """Covariances of correlated random features: a PSD joint covariance, condition number ~1e2."""
    Z = rng.normal(size=(n, mx + my)) @ rng.normal(size=(mx + my, mx + my))
    C = np.cov(Z.T, bias=True)
    return C[:mx, :mx], C[mx:, mx:], C[:mx, mx:]


# Random problems of size <= 20 with condition numbers ~1e2-1e3: LAPACK's backward-stable
# solvers give values and constraints to ~1e-14; 1e-10 leaves room and would catch any
# wrong scaling, missing symmetrisation or mismatched sign.
TOL = 1e-10


def test_ridge_cca_solves_the_generalised_eigenproblem():
    Cxx, Cyy, Cxy = _moments(np.random.default_rng(0), 200, 12, 9)
    reg, k = 0.05, 4
    rho, A, B = ridge_cca(Cxx, Cyy, Cxy, reg, k)
    # [0 Cxy; Cyx 0] w = rho [Cxx + reg I, 0; 0, Cyy + reg I] w, by scipy's generalised eigh
    lhs = np.block([[np.zeros((12, 12)), Cxy], [Cxy.T, np.zeros((9, 9))]])
    rhs = scipy.linalg.block_diag(Cxx + reg * np.eye(12), Cyy + reg * np.eye(9))
    vals, vecs = scipy.linalg.eigh(lhs, rhs)
    np.testing.assert_allclose(rho, vals[::-1][:k], rtol=TOL)
    # w^T rhs w = 1 splits evenly between the views: (a, b) = sqrt(2) (w_x, w_y), up to one sign
    W = np.sqrt(2) * vecs[:, ::-1][:, :k]
    sign = np.sign((W[:12] * A).sum(axis=0))
    np.testing.assert_allclose(A, W[:12] * sign, atol=1e-8 * np.abs(A).max())
    np.testing.assert_allclose(B, W[12:] * sign, atol=1e-8 * np.abs(B).max())
    np.testing.assert_allclose(A.T @ (Cxx + reg * np.eye(12)) @ A, np.eye(k), atol=TOL)
    np.testing.assert_allclose(B.T @ (Cyy + reg * np.eye(9)) @ B, np.eye(k), atol=TOL)
    np.testing.assert_allclose(A.T @ Cxy @ B, np.diag(rho), atol=TOL)
    # sign convention: the largest entry of each direction of the first view is positive
    assert np.all(A[np.abs(A).argmax(axis=0), np.arange(k)] > 0)


def test_ridge_cca_unregularised_on_rank_deficient_views():
    # 10 centred rows in 15 and 4 dimensions, reg = 0: Cxx has rank 9 (singular, the solve
    # must drop its null directions), and as the x-view spans every centred vector of the
    # 10 rows, each y-direction is matched exactly: the top min(4, 9) correlations are 1.
    rng = np.random.default_rng(1)
    Zx, Zy = rng.normal(size=(10, 15)), rng.normal(size=(10, 4))
    C = np.cov(np.hstack([Zx, Zy]).T, bias=True)
    Cxx, Cyy, Cxy = C[:15, :15], C[15:, 15:], C[:15, 15:]
    rho, A, B = ridge_cca(Cxx, Cyy, Cxy, 0.0, 6)
    np.testing.assert_allclose(rho[:4], 1.0, atol=1e-8)
    np.testing.assert_array_equal(rho[4:], 0.0)  # no y-direction left: padded
    np.testing.assert_array_equal(A[:, 4:], 0.0)
    np.testing.assert_allclose(A[:, :4].T @ Cxx @ A[:, :4], np.eye(4), atol=1e-8)
    np.testing.assert_allclose(B[:, :4].T @ Cyy @ B[:, :4], np.eye(4), atol=1e-8)
    # a diagonal covariance may be passed as its diagonal
    d = np.linspace(1.0, 2.0, 15)
    for got, ref in zip(ridge_cca(d, Cyy, Cxy, 0.01, 3), ridge_cca(np.diag(d), Cyy, Cxy, 0.01, 3), strict=True):
        np.testing.assert_allclose(got, ref, rtol=TOL, atol=TOL)


def test_cross_svd_matches_the_symmetric_embedding():
    _, _, Cxy = _moments(np.random.default_rng(2), 200, 11, 7)
    s, A, B = cross_svd(Cxy, 5)
    # eigenvalues of [0 C; C^T 0] are +-s (and zeros)
    emb = np.block([[np.zeros((11, 11)), Cxy], [Cxy.T, np.zeros((7, 7))]])
    np.testing.assert_allclose(s, scipy.linalg.eigh(emb, eigvals_only=True)[::-1][:5], rtol=TOL)
    np.testing.assert_allclose(A.T @ A, np.eye(5), atol=TOL)
    np.testing.assert_allclose(B.T @ B, np.eye(5), atol=TOL)
    np.testing.assert_allclose(A.T @ Cxy @ B, np.diag(s), atol=TOL)
    s9, _, B9 = cross_svd(Cxy, 9)  # beyond min(11, 7) = 7: zeros
    np.testing.assert_array_equal(s9[7:], 0.0)
    np.testing.assert_array_equal(B9[:, 7:], 0.0)


def test_sliced_directions_match_the_generalised_eigenproblem():
    rng = np.random.default_rng(3)
    Z = rng.normal(size=(300, 10)) @ rng.normal(size=(10, 10))
    labels = rng.integers(0, 6, size=300)
    Z[:, 0] += labels  # slice means that differ
    Cxx = np.cov(Z.T, bias=True)
    counts, sums = slice_sums(Z, labels, 6)
    Cb = between_slice_covariance(counts, sums)
    # Cb = sum_s p_s (mu_s - mu)(mu_s - mu)^T, written out
    mu = Z.mean(axis=0)
    direct = sum((labels == s).mean() * np.outer(Z[labels == s].mean(axis=0) - mu, Z[labels == s].mean(axis=0) - mu)
                 for s in range(6))
    np.testing.assert_allclose(Cb, direct, atol=TOL * np.abs(direct).max())
    reg, k = 0.1, 5
    vals, A = sliced_directions(Cxx, Cb, reg, k)
    ref_vals, ref_vecs = scipy.linalg.eigh(Cb, Cxx + reg * np.eye(10))  # v^T (Cxx + reg I) v = 1
    np.testing.assert_allclose(vals, ref_vals[::-1][:k], rtol=TOL)
    np.testing.assert_allclose(A, _align(ref_vecs[:, ::-1][:, :k], A), atol=1e-8)
    np.testing.assert_allclose(A.T @ (Cxx + reg * np.eye(10)) @ A, np.eye(k), atol=TOL)
    # rank of Cb is S - 1 = 5: a 6th direction has eigenvalue 0
    assert abs(sliced_directions(Cxx, Cb, reg, 6)[0][5]) < TOL
    # the factored form never forms Cb and gives the same solution
    vals_f, A_f = sliced_directions(Cxx, between_slice_factor(counts, sums), reg, k, factor=True)
    np.testing.assert_allclose(vals_f, vals, rtol=TOL)
    np.testing.assert_allclose(A_f, A, atol=1e-8)


# -- exact kernel CCA, SVD and SIR against dual formulations ------------------------------

@pytest.fixture(scope="module")
def exact_cca(mnist_halves):
    L, R, *_ = mnist_halves
    return KernelCCA(5, solver="exact", reg=1e-3, random_state=0).fit(L[:300], R[:300])


def test_exact_cca_matches_the_dual_eigenproblem(mnist_halves, exact_cca):
    # The dual problem [0, KxKy; KyKx, 0] w = rho [Kx^2 + n reg Kx, 0; 0, Ky^2 + n reg Ky] w
    # with centred kernels, solved by scipy on the complement of the constant vector
    # (where the right-hand side is positive definite). Observed to agree to 4e-15; the
    # right-hand side has condition ~3e5 here, so 1e-9 is a safe bound for round-off.
    L, R, *_ = mnist_halves
    est = exact_cca
    n, reg = 300, 1e-3
    _, Kx = _deflated(_centred(kernel_matrix(est.kernel_[0], L[:n])))
    _, Ky = _deflated(_centred(kernel_matrix(est.kernel_[1], R[:n])))
    Z = np.zeros_like(Kx)
    lhs = np.block([[Z, Kx @ Ky], [Ky @ Kx, Z]])
    rhs = scipy.linalg.block_diag(Kx @ Kx + n * reg * Kx, Ky @ Ky + n * reg * Ky)
    np.testing.assert_allclose(est.correlations_, _top_eigvals(lhs, rhs, 5), rtol=1e-9)
    assert np.all(np.diff(est.correlations_) < 0)
    assert 0 < est.correlations_[-1] < est.correlations_[0] < 1


def test_exact_cca_functions_satisfy_the_rkhs_constraints(mnist_halves, exact_cca):
    # Checked on the functions themselves (the variates on the training rows and the RKHS
    # norms coef^T K~ coef from the kernel matrix), not on the internal coordinates:
    # Var(f) + reg ||f||^2 = 1, Cov(f_i, g_j) = rho_i delta_ij, variates centred. The models'
    # coefficients are dual coefficients over the kernel sections at the training rows.
    L, R, *_ = mnist_halves
    est, n, reg = exact_cca, 300, 1e-3
    assert (est.solver_, est.n_features_, est.n_iter_) == ("exact", n, 1)
    U, V = est.transform(L[:n], R[:n])
    Kx = _centred(kernel_matrix(est.kernel_[0], L[:n]))
    Ky = _centred(kernel_matrix(est.kernel_[1], R[:n]))
    a, b = est.models_[0].coef, est.models_[1].coef
    np.testing.assert_allclose(U, Kx @ a, atol=1e-10)
    np.testing.assert_allclose(U.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(V.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(U.T @ U / n + reg * a.T @ Kx @ a, np.eye(5), atol=1e-8)
    np.testing.assert_allclose(V.T @ V / n + reg * b.T @ Ky @ b, np.eye(5), atol=1e-8)
    np.testing.assert_allclose(U.T @ V / n, np.diag(est.correlations_), atol=1e-8)


def test_exact_svd_matches_the_cross_kernel_spectrum(mnist_halves):
    # The singular values of the cross-covariance operator are the square roots of the
    # eigenvalues of K~x K~y / n^2 (same nonzero spectrum as Cxy Cyx), taken here from a
    # general eigen-solver; the singular functions are RKHS-orthonormal.
    L, R, *_ = mnist_halves
    n = 300
    est = KernelSVD(4, solver="exact", random_state=0).fit(L[:n], R[:n])
    Kx = _centred(kernel_matrix(est.kernel_[0], L[:n]))
    Ky = _centred(kernel_matrix(est.kernel_[1], R[:n]))
    with one_blas_thread():
        ev = np.sort(scipy.linalg.eigvals(Kx @ Ky).real)[::-1][:4]
    np.testing.assert_allclose(est.singular_values_, np.sqrt(ev) / n, rtol=1e-8)
    a, b = est.models_[0].coef, est.models_[1].coef
    np.testing.assert_allclose(a.T @ Kx @ a, np.eye(4), atol=1e-8)
    np.testing.assert_allclose(b.T @ Ky @ b, np.eye(4), atol=1e-8)
    U, V = est.transform(L[:n], R[:n])
    np.testing.assert_allclose(U.T @ V / n, np.diag(est.singular_values_), atol=1e-10)


@pytest.mark.parametrize("outputs", ["one torque", "seven torques"])
def test_exact_sir_matches_the_dual_eigenproblem(sarcos, outputs):
    # Dual SIR: with f = K~ alpha, the variance of the slice means of f is
    # alpha^T K~ D K~ alpha, D = sum_s 1_s 1_s^T / (n n_s), against Var(f) + reg ||f||^2 =
    # alpha^T (K~^2 / n + reg K~) alpha; solved by scipy on the complement of the constant
    # vector. Slices: quantiles of one torque, k-means of all seven (the estimator's own
    # slicer, tested separately below). Observed to agree to 5e-13: the right-hand side
    # has condition ~4e9, but the top eigenvectors avoid its small-eigenvalue directions
    # (the slice means do not excite them); 1e-8 leaves room for that.
    X, Y = sarcos
    n, k, reg = 400, 4, 1e-3
    y = Y[:n, 1] if outputs == "one torque" else Y[:n]
    est = KernelSIR(k, n_slices=8, reg=reg, solver="exact", random_state=0).fit(X[:n], y)
    assert est.slicer_.kind == ("quantiles" if outputs == "one torque" else "kmeans")
    assert est.slicer_.n_slices == 8
    assert (est.solver_, est.n_features_, est.n_iter_) == ("exact", n, 1)
    labels = est.slicer_.assign(y)
    D = sum(np.outer(labels == s, labels == s) / (n * (labels == s).sum()) for s in range(8))
    K = _centred(kernel_matrix(est.kernel_, X[:n]))
    H, Kd = _deflated(K)
    lhs = H.T @ K @ D @ K @ H
    rhs = Kd @ Kd / n + reg * Kd
    np.testing.assert_allclose(est.eigenvalues_, _top_eigvals(0.5 * (lhs + lhs.T), rhs, k), rtol=1e-8)
    # the directions: slice-mean variance lambda_i, unit regularised variance (the model's
    # coefficients are dual coefficients over the kernel sections at the training rows)
    F = est.transform(X[:n])
    a = est.model_.coef
    np.testing.assert_allclose(F.T @ D @ F, np.diag(est.eigenvalues_), atol=1e-8)
    np.testing.assert_allclose(F.T @ F / n + reg * a.T @ K @ a, np.eye(k), atol=1e-8)


# -- randomized kernel CCA against exact kernel CCA ----------------------------------------

@pytest.fixture(scope="module")
def exact_500(mnist_halves):
    L, R, *_ = mnist_halves
    return KernelCCA(5, solver="exact", reg=1e-3, random_state=0).fit(L[:500], R[:500])


def test_nystroem_with_every_row_as_landmark_is_exact(mnist_halves, exact_500):
    # With the 500 training rows as landmarks the Nyström features reproduce both kernel
    # matrices, so the problem is the exact one: observed agreement to 1e-15 (correlations)
    # and sin^2 ~1e-15 (variates on held-out digits); the bounds allow for a different
    # rank cutoff of the two whitenings (eigenvalues below n eps max, suppressed by reg).
    L, R, Lt, Rt = mnist_halves
    ny = KernelCCA(5, solver="rca", n_features=500, reg=1e-3, random_state=0).fit(L[:500], R[:500])
    ex = exact_500
    assert ny.bandwidth_ == ex.bandwidth_  # same seeded sample
    np.testing.assert_allclose(ny.correlations_, ex.correlations_, rtol=1e-6)
    (U, V), (Ue, Ve) = ny.transform(Lt, Rt), ex.transform(Lt, Rt)
    for i in range(1, 6):  # ordered components, not just the subspace
        assert principal_angle_sin2(U[:, :i], Ue[:, :i]) < 1e-6
        assert principal_angle_sin2(V[:, :i], Ve[:, :i]) < 1e-6
    # the same functions (signs are fixed in different coordinates), centred on the same data
    np.testing.assert_allclose(_align(U, Ue), Ue, atol=1e-6 * np.abs(Ue).max())
    np.testing.assert_allclose(ny.score(Lt, Rt), ex.score(Lt, Rt), rtol=1e-6)


def test_random_features_approach_exact_cca(mnist_halves, exact_500):
    # Monte Carlo error of random Fourier features falls like 1/sqrt(M): the largest error
    # of the top-5 correlations was 0.032-0.042 at M = 128 and 0.009-0.013 at M = 1024
    # over five seeds (a ratio >= 2.4 for any pairing; sqrt(8) = 2.8 expected). The
    # estimates are biased low (the feature covariance is a noisy, regularised proxy).
    L, R, Lt, Rt = mnist_halves
    ex = exact_500
    err = {}
    for m in (128, 1024):
        rf = KernelCCA(5, solver="rca", features="fourier", n_features=m, block_size=128, reg=1e-3,
                       random_state=0)
        rf.fit(L[:500], R[:500])
        assert rf.n_features_ == rf.models_[0].coef.shape[0] == rf.models_[1].coef.shape[0] == m
        err[m] = np.abs(rf.correlations_ - ex.correlations_).max()
    assert err[1024] < err[128] / 2
    assert err[1024] < 0.03
    # the held-out correlation sum: 4.24-4.37 at M = 1024 over five seeds, exact 4.41
    assert abs(rf.score(Lt, Rt) - ex.score(Lt, Rt)) < 0.3


def _explicit_features(est, X, Y):
    """The features of both views of a fitted ``KernelCCA(solver="rca")``, recomputed densely, and its
    directions in them (the model folds the scaling or the whitening into its coefficients)."""
    out = []
    for model, V in zip(est.models_, (X, Y), strict=True):
        f = model.features
        if est.features in ("fourier", "fourier_pairs"):
            nb = est.n_features_ // f.block_size
            out.append((f.transform(V, 0, nb).astype(np.float64) / np.sqrt(nb), model.coef * np.sqrt(nb)))
        else:  # kernel sections at the landmarks, whitened by K_LL^{-1/2}: N^T K_LL (N A) = A
            K = kernel_matrix(f.kernel, f.landmarks)
            N = inverse_sqrt(K)
            out.append((kernel_matrix(f.kernel, V, f.landmarks) @ N, N.T @ K @ model.coef))
    return out


@pytest.mark.parametrize("est", [
    KernelCCA(4, solver="rca", features="fourier", n_features=192, block_size=64, compute_dtype="float64",
              reg=1e-3, random_state=5),
    KernelCCA(4, solver="rca", features="fourier_pairs", n_features=192, block_size=64, compute_dtype="float64",
              reg=1e-3, random_state=5),
    KernelCCA(4, solver="rca", n_features=150, reg=1e-3, random_state=5),
], ids=lambda e: e.features)
def test_accumulated_moments_give_the_dense_cca_of_the_features(mnist_halves, est):
    # Fitted chunk by chunk on dask arrays, the result is regularised linear CCA of the
    # explicit features, here solved densely by scipy's generalised eigh (float64
    # features: only round-off differs, observed 3e-15 relative; the regularised
    # covariances have condition ~40).
    L, R, *_ = mnist_halves
    X, Y = L[:600], R[:600]
    est.fit(da.from_array(X, chunks=(128, -1)), da.from_array(Y, chunks=(128, -1)))
    (zx, A), (zy, B) = _explicit_features(est, X, Y)
    mx, my = zx.shape[1], zy.shape[1]
    C = np.cov(np.hstack([zx, zy]).T, bias=True)
    reg = est.reg
    lhs = np.block([[np.zeros((mx, mx)), C[:mx, mx:]], [C[mx:, :mx], np.zeros((my, my))]])
    rhs = scipy.linalg.block_diag(C[:mx, :mx] + reg * np.eye(mx), C[mx:, mx:] + reg * np.eye(my))
    np.testing.assert_allclose(est.correlations_, _top_eigvals(lhs, rhs, 4), rtol=1e-9)
    assert (est.solver_, est.n_iter_) == ("rca", 1)
    assert [(r["iteration"], r["rows"]) for r in est.convergence_] == [(1, 600)]  # one pass over the rows
    np.testing.assert_allclose(est.models_[0].offset, zx.mean(axis=0) @ A, atol=1e-10)
    # the variates: centred, Var(u) + reg |a|^2 = 1, Cov(u_i, v_j) = rho_i delta_ij
    U, V = est.transform(X, Y)
    np.testing.assert_allclose(U.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(U.T @ U / 600 + reg * A.T @ A, np.eye(4), atol=1e-8)
    np.testing.assert_allclose(V.T @ V / 600 + reg * B.T @ B, np.eye(4), atol=1e-8)
    np.testing.assert_allclose(U.T @ V / 600, np.diag(est.correlations_), atol=1e-8)


def test_views_have_independent_features(mnist_halves):
    L, R, *_ = mnist_halves
    rf = KernelCCA(2, solver="rca", features="fourier", n_features=128, random_state=7).fit(L[:100], R[:100])
    a, b = (m.features for m in rf.models_)
    assert (a.seed, b.seed) == (view_seed(7, 0), view_seed(7, 1))
    assert a.seed != b.seed
    # the documented seeds regenerate the features anywhere
    again = RandomFeatures(rf.kernel_[1], 392, 128, view_seed(7, 1), "float32", center=b.center)
    np.testing.assert_array_equal(again.transform(R[:5], 0, 1), b.transform(R[:5], 0, 1))


# -- lazy and labelled inputs --------------------------------------------------------------

@pytest.fixture(scope="module")
def small_pair(mnist_halves):
    L, R, Lt, Rt = mnist_halves
    return L[:400], R[:400], Lt[:120], Rt[:120]


def _estimators_for_lazy():
    yield KernelCCA(3, solver="exact", random_state=0), "bitwise"
    yield KernelCCA(3, solver="rca", n_features=150, random_state=0), 1e-10
    # float64 features: only the order of the chunk sums differs
    yield KernelCCA(3, solver="rca", features="fourier", n_features=128, compute_dtype="float64",
                    random_state=0), 1e-10


def _lazy_id(p):
    return f"{p.solver}-{p.features}" if isinstance(p, KernelCCA) else str(p)


@pytest.mark.parametrize(("est", "rtol"), list(_estimators_for_lazy()), ids=_lazy_id)
def test_dask_and_zarr_inputs_give_the_numpy_fit(tmp_path, small_pair, est, rtol):
    # 400 rows: the seeded sample behind the bandwidths is every row for numpy and lazy
    # inputs alike, in the same order, so only the order of the sums can differ (none for
    # the exact estimator, which reads the data whole).
    L, R, *_ = small_pair
    ref = est.__class__(**est.get_params()).fit(L, R)
    zarr.create_array(store=str(tmp_path / "l.zarr"), data=L, chunks=(100, 392))
    zarr.create_array(store=str(tmp_path / "r.zarr"), data=R, chunks=(150, 392))  # rechunked to the rows of X
    inputs = [
        (da.from_array(L, chunks=(90, -1)), da.from_array(R, chunks=(90, -1))),
        (str(tmp_path / "l.zarr"), str(tmp_path / "r.zarr")),
        (xr.DataArray(da.from_array(L, chunks=(100, -1)), dims=("digit", "pixel")), R),
    ]
    for X, Y in inputs:
        got = est.__class__(**est.get_params()).fit(X, Y)
        assert got.bandwidth_ == ref.bandwidth_
        if rtol == "bitwise":
            np.testing.assert_array_equal(got.correlations_, ref.correlations_)
        else:
            np.testing.assert_allclose(got.correlations_, ref.correlations_, rtol=rtol)


@pytest.mark.parametrize(("est", "rtol"), list(_estimators_for_lazy()), ids=_lazy_id)
def test_transform_and_score_stay_lazy(small_pair, est, rtol):
    L, R, Lt, Rt = small_pair
    est = est.fit(L, R)
    Xd, Yd = da.from_array(Lt, chunks=(40, -1)), da.from_array(Rt, chunks=(40, -1))
    xa = xr.DataArray(Xd, dims=("digit", "pixel"), coords={"digit": np.arange(120) + 5000})
    with dask.config.set(scheduler=_refuse):
        U, V = est.transform(Xd, Yd)
        Ux = est.transform(Xd)
        La = est.transform(xa)
    assert all(isinstance(Z, da.Array) for Z in (U, V, Ux))
    assert U.chunks == V.chunks == (Xd.chunks[0], (3,))
    assert len(U.dask.layers[U.name]) == Xd.numblocks[0]  # one task per row chunk
    Ue, Ve = est.transform(Lt, Rt)
    np.testing.assert_allclose(U.compute(), Ue, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(V.compute(), Ve, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(Ux.compute(), Ue, rtol=1e-9, atol=1e-12)
    assert isinstance(La, xr.DataArray)
    assert La.dims == ("digit", "component")
    np.testing.assert_array_equal(La["digit"].values, np.arange(120) + 5000)
    np.testing.assert_allclose(est.score(Xd, Yd), est.score(Lt, Rt), rtol=1e-10)


def test_sir_on_lazy_inputs_and_lazy_transform(sarcos):
    X, Y = sarcos
    X, y = X[:300], Y[:300, 0]
    ref = KernelSIR(3, n_slices=6, solver="exact", random_state=0).fit(X, y)
    got = KernelSIR(3, n_slices=6, solver="exact", random_state=0).fit(da.from_array(X, chunks=(70, -1)),
                                                                      da.from_array(y, chunks=70))
    np.testing.assert_array_equal(got.eigenvalues_, ref.eigenvalues_)
    Xd = da.from_array(X[:100], chunks=(30, -1))
    with dask.config.set(scheduler=_refuse):
        F = ref.transform(Xd)
    assert isinstance(F, da.Array)
    np.testing.assert_allclose(F.compute(), ref.transform(X[:100]), rtol=1e-9, atol=1e-12)


# -- bad input: clear errors before any work -------------------------------------------------

@pytest.fixture
def pair():
    rng = np.random.default_rng(0)
    return rng.normal(size=(60, 4)), rng.normal(size=(60, 3))


def _solver(cls, **fixed):
    """``cls`` with some parameters fixed, called as the estimator class (``make(2, random_state=0)``)."""
    def make(n_components=2, **params):
        return cls(n_components, **fixed, **params)

    make.__name__ = f"{cls.__name__}({', '.join(f'{k}={v!r}' for k, v in fixed.items())})"
    return make


EXACT_CCA = _solver(KernelCCA, solver="exact")
EXACT_SVD = _solver(KernelSVD, solver="exact")
RCA_FOURIER = _solver(KernelCCA, solver="rca", features="fourier")
RCA_NYSTROEM = _solver(KernelCCA, solver="rca")
TWO_VIEW = [EXACT_CCA, EXACT_SVD, RCA_FOURIER, RCA_NYSTROEM]


@pytest.mark.parametrize("cls", TWO_VIEW, ids=lambda c: c.__name__)
def test_bad_pairs_fail_before_any_work(pair, cls):
    X, Y = pair
    Xd = da.from_array(X, chunks=(20, -1))
    with dask.config.set(scheduler=_refuse):
        with pytest.raises(ValueError, match="X has 60 rows, Y has 59"):
            cls(2).fit(Xd, da.from_array(Y[:-1], chunks=(20, -1)))
        with pytest.raises(ValueError, match="X has 60 rows, Y has 59"):
            cls(2).fit(X, Y[:-1])
        with pytest.raises(ValueError, match="2-D"):
            cls(2).fit(X[:, 0], Y)
        with pytest.raises(TypeError, match="real numeric dtype"):
            cls(2).fit(Xd, np.full((60, 3), "a"))
        with pytest.raises(ValueError, match="requires y to be passed"):
            cls(2).fit(X, None)
    bad = Y.copy()
    bad[17, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity in Y"):
        cls(2).fit(X, bad)
    with pytest.raises(ValueError, match="NaN or infinity"):
        cls(2).fit(Xd, da.from_array(bad, chunks=(20, -1)))
    est = cls(2, random_state=0).fit(X, Y)
    with pytest.raises(ValueError, match="Y has 2 features, but .* is expecting 3"):
        est.transform(X, Y[:, :2])
    with pytest.raises(ValueError, match="X has 3 features, but .* is expecting 4"):
        est.transform(X[:, :3])


@pytest.mark.parametrize(
    ("cls", "params", "exc", "match"),
    [
        (RCA_FOURIER, {"n_components": 300, "n_features": 256}, ValueError,
         "n_components=300 must be <= n_features=256"),
        (RCA_NYSTROEM, {"n_components": 40, "n_features": 30}, ValueError, "n_components=40 must be <= n_features=30"),
        # one unit and one range of reg for every solver: a ridge > 0 (kernel CCA is ill-posed without it)
        (RCA_FOURIER, {"reg": -1.0}, ValueError, r"'reg' parameter of KernelCCA must be a float in the range \(0\.0"),
        (EXACT_CCA, {"reg": 0.0}, ValueError, r"'reg' parameter of KernelCCA must be a float in the range \(0\.0"),
        (RCA_NYSTROEM, {"bandwidth_y": "mean"}, ValueError,
         r"'bandwidth_y' parameter of KernelCCA must be a str among \{'median'\}"),
        (EXACT_CCA, {"bandwidth_x": [1.0]}, TypeError,
         r"'bandwidth_x' parameter of KernelCCA must be a str among \{'median'\} or a float in the range \(0\.0"),
        (EXACT_CCA, {"kernel_y": "polynomial"}, ValueError,
         "'kernel_y' parameter of KernelCCA must be a str among .*Got 'polynomial'"),
        (EXACT_CCA, {"n_components": 61}, ValueError, "n_components=61 must be <= n_samples=60"),
        (EXACT_SVD, {"n_components": 0}, ValueError,
         r"'n_components' parameter of KernelSVD must be an int in the range \[1, inf\)"),
        (RCA_NYSTROEM, {"n_features": 61}, ValueError,
         "n_features=61 asks for more Nyström landmarks than the n_samples=60 rows"),
        (EXACT_SVD, {"features": "fourier"}, ValueError,
         r"KernelSVD\(solver='exact'\) takes features in \['nystroem'\]"),
        (_solver(KernelSVD, solver="rca"), {}, ValueError,
         r"'solver' parameter of KernelSVD must be a str among .*Got 'rca'"),
    ],
    ids=lambda p: p.__name__ if callable(p) else None,
)
def test_impossible_parameters(pair, cls, params, exc, match):
    X, Y = pair
    with dask.config.set(scheduler=_refuse), pytest.raises(exc, match=match):
        cls(**{"n_components": 2, **params}).fit(da.from_array(X, chunks=(20, -1)), da.from_array(Y, chunks=(20, -1)))


def test_sir_bad_input(sarcos):
    X, Y = sarcos[0][:60], sarcos[1][:60, 0]
    Xd, yd = da.from_array(X, chunks=(20, -1)), da.from_array(Y, chunks=20)
    with dask.config.set(scheduler=_refuse):
        with pytest.raises(ValueError, match="n_components=5 must be <= n_slices - 1 = 4"):
            KernelSIR(5, n_slices=5, solver="exact").fit(Xd, yd)
        with pytest.raises(ValueError, match="n_slices=10 must be <= n_samples=8"):
            KernelSIR(2, n_slices=10, solver="exact").fit(Xd[:8], yd[:8])
        with pytest.raises(ValueError, match="X has 60 rows, y has 59"):
            KernelSIR(2, solver="exact").fit(Xd, yd[:-1])
        with pytest.raises(ValueError, match=r"'n_slices' parameter of KernelSIR must be an int in the range \[2,"):
            KernelSIR(1, n_slices=1, solver="exact").fit(Xd, yd)
        with pytest.raises(ValueError, match=r"KernelSIR\(solver='exact'\) takes features in \['nystroem'\]"):
            KernelSIR(2, solver="exact", features="fourier").fit(Xd, yd)
    bad = Y.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity in y"):
        KernelSIR(2, solver="exact").fit(X, bad)
    with pytest.raises(TypeError, match="real numeric dtype"):
        KernelSIR(2, solver="exact").fit(X, np.array(["a", "b", "c"] * 20))
    # three classes give two directions at most, whatever n_slices says
    with pytest.raises(ValueError, match="y gives only 3 slices"):
        KernelSIR(3, n_slices=10, solver="exact").fit(X, np.arange(60) % 3)


def test_size_limit_before_reading_the_data():
    n = MAX_TWO_VIEW_SAMPLES
    X = da.zeros((n + 1, 3), chunks=(2000, 3))
    for cls in (EXACT_CCA, EXACT_SVD):
        with dask.config.set(scheduler=_refuse), pytest.raises(
                ValueError, match=rf"solver='exact'\) forms dense {n + 1} x {n + 1} kernel matrices and is limited to "
                                  rf"n_samples <= {n} \(got {n + 1}\); use another solver \(e.g. solver='rca'\)"):
            cls(2).fit(X, X)
    with dask.config.set(scheduler=_refuse), pytest.raises(ValueError, match="limited to n_samples"):
        KernelSIR(2, solver="exact").fit(X, X[:, 0])


# -- the slices ---------------------------------------------------------------------------------

def test_quantile_slices_are_balanced(sarcos):
    Y = sarcos[1]
    # distinct values (no ties): slices of floor or ceil of n / S rows
    y = np.unique(Y[:, 0])
    s = Slicer.fit(y, 10, seed=0)
    counts = np.bincount(s.assign(y))
    assert (s.kind, s.n_slices) == ("quantiles", 10)
    assert counts.max() - counts.min() <= 1
    # with ties an edge moves at most its tied copies across: within twice the largest tie
    for j in range(7):
        s = Slicer.fit(Y[:, j], 10, seed=0)
        counts = np.bincount(s.assign(Y[:, j]), minlength=s.n_slices)
        ties = np.unique(Y[:, j], return_counts=True)[1].max()
        assert s.n_slices == 10
        assert np.abs(counts - 200).max() <= 2 * ties
    # heavy ties merge slices, each still non-empty
    y = np.repeat(np.arange(12.0), [50] + [5] * 11)
    s = Slicer.fit(y, 10, seed=0)
    assert s.n_slices < 10
    assert np.bincount(s.assign(y), minlength=s.n_slices).min() > 0


def test_class_slices():
    _, labels = load_mnist("train", sample=True)
    s = Slicer.fit(labels[:500], 10, seed=0)
    assert (s.kind, s.n_slices) == ("classes", 10)
    np.testing.assert_array_equal(s.assign(labels), labels)
    s = Slicer.fit(labels[labels < 3], 10, seed=0)
    assert s.n_slices == 3
    with pytest.raises(ValueError, match=r"not seen .*\[3, 7\]"):
        s.assign(np.array([0, 3, 7, 1]))


def test_kmeans_slices_are_deterministic_and_chunkable(sarcos):
    Y = sarcos[1]
    a = Slicer.fit(Y[:1000], 8, seed=3)
    b = Slicer.fit(Y[:1000], 8, seed=3)
    assert (a.kind, a.n_slices) == ("kmeans", 8)
    np.testing.assert_array_equal(a.centroids, b.centroids)
    whole = a.assign(Y)
    assert whole.dtype == np.int64
    assert set(np.unique(whole)) == set(range(8))
    chunks = np.concatenate([a.assign(Y[i:i + 137]) for i in range(0, len(Y), 137)])
    np.testing.assert_array_equal(chunks, whole)
    # a row's slice is its nearest centroid in standardised units
    z = (Y - Y[:1000].mean(axis=0)) / Y[:1000].std(axis=0)
    d = ((z[:, None, :] - a.centroids[None]) ** 2).sum(axis=2)
    np.testing.assert_array_equal(whole, d.argmin(axis=1))
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(a)).assign(Y), whole)
    # the same on the blocks of a dask array
    lazy = da.from_array(Y, chunks=(300, -1)).map_blocks(a.assign, drop_axis=1, dtype=np.int64)
    np.testing.assert_array_equal(lazy.compute(), whole)


def test_slicer_rejects_bad_responses():
    with pytest.raises(ValueError, match="NaN or infinity"):
        Slicer.fit(np.array([1.0, np.nan, 2.0, 3.0]), 2, seed=0)
    with pytest.raises(ValueError, match="NaN or infinity"):
        Slicer.fit(np.arange(10.0), 2, seed=0).assign(np.array([np.inf]))
    with pytest.raises(ValueError, match="fewer than n_slices=5"):
        Slicer.fit(np.arange(4.0), 5, seed=0)
    with pytest.raises(TypeError, match="real numeric dtype"):
        Slicer.fit(np.array(["a", "b", "c"]), 2, seed=0)
    with pytest.raises(ValueError, match=r"shape \(n, 2\)"):
        Slicer.fit(np.random.default_rng(0).normal(size=(20, 2)), 3, seed=0).assign(np.zeros((4, 3)))


# -- scikit-learn's estimator checks ----------------------------------------------------------

def _estimators():
    # Small budgets keep each check fast; quality is tested above.
    yield KernelCCA(n_components=2, solver="exact", random_state=0)
    yield KernelSVD(n_components=2, solver="exact", random_state=0)
    yield KernelCCA(n_components=2, solver="rca", features="fourier", n_features=64, block_size=32, random_state=0)
    yield KernelCCA(n_components=2, solver="rca", n_features=8, random_state=0)  # the checks fit 10 to 30 rows


def _expected_failures(estimator):
    failures = {}
    if estimator.solver not in ("auto", "dsgd"):
        # the check calls partial_fit when the class has it: these solvers refuse it (a ValueError
        # that names the solver that streams), as every estimator's non-streaming solvers do
        for check in ("check_fit_score_takes_y", "check_n_features_in_after_fitting"):
            failures[check] = f"partial_fit refuses solver={estimator.solver!r}"
    if hasattr(estimator, "score"):
        # the check calls score(X, y=...); the second view is named Y, as in fit(X, Y)
        failures["check_n_features_in_after_fitting"] = "score takes the second view as Y, not y"
    return failures


@parametrize_with_checks(list(_estimators()), expected_failed_checks=_expected_failures)
def test_sklearn_compatible(estimator, check):
    check(estimator)
