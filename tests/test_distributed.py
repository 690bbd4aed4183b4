"""The update loop on a real distributed.LocalCluster: same model as locally, survives a killed worker."""

from __future__ import annotations

import os
import signal
import threading

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from conftest import worker_cluster
from distributed import Client, get_task_stream

from dsgd_dask import KernelPCA

# the paper's algorithm: chunk tasks of steps and data-parallel steps
PARAMS = dict(n_components=3, solver="dsgd", features="fourier", n_features=1024, block_size=128, batch_size=64,
              max_iter=60, random_state=1)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("data") / "X.zarr")
    X = np.random.default_rng(0).normal(size=(3000, 20)).astype("float32")
    zarr.create_array(store=path, data=X, chunks=(256, 20))
    return path


@pytest.fixture(scope="module")
def reference(store):
    with dask.config.set(scheduler="sync"):
        return KernelPCA(**PARAMS).fit(da.from_zarr(store))


@pytest.fixture(scope="module")
def partitioned_reference(store):
    with dask.config.set(scheduler="sync"):
        return KernelPCA(**PARAMS, n_partitions=2).fit(da.from_zarr(store))


@pytest.mark.parametrize("n_workers", [1, 2])
def test_same_model_on_local_cluster(store, reference, n_workers, local_clusters):
    with Client(local_clusters(n_workers)) as client, get_task_stream(client) as stream:
        model = KernelPCA(**PARAMS).fit(da.from_zarr(store))
        Z = model.transform(da.from_zarr(store)).compute()
    # the steps ran as tasks on the workers (each next to its chunk: on both workers when there are two)
    step_workers = {t["worker"] for t in stream.data if str(t["key"]).startswith("dsgd-step-")}
    assert len(step_workers) == n_workers
    np.testing.assert_array_equal(model.model_.coef, reference.model_.coef)
    np.testing.assert_array_equal(model.eigenvalues_, reference.eigenvalues_)
    np.testing.assert_array_equal(Z, reference.transform(da.from_zarr(store)).compute(scheduler="sync"))


def test_threaded_scheduler_same_model(store, reference):
    with dask.config.set(scheduler="threads"):
        model = KernelPCA(**PARAMS).fit(da.from_zarr(store))
    np.testing.assert_array_equal(model.model_.coef, reference.model_.coef)


def test_killed_worker_does_not_change_the_fit(store, reference):
    with worker_cluster(2) as cluster, Client(cluster) as client:
        pids = client.run(os.getpid)
        victim = sorted(pids.values())[0]
        killed = threading.Event()

        def kill_once(step, model):
            if step >= 20 and not killed.is_set():
                killed.set()
                os.kill(victim, signal.SIGKILL)

        model = KernelPCA(**PARAMS).fit(da.from_zarr(store), callback=kill_once)
        assert killed.is_set()
        assert victim not in client.run(os.getpid).values()  # that worker process is gone
    np.testing.assert_array_equal(model.model_.coef, reference.model_.coef)


def _read_failing_once(block, armed, failed):
    """The chunk as read, but the first read after ``armed`` exists raises, as a dropped connection would."""
    if os.path.exists(armed) and not os.path.exists(failed):
        open(failed, "w").close()
        raise OSError("connection reset while reading a chunk")
    return block


@pytest.mark.parametrize("rechunk", [None, (384, 20)], ids=["zarr-chunks", "rechunked"])
def test_a_failed_chunk_read_is_run_again_to_the_same_fit(store, reference, tmp_path, local_clusters, rechunk):
    # the scheduler does not retry a task that raised: the fit runs the steps since the last
    # state it holds again and ends as if nothing failed (with MAX_REPLAYS = 0 it raises the OSError);
    # the rows read again under new names whatever their graph (a rechunk's included)
    armed, failed = str(tmp_path / "armed"), str(tmp_path / "failed")
    X = da.from_zarr(store).map_blocks(_read_failing_once, armed, failed, dtype=np.float32)
    if rechunk is not None:
        X = X.rechunk(rechunk)
        with dask.config.set(scheduler="sync"):
            reference = KernelPCA(**PARAMS).fit(da.from_zarr(store).rechunk(rechunk))

    def arm(step, model):
        if step >= 20 and not os.path.exists(armed):
            open(armed, "w").close()

    with Client(local_clusters(2)):
        model = KernelPCA(**PARAMS).fit(X, callback=arm)
    assert os.path.exists(failed)  # a chunk read of the steps after step 20 failed once
    np.testing.assert_array_equal(model.model_.coef, reference.model_.coef)


def test_steps_scatter_their_features_again_when_the_last_copy_is_lost(store, reference):
    # the fit starts on one worker, which alone receives the scattered features and rule; a
    # second worker joins and the first is killed after step 20: the fit scatters them again
    with worker_cluster(1) as cluster, Client(cluster) as client:
        victim = next(iter(client.run(os.getpid).values()))
        killed = threading.Event()

        def kill_once(step, model):
            if step >= 20 and not killed.is_set():
                cluster.scale(2)
                client.wait_for_workers(2, timeout=60)
                killed.set()
                os.kill(victim, signal.SIGKILL)

        with pytest.warns(RuntimeWarning, match="scattered again"):
            model = KernelPCA(**PARAMS).fit(da.from_zarr(store), callback=kill_once)
        assert killed.is_set()
    np.testing.assert_array_equal(model.model_.coef, reference.model_.coef)


@pytest.mark.parametrize("n_workers", [1, 2])
def test_data_parallel_steps_on_local_cluster(store, partitioned_reference, n_workers, local_clusters):
    with Client(local_clusters(n_workers)) as client, get_task_stream(client) as stream:
        model = KernelPCA(**PARAMS, n_partitions=2).fit(da.from_zarr(store))
    part_workers = {t["worker"] for t in stream.data if str(t["key"]).startswith("dsgd-part-")}
    assert len(part_workers) == n_workers  # the parts of a step ran on every worker
    np.testing.assert_array_equal(model.model_.coef, partitioned_reference.model_.coef)


# -- the default solver: full-data passes as reductions over the chunks --------------------------

SUBSPACE = dict(n_components=3, n_features=1024, block_size=256, tol=1e-8, max_iter=6, random_state=1)


@pytest.fixture(scope="module")
def subspace_reference(store):
    with dask.config.set(scheduler="sync"):
        return KernelPCA(**SUBSPACE).fit(da.from_zarr(store))


@pytest.mark.parametrize("n_workers", [1, 2])
def test_full_passes_on_local_cluster(store, subspace_reference, n_workers, local_clusters):
    with Client(local_clusters(n_workers)) as client, get_task_stream(client) as stream:
        model = KernelPCA(**SUBSPACE).fit(da.from_zarr(store))
    pass_workers = {t["worker"] for t in stream.data if "dsgd-pass-" in str(t["key"])}
    assert len(pass_workers) == n_workers  # every pass ran on all the workers at once
    assert model.n_iter_ == subspace_reference.n_iter_ >= 2
    assert np.array_equal(model.model_.coef, subspace_reference.model_.coef)
    assert np.array_equal(model.eigenvalues_, subspace_reference.eigenvalues_)
    assert np.array_equal(model.model_.offset, subspace_reference.model_.offset)


def test_laplacian_passes_on_a_local_cluster(store, local_clusters):
    # compiled sections (Numba) in the workers' processes: the same model as in this one
    params = dict(SUBSPACE, kernel="laplacian", n_features=512)
    with dask.config.set(scheduler="sync"):
        reference = KernelPCA(**params).fit(da.from_zarr(store))
    with Client(local_clusters(2)):
        model = KernelPCA(**params).fit(da.from_zarr(store))
    assert model.n_iter_ == reference.n_iter_ >= 2
    assert np.array_equal(model.model_.coef, reference.model_.coef)
    assert np.array_equal(model.eigenvalues_, reference.eigenvalues_)


def test_a_pass_whose_read_failed_runs_again_on_rechunked_rows(store, tmp_path, local_clusters):
    # the pass's rows read again under new names through a rechunk (dask's clone fails on it)
    armed, failed = str(tmp_path / "armed"), str(tmp_path / "failed")
    X = da.from_zarr(store).map_blocks(_read_failing_once, armed, failed, dtype=np.float32).rechunk((384, 20))
    with dask.config.set(scheduler="sync"):
        reference = KernelPCA(**SUBSPACE).fit(da.from_zarr(store).rechunk((384, 20)))

    def arm(n_iter, model):
        open(armed, "a").close()

    with Client(local_clusters(2)), pytest.warns(RuntimeWarning, match="runs again"):
        model = KernelPCA(**SUBSPACE).fit(X, callback=arm)
    assert os.path.exists(failed)  # a chunk read of the second pass failed once
    assert model.n_iter_ == reference.n_iter_ >= 2
    np.testing.assert_array_equal(model.model_.coef, reference.model_.coef)
    np.testing.assert_array_equal(model.eigenvalues_, reference.eigenvalues_)


@pytest.fixture(scope="module")
def staged_store(tmp_path_factory):
    """163,840 rows in 20 chunks: the subspace solver runs a sampled stage before its passes."""
    path = str(tmp_path_factory.mktemp("data") / "staged.zarr")
    rng = np.random.default_rng(5)
    centres = rng.normal(size=(6, 8)) * 2.0
    X = (centres[rng.integers(6, size=163_840)] + rng.normal(size=(163_840, 8))).astype("float32")
    zarr.create_array(store=path, data=X, chunks=(8192, 8))
    return path


def test_sampled_stages_and_passes_on_local_cluster(staged_store, local_clusters):
    # The stage's chunk subset and the passes: the same model, bit for bit, on two workers
    # as on the synchronous scheduler, and the stage's tasks ran on both workers.
    params = dict(n_components=3, n_features=512, block_size=256, random_state=4)
    with dask.config.set(scheduler="sync"):
        ref = KernelPCA(**params).fit(da.from_zarr(staged_store))
    with Client(local_clusters(2)) as client, get_task_stream(client) as stream:
        model = KernelPCA(**params).fit(da.from_zarr(staged_store))
    stage_rows = ref.convergence_[0]["rows"]
    assert 40_000 <= stage_rows < 163_840 // 4 + 8192
    assert [e["rows"] for e in model.convergence_] == [e["rows"] for e in ref.convergence_]
    assert len({t["worker"] for t in stream.data if "dsgd-pass-" in str(t["key"])}) == 2
    assert np.array_equal(model.model_.coef, ref.model_.coef)
    assert np.array_equal(model.eigenvalues_, ref.eigenvalues_)
    assert np.array_equal(model.model_.offset, ref.model_.offset)


# -- two views: KernelCCA(solver="lobpcg") and the rca solvers of KernelCCA and KernelSIR on a cluster, with a
# worker killed during a pass: tests/test_pass_solvers.py (one LocalCluster for every pass solver)


def _labelled(block, block_info=None):
    return block + block_info[0]["chunk-location"][0]


@pytest.mark.parametrize("graph", ["zarr", "rechunked", "mapped-rechunked"])
def test_a_replayed_chunk_reads_the_same_rows_under_new_names(store, graph, local_clusters):
    # dask.graph_manipulation.clone fails on the rechunked graphs (dask issue 12455); renamed does not
    from types import SimpleNamespace

    from dsgd_dask.engine.distributed import _chunk

    data = da.from_zarr(store)
    if graph == "rechunked":
        data = data.rechunk((384, 20))
    elif graph == "mapped-rechunked":
        data = data.map_blocks(_labelled, dtype=np.float32).rechunk((384, 20))
    view = SimpleNamespace(data=data)
    first, again = _chunk(view, 3, 0), _chunk(view, 3, 1)
    assert first.name == view.data.blocks[3].name
    assert again.name != first.name
    assert again.chunks == first.chunks
    assert not set(again.__dask_graph__()) & set(first.__dask_graph__())
    expected = first.compute(scheduler="sync")
    np.testing.assert_array_equal(again.compute(scheduler="sync"), expected)
    with Client(local_clusters(2)) as client:
        np.testing.assert_array_equal(client.compute(again).result(), expected)


@pytest.mark.parametrize("n_workers", [1, 2])
def test_sample_preconditioned_cca_steps_same_model_on_local_cluster(store, n_workers, local_clusters):
    """The client keeps the factor its start measured; the workers factor the same sample again: the same model."""
    from dsgd_dask import KernelCCA

    params = dict(solver="dsgd", features="fourier_pairs", n_features=256, block_size=64, batch_size=128,
                  max_iter=30, preconditioner="sample", preconditioner_jitter=0.8, random_state=2)
    X = da.from_zarr(store)
    with dask.config.set(scheduler="sync"):
        ref = KernelCCA(3, **params).fit(X[:, :10], X[:, 10:])
    with Client(local_clusters(n_workers)) as client, get_task_stream(client) as stream:
        est = KernelCCA(3, **params).fit(X[:, :10], X[:, 10:])
    assert {t["worker"] for t in stream.data if str(t["key"]).startswith("dsgd-step-")}
    np.testing.assert_array_equal(est.correlations_, ref.correlations_)
    for a, b in zip(est.models_, ref.models_, strict=True):
        np.testing.assert_array_equal(a.coef, b.coef)
