"""[cos, sin] pairs of random Fourier frequencies: the features, their kernel, their models."""

import numpy as np
import pytest
from sklearn.datasets import load_digits

from dsgd_dask import KernelLogisticRegression, KernelRidge, load
from dsgd_dask.features import FourierPairs, KernelSpec, RandomFeatures, kernel_matrix


def test_pairs_are_cos_and_sin_of_the_same_frequencies():
    spec = KernelSpec("gaussian", 1.5)
    X = np.random.default_rng(0).normal(size=(50, 6))
    f = FourierPairs(spec, 6, 64, seed=3, dtype="float64")
    z = f.transform(X, 0, 2)
    assert z.shape == (50, 128)
    for j in range(2):
        w, b = f.block(j)
        np.testing.assert_array_equal(w[:, :32], w[:, 32:])  # each frequency written twice
        assert not b.any()
        u = X @ w[:, :32]
        block = z[:, 64 * j:64 * (j + 1)]
        np.testing.assert_allclose(block[:, :32], np.sqrt(2 / 64) * np.cos(u), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(block[:, 32:], np.sqrt(2 / 64) * np.sin(u), rtol=1e-12, atol=1e-14)
    # the same blocks regenerated from the cache, from their seeds, and in float32
    np.testing.assert_array_equal(f.transform(X, 1, 2), z[:, 64:])
    z32 = FourierPairs(spec, 6, 64, seed=3, dtype="float32").transform(X, 0, 2)
    np.testing.assert_allclose(z32, z, atol=1e-5)


def test_pairs_estimate_the_kernel_with_less_error_than_phases():
    # E[z(x) . z(y)] = k(x, y); pairs have no phase noise: their error over many blocks is
    # smaller than that of as many phased cosines (Sutherland and Schneider 2015)
    spec = KernelSpec("gaussian", 2.0)
    X = np.random.default_rng(1).normal(size=(40, 5))
    K = kernel_matrix(spec, X, X)
    m, J = 256, 64
    errs = {}
    for cls in (FourierPairs, RandomFeatures):
        Z = cls(spec, 5, m, seed=0, dtype="float64").transform(X, 0, J)
        errs[cls.__name__] = np.abs(Z @ Z.T / J - K).max()
    # 16,384 frequency draws: a deviation of a few times 1 / sqrt(J m / 2) = 0.011 at most
    assert errs["FourierPairs"] < 0.03
    assert errs["FourierPairs"] < errs["RandomFeatures"]


def test_pairs_refuse_odd_blocks_and_kernels_without_a_spectrum():
    with pytest.raises(ValueError, match="even block_size"):
        FourierPairs(KernelSpec("gaussian", 1.0), 3, 63, seed=0)
    with pytest.raises(ValueError, match="shift-invariant"):
        FourierPairs(KernelSpec("arccos", 1.0), 3, 64, seed=0)


def test_machines_on_pairs_fit_save_and_load(tmp_path):
    X, y = load_digits(return_X_y=True)
    X = X / 16
    clf = KernelLogisticRegression(features="fourier_pairs", random_state=0).fit(X[:1200], y[:1200])
    assert isinstance(clf.model_.features, FourierPairs)
    assert clf.score(X[1200:], y[1200:]) > 0.9
    clf.save(str(tmp_path / "m.zarr"))
    back = load(str(tmp_path / "m.zarr"))
    assert isinstance(back.model_.features, FourierPairs)
    np.testing.assert_array_equal(back.decision_function(X[1200:]), clf.decision_function(X[1200:]))
    # the passes take them too: conjugate gradients on pairs reach the closed form on them
    ridge = KernelRidge(alpha=1e-3, solver="cg", features="fourier_pairs", n_features=512, tol=1e-10,
                        compute_dtype="float64", random_state=0).fit(X[:600], X[:600, 20])
    Z = ridge.model_.features.transform(X[:600], 0, ridge.n_features_ // ridge.model_.features.block_size)
    n = 600
    J = ridge.n_features_ // ridge.model_.features.block_size
    b = ridge.intercept_
    coef = np.linalg.solve(Z.T @ Z / n + 1e-3 * J * np.eye(Z.shape[1]), Z.T @ (X[:600, 20] - b) / n)
    np.testing.assert_allclose(ridge.predict(X[:600]), Z @ coef + b, atol=1e-6)


def test_pairs_where_the_solvers_take_them():
    # kernel CCA and SVD take pairs on their steps (and CCA on its one pass); the other
    # component analyses refuse them before reading the data, naming the features they take
    from dsgd_dask import KernelCCA, KernelPCA, KernelSIR, KernelSVD

    X, y = load_digits(return_X_y=True)
    X = X[:300] / 16
    cca = KernelCCA(2, solver="dsgd", features="fourier_pairs", n_features=128, random_state=0)
    cca.fit(X[:, :32], X[:, 32:])
    assert all(isinstance(f, FourierPairs) for f in cca._features)
    svd = KernelSVD(2, features="fourier_pairs", n_features=128, random_state=0).fit(X[:, :32], X[:, 32:])
    assert all(isinstance(f, FourierPairs) for f in svd._features)
    with pytest.raises(ValueError, match="even block_size"):
        KernelCCA(2, solver="dsgd", features="fourier_pairs", n_features=129, block_size=129).fit(X[:, :32], X[:, 32:])
    for est in (KernelPCA(2, solver="dsgd", features="fourier_pairs"),
                KernelSIR(2, solver="dsgd", features="fourier_pairs")):
        with pytest.raises(ValueError, match="takes features in"):
            est.fit(X, y[:300].astype(float))
