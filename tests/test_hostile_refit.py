"""Atomic fits: a fit or partial_fit that raises (Ctrl-C included) leaves the estimator exactly as it was."""

from __future__ import annotations

import dataclasses
import os
import pickle
import signal

import dask.array as da
import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

import dsgd_dask
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

RNG = np.random.default_rng(0)
X = RNG.standard_normal((300, 5))
Y = np.tanh(X[:, :3]) + 0.1 * RNG.standard_normal((300, 3))  # the second view, row-aligned with X
Y_REG = np.sin(X[:, 0]) + X[:, 1]
Y_CLS = np.where(X[:, 0] + X[:, 1] ** 2 > 1.0, 1, -1)
Y_SIR = X[:, 0] ** 2 + 0.1 * RNG.standard_normal(300)

SMALL = dict(n_features=64, block_size=32, batch_size=64, random_state=0)
STEPS = dict(SMALL, max_iter=10)

#: (estimator, its target: None, "view", "reg", "cls" or "sir") for every estimator and a solver of each family.
CASES = {
    "pca-dsgd": (KernelPCA(2, solver="dsgd", **STEPS), None),
    "pca-subspace": (KernelPCA(2, solver="subspace", tol=0.0, **dict(SMALL, max_iter=3)), None),
    "pca-rca": (KernelPCA(2, solver="rca", **SMALL), None),
    "svd-dsgd": (KernelSVD(2, solver="dsgd", **STEPS), "view"),
    "cca-dsgd": (KernelCCA(2, solver="dsgd", **STEPS), "view"),
    "cca-lobpcg": (KernelCCA(2, solver="lobpcg", **dict(SMALL, max_iter=3)), "view"),
    "sir-dsgd": (KernelSIR(1, n_slices=4, solver="dsgd", **STEPS), "sir"),
    "ridge-dsgd": (KernelRidge(1e-3, solver="dsgd", **STEPS), "reg"),
    "ridge-cg": (KernelRidge(1e-3, solver="cg", **dict(SMALL, max_iter=3)), "reg"),
    "ridge-exact": (KernelRidge(1e-3, solver="exact", random_state=0), "reg"),
    "svc-dsgd": (KernelSVC(1e-3, **STEPS), "cls"),
    "logistic-dsgd": (KernelLogisticRegression(1e-3, **STEPS), "cls"),
}
#: The cases that stream (partial_fit), each with the method that ends a call after its steps.
STREAMING = {"pca-dsgd": "_finalise", "svd-dsgd": "_finish", "cca-dsgd": "_finish", "sir-dsgd": "_finish",
             "ridge-dsgd": "_finish", "svc-dsgd": "_finish", "logistic-dsgd": "_finish"}


def _fresh(name):
    est, target = CASES[name]
    return pickle.loads(pickle.dumps(est)), target  # an unfitted copy: the table is shared by the tests


def _args(target, shifted: bool = False) -> tuple:
    """The fit arguments of a case; ``shifted``: other data (``X * 2 + 3``, and a target of other scale)."""
    x = X * 2 + 3 if shifted else X
    if target is None:
        return (x,)
    if target == "view":
        return x, (Y * 2 + 3 if shifted else Y)
    if target == "cls":
        return x, Y_CLS
    y = Y_REG if target == "reg" else Y_SIR
    return x, (y * 2 + 3 if shifted else y)


def _output(est, target) -> tuple:
    """What the fitted estimator computes on X: projections, decision values or predictions."""
    if target == "view":
        return tuple(np.asarray(v) for v in est.transform(X, Y))
    if hasattr(est, "transform"):
        return (np.asarray(est.transform(X)),)
    if hasattr(est, "decision_function"):
        return (np.asarray(est.decision_function(X)),)
    return (np.asarray(est.predict(X)),)


def _interrupt(*args):
    raise KeyboardInterrupt


# -- a frozen copy of the whole estimator state, compared value by value --------------------------
def _frozen(value, seen=None):
    """``value`` as nested plain values and array copies: a copy that later in-place changes cannot reach.

    Objects are taken by their public attributes (what their caches hold is not state).
    """
    seen = set() if seen is None else seen
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.copy())
    if isinstance(value, np.generic | int | float | str | bool | bytes | type(None) | np.dtype | type):
        return value
    if id(value) in seen:
        return ("seen", type(value).__name__)
    seen = seen | {id(value)}
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_frozen(v, seen) for v in value])
    if isinstance(value, dict):
        return ("dict", {k: _frozen(v, seen) for k, v in value.items()})
    if dataclasses.is_dataclass(value):
        return (type(value).__name__, {f.name: _frozen(getattr(value, f.name), seen)
                                       for f in dataclasses.fields(value)})
    if hasattr(value, "__dict__"):
        return (type(value).__name__, {k: _frozen(v, seen) for k, v in vars(value).items()
                                       if not k.startswith("_")})
    return ("repr", repr(value))


def _assert_same(a, b, where="estimator"):
    if isinstance(a, tuple) and a and a[0] == "array":
        assert isinstance(b, tuple), where
        assert b[0] == "array", where
        assert a[1] == b[1], where
        assert np.array_equal(a[2], b[2], equal_nan=a[2].dtype.kind in "fc"), where
    elif isinstance(a, tuple | list):
        assert type(a) is type(b), where
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: {sorted(a.keys() ^ b.keys())}"
        for k in a:
            _assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, float) and np.isnan(a):
        assert isinstance(b, float), where
        assert np.isnan(b), where
    else:
        assert a == b, where


def _state(est) -> dict:
    """Every attribute of ``est``, fitted (``name_``), private (``_features``, ``_n_calls``...) and parameter."""
    return _frozen(vars(est))


# -- a refit that is interrupted --------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CASES))
def test_interrupted_refit_keeps_the_previous_model(name, tmp_path):
    est, target = _fresh(name)
    est.fit(*_args(target))
    before, out = _state(est), _output(est, target)
    fitted = {k for k in vars(est) if k.endswith("_")}
    assert {"n_iter_", "bandwidth_", "kernel_"} <= fitted
    with pytest.raises(KeyboardInterrupt):
        est.fit(*_args(target, shifted=True), callback=_interrupt)
    _assert_same(_state(est), before)
    for a, b in zip(_output(est, target), out, strict=True):
        np.testing.assert_array_equal(a, b)
    back = dsgd_dask.load(est.save(tmp_path / "m.zarr"))
    for a, b in zip(_output(back, target), out, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", list(CASES))
def test_interrupted_first_fit_leaves_the_estimator_unfitted(name, tmp_path):
    est, target = _fresh(name)
    before = _state(est)
    with pytest.raises(KeyboardInterrupt):
        est.fit(*_args(target), callback=_interrupt)
    _assert_same(_state(est), before)
    assert not [k for k in vars(est) if k.endswith("_") or k.startswith("_")]
    with pytest.raises(NotFittedError):
        est.save(tmp_path / "m.zarr")
    assert not (tmp_path / "m.zarr").exists()
    with pytest.raises(NotFittedError):
        _output(est, target)
    # and the estimator fits as a fresh one would
    np.testing.assert_array_equal(_output(est.fit(*_args(target)), target)[0],
                                  _output(_fresh(name)[0].fit(*_args(target)), target)[0])


@pytest.mark.parametrize("name", list(CASES))
def test_unfitted_estimator_refuses_save(name, tmp_path):
    est, _ = _fresh(name)
    with pytest.raises(NotFittedError):
        est.save(tmp_path / "m.zarr")


def test_other_exceptions_restore_too():
    class Stop(Exception):
        pass

    def stop(*args):
        raise Stop

    est = KernelPCA(2, solver="dsgd", **STEPS).fit(X)
    before = _state(est)
    with pytest.raises(Stop):
        est.fit(X * 2 + 3, callback=stop)
    _assert_same(_state(est), before)
    # a value found bad only when its chunk is read, in the middle of the fit
    bad = X * 2 + 3
    bad[-1, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        est.fit(da.from_array(bad, chunks=(50, 5)))
    _assert_same(_state(est), before)
    with pytest.raises(ValueError, match="max_iter"):
        est.set_params(max_iter=0).fit(X * 2 + 3)
    est.set_params(max_iter=STEPS["max_iter"])
    _assert_same(_state(est), before)


def test_sigint_during_a_dask_fit_keeps_the_previous_model():
    est = KernelPCA(2, solver="dsgd", **STEPS).fit(X)
    before, out = _state(est), _output(est, None)
    calls = []

    def sigint(*args):
        calls.append(args[0])
        if len(calls) == 2:  # after some steps on the new data
            os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            est.fit(da.from_array(X * 2 + 3, chunks=(50, 5)), callback=sigint)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert len(calls) >= 2
    _assert_same(_state(est), before)
    np.testing.assert_array_equal(_output(est, None)[0], out[0])


def test_interrupted_hebbian_refit_keeps_the_previous_model():
    est = KernelHebbianPCA(2, max_iter=2, random_state=0).fit(X[:100])
    before, out = _state(est), est.transform(X)
    with pytest.raises(KeyboardInterrupt):
        est.fit(X[:120] * 2 + 3, callback=_interrupt)
    _assert_same(_state(est), before)
    np.testing.assert_array_equal(est.transform(X), out)
    est = KernelHebbianPCA(2, max_iter=2, random_state=0)
    with pytest.raises(KeyboardInterrupt):
        est.fit(X[:100], callback=_interrupt)
    with pytest.raises(NotFittedError):
        est.transform(X)


# -- partial_fit -----------------------------------------------------------------------------------
def _partial(est, target, shifted=False):
    kwargs = {"classes": [-1, 1]} if target == "cls" else {}
    return est.partial_fit(*_args(target, shifted), **kwargs)


def _interrupt_after_the_steps(monkeypatch, name, est):
    """Make the next call stop once its steps are taken (state_, n_iter_, convergence_ updated)."""
    monkeypatch.setattr(type(est), STREAMING[name], lambda self, *a: _interrupt())


@pytest.mark.parametrize("name", list(STREAMING))
def test_interrupted_partial_fit_keeps_the_state(name, monkeypatch, tmp_path):
    est, target = _fresh(name)
    _partial(est, target)
    before, out = _state(est), _output(est, target)
    copy = pickle.loads(pickle.dumps(est))
    records = est.convergence_
    with monkeypatch.context() as m:
        _interrupt_after_the_steps(m, name, est)
        with pytest.raises(KeyboardInterrupt):
            _partial(est, target, shifted=True)
    _assert_same(_state(est), before)
    assert est.convergence_ is records  # the same list, its appended records taken back
    for a, b in zip(_output(est, target), out, strict=True):
        np.testing.assert_array_equal(a, b)
    # the next call continues as if the interrupted one never ran (same epoch offset, same steps)
    for a, b in zip(_output(_partial(est, target, shifted=True), target),
                    _output(_partial(copy, target, shifted=True), target), strict=True):
        np.testing.assert_array_equal(a, b)
    assert est.n_iter_ == copy.n_iter_
    assert len(est.convergence_) == len(copy.convergence_)


@pytest.mark.parametrize("name", ["pca-dsgd", "cca-dsgd", "svc-dsgd"])
def test_interrupted_first_partial_fit_leaves_the_estimator_unfitted(name, monkeypatch, tmp_path):
    est, target = _fresh(name)
    with monkeypatch.context() as m:
        _interrupt_after_the_steps(m, name, est)
        with pytest.raises(KeyboardInterrupt):
            _partial(est, target)
    assert not [k for k in vars(est) if k.endswith("_") or k.startswith("_")]
    with pytest.raises(NotFittedError):
        est.save(tmp_path / "m.zarr")


@pytest.mark.parametrize("name", list(STREAMING))
def test_partial_fit_writes_no_array_of_the_previous_state(name):
    # the snapshot of an atomic fit copies no array: it relies on every call building new ones
    est, target = _fresh(name)
    _partial(est, target)
    held = {k: v for k, v in vars(est).items() if k in ("state_", "models_", "model_", "eigenvalues_")}
    frozen = _frozen(held)
    _partial(est, target, shifted=True)
    _assert_same(_frozen(held), frozen)
    assert est.state_ is not held["state_"]


@pytest.mark.parametrize("name", list(STREAMING))
def test_partial_fit_refuses_a_checkpoint(name, tmp_path):
    est, target = _fresh(name)
    est.set_params(checkpoint=str(tmp_path / "ckpt.zarr"))
    with pytest.raises(ValueError, match=r"checkpoint=.* applies to fit.*save\(path\).*checkpoint=None"):
        _partial(est, target)
    assert not (tmp_path / "ckpt.zarr").exists()
    assert not [k for k in vars(est) if k.endswith("_") or k.startswith("_")]
    _partial(est.set_params(checkpoint=None), target)  # the stream's state: the estimator, saved by save
    back = dsgd_dask.load(est.save(tmp_path / "m.zarr"))
    for a, b in zip(_output(_partial(back, target), target), _output(_partial(est, target), target), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("cls", [KernelPCA, KernelSVD, KernelCCA, KernelSIR, KernelRidge, KernelSVC,
                                 KernelLogisticRegression, KernelHebbianPCA])
def test_every_public_fit_is_atomic(cls):
    for method in ("fit", "partial_fit"):
        if hasattr(cls, method):
            assert getattr(getattr(cls, method), "__atomic_fit__", False), f"{cls.__name__}.{method}"
