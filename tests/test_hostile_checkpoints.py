"""Checkpoints are bound to their input data: a fit on other data of the same shape is refused, not resumed.

For every estimator and every solver that checkpoints, a checkpoint written on ``X`` (and
``y`` or ``Y``) is refused by a fit on another ``X``, ``y`` or ``Y`` of the same shape,
with a message naming the input that differs; the same data resumes as before.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest

from dsgd_dask import (
    KernelCCA,
    KernelLogisticRegression,
    KernelPCA,
    KernelRidge,
    KernelSIR,
    KernelSVC,
    KernelSVD,
)
from dsgd_dask.cli import main
from dsgd_dask.engine.checkpoint import Checkpointer, PassCheckpoint, fit_fingerprint
from dsgd_dask.engine.steps import StepState
from dsgd_dask.estimators._solvers import SOLVERS
from dsgd_dask.streams.fingerprint import N_WINDOWS, WINDOW_ROWS, data_fingerprint, sampled_rows
from dsgd_dask.streams.inputs import DataView

N, D = 200, 4
STEPS = dict(features="fourier", n_features=64, block_size=32, batch_size=32, max_iter=8, checkpoint_every=2,
             random_state=0)
PASSES = dict(n_features=64, block_size=32, max_iter=2, random_state=0)

#: (estimator, solver, its parameters, what the second input is: None, "y" (a target) or "Y" (a view))
CASES = [
    (KernelPCA, "dsgd", dict(n_components=2, **STEPS), None),
    (KernelPCA, "subspace", dict(n_components=2, tol=0.0, **PASSES), None),
    (KernelSVD, "dsgd", dict(n_components=2, **STEPS), "Y"),
    (KernelCCA, "dsgd", dict(n_components=2, **STEPS), "Y"),
    (KernelCCA, "lobpcg", dict(n_components=2, reg=1e-3, tol=1e-12, **PASSES), "Y"),
    (KernelSIR, "dsgd", dict(n_components=2, n_slices=4, **STEPS), "y"),
    (KernelRidge, "dsgd", dict(alpha=1e-2, **STEPS), "y"),
    (KernelRidge, "cg", dict(alpha=1e-2, tol=0.0, **PASSES), "y"),
    (KernelSVC, "dsgd", dict(alpha=1e-2, **STEPS), "y"),
    (KernelLogisticRegression, "dsgd", dict(alpha=1e-2, **STEPS), "y"),
]
IDS = [f"{cls.__name__}-{solver}" for cls, solver, _, _ in CASES]


def test_the_cases_cover_every_solver_that_checkpoints():
    # "rca" and "exact" take no checkpoint (one pass, one dense solve); every other solver does
    table = {(name, solver) for name, solvers in SOLVERS.items() for solver in solvers
             if solver not in ("rca", "exact")}
    assert {(cls.__name__, solver) for cls, solver, _, _ in CASES} == table


def _data(second: str | None, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    if second is None:
        return X, None
    if second == "Y":
        return X, np.tanh(X[:, :3]) + 0.1 * rng.normal(size=(N, 3))
    return X, np.sin(X[:, 0]) + 0.1 * rng.normal(size=N)


def _target(cls, y):
    """``y`` as ``cls`` takes it: class labels for the classifiers, the values for the others."""
    return (y > 0).astype(np.int64) if cls in (KernelSVC, KernelLogisticRegression) else y


def _other(cls, second, y):
    """Another ``y`` or ``Y`` of the same shape (for labels: some of them flipped)."""
    if second == "Y":
        return y * 3.0 + 1.0
    if cls in (KernelSVC, KernelLogisticRegression):
        flipped = y.copy()
        flipped[::3] = 1 - flipped[::3]
        return flipped
    return -y


def _fit(cls, solver, params, ckpt, X, y):
    est = cls(solver=solver, checkpoint=str(ckpt), **params)
    return est.fit(X) if y is None else est.fit(X, y)


def _coefs(est) -> list[np.ndarray]:
    models = getattr(est, "models_", None) or [est.model_]
    return [np.asarray(m.coef) for m in models]


@pytest.mark.parametrize(("cls", "solver", "params", "second"), CASES, ids=IDS)
def test_other_X_of_the_same_shape_is_refused(tmp_path, cls, solver, params, second):
    X, y = _data(second)
    y = None if y is None else _target(cls, y)
    ckpt = tmp_path / "ckpt.zarr"
    _fit(cls, solver, params, ckpt, X, y)
    assert ckpt.exists()
    with pytest.raises(ValueError, match=r"written for a different X \(same shape \(200, 4\), other values\)") as err:
        _fit(cls, solver, params, ckpt, X * 3 + 1, y)
    assert "to start afresh, delete it or choose another checkpoint path" in str(err.value)
    assert str(ckpt) in str(err.value)


@pytest.mark.parametrize(("cls", "solver", "params", "second"), [c for c in CASES if c[3]],
                         ids=[i for i, c in zip(IDS, CASES, strict=True) if c[3]])
def test_other_y_or_Y_of_the_same_shape_is_refused(tmp_path, cls, solver, params, second):
    X, y = _data(second)
    y = _target(cls, y)
    ckpt = tmp_path / "ckpt.zarr"
    _fit(cls, solver, params, ckpt, X, y)
    other = _other(cls, second, y)
    assert other.shape == y.shape
    assert not np.array_equal(other, y)
    with pytest.raises(ValueError, match=rf"written for a different {second} \(same shape .*, other values\)"):
        _fit(cls, solver, params, ckpt, X, other)


@pytest.mark.parametrize(("cls", "solver", "params", "second"), CASES, ids=IDS)
def test_the_same_data_resumes(tmp_path, cls, solver, params, second):
    X, y = _data(second)
    y = None if y is None else _target(cls, y)
    ckpt = tmp_path / "ckpt.zarr"
    first = _fit(cls, solver, params, ckpt, X, y)
    # an equal copy (not the same object) of the data: the fingerprint is of the values
    again = _fit(cls, solver, params, ckpt, X.copy(), None if y is None else y.copy())
    for a, b in zip(_coefs(first), _coefs(again), strict=True):
        np.testing.assert_array_equal(a, b)


def test_other_parameters_are_named(tmp_path):
    X, _ = _data(None)
    ckpt = tmp_path / "ckpt.zarr"
    KernelPCA(n_components=2, solver="dsgd", checkpoint=str(ckpt), **STEPS).fit(X)
    with pytest.raises(ValueError, match=r"belongs to a different fit: it was written for other parameters "
                                         r"\(n_components=2, not 3\)"):
        KernelPCA(n_components=3, solver="dsgd", checkpoint=str(ckpt), **STEPS).fit(X)


def test_other_shape_dtype_and_row_chunks_are_named(tmp_path):
    X, _ = _data(None)
    ckpt = tmp_path / "ckpt.zarr"
    KernelPCA(n_components=2, solver="dsgd", checkpoint=str(ckpt), **STEPS).fit(X)
    with pytest.raises(ValueError, match=r"a different X \(shape \(200, 4\), not \(190, 4\)\)"):
        KernelPCA(n_components=2, solver="dsgd", checkpoint=str(ckpt), **STEPS).fit(X[:190])
    with pytest.raises(ValueError, match=r"a different X \(same shape \(200, 4\), dtype float64, not float32\)"):
        KernelPCA(n_components=2, solver="dsgd", checkpoint=str(ckpt), **STEPS).fit(da.from_array(X.astype(np.float32)))
    # the same values in a dask array: the order of the steps follows the row chunks
    with pytest.raises(ValueError, match=r"a different X \(same values, other row chunks \(in memory, not 4 row "
                                         r"chunks of at most 50 rows\)\)"):
        KernelPCA(n_components=2, solver="dsgd", checkpoint=str(ckpt), **STEPS).fit(da.from_array(X, chunks=(50, -1)))


def test_checkpoints_without_input_fingerprints_are_refused(tmp_path):
    X, _ = _data(None)
    est = KernelPCA(n_components=2, solver="dsgd", checkpoint=str(tmp_path / "steps.zarr"), **STEPS)
    params = {k: v for k, v in est.get_params().items() if k not in ("verbose", "checkpoint_every")}
    old = Checkpointer(tmp_path / "steps.zarr", 2, fit_fingerprint("KernelPCA", params, X.shape))
    old.seed = 0
    old.save(StepState((np.zeros((64, 2)),), 4, 1.0))
    with pytest.raises(ValueError, match="has no fingerprints of the data it was fitted on"):
        est.fit(X)
    est = KernelPCA(n_components=2, solver="subspace", tol=0.0, checkpoint=str(tmp_path / "passes.zarr"), **PASSES)
    old = PassCheckpoint(tmp_path / "passes.zarr", "any")
    old.save("subspace", {"top": np.zeros((64, 2))}, 1, 1, [])
    with pytest.raises(ValueError, match="has no fingerprints of the data it was fitted on"):
        est.fit(X)


# -- the fingerprint itself ----------------------------------------------------------------------
def test_fingerprint_reads_few_chunks_of_a_lazy_input():
    n_chunks, rows = 1000, 50
    read = []

    def block(i):
        read.append(i)
        return np.full((rows, 3), float(i))

    parts = [da.from_delayed(dask.delayed(block)(i), shape=(rows, 3), dtype=float) for i in range(n_chunks)]
    view = DataView(da.concatenate(parts, axis=0))
    fingerprint = data_fingerprint(view)
    # a window of consecutive rows spans at most two chunks
    assert 0 < len(set(read)) <= 2 * N_WINDOWS
    assert fingerprint["shape"] == [n_chunks * rows, 3]
    assert fingerprint["row_chunks"] == [[rows, n_chunks]]
    assert sum(stop - start for start, stop in sampled_rows(n_chunks * rows, 3)) == N_WINDOWS * WINDOW_ROWS


def test_fingerprint_digest_is_of_the_values_not_the_chunks():
    X = np.random.default_rng(1).normal(size=(500, 3))
    in_memory = data_fingerprint(DataView(X))
    lazy = data_fingerprint(DataView(da.from_array(X, chunks=(37, -1))))
    assert in_memory["digest"] == lazy["digest"]
    assert (in_memory["row_chunks"], lazy["row_chunks"]) == (None, [[37, 13], [19, 1]])
    # one sampled row changed: another digest
    start, _ = sampled_rows(*X.shape)[0]
    changed = X.copy()
    changed[start, 0] += 1e-12
    assert data_fingerprint(DataView(changed))["digest"] != in_memory["digest"]


# -- the command line --------------------------------------------------------------------------
def test_cli_refuses_a_checkpoint_of_another_target(tmp_path, capsys):
    X, y = _data("y")
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "yA.npy", y)
    np.save(tmp_path / "yB.npy", -y)
    ckpt = tmp_path / "ck.zarr"

    def fit(target, out):
        return main(["fit", "ridge", str(tmp_path / "X.npy"), "--y", str(tmp_path / target), "--checkpoint",
                     str(ckpt), "--set", "solver=cg", "--set", "n_features=64", "--set", "max_iter=2",
                     "--set", "random_state=0", "--out", str(tmp_path / out), "-q"])

    assert fit("yA.npy", "a.zarr") == 0
    capsys.readouterr()
    assert fit("yB.npy", "b.zarr") != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("dsgd-dask: error: ")
    assert "Traceback" not in err
    assert "a different y (same shape (200, 1), other values)" in err
    assert not (tmp_path / "b.zarr").exists()
