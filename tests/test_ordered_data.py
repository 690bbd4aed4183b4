"""Data stored in order (rows sorted by class): samples and statistics still represent all rows."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import zarr

from dsgd_dask import KernelPCA
from dsgd_dask.metrics import principal_angle_sin2
from dsgd_dask.streams.batches import sample_rows
from dsgd_dask.streams.inputs import as_view

N_ROWS, N_CLASSES, CHUNK = 200_000, 10, 10_000


@pytest.fixture(scope="module")
def sorted_and_shuffled(tmp_path_factory):
    """The same 200,000 rows of a 10-class mixture twice: sorted by class, and shuffled; Zarr stores."""
    rng = np.random.default_rng(11)
    centres = rng.normal(size=(N_CLASSES, 8)) * 1.5
    labels = np.sort(rng.integers(N_CLASSES, size=N_ROWS))
    X = (centres[labels] + rng.normal(size=(N_ROWS, 8))).astype(np.float32)
    root = tmp_path_factory.mktemp("ordered")
    paths = {}
    for name, rows in (("sorted", X), ("shuffled", X[rng.permutation(N_ROWS)])):
        paths[name] = str(root / f"{name}.zarr")
        zarr.create_array(store=paths[name], data=rows, chunks=(CHUNK, 8))
    return X, labels, paths


def test_sample_draws_from_every_chunk(sorted_and_shuffled):
    # 10,000 rows from a store of 20 one-class chunks: every class in its proportion, to
    # within four binomial standard deviations; the same rows as from the array in memory.
    X, labels, paths = sorted_and_shuffled
    view = as_view(da.from_zarr(paths["sorted"]))
    sample = sample_rows(view, 10_000, seed=3)
    assert np.array_equal(sample, sample_rows(as_view(X), 10_000, seed=3))
    centres = np.stack([X[labels == c].mean(axis=0) for c in range(N_CLASSES)])
    got = np.argmin(((sample[:, None, :] - centres[None]) ** 2).sum(-1), axis=1)
    truth = np.argmin(((X[:, None, :] - centres[None]) ** 2).sum(-1), axis=1)
    share = np.bincount(truth, minlength=N_CLASSES) / N_ROWS
    sd = np.sqrt(share * (1 - share) / 10_000)
    assert np.all(np.abs(np.bincount(got, minlength=N_CLASSES) / 10_000 - share) <= 4 * sd)


def test_sorted_store_fits_like_the_shuffled_one(sorted_and_shuffled):
    # The same rows sorted by class and shuffled. The stages see biased chunk subsets of
    # the sorted store, but the passes see every row, so the eigenvalues and the subspace
    # agree to the two feature sets' difference (different landmark rows; the subspace
    # converged to tol = 1e-4 on each). The steps solver takes its final statistics from
    # the sample checked above; its own Monte Carlo error (sin^2 0.06 to 0.33 between
    # seeds on these rows) is too large for a comparison of this kind to mean much.
    X, _, paths = sorted_and_shuffled
    a = KernelPCA(4, random_state=0).fit(da.from_zarr(paths["sorted"]))
    b = KernelPCA(4, random_state=0).fit(da.from_zarr(paths["shuffled"]))
    assert any(e["rows"] < N_ROWS for e in a.convergence_)  # a stage on a subset of chunks ran
    np.testing.assert_allclose(a.eigenvalues_, b.eigenvalues_, rtol=0.01)
    probe = X[::20]
    assert principal_angle_sin2(a.transform(probe), b.transform(probe)) < 1e-3
    # centred on all rows: the offset is the full-data mean
    np.testing.assert_allclose(a.transform(X).mean(axis=0), 0.0, atol=1e-3 * np.sqrt(a.eigenvalues_.max()))
