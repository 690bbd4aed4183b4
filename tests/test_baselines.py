"""KernelPCA's one-pass (rca) and dense (exact) solvers, and the Hebbian baselines, against dense references."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
from dask.callbacks import Callback
from sklearn.decomposition import KernelPCA as SkKernelPCA
from sklearn.metrics.pairwise import laplacian_kernel, rbf_kernel
from sklearn.utils.estimator_checks import parametrize_with_checks

import dsgd_dask.baselines._dense as dense
import dsgd_dask.engine.passes as passes
from dsgd_dask import KernelPCA
from dsgd_dask.baselines import GAINS, MAX_SAMPLES, KernelHebbianPCA, excess_reconstruction_error
from dsgd_dask.datasets import load_usps
from dsgd_dask.features import kernel_matrix
from dsgd_dask.features.nystroem import inverse_sqrt
from dsgd_dask.metrics import principal_angle_sin2


def _refuse(*args, **kwargs):
    raise AssertionError("something was computed")


def _centred(K):
    return K - K.mean(axis=0) - K.mean(axis=1)[:, None] + K.mean()


def _cosines(Z, E):
    return np.abs((Z * E).sum(axis=0)) / (np.linalg.norm(Z, axis=0) * np.linalg.norm(E, axis=0))


def _exact(k, **params):
    return KernelPCA(k, solver="exact", **params)


def _rca(k, features="nystroem", **params):
    return KernelPCA(k, solver="rca", features=features, **params)


#: The one-pass solver with each kind of features (the old NystroemPCA and RandomFeaturePCA).
RCA = ["nystroem", "fourier"]


@pytest.fixture(scope="module")
def usps():
    """The first 2000 USPS training digits and 500 test digits, 256 pixels in [0, 1] (the shipped subset)."""
    return load_usps("train", sample=True)[0], load_usps("test", sample=True)[0]


# -- randomized kernel PCA vs exact kernel PCA on MNIST ------------------------------------

@pytest.fixture(scope="module")
def mnist_exact(mnist_small):
    X, Xt = mnist_small
    k = 3
    exact = _exact(k + 1, random_state=0).fit(X)
    return X, Xt, k, exact, exact.transform(Xt)[:, :k]


def test_mnist_eigengap(mnist_exact):
    # Centred spectrum at the median bandwidth: 0.0316, 0.0232, 0.0194 | 0.0169, a 13% gap
    # after k = 3 (none after k = 5), so the top-3 subspace is well defined.
    _, _, k, exact, _ = mnist_exact
    lam = exact.eigenvalues_
    assert lam[k - 1] / lam[k] > 1.1


def test_nystroem_subspace_matches_exact(mnist_exact):
    # sin^2 on held-out digits falls fast with the number of landmarks m: about 4e-3 at
    # m = 128, 7e-4 at 256 and 6-7e-5 at 512 over six seeds (eigenvalues within 1.5%).
    X, Xt, k, exact, E = mnist_exact
    npca = _rca(k, n_features=512, random_state=0).fit(X)
    assert npca.solver_ == "rca"
    assert npca.bandwidth_ == exact.bandwidth_  # same seeded median sample
    assert principal_angle_sin2(npca.transform(Xt), E) < 5e-4
    np.testing.assert_allclose(npca.eigenvalues_, exact.eigenvalues_[:k], rtol=0.03)


def test_random_feature_subspace_matches_exact(mnist_exact):
    # A Monte Carlo estimate: with M = 2048 features the eigenvalues are off by ~5%, so
    # lambda_3 and lambda_4 (13% apart) can nearly swap and one seed's sin^2 ranges over
    # 0.02-0.25 (over 48 seeds: median 0.05, 15% of the seeds above 0.15). The median of
    # seven seeds exceeds 0.15 with probability ~1%; a wrong centring or scaling gives
    # sin^2 near 1.
    X, Xt, k, exact, E = mnist_exact
    fits = [_rca(k, "fourier", n_features=2048, random_state=seed).fit(X) for seed in range(7)]
    assert all(f.n_features_ == 2048 for f in fits)
    assert np.median([principal_angle_sin2(f.transform(Xt), E) for f in fits]) < 0.15
    np.testing.assert_allclose(np.median([f.eigenvalues_ for f in fits], axis=0), exact.eigenvalues_[:k],
                               rtol=0.10)


# -- the out-of-core accumulation is exact -----------------------------------------------

def _features(est, X):
    """The explicit features of a KernelPCA fitted by the rca solver, recomputed densely.

    Fourier: the model's seeded blocks, scaled so their products estimate the kernel.
    Nyström: ``k(x, L) K_LL^{-1/2}`` on the model's landmarks, whitened here.
    """
    f = est.model_.features
    if est.features == "fourier":
        n_blocks = est.n_features_ // f.block_size
        return f.transform(X, 0, n_blocks).astype(np.float64) / np.sqrt(n_blocks)
    L = f.landmarks
    return kernel_matrix(est.kernel_, X, L) @ inverse_sqrt(kernel_matrix(est.kernel_, L))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_panelled_gram_is_the_dense_one(monkeypatch, dtype):
    # a^T a by GEMMs on column panels (5 columns: the last panel partial), summed over two
    # slices, then mirrored: exactly symmetric, equal to the dense product to round-off
    monkeypatch.setattr(passes, "GRAM_PANEL", 5)
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(30, 17)).astype(dtype), rng.normal(size=(12, 17)).astype(dtype)
    out = np.zeros((17, 17))
    passes.add_gram(out, a)
    passes.add_gram(out, b)
    got = passes.mirror_upper(out)
    want = a.T.astype(np.float64) @ a + b.T.astype(np.float64) @ b
    np.testing.assert_array_equal(got, got.T)
    np.testing.assert_allclose(got, want, rtol=0, atol=64 * np.finfo(dtype).eps * np.abs(want).max())


@pytest.mark.parametrize(("features", "rtol"), [("fourier", 1e-5), ("nystroem", 1e-9)])
def test_accumulated_moments_give_the_dense_pca_of_the_features(usps, features, rtol):
    # Fitted chunk by chunk on a dask array: the result is linear PCA of the explicit
    # features up to round-off (float32 Fourier features; Nyström features in float64).
    X = usps[0]
    est = _rca(3, features, n_features=256, random_state=0).fit(da.from_array(X, chunks=(300, -1)))
    assert est.n_features_ == 256
    Z = _features(est, X)
    mean = Z.mean(axis=0)
    vals, vecs = np.linalg.eigh((Z - mean).T @ (Z - mean) / len(Z))
    assert est.convergence_[0]["rows"] == len(X)
    assert (est.n_iter_, len(est.convergence_)) == (1, 1)
    np.testing.assert_allclose(est.eigenvalues_, vals[::-1][:3], rtol=rtol)
    # the model is the centred projection on the top eigenvectors: the functions of the
    # features (Z - mean) V, as coefficients of the model's own features
    assert principal_angle_sin2(est.transform(X), (Z - mean) @ vecs[:, ::-1][:, :3]) < rtol
    # the transform is the centred projection: uncorrelated, variances = eigenvalues
    T = est.transform(X)
    np.testing.assert_allclose(T.mean(axis=0), 0.0, atol=1e-6)
    np.testing.assert_allclose(np.cov(T.T, bias=True), np.diag(est.eigenvalues_), atol=1e-6 * est.eigenvalues_[0])


@pytest.mark.parametrize("features", RCA)
def test_dask_input_gives_the_numpy_result(usps, features):
    # 900 rows: the seeded sample behind the median bandwidth and the feature centre is
    # then every row for numpy and dask alike, so only round-off differs.
    X = usps[0][:900]
    a = _rca(3, features, n_features=256, random_state=0).fit(X)
    Xd = da.from_array(X, chunks=(200, -1))
    for data in (Xd, xr.DataArray(Xd, dims=("digit", "pixel"))):
        b = _rca(3, features, n_features=256, random_state=0).fit(data)
        assert a.bandwidth_ == b.bandwidth_
        np.testing.assert_allclose(b.eigenvalues_, a.eigenvalues_, rtol=1e-6)
        # the coefficients are the unit components (atol 1e-6) through the features' linear map
        np.testing.assert_allclose(b.model_.coef, a.model_.coef, atol=1e-6 * np.abs(a.model_.coef).max())
        np.testing.assert_allclose(b.transform(X), a.transform(X), atol=1e-7)


class _LargestRowBlock(Callback):
    """Records the most rows of the input width any task held."""

    def __init__(self, width):
        super().__init__()
        self.width = width
        self.rows = 0

    def _posttask(self, key, result, dsk, state, id):
        if isinstance(result, np.ndarray) and result.ndim == 2 and result.shape[1] == self.width:
            self.rows = max(self.rows, result.shape[0])


@pytest.mark.parametrize("features", RCA)
def test_fit_on_dask_never_gathers_the_data(usps, features):
    X = usps[0]
    watch = _LargestRowBlock(X.shape[1])
    with watch:
        est = _rca(3, features, n_features=128, random_state=0).fit(da.from_array(X, chunks=(250, -1)))
    assert 0 < watch.rows <= 250  # one chunk at a time (the 128 landmarks fit in one)
    assert est.convergence_[0]["rows"] == len(X)


def test_random_features_are_those_of_dsgd_kernel_pca(usps):
    # Same data, random_state and block size: the same seeded feature blocks.
    X = usps[0][:500]
    rpca = _rca(2, "fourier", n_features=512, random_state=3).fit(X)
    dsgd = KernelPCA(2, features="fourier", solver="dsgd", n_features=512, max_iter=2, random_state=3).fit(X)
    assert rpca.bandwidth_ == dsgd.bandwidth_
    np.testing.assert_array_equal(rpca.model_.features.transform(X[:50], 0, 2),
                                  dsgd.model_.features.transform(X[:50], 0, 2))


# -- lazy and labelled transforms ---------------------------------------------------------

def _fitted(X):
    yield _rca(3, "fourier", n_features=128, random_state=0).fit(X)
    yield _rca(3, n_features=100, random_state=0).fit(X)
    yield _exact(3, random_state=0).fit(X)
    yield KernelHebbianPCA(3, max_iter=2, random_state=0).fit(X)


def test_transform_stays_lazy_on_dask_and_labelled_on_xarray(usps):
    X, Xt = usps[0][:300], usps[1][:200]
    Xd = da.from_array(Xt, chunks=(50, -1))
    xa = xr.DataArray(Xd, dims=("digit", "pixel"), coords={"digit": np.arange(200) + 1000})
    for est in _fitted(X):
        with dask.config.set(scheduler=_refuse):
            Z = est.transform(Xd)
            L = est.transform(xa)
        assert isinstance(Z, da.Array), type(est).__name__
        assert Z.chunks == (Xd.chunks[0], (3,))
        assert len(Z.dask.layers[Z.name]) == Xd.numblocks[0]  # one task per row chunk
        expected = est.transform(Xt)
        # float32 features: the GEMMs of 50-row chunks and of all 200 rows may round differently
        # (relative 6e-8 per product, summed over the features); float64 paths agree to 1e-9
        float32 = hasattr(est, "model_") and est.model_.features.dtype == np.float32
        atol = 1e-6 * np.abs(expected).max() if float32 else 1e-9
        np.testing.assert_allclose(Z.compute(), expected, rtol=1e-6, atol=atol)
        assert isinstance(L, xr.DataArray)
        assert L.dims == ("digit", "component")
        np.testing.assert_array_equal(L["digit"].values, np.arange(200) + 1000)
        np.testing.assert_allclose(L.values, expected, rtol=1e-6, atol=atol)


# -- exact kernel PCA ----------------------------------------------------------------------

@pytest.mark.parametrize(("kernel", "reference"), [
    ("gaussian", lambda A, B, s: rbf_kernel(A, B, gamma=0.5 / s**2)),
    ("laplacian", lambda A, B, s: laplacian_kernel(A, B, gamma=1.0 / s)),
])
def test_exact_matches_scikit_learn_kernel_pca(usps, kernel, reference):
    X, Xt = usps[0][:500].astype(np.float64), usps[1].astype(np.float64)  # scikit-learn keeps float32
    ours = _exact(4, kernel=kernel, random_state=0).fit(X)
    s = ours.bandwidth_
    ref = SkKernelPCA(4, kernel="precomputed").fit(reference(X, X, s))
    np.testing.assert_allclose(ours.eigenvalues_, ref.eigenvalues_ / len(X), rtol=1e-10)
    # same sign convention (largest entry of each eigenvector positive)
    np.testing.assert_allclose(ours.transform(Xt), ref.transform(reference(Xt, X, s)), atol=1e-10)
    np.testing.assert_allclose(ours.fit_transform(X), ref.transform(reference(X, X, s)), atol=1e-10)


def test_exact_refuses_large_data_before_reading_it():
    X = da.zeros((MAX_SAMPLES + 1, 3), chunks=(5000, 3))
    for est in (_exact(2), KernelHebbianPCA(2)):
        with dask.config.set(scheduler=_refuse), pytest.raises(ValueError, match=(
                rf"limited to n_samples <= {MAX_SAMPLES} \(got {MAX_SAMPLES + 1}\); use KernelPCA with "
                "solver='subspace', 'rca' or 'dsgd'")):
            est.fit(X)


def test_size_limit_is_the_module_constant(monkeypatch):
    X = np.random.default_rng(0).normal(size=(60, 3))
    monkeypatch.setattr(dense, "MAX_SAMPLES", 50)
    with pytest.raises(ValueError, match=r"KernelPCA\(solver='exact'\) .* limited to n_samples <= 50"):
        _exact(2).fit(X)
    monkeypatch.setattr(dense, "MAX_SAMPLES", 60)
    assert _exact(2).fit(X).n_features_ == 60  # every training row a landmark


# -- the Kernel Hebbian Algorithm family ---------------------------------------------------

@pytest.fixture(scope="module")
def kha_problem(usps):
    """500 USPS digits, r = 3 (eigenvalue ratios 1.83, 1.31, 1.42: every component well separated)."""
    X, Xt = usps[0][:500], usps[1]
    r = 3
    exact = _exact(r, random_state=0).fit(X)
    K = _centred(kernel_matrix(exact.kernel_, X))
    mu = np.linalg.eigvalsh(K)
    e_min = float(np.sqrt(np.sum(mu[:-r] ** 2)))
    fits = {}
    for gain in GAINS:
        errors = []
        model = KernelHebbianPCA(r, gain=gain, max_iter=20, random_state=0).fit(
            X, callback=lambda n, A, errors=errors: errors.append(excess_reconstruction_error(K, A, min_error=e_min)))
        fits[gain] = (model, errors)
    return X, Xt, r, exact, K, fits


@pytest.mark.parametrize(("gain", "tol"), [("constant", 3e-2), ("1/t", 1e-2), ("et", 5e-4), ("smd", 5e-4)])
def test_kha_reduces_the_excess_reconstruction_error(kha_problem, gain, tol):
    # After 20 passes (eta0 = 0.2): constant gain stalls on its noise floor (~5e-3 to 1e-2
    # over three seeds), KHA/t is slow (2-3e-3), KHA/et and KHA-SMD reach 1.5-5e-5.
    *_, fits = kha_problem
    model, errors = fits[gain]
    assert len(errors) == model.n_iter_ == 20
    assert errors[-1] < errors[0] / 10
    assert 0 <= errors[-1] < tol


def test_kha_gains_rank_as_in_the_paper(kha_problem):
    *_, fits = kha_problem
    final = {gain: errors[-1] for gain, (_, errors) in fits.items()}
    assert final["et"] < final["1/t"] / 10
    assert final["smd"] < final["1/t"] / 10


@pytest.mark.parametrize("gain", ["et", "smd"])
def test_kha_converges_to_the_exact_components(kha_problem, gain):
    # Observed over three seeds: sin^2 4-9e-6 on held-out digits, every |cos| > 0.9996,
    # eigenvalues within 0.1%.
    X, Xt, r, exact, _, fits = kha_problem
    model, _ = fits[gain]
    Z, E = model.transform(Xt), exact.transform(Xt)
    assert principal_angle_sin2(Z, E) < 1e-4
    assert np.all(_cosines(Z, E) > 0.999)  # ordered eigenvectors, not just the subspace
    np.testing.assert_allclose(model.eigenvalues_, exact.eigenvalues_, rtol=5e-3)
    # orthonormal eigenfunctions: A K~ A^T = I at convergence (observed within 7.4e-3)
    A = model.coef_
    K = _centred(kernel_matrix(exact.kernel_, X))
    np.testing.assert_allclose(A @ K @ A.T, np.eye(r), atol=2e-2)


def test_excess_reconstruction_error(kha_problem):
    _, _, r, _, K, _ = kha_problem
    mu, U = np.linalg.eigh(K)
    A = (U[:, ::-1][:, :r] / np.sqrt(mu[::-1][:r])).T  # the top eigenvectors at unit RKHS norm
    assert abs(excess_reconstruction_error(K, A)) < 1e-10
    # invariant to rotations of the components, positive away from the optimum
    Q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(r, r)))
    assert abs(excess_reconstruction_error(K, Q @ A)) < 1e-10
    assert excess_reconstruction_error(K, 0.9 * A) > 1e-3
    with pytest.raises(ValueError, match="A must have shape"):
        excess_reconstruction_error(K, A[:, :-1])
    with pytest.raises(ValueError, match="square"):
        excess_reconstruction_error(K[:-1], A)
    F = np.random.default_rng(0).normal(size=(20, 2))
    with pytest.raises(ValueError, match="rank"):
        excess_reconstruction_error(F @ F.T, np.ones((2, 20)))


def test_kha_divergence_and_degenerate_data_are_reported(usps):
    with pytest.raises(ValueError, match="diverged in pass 1.*lower eta0"):
        KernelHebbianPCA(3, gain="constant", eta0=50.0, max_iter=2, random_state=0).fit(usps[0][:200])
    with pytest.raises(ValueError, match="no variance under this kernel"):
        KernelHebbianPCA(2, bandwidth=1.0).fit(np.ones((20, 3)))


# -- scikit-learn's estimator checks ------------------------------------------------------

def _estimators():
    # Small feature budgets keep each of the ~45 checks fast; quality is tested above.
    yield _rca(2, "fourier", n_features=64, block_size=32, random_state=0)
    yield _rca(2, "fourier", n_features=64, block_size=32, kernel="laplacian", compute_dtype="float64",
               random_state=0)
    yield _rca(5)  # the automatic budget: every row a landmark on the checks' small data
    yield _exact(5)
    yield _exact(2, kernel="arccos", center=False, random_state=0)
    yield KernelHebbianPCA(n_components=2, max_iter=3, random_state=0)
    yield KernelHebbianPCA(n_components=2, gain="smd", max_iter=3, random_state=0)


def _expected_failures(estimator):
    if not isinstance(estimator, KernelPCA):
        return {}
    # the checks call partial_fit whenever it exists; the rca and exact solvers need all the
    # data at once, and their partial_fit says so with a ValueError (the solver table's rule)
    reason = "partial_fit raises a ValueError for solvers that do not stream"
    return {"check_fit_score_takes_y": reason, "check_n_features_in_after_fitting": reason}


@parametrize_with_checks(list(_estimators()), expected_failed_checks=_expected_failures)
def test_sklearn_compatible(estimator, check):
    check(estimator)


# -- bad input and impossible parameters --------------------------------------------------

@pytest.fixture
def small():
    return np.random.default_rng(0).normal(size=(60, 4))


def _rca_fourier(**params):
    return KernelPCA(**{"solver": "rca", "features": "fourier", "n_features": 1024, **params})


def _rca_nystroem(**params):
    return KernelPCA(**{"solver": "rca", **params})


def _exact_pca(**params):
    return KernelPCA(**{"solver": "exact", **params})


@pytest.mark.parametrize(
    ("make", "params", "exc", "match"),
    [
        (_rca_fourier, {"n_components": 300, "n_features": 256}, ValueError,
         "n_components=300 must be <= n_features=256"),
        (_rca_fourier, {"n_features": 0}, ValueError,
         r"'n_features' parameter of KernelPCA must be an int in the range \[1, 16777216\]"),
        (_rca_fourier, {"block_size": 1.5}, TypeError, "'block_size' parameter of KernelPCA must be an int"),
        (_rca_fourier, {"compute_dtype": "float16"}, ValueError,
         "'compute_dtype' parameter of KernelPCA must be a str among"),
        (_rca_fourier, {"center": "yes"}, ValueError, "'center' parameter of KernelPCA must be an instance of 'bool'"),
        (_rca_fourier, {"n_features": 100, "block_size": 64}, ValueError,
         "n_features=100 is not a multiple of block_size=64: use n_features=64 or 128"),
        (_rca_nystroem, {"n_components": 40, "n_features": 30}, ValueError, "n_components=40 must be <= n_features=30"),
        (_rca_nystroem, {"n_features": 61}, ValueError, "n_features=61 exceeds the 60 rows"),
        (_rca_nystroem, {"whitening": "block"}, ValueError, "whitens all the landmarks together"),
        (_rca_nystroem, {"kernel": "polynomial"}, ValueError,
         "'kernel' parameter of KernelPCA must be a str among .*Got 'polynomial'"),
        (_rca_nystroem, {"bandwidth": -1.0}, ValueError,
         r"'bandwidth' parameter of KernelPCA must be .*a float in the range \(0\.0, inf\)"),
        (_exact_pca, {"n_components": 61}, ValueError, "n_components=61 must be <= n_samples=60"),
        (_exact_pca, {"n_components": 0}, ValueError,
         r"'n_components' parameter of KernelPCA must be an int in the range \[1, inf\)"),
        (_exact_pca, {"kernel_params": {"gamma": 1}}, ValueError, "unknown kernel_params"),
        (_exact_pca, {"features": "fourier"}, ValueError, r"KernelPCA\(solver='exact'\) takes features in"),
        (KernelHebbianPCA, {"gain": "adam"}, ValueError, "'gain' parameter of KernelHebbianPCA must be a str among"),
        (KernelHebbianPCA, {"eta0": 0.0}, ValueError,
         r"'eta0' parameter of KernelHebbianPCA must be a float in the range \(0\.0, inf\)"),
        (KernelHebbianPCA, {"meta_gain": -1.0}, ValueError,
         r"'meta_gain' parameter of KernelHebbianPCA must be a float in the range \[0\.0, inf\)"),
        (KernelHebbianPCA, {"meta_decay": 1.5}, ValueError,
         r"'meta_decay' parameter of KernelHebbianPCA must be a float in the range \[0\.0, 1\.0\]"),
        (KernelHebbianPCA, {"max_iter": 0}, ValueError,
         r"'max_iter' parameter of KernelHebbianPCA must be an int in the range \[1, inf\)"),
        (KernelHebbianPCA, {"random_state": "seed"}, TypeError, "random_state"),
    ],
)
def test_impossible_parameters(small, make, params, exc, match):
    with pytest.raises(exc, match=match):
        make(**{"n_components": 2, **params}).fit(small)


@pytest.mark.parametrize("make", [_rca_fourier, _rca_nystroem, _exact_pca, KernelHebbianPCA])
def test_bad_input(small, make):
    est = make(n_components=2, random_state=0)
    bad = small.copy()
    bad[37, 2] = np.nan
    for data in (bad, da.from_array(bad, chunks=(20, 4))):
        with pytest.raises(ValueError, match="NaN|infinity"):
            est.fit(data)
    with pytest.raises(ValueError, match="2-D"):
        est.fit(small[:, 0])
    with pytest.raises(TypeError, match="real numeric dtype"):
        est.fit(da.from_array(np.full((60, 4), "a")))
    est.fit(small)
    with pytest.raises(ValueError, match=f"X has 3 features, but {type(est).__name__} is expecting 4 features"):
        est.transform(small[:, :3])
    with pytest.raises(ValueError, match="NaN|infinity"):
        est.transform(da.from_array(bad, chunks=(20, 4))).compute()


# -- persistence and the solver record -------------------------------------------------------

@pytest.mark.parametrize(("solver", "features"), [("rca", "fourier"), ("rca", "nystroem"), ("exact", "nystroem")])
def test_one_shot_models_save_load_and_refuse_partial_fit(usps, tmp_path, solver, features):
    # A model of the rca or exact solver is a function set like any other: saved and
    # loaded bit for bit; partial_fit (steps) is refused, before and after the fit.
    from dsgd_dask import load

    X, Xt = usps[0][:400], usps[1][:100]
    est = KernelPCA(3, solver=solver, features=features, n_features=128, random_state=0)
    with pytest.raises(ValueError, match=f"solver='{solver}' needs all the data at once"):
        est.partial_fit(X)
    est.fit(X)
    assert est.solver_ == solver
    assert est.n_features_ == (400 if solver == "exact" else 128)
    assert est.convergence_[0]["iteration"] == est.n_iter_ == 1
    est.save(tmp_path / "m.zarr")
    back = load(tmp_path / "m.zarr")
    assert back.solver_ == solver
    assert back.get_params() == est.get_params()
    np.testing.assert_array_equal(back.transform(Xt), est.transform(Xt))
    np.testing.assert_array_equal(back.eigenvalues_, est.eigenvalues_)
    with pytest.raises(ValueError, match="needs all the data at once"):
        back.partial_fit(X)
