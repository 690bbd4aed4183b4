"""``average``: the model made of the mean of the steps' iterates, the same on every scheduler, resumed and streamed."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client

import dsgd_dask
from dsgd_dask import KernelCCA, KernelLogisticRegression, KernelPCA, KernelRidge

# one step per dask chunk: the callback sees every iterate
PCA = dict(n_components=3, solver="dsgd", features="fourier", n_features=256, block_size=64, batch_size=30,
           max_iter=40, random_state=3)
CCA = dict(n_components=2, solver="dsgd", features="fourier", n_features=256, block_size=64, batch_size=30,
           max_iter=30, reg=1e-3, random_state=5)


def iterates(X, **params):
    """The last iterate after every step of a fit without a mean (one step per chunk task)."""
    seen = []
    KernelPCA(**params).fit(da.from_array(X, chunks=(params["batch_size"], -1)),
                            callback=lambda step, model: seen.append((step, model.coef.copy())))
    assert [s for s, _ in seen] == list(range(1, params["max_iter"] + 1))
    return [c for _, c in seen]


def mean_of(coefs):
    rows = max(c.shape[0] for c in coefs)
    return np.mean([np.vstack([c, np.zeros((rows - c.shape[0], c.shape[1]))]) for c in coefs], axis=0)


@pytest.mark.parametrize(("average", "first"), [(True, 1), (1, 1), (20 * 30 + 1, 21), (40 * 30, 40)])
def test_the_mean_is_that_of_the_iterates(blobs, average, first):
    its = iterates(blobs, **PCA)
    seen = []
    est = KernelPCA(**PCA, average=average).fit(da.from_array(blobs, chunks=(30, -1)),
                                                  callback=lambda step, model: seen.append(model.coef.copy()))
    expected = mean_of(its[first - 1:])
    assert est.state_.n_mean == PCA["max_iter"] - first + 1
    # the running mean (each iterate with weight 1/n) rounds otherwise than numpy's sum: a few ulps per step
    scale = np.abs(expected).max()
    np.testing.assert_allclose(est.state_.mean[0], expected, rtol=0, atol=1e-13 * scale)
    np.testing.assert_array_equal(est.state_.coef[0], its[-1])  # the iterates themselves are unchanged
    # the callback gets the last iterate until the mean begins, then the mean
    if first > 1:
        np.testing.assert_array_equal(seen[first - 2], its[first - 2])
    np.testing.assert_array_equal(seen[-1], est.state_.mean[0])


def test_without_average_the_model_is_the_last_iterate(blobs):
    plain = KernelPCA(**PCA).fit(blobs)
    off = KernelPCA(**PCA, average=0).fit(blobs)
    assert plain.state_.mean == ()
    assert plain.state_.n_mean == 0
    np.testing.assert_array_equal(plain.model_.coef, off.model_.coef)


def test_the_model_is_made_of_the_mean(blobs):
    y = (blobs[:, 0] > np.median(blobs[:, 0])).astype(int)
    params = dict(solver="dsgd", preconditioner=None, features="fourier", n_features=256, block_size=64,
                  batch_size=50, max_iter=24, random_state=0)
    last = KernelLogisticRegression(**params).fit(blobs, y)
    mean = KernelLogisticRegression(**params, average=True).fit(blobs, y)
    np.testing.assert_array_equal(mean.model_.coef, mean.state_.mean[0])
    np.testing.assert_array_equal(last.model_.coef, last.state_.coef[0])
    np.testing.assert_array_equal(mean.state_.coef[0], last.state_.coef[0])
    assert not np.array_equal(mean.model_.coef, last.model_.coef)
    # kernel ridge by steps: the same
    ridge = KernelRidge(alpha=1e-3, solver="dsgd", features="fourier", n_features=256, block_size=64,
                        max_iter=24, average=True, random_state=0).fit(blobs, blobs[:, 1])
    np.testing.assert_array_equal(ridge.model_.coef[:, 0], ridge.state_.mean[0][:, 0])


@pytest.fixture(scope="module")
def views():
    rng = np.random.default_rng(2)
    t = rng.uniform(-2, 2, size=(1200, 2))
    X = np.column_stack([np.sin(t[:, 0]), np.cos(t[:, 1]), rng.normal(size=1200)]) + 0.1 * rng.normal(size=(1200, 3))
    Y = np.column_stack([t[:, 0] ** 2, t[:, 1], rng.normal(size=1200)]) + 0.1 * rng.normal(size=(1200, 3))
    return da.from_array(X, chunks=(120, -1)), da.from_array(Y, chunks=(120, -1))


@pytest.mark.parametrize("n_partitions", [1, 2])
def test_the_same_mean_on_every_scheduler(views, n_partitions, local_clusters):
    X, Y = views
    params = dict(CCA, n_partitions=n_partitions, average=10 * 30)
    with dask.config.set(scheduler="sync"):
        reference = KernelCCA(**params).fit(X, Y)
    with dask.config.set(scheduler="threads"):
        threads = KernelCCA(**params).fit(X, Y)
    with Client(local_clusters(2)):
        cluster = KernelCCA(**params).fit(X, Y)
    assert reference.state_.n_mean == CCA["max_iter"] - 10 + 1
    for other in (threads, cluster):
        for a, b in zip(reference.state_.mean, other.state_.mean, strict=True):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(reference.models_, other.models_, strict=True):
            np.testing.assert_array_equal(a.coef, b.coef)
        np.testing.assert_array_equal(reference.correlations_, other.correlations_)


class Interrupt(Exception):
    pass


def test_a_resumed_fit_ends_with_the_same_mean(views, tmp_path):
    X, Y = views
    params = dict(CCA, average=5 * 30, checkpoint_every=3)
    ckpt = tmp_path / "ckpt.zarr"

    def stop_at_14(step, models):
        if step >= 14:
            raise Interrupt

    with pytest.raises(Interrupt):
        KernelCCA(**params, checkpoint=ckpt).fit(X, Y, callback=stop_at_14)
    resumed = KernelCCA(**params, checkpoint=ckpt).fit(X, Y)
    reference = KernelCCA(**params).fit(X, Y)
    assert resumed.state_.n_mean == reference.state_.n_mean == CCA["max_iter"] - 5 + 1
    for a, b in zip(resumed.models_, reference.models_, strict=True):
        np.testing.assert_array_equal(a.coef, b.coef)


def test_a_saved_model_streams_on_with_its_mean(blobs, tmp_path):
    first, more = blobs[:300], blobs[300:]
    params = dict(PCA, max_iter="auto", average=True)
    est = KernelPCA(**params).partial_fit(first)
    est.save(tmp_path / "model.zarr")
    loaded = dsgd_dask.load(tmp_path / "model.zarr")
    np.testing.assert_array_equal(loaded.state_.mean[0], est.state_.mean[0])
    assert loaded.state_.n_mean == est.state_.n_mean == 10
    est.partial_fit(more)
    loaded.partial_fit(more)
    assert est.state_.n_mean == 20
    np.testing.assert_array_equal(loaded.state_.mean[0], est.state_.mean[0])
    np.testing.assert_array_equal(loaded.model_.coef, est.model_.coef)


@pytest.mark.parametrize("average", [-1, 1.5, "yes", None])
def test_bad_average_is_refused(blobs, average):
    with pytest.raises((ValueError, TypeError), match="average"):
        KernelPCA(**PCA, average=average).fit(blobs)
