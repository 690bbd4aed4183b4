"""Labels as scikit-learn takes them, and data or bandwidths of scales a precision cannot hold.

Class labels: an object array of numbers is numbers (never their strings), missing labels
and a mix of numbers and strings are refused, whether ``y`` is numpy, dask or xarray.
Scales: where squared distances (Nyström sections) or phases (Fourier features) overflow
or underflow the compute precision, a ``ValueError`` says which scale and what to do;
where they fit, the fit is the same at any scale; an offset of the data costs nothing.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr
from sklearn.linear_model import LogisticRegression

from dsgd_dask import KernelLogisticRegression, KernelPCA, KernelRidge, KernelSVC
from dsgd_dask.features import KernelSpec, RandomFeatures, median_bandwidth
from dsgd_dask.features.nystroem import NystroemFeatures

SMALL = dict(n_features=128, block_size=64, max_iter=60, random_state=0)
CLASSIFIERS = (KernelSVC, KernelLogisticRegression)


@pytest.fixture(scope="module")
def labelled():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 2))
    return X, (X[:, 0] + 0.3 * X[:, 1] > 0).astype(int)


@pytest.fixture(scope="module")
def smooth():
    """A smooth target of two inputs, with held-out rows."""
    rng = np.random.default_rng(0)
    X, Xt = rng.normal(size=(1000, 2)), rng.normal(size=(400, 2))

    def f(Z):
        return np.sin(2 * Z[:, 0]) + 0.5 * np.cos(Z[:, 1])

    return X, f(X) + 0.1 * rng.normal(size=len(X)), Xt, f(Xt)


def _kinds(y):
    """``y`` as numpy, dask (two chunks) and an xarray DataArray."""
    yield y
    yield da.from_array(y, chunks=len(y) // 2)
    yield xr.DataArray(y, dims="sample")


# -- class labels ------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", CLASSIFIERS)
def test_object_numbers_are_numeric_labels(labelled, cls):
    X, y = labelled
    # scikit-learn's classes for these labels (its classifiers refuse them as an object
    # array, "Unknown label type: unknown"; as numbers, classes_ are the integers)
    reference = LogisticRegression().fit(X, y).classes_
    for y_numeric, y_object in zip(_kinds(y), _kinds(y.astype(object)), strict=True):
        numeric = cls(**SMALL).fit(X, y_numeric)
        np.testing.assert_array_equal(numeric.classes_, reference)
        clf = cls(**SMALL).fit(X, y_object)
        assert clf.classes_.dtype.kind in "iu"
        np.testing.assert_array_equal(clf.classes_, reference)
        # the same codes as the integers in the same container (a lazy y makes the rows
        # lazy, read in its chunks): the same model
        np.testing.assert_array_equal(clf.decision_function(X), numeric.decision_function(X))
    pred = clf.predict(X)
    assert set(pred.tolist()) <= set(y.tolist())
    assert (pred == y.astype(object)).mean() == clf.score(X, y.astype(object)) == clf.score(X, y) > 0.9


@pytest.mark.parametrize("cls", CLASSIFIERS)
def test_partial_fit_classes_of_object_numbers(labelled, cls):
    X, y = labelled
    clf = cls(**SMALL).partial_fit(X, y.astype(object), classes=np.array([0, 1], dtype=object))
    np.testing.assert_array_equal(clf.classes_, [0, 1])
    assert clf.classes_.dtype.kind in "iu"
    clf.partial_fit(X[:50], y[:50])  # numbers as numbers, in later calls too
    with pytest.raises(ValueError, match="numeric labels but classes"):
        cls(**SMALL).partial_fit(X, y, classes=["a", "b"])
    with pytest.raises(ValueError, match="string labels but classes_"):
        clf.partial_fit(X[:50], np.where(y[:50] > 0, "a", "b"))


@pytest.mark.parametrize(("bad", "match"), [
    # (xarray turns None into NaN)
    ([0, 1, None], r"missing labels \((None|nan)\)"),
    ([0.0, 1.0, np.nan], r"missing labels \(nan\)"),
    (["a", "b", None], r"missing labels \((None|nan)\)"),
    ([1, "a", 1], "mixes numbers and strings"),
])
def test_missing_and_mixed_labels_are_refused(labelled, bad, match):
    X, _ = labelled
    y = np.array(bad * 100, dtype=object)
    for kind in _kinds(y):
        with pytest.raises(ValueError, match=match):
            KernelSVC(**SMALL).fit(X, kind)
    with pytest.raises(ValueError, match=match):
        KernelLogisticRegression(**SMALL).partial_fit(X, np.array([0, 1] * 150), classes=np.array(bad, dtype=object))


def test_nan_in_float_labels_is_refused(labelled):
    X, y = labelled
    bad = y.astype(float)
    bad[3] = np.nan
    for kind in _kinds(bad):
        with pytest.raises(ValueError, match="NaN or infinity"):
            KernelSVC(**SMALL).fit(X, kind)


@pytest.mark.parametrize("cls", CLASSIFIERS)
def test_string_labels(labelled, cls):
    X, y = labelled
    names = np.where(y > 0, "yes", "no")
    for plain, kind in zip(_kinds(names), _kinds(names.astype(object)), strict=True):
        reference = cls(**SMALL).fit(X, plain)
        np.testing.assert_array_equal(reference.classes_, ["no", "yes"])
        clf = cls(**SMALL).fit(X, kind)
        np.testing.assert_array_equal(clf.classes_, ["no", "yes"])
        np.testing.assert_array_equal(clf.decision_function(X), reference.decision_function(X))
    assert set(clf.predict(X).tolist()) <= {"no", "yes"}
    assert clf.score(X, names.astype(object)) == clf.score(X, names) > 0.9


# -- scales ------------------------------------------------------------------------------------


def _fit(cls, X, **params):
    if cls is KernelPCA:
        return KernelPCA(2, **SMALL, **params).fit(X)
    return KernelRidge(**{"solver": "dsgd", **SMALL, **params}).fit(X, np.sin(X[:, 0] / np.abs(X).max()))


@pytest.mark.parametrize("cls", [KernelPCA, KernelRidge])
def test_extreme_scales_are_refused(labelled, cls):
    X, _ = labelled
    # Nyström sections square distances: 1e19 overflows float32 (3.4e38), 1e-20 underflows it (1.2e-38)
    with pytest.raises(ValueError, match=r"largest distance of .* is [\d.]+e\+19; its square, .* overflows float32.*"
                                         r"standardise the data.*compute_dtype='float64'"):
        _fit(cls, X * 1e19)
    with pytest.raises(ValueError, match=r"median distance of .* is [\d.]+e-20; its square, .* underflows float32.*"
                                         r"standardise the data.*compute_dtype='float64'"):
        _fit(cls, X * 1e-20)
    # the arc-cosine kernel is not shift-invariant: its sections square the rows' norms
    with pytest.raises(ValueError, match=r"largest norm of .* is [\d.]+e\+19; its square, .* overflows float32"):
        _fit(cls, X * 1e19, kernel="arccos")
    # a bandwidth far below the resolution of the data's distances, whatever the features
    for features in ("nystroem", "fourier"):
        with pytest.raises(ValueError, match=r"bandwidth=1e-30 is .*e\+30 times smaller than the median distance"):
            _fit(cls, X, bandwidth=1e-30, features=features)
    # Fourier features multiply the inputs by omega / bandwidth: their limits are of the first power
    with pytest.raises(ValueError, match=r"median distance of .*, [\d.]+e-40, underflows float32"):
        _fit(KernelPCA, X * 1e-40, features="fourier")
    with pytest.raises(ValueError, match=r"bandwidth=.*e-40: 1/bandwidth, [\d.]+e\+\d+, overflows float32.*standard"):
        _fit(KernelRidge, X * 1e-40, features="fourier")
    # float64's own limits, with no advice to change the precision
    with pytest.raises(ValueError, match=r"its square, .* underflows float64") as err:
        _fit(cls, X * 1e-160, compute_dtype="float64")
    assert "compute_dtype" not in str(err.value)
    with pytest.raises(ValueError, match=r"1/bandwidth is 1e-40; its square, 1e-80, underflows float32"):
        _fit(cls, X, bandwidth=1e40)


def _outputs(model, X):
    return model.transform(X) if isinstance(model, KernelPCA) else model.predict(X)


@pytest.mark.parametrize("cls", [KernelPCA, KernelRidge])
@pytest.mark.parametrize(("features", "dtype", "tol"), [
    # float32 phases x omega / bandwidth round differently at each scale: eps32 * |phase| ~ 1e-6
    # on the features (observed 3e-7 relative on the outputs)
    ("fourier", "float32", 1e-5),
    # float64 squared distances round differently at each scale, and the whitening of the
    # landmarks (eigenvalues kept down to m eps max|K|) amplifies it: observed 1e-4 for the
    # ridge's steps, 1e-5 after a mere rescaling by 3, 3e-10 for PCA's top components
    ("nystroem", "float64", 1e-3),
])
def test_representable_scales_fit_alike(labelled, cls, features, dtype, tol):
    X, _ = labelled
    ref = _fit(cls, X, features=features, compute_dtype=dtype)
    # the median bandwidth follows the scale: the same kernel, so the same outputs
    for scale in (1e19, 1e-20):
        model = _fit(cls, X * scale, features=features, compute_dtype=dtype)
        assert model.bandwidth_ == pytest.approx(ref.bandwidth_ * scale, rel=1e-12)
        out, want = _outputs(model, X * scale), _outputs(ref, X)
        assert np.abs(out - want).max() <= tol * np.abs(want).max()


def test_median_bandwidth_at_any_scale(labelled):
    X, _ = labelled
    ref = median_bandwidth(X)
    for scale in (1e-170, 1e170):  # squares under- and overflow float64: the median is taken on X / 2^k
        assert median_bandwidth(X * scale) == pytest.approx(ref * scale, rel=1e-12)
        assert median_bandwidth(X * scale, "norm") == pytest.approx(median_bandwidth(X, "norm") * scale, rel=1e-12)


# -- an offset ---------------------------------------------------------------------------------


def test_features_are_taken_about_the_centre_in_float64():
    rng = np.random.default_rng(0)
    X, L = rng.normal(size=(50, 3)), rng.normal(size=(64, 3))
    offset = 1e7  # float32 spacing at 1e7 is 1: rounding before centring would lose every digit
    spec = KernelSpec("gaussian", 1.0)
    fourier = RandomFeatures(spec, 3, 64, 0, "float32", center=X.mean(axis=0))
    shifted = RandomFeatures(spec, 3, 64, 0, "float32", center=X.mean(axis=0) + offset)
    # the centred inputs differ by the float64 rounding of the offset (1e7 * 1.1e-16), below
    # float32's spacing: the features agree to float32 round-off of phases of order 10
    np.testing.assert_allclose(shifted.transform(X + offset, 0, 1), fourier.transform(X, 0, 1), atol=1e-5)
    ny = NystroemFeatures(spec, L, 64, 0, "float32", center=X.mean(axis=0))
    ny_shifted = NystroemFeatures(spec, L + offset, 64, 0, "float32", center=X.mean(axis=0) + offset)
    # float32 sections whitened by K_LL^{-1/2}, whose kept eigenvalues go down to m eps32 max|K|
    # (1e-5): round-off of 1e-7 grows to at most ~1e-7 / sqrt(1e-5) ~ 3e-5
    np.testing.assert_allclose(ny_shifted.transform(X + offset, 0, 1), ny.transform(X, 0, 1), atol=3e-4)


@pytest.mark.parametrize("features", ["nystroem", "fourier"])
@pytest.mark.parametrize("solver", ["dsgd", "cg"])
def test_an_offset_costs_no_precision(smooth, features, solver):
    X, y, Xt, yt = smooth
    offset = 1e7  # float32 spacing at 1e7 is 1, the spread of the data

    def r2(shift):
        model = KernelRidge(features=features, solver=solver, n_features=256, random_state=0)
        return model.fit(X + shift, y).score(Xt + shift, yt)

    plain, shifted = r2(0.0), r2(offset)
    assert plain > 0.7  # a fit worth keeping
    # the features are computed about the data's mean, centred in float64: they agree to
    # float32 round-off, the fits to the solvers' sensitivity to it (observed |dR^2| <= 3e-6;
    # rounding the inputs to float32 before centring cost 0.25 of R^2)
    assert abs(shifted - plain) < 1e-4


@pytest.mark.parametrize("cls", [KernelPCA, KernelRidge])
def test_the_dense_solvers_take_the_kernel_about_the_mean(smooth, cls):
    X, y, Xt, _ = smooth
    X, y = X[:400], y[:400]
    offset = 1e9  # |x|^2 ~ 1e18: float64's spacing there (128) exceeds every squared distance

    def outputs(shift):
        if cls is KernelPCA:
            return np.abs(KernelPCA(2, solver="exact").fit(X + shift).transform(Xt + shift))  # up to sign
        return KernelRidge(solver="exact", alpha=1e-3).fit(X + shift, y).predict(Xt + shift)

    plain, shifted = outputs(0.0), outputs(offset)
    # the shifted inputs are themselves rounded to 1.2e-7 (float64's spacing at 1e9), and the
    # kernel is smooth at the bandwidth's scale (about 1): outputs move by about that (observed
    # 1e-7 relative); distances of the raw rows gave a ridge of R^2 -9000
    assert np.abs(shifted - plain).max() <= 1e-5 * np.abs(plain).max()
