"""Parameter validation: every constructor parameter of every estimator is declared in
``_parameter_constraints`` and checked when ``fit`` or ``partial_fit`` starts, before any
input is read, with scikit-learn's ``InvalidParameterError`` naming the parameter."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import check_param_validation

from dsgd_dask import (
    KernelCCA,
    KernelHebbianPCA,
    KernelLogisticRegression,
    KernelPCA,
    KernelRidge,
    KernelSIR,
    KernelSVC,
    KernelSVD,
)
from dsgd_dask.estimators._base import RandomFeatureEstimatorMixin
from dsgd_dask.estimators._constraints import MAX_FEATURES

ESTIMATORS = [KernelPCA, KernelSVD, KernelCCA, KernelSIR, KernelRidge, KernelSVC, KernelLogisticRegression,
              KernelHebbianPCA]
#: The estimators fitted on X alone (the others take a second view or a target).
UNSUPERVISED = (KernelPCA, KernelHebbianPCA)

#: One value outside the constraints of each parameter (of any estimator that has it).
INVALID = {
    "n_components": 0,
    "kernel": "polynomial", "kernel_x": "polynomial", "kernel_y": "rbf2",
    "bandwidth": 0.0, "bandwidth_x": "mean", "bandwidth_y": -1.0,
    "kernel_params": "nu=1.5", "kernel_params_x": [("nu", 1.5)], "kernel_params_y": 1.5,
    "features": "random",
    "whitening": "full",
    "solver": "sgd",
    "n_features": 1e10,
    "block_size": 2.5,
    "n_oversamples": -1,
    "tol": -1.0,
    "batch_size": 0,
    "max_iter": "forever",
    "shuffle_chunks": 0,
    "n_partitions": 1.5,
    "eta0": 0.0,
    "eta_decay": -0.1,
    "average": -1,
    "init": "zeros",
    "center": "yes",
    "ordered": 1,
    "compute_dtype": "float16",
    "cache_bytes": -1,
    "checkpoint": 3,
    "checkpoint_every": 0,
    "verbose": "loud",
    "random_state": "seed",
    "alpha": -1.0,
    "fit_intercept": "yes",
    "preconditioner": "jacobi",
    "preconditioner_jitter": 0.0,
    "reg": 0.0,
    "n_slices": 1,
    "gain": "adam",
    "meta_gain": -0.3,
    "meta_decay": 1.5,
}


def _explode(*args, **kwargs):
    raise AssertionError("an input chunk was computed before the parameters were validated")


def _exploding(shape):
    """A dask array whose every chunk raises when computed."""
    return da.map_blocks(_explode, da.zeros(shape, chunks=(20, *shape[1:])), dtype=np.float64)


@pytest.fixture
def no_input_read(monkeypatch):
    """Reading the input in any way (even its shape) fails the test."""

    def refuse(self, *args, **kwargs):
        raise AssertionError("the input was read before the parameters were validated")

    monkeypatch.setattr(RandomFeatureEstimatorMixin, "_validate_input", refuse)


def _fit_methods(cls):
    """``(name, call)`` of each public fit method of ``cls``, on inputs that fail if read."""
    X, y = _exploding((40, 3)), _exploding((40,))
    if cls in UNSUPERVISED:
        args, extra = (X,), {}
    else:
        args, extra = (X, y), ({"classes": [0, 1]} if cls in (KernelSVC, KernelLogisticRegression) else {})
    yield "fit", lambda est: est.fit(*args)
    if hasattr(cls, "partial_fit"):
        yield "partial_fit", lambda est: est.partial_fit(*args, **extra)


def _cases():
    for cls in ESTIMATORS:
        for param in sorted(cls().get_params()):
            yield pytest.param(cls, param, id=f"{cls.__name__}-{param}")


def test_every_parameter_has_a_constraint_and_an_invalid_value():
    for cls in ESTIMATORS:
        params = set(cls().get_params())
        assert set(cls._parameter_constraints) == params, cls.__name__
        assert params <= set(INVALID), f"{cls.__name__}: no invalid value for {sorted(params - set(INVALID))}"


@pytest.mark.usefixtures("no_input_read")
@pytest.mark.parametrize(("cls", "param"), list(_cases()))
def test_invalid_value_refused_before_any_work(cls, param):
    value = INVALID[param]
    for method, call in _fit_methods(cls):
        est = cls(**{param: value})
        with dask.config.set(scheduler=_explode), pytest.raises(InvalidParameterError) as info:
            call(est)
        message = str(info.value)
        assert message.startswith(f"The '{param}' parameter of {cls.__name__} must be "), (method, message)
        assert message.endswith(f"Got {value!r} instead."), (method, message)
        assert not any(name.endswith("_") for name in vars(est)), f"{method} left fitted attributes"


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_sklearn_param_validation_check(cls):
    # scikit-learn's own check (not among those parametrize_with_checks runs): every
    # parameter constrained, a value of no valid type and a value outside each
    # constraint refused by fit and partial_fit with the message that names it
    check_param_validation(cls.__name__, cls())


@pytest.mark.parametrize("cls", [c for c in ESTIMATORS if c is not KernelHebbianPCA], ids=lambda c: c.__name__)
def test_negative_cache_bytes_refused(cls):
    with pytest.raises(ValueError, match=rf"'cache_bytes' parameter of {cls.__name__} must be an int in the range "
                                         r"\[0, inf\) or None\. Got -1 instead"):
        cls(cache_bytes=-1)._validate_params()
    for valid in (None, 0, 1 << 20, np.int64(5)):
        cls(cache_bytes=valid)._validate_params()


@pytest.mark.usefixtures("no_input_read")
def test_absurd_feature_budgets_refused_naming_the_valid_range():
    # a float budget, and an integer one whose Fourier blocks could never be allocated, are
    # refused when fit starts, naming the valid range, not when the arrays are allocated
    X = _exploding((40, 3))
    for budget in (1e10, 10**10, MAX_FEATURES + 1, 0, 256.0):
        with pytest.raises(InvalidParameterError,
                           match=r"'n_features' parameter of KernelPCA must be an int in the range "
                                 rf"\[1, {MAX_FEATURES}\] or a str among \{{'auto'\}}\. Got {budget!r} instead"):
            KernelPCA(features="fourier", n_features=budget).fit(X)
    with pytest.raises(InvalidParameterError, match=rf"'block_size' parameter of KernelSVD must be an int in the "
                                                    rf"range \[1, {MAX_FEATURES}\]"):
        KernelSVD(features="fourier", block_size=10**10).fit(X, X)
    for budget in (1, 256, np.int64(512), MAX_FEATURES, "auto"):
        KernelPCA(features="fourier", n_features=budget)._validate_params()


def test_accepted_values_of_the_shared_parameters():
    # random_state: a Generator and any non-negative integer (an earlier fit's seed_) as before
    for seed in (None, 0, 2**40, np.random.RandomState(0), np.random.default_rng(0)):
        KernelRidge(random_state=seed)._validate_params()
    with pytest.raises(InvalidParameterError, match="'random_state' parameter of KernelRidge"):
        KernelRidge(random_state=-1)._validate_params()
    KernelPCA(kernel="rbf", bandwidth=2, verbose=1, center=np.True_, checkpoint="ckpt.zarr")._validate_params()
    KernelCCA(bandwidth_x=0.5, kernel_params_y={"nu": 2.5}, kernel_y="matern", tol=1e-8)._validate_params()
    KernelRidge(eta_decay="auto", alpha=0)._validate_params()
    with pytest.raises(InvalidParameterError, match="'eta_decay' parameter of KernelPCA"):
        KernelPCA(eta_decay="auto")._validate_params()
    KernelHebbianPCA(meta_decay=1.0, meta_gain=0.0)._validate_params()
    # InvalidParameterError is a ValueError and a TypeError: code catching either still does
    for exc in (ValueError, TypeError):
        with pytest.raises(exc):
            KernelSIR(n_slices=1)._validate_params()


def test_checks_between_parameters_stay():
    # what no single constraint says: solver with features, kernel_params with kernel
    X = np.random.default_rng(0).normal(size=(60, 3))
    with pytest.raises(ValueError, match=r"KernelPCA\(solver='exact'\) takes features in \['nystroem'\]") as info:
        KernelPCA(solver="exact", features="fourier").fit(X)
    assert not isinstance(info.value, InvalidParameterError)
    with pytest.raises(ValueError, match="nu applies to the matern kernel only"):
        KernelSVD(kernel_y="gaussian", kernel_params_y={"nu": 1.5}).fit(X, X)
