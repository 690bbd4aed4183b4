"""Checkpoints: a fit killed mid-way resumes to the uninterrupted result; damaged checkpoints are refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import dask.array as da
import numpy as np
import pytest
import zarr

from dsgd_dask import KernelCCA, KernelPCA, KernelSIR

# the paper's algorithm: checkpoints every few steps (the subspace solver's are in test_subspace.py)
PARAMS = dict(n_components=3, solver="dsgd", features="fourier", n_features=1024, block_size=64, batch_size=32,
              max_iter=80, random_state=7)

CHILD = """
import time, dask.array as da
from dsgd_dask import KernelCCA, KernelPCA
X = da.from_zarr({store!r})
KernelPCA(**{params!r}, checkpoint={ckpt!r}, checkpoint_every=4).fit(
    X, callback=lambda step, model: time.sleep(0.15))
"""


@pytest.fixture
def store(tmp_path, blobs):
    path = str(tmp_path / "data.zarr")
    zarr.create_array(store=path, data=blobs.astype("float32"), chunks=(64, 5))
    return path


def _checkpoint_step(path):
    try:
        return zarr.open_group(path, mode="r").attrs["step"]
    except Exception:
        return -1


def test_killed_fit_resumes_to_the_same_model(store, tmp_path):
    ckpt = str(tmp_path / "ckpt.zarr")
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(store=store, params=PARAMS, ckpt=ckpt)])
    try:
        deadline = time.monotonic() + 120
        while _checkpoint_step(ckpt) < 20:
            assert child.poll() is None, "the fit ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
    killed_at = _checkpoint_step(ckpt)
    assert 20 <= killed_at < PARAMS["max_iter"]

    X = da.from_zarr(store)
    resumed = KernelPCA(**PARAMS, checkpoint=ckpt, checkpoint_every=4).fit(X)
    reference = KernelPCA(**PARAMS).fit(X)
    assert resumed.n_iter_ == reference.n_iter_ == PARAMS["max_iter"]
    np.testing.assert_array_equal(resumed.model_.coef, reference.model_.coef)
    np.testing.assert_array_equal(resumed.eigenvalues_, reference.eigenvalues_)
    assert _checkpoint_step(ckpt) == PARAMS["max_iter"]


def test_completed_checkpoint_returns_the_model(store, tmp_path):
    ckpt = str(tmp_path / "ckpt.zarr")
    X = da.from_zarr(store)
    first = KernelPCA(**PARAMS, checkpoint=ckpt).fit(X)
    calls = []
    again = KernelPCA(**PARAMS, checkpoint=ckpt).fit(X, callback=lambda *a: calls.append(a))
    assert calls == []  # nothing left to do
    np.testing.assert_array_equal(first.model_.coef, again.model_.coef)


def test_checkpoint_with_random_state_none_resumes_its_seed(store, tmp_path):
    ckpt = str(tmp_path / "ckpt.zarr")
    X = da.from_zarr(store)
    params = {**PARAMS, "random_state": None, "max_iter": 20}
    first = KernelPCA(**params, checkpoint=ckpt).fit(X)
    again = KernelPCA(**params, checkpoint=ckpt).fit(X)
    assert first.seed_ == again.seed_
    np.testing.assert_array_equal(first.model_.coef, again.model_.coef)


def test_truncated_checkpoint_is_refused(store, tmp_path):
    ckpt = tmp_path / "ckpt.zarr"
    X = da.from_zarr(store)
    KernelPCA(**{**PARAMS, "max_iter": 20}, checkpoint=str(ckpt)).fit(X)
    chunk = next(p for p in (ckpt / "coef").rglob("*") if p.is_file() and p.name != "zarr.json")
    chunk.write_bytes(chunk.read_bytes()[:10])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        KernelPCA(**{**PARAMS, "max_iter": 20}, checkpoint=str(ckpt)).fit(X)


def test_checkpoint_of_another_fit_is_refused(store, tmp_path):
    ckpt = str(tmp_path / "ckpt.zarr")
    X = da.from_zarr(store)
    KernelPCA(**{**PARAMS, "max_iter": 20}, checkpoint=ckpt).fit(X)
    with pytest.raises(ValueError, match="belongs to a different fit"):
        KernelPCA(**{**PARAMS, "max_iter": 20, "n_components": 2}, checkpoint=ckpt).fit(X)
    with pytest.raises(ValueError, match="belongs to a different fit"):
        KernelPCA(**{**PARAMS, "max_iter": 20}, checkpoint=ckpt).fit(X[:-10])


def test_crash_between_renames_recovers(store, tmp_path):
    """If the process dies after moving the old checkpoint aside, the old one is used."""
    ckpt = tmp_path / "ckpt.zarr"
    X = da.from_zarr(store)
    params = {**PARAMS, "max_iter": 20}
    full = KernelPCA(**params, checkpoint=str(ckpt)).fit(X)
    os.rename(ckpt, tmp_path / ".ckpt.zarr.old-0123")
    again = KernelPCA(**params, checkpoint=str(ckpt)).fit(X)
    np.testing.assert_array_equal(full.model_.coef, again.model_.coef)
    assert ckpt.exists()
    assert not list(tmp_path.glob(".ckpt.zarr.*"))


# -- two views: the passes of KernelCCA(solver="lobpcg") checkpoint after every pass ------------

LOBPCG = dict(n_components=2, solver="lobpcg", n_features=256, block_size=64, reg=1e-4, tol=1e-7, max_iter=6,
              random_state=3)


def test_lobpcg_interrupted_after_pass_two_resumes_bit_identically(blobs, tmp_path):
    A, B = blobs[:, :3], blobs[:, 3:]
    ckpt = str(tmp_path / "ckpt.zarr")

    class Stop(Exception):
        pass

    def stop_after_two(n_passes, models):
        if n_passes == 2:
            raise Stop

    with pytest.raises(Stop):
        KernelCCA(**LOBPCG, checkpoint=ckpt).fit(A, B, callback=stop_after_two)
    seen = []
    resumed = KernelCCA(**LOBPCG, checkpoint=ckpt).fit(A, B, callback=lambda n, models: seen.append(n))
    reference = KernelCCA(**LOBPCG).fit(A, B)
    assert seen[0] == 3  # the resumed fit starts after the second pass
    assert resumed.n_iter_ == reference.n_iter_ >= 3
    for a, b in zip(resumed.models_, reference.models_, strict=True):
        np.testing.assert_array_equal(a.coef, b.coef)
        np.testing.assert_array_equal(a.offset, b.offset)
    np.testing.assert_array_equal(resumed.correlations_, reference.correlations_)
    # the passes before the interruption keep their records
    for key in ("iteration", "rows", "measure", "correlations"):
        assert [r[key] for r in resumed.convergence_] == [r[key] for r in reference.convergence_]


@pytest.mark.parametrize("est", [
    KernelCCA(2, solver="rca", n_features=64, random_state=3),
    KernelSIR(2, solver="rca", features="fourier", n_features=64, n_slices=4, random_state=3),
])
def test_rca_takes_no_checkpoint(blobs, tmp_path, est):
    """One pass, an M^2 state: "rca" ignores ``checkpoint`` (documented), and writes nothing there."""
    ckpt = tmp_path / "ckpt.zarr"
    A, B = blobs[:, :3], blobs[:, 3:]
    fitted = est.set_params(checkpoint=str(ckpt)).fit(A, B if isinstance(est, KernelCCA) else B[:, 0])
    assert not ckpt.exists()
    assert (fitted.n_iter_, len(fitted.convergence_)) == (1, 1)
