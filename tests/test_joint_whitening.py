"""Joint whitening of all the landmarks (one Cholesky factor) against dense references."""

from __future__ import annotations

import pickle

import dask.array as da
import numpy as np
import pytest
import zarr

from dsgd_dask import KernelPCA, load
from dsgd_dask.engine.passes import covariance_request, covariance_times, reduce_pass
from dsgd_dask.features import KernelSpec, kernel_matrix
from dsgd_dask.features.nystroem import NystroemFeatures
from dsgd_dask.features.whitening import JointWhitening
from dsgd_dask.metrics import principal_angle_sin2
from dsgd_dask.rules.subspace import orthonormal
from dsgd_dask.streams.inputs import DataView


def _sections(X, L, spec, dtype="float64", block=16):
    return NystroemFeatures(spec, L, block, 0, dtype, center=X.mean(axis=0), whiten=False)


def test_whitened_features_are_the_nystroem_features_of_all_landmarks():
    # z(x).z(y) = k(x, L) (K_LL + delta I)^{-1} k(L, y), the Nyström approximation on all M
    # landmarks together; with every row a landmark that is the kernel itself on the rows.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(96, 4))
    spec = KernelSpec("gaussian", 2.0)
    f = _sections(X, X, spec)
    w = JointWhitening(f)
    assert w.n_features == 96
    assert 0 < w.ridge < 1e-12
    Z = w.whiten(f.raw_transform(X, 0, 6))
    np.testing.assert_allclose(Z @ Z.T, kernel_matrix(spec, X), atol=1e-8)
    # on other rows: the dense Nyström formula
    Y = rng.normal(size=(30, 4))
    K = kernel_matrix(spec, X)
    dense = kernel_matrix(spec, Y, X) @ np.linalg.solve(K + w.ridge * np.eye(96), kernel_matrix(spec, X, Y))
    Zy = w.whiten(f.raw_transform(Y, 0, 6))
    np.testing.assert_allclose(Zy @ Zy.T, dense, atol=1e-8)


def test_fold_and_unfold_are_the_joint_whitening():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(120, 5))
    f = _sections(X, X[:48], KernelSpec("gaussian", 2.0))
    w = JointWhitening(f)
    R = f.raw_transform(X, 0, 3)
    Z = w.whiten(R)
    A = rng.normal(size=(48, 3))
    np.testing.assert_allclose(R @ w.fold(A), Z @ A, rtol=1e-9, atol=1e-12)
    G = R.T @ X[:, :3]
    np.testing.assert_allclose(w.unfold(G), Z.T @ X[:, :3], rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="rows"):
        w.fold(A[:40])


def test_joint_whitening_needs_kernel_sections():
    X = np.random.default_rng(2).normal(size=(40, 3))
    with pytest.raises(ValueError, match="whiten=False"):
        JointWhitening(NystroemFeatures(KernelSpec("gaussian", 1.0), X, 20, 0, "float64"))
    with pytest.raises(ValueError, match="normalization"):
        NystroemFeatures(KernelSpec("gaussian", 1.0), X, 20, 0, "float64", normalization=np.zeros((2, 20, 20)),
                         whiten=False)


def test_repeated_landmarks_keep_the_factor_defined():
    # Every landmark four times: K_LL has rank M / 4, and the ridge keeps the factor
    # defined; the whitened features still give the kernel on the distinct rows.
    rng = np.random.default_rng(3)
    X = rng.normal(size=(24, 3))
    L = np.repeat(X, 4, axis=0)
    spec = KernelSpec("gaussian", 1.5)
    w = JointWhitening(_sections(X, L, spec))
    Z = w.whiten(_sections(X, L, spec).raw_transform(X, 0, 6))
    assert np.isfinite(Z).all()
    np.testing.assert_allclose(Z @ Z.T, kernel_matrix(spec, X), atol=1e-6)


@pytest.mark.parametrize("center", [True, False])
@pytest.mark.parametrize("lazy", [False, True])
def test_covariance_pass_with_joint_whitening_is_the_dense_covariance_product(center, lazy):
    rng = np.random.default_rng(6)
    X = rng.normal(size=(700, 5)) + 3.0
    f = _sections(X, X[:64], KernelSpec("gaussian", 2.5), block=32)
    w = JointWhitening(f)
    V = orthonormal(rng.normal(size=(64, 4)))
    Z = w.whiten(f.raw_transform(X, 0, 2))
    mean = Z.mean(axis=0)
    Zc = Z - mean if center else Z
    dense = Zc.T @ (Zc @ V) / len(Z)
    shift = f.raw_transform(X[:100], 0, 2).mean(axis=0)
    data = da.from_array(X, chunks=(128, 5)) if lazy else X
    totals = reduce_pass(DataView(data), covariance_request(f, 2, V, shift, whitening=w))
    sums = covariance_times(totals, f, V, shift, center, whitening=w)
    assert sums.n == 700
    np.testing.assert_allclose(sums.cov_times, dense, rtol=1e-8, atol=1e-10 * np.abs(dense).max())
    np.testing.assert_allclose(sums.mean, mean, rtol=1e-8, atol=1e-10)


# -- the estimator -------------------------------------------------------------------------------

def test_joint_blocks_equal_one_block_of_all_landmarks(mnist_small):
    # Four blocks of 100 whitened jointly: the same landmarks and the same problem as one
    # block of 400, and as the rca solver on 400 landmarks (solved exactly): converged in float64, the
    # subspaces agree to the convergence tolerance. Blocks whitened each on their own solve
    # another problem, measurably further away.
    X, Xt = mnist_small
    m = 400
    ny = KernelPCA(4, solver="rca", n_features=m, random_state=3).fit(X)
    common = dict(n_features=m, compute_dtype="float64", tol=1e-12, max_iter=60, random_state=3)
    one = KernelPCA(4, block_size=m, **common).fit(X)
    joint = KernelPCA(4, block_size=100, **common).fit(X)
    block = KernelPCA(4, block_size=100, whitening="block", **common).fit(X)
    assert (one._params["whitening"], joint._params["whitening"]) == ("block", "joint")
    assert np.array_equal(joint.model_.features.landmarks, one.model_.features.landmarks)
    assert principal_angle_sin2(joint.transform(Xt), ny.transform(Xt)) < 1e-8
    assert principal_angle_sin2(joint.transform(Xt), one.transform(Xt)) < 1e-8
    np.testing.assert_allclose(joint.eigenvalues_, ny.eigenvalues_, rtol=1e-8)
    assert principal_angle_sin2(block.transform(Xt), ny.transform(Xt)) > 1e-6


def test_joint_whitening_of_every_row_is_exact_kernel_pca(mnist_small):
    # 1200 digits, all of them landmarks in three blocks whitened together: exact kernel PCA
    # up to the ridge M eps max|K| of float64 (1e-13 against eigenvalues above 1e-2 of K).
    X, Xt = mnist_small
    X = X[:1200]
    exact = KernelPCA(5, solver="exact", random_state=0).fit(X)
    est = KernelPCA(5, n_features=1200, block_size=400, compute_dtype="float64", tol=1e-12,
                        max_iter=60, random_state=0).fit(X)
    assert est._params["whitening"] == "joint"
    assert principal_angle_sin2(est.transform(Xt), exact.transform(Xt)) < 1e-8
    np.testing.assert_allclose(est.eigenvalues_, exact.eigenvalues_, rtol=1e-8)


def test_default_float32_joint_fit_matches_exact_kernel_pca(mnist_small):
    # The default precision: float32 kernel sections whitened by a float64 factor with the
    # ridge of float32 round-off; k = 5 on 3000 digits lands far below the 1e-3 that
    # separates the components (eigengap checked in test_baselines).
    X, Xt = mnist_small
    exact = KernelPCA(5, solver="exact", random_state=0).fit(X)
    est = KernelPCA(5, n_features=2048, block_size=512, random_state=0).fit(X)
    assert est._params["whitening"] == "joint"
    assert principal_angle_sin2(est.transform(Xt), exact.transform(Xt)) < 1e-4
    np.testing.assert_allclose(est.eigenvalues_, exact.eigenvalues_, rtol=1e-3)


def test_fitted_joint_model_keeps_landmarks_only(mnist_small, tmp_path):
    # The factor (M x M) stays with the fit: the model is kernel sections with folded
    # coefficients, saved and loaded without any whitening matrix, pickled without it.
    X, Xt = mnist_small
    est = KernelPCA(3, n_features=1024, block_size=256, random_state=0).fit(X[:1500])
    f = est.model_.features
    assert not f.whiten
    assert f.normalization is None
    assert est._whitening is None
    assert len(pickle.dumps(est)) < 1024 * 784 * 8 * 1.5  # the landmarks, no 1024 x 1024 factor beside them
    est.save(tmp_path / "m.zarr")
    assert "normalization" not in zarr.open_group(tmp_path / "m.zarr", mode="r")
    back = load(tmp_path / "m.zarr")
    assert np.array_equal(back.transform(Xt), est.transform(Xt))
    assert back.get_params() == est.get_params()


def test_partial_fit_steps_on_jointly_whitened_blocks(mnist_small):
    # partial_fit takes steps on the landmarks whitened together and split into blocks
    # ("auto" and "joint"): the kernel the subspace solver's passes whiten. A model fitted by
    # the subspace solver takes no steps.
    X, _ = mnist_small
    est = KernelPCA(3, n_features=1024, block_size=512, random_state=0).partial_fit(X[:1500])
    assert est._params["whitening"] == "joint"
    est.partial_fit(X[1500:])
    assert est.n_features_ == 1024
    joint = KernelPCA(3, n_features=1024, block_size=512, whitening="joint", random_state=0)
    joint.fit(X[:1500])
    assert (joint.solver_, joint._params["whitening"]) == ("subspace", "joint")
    with pytest.raises(ValueError, match="partial_fit"):
        joint.partial_fit(X[1500:])


@pytest.mark.parametrize("params", [dict(whitening="joint", features="fourier"),
                                    dict(whitening="block", solver="rca"),
                                    dict(whitening="block", solver="exact"),
                                    dict(whitening="cholesky")])
def test_bad_whitening(blobs, params):
    with pytest.raises(ValueError, match="whitening"):
        KernelPCA(2, **params).fit(blobs)


def test_auto_whitening_is_joint_up_to_the_limit(blobs):
    from dsgd_dask.estimators.kpca import JOINT_MAX_FEATURES

    assert KernelPCA(2, n_features=600, block_size=150)._check_params(600)["whitening"] == "joint"
    assert KernelPCA(2, n_features=600)._check_params(600)["whitening"] == "block"  # one block
    big = KernelPCA(2, n_features=JOINT_MAX_FEATURES + 4096)._check_params(10**6)
    assert big["whitening"] == "block"
    assert big["n_blocks"] > 1
    assert KernelPCA(2, n_features=JOINT_MAX_FEATURES)._check_params(10**6)["whitening"] == "joint"
    # the steps whiten several blocks together too (up to their own limit), or on request block by block
    assert KernelPCA(2, solver="dsgd", n_features=2048)._check_params(10**6)["whitening"] == "joint"
    assert KernelPCA(2, n_features=2048, block_size=512)._check_params(10**6, stream=True)["whitening"] == "joint"
    assert KernelPCA(2, solver="dsgd", n_features=1024)._check_params(10**6)["whitening"] == "block"  # one block
    blocks = KernelPCA(2, solver="dsgd", n_features=2048, whitening="block")._check_params(10**6)
    assert (blocks["whitening"], blocks["n_blocks"]) == ("block", 2)
    assert KernelPCA(2, solver="rca", n_features=2048)._check_params(10**6)["whitening"] == "joint"
