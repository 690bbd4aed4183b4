"""Shared fixtures: real data (the subsets shipped with dsgd_dask), small synthetic data."""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

import numpy as np
import pytest
import zarr
from threadpoolctl import threadpool_info

from dsgd_dask.datasets import load_mnist
from dsgd_dask.features import KernelSpec

ROOT = Path(__file__).resolve().parents[1]

#: Most worker processes ``-n auto`` starts (``addopts`` in ``pyproject.toml``): each may hold
#: a local cluster of its own and a dense reference of a few GiB.
MAX_TEST_PROCESSES = 4


def pytest_xdist_auto_num_workers(config) -> int:
    """One test process per core this process may run on, at most :data:`MAX_TEST_PROCESSES`."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, MAX_TEST_PROCESSES))


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 API server (moto's) on loopback for the session: the ``storage_options`` that reach it.

    Started in this process on a free port; subprocesses reach it with the same options.
    """
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield {"endpoint_url": f"http://{host}:{port}", "key": "testing", "secret": "testing"}
    finally:
        server.stop()
        restore_environ(saved)


def restore_environ(saved: dict) -> None:
    """Set the environment variables of ``saved`` back to its values (``None``: unset)."""
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


#: What a ``distributed`` nanny sets in the environment of the process that starts it (its
#: ``pre-spawn-environ``) and leaves there: without a restore, a subprocess started by a later
#: test (the command line) would run with one BLAS thread, whatever ran before it.
NANNY_ENVIRON = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MALLOC_TRIM_THRESHOLD_")
_ENVIRON_AT_START = {k: os.environ.get(k) for k in NANNY_ENVIRON}


@pytest.fixture(autouse=True)
def _environment_as_at_start():
    """After every test, those variables as they were when the session started."""
    yield
    restore_environ(_ENVIRON_AT_START)


def worker_cluster(n_workers: int):
    """A new ``distributed.LocalCluster`` of ``n_workers`` worker processes, one thread each, no dashboard."""
    from dsgd_dask.engine.distributed import local_cluster

    return local_cluster(n_workers)


@pytest.fixture(scope="session")
def local_clusters():
    """``get(n)``: a :func:`worker_cluster` of ``n`` workers, shared by the session.

    For the tests that only run work on a cluster; a test that kills a worker or changes the
    scheduler's settings starts a cluster of its own.
    """
    clusters = {}

    def get(n_workers: int):
        if n_workers not in clusters:
            clusters[n_workers] = worker_cluster(n_workers)
        return clusters[n_workers]

    try:
        yield get
    finally:
        for cluster in clusters.values():
            cluster.close()


@pytest.fixture
def s3_bucket(s3_server):
    """A new, empty bucket on :func:`s3_server`: ``(url, storage_options)``, ``url`` as ``s3://bucket``."""
    import s3fs

    name = f"test-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(**s3_server).mkdir(name)
    return f"s3://{name}", dict(s3_server)


@pytest.fixture(scope="session")
def mnist_small():
    """The first 3000 training and 1000 test MNIST digits, pixels scaled to [0, 1].

    Read from the MNIST subset shipped with the package (no data home needed).
    """
    X, _ = load_mnist("train", sample=True)
    Xt, _ = load_mnist("test", sample=True)
    return X[:3000] / 255.0, Xt[:1000] / 255.0


def mnist_halves(n: int, offset: int = 0):
    """Left and right 392-pixel halves of ``n`` real MNIST training digits (the papers' two views), in [0, 1]."""
    X, _ = load_mnist("train", sample=True)
    X = X[offset:offset + n].reshape(-1, 28, 28) / 255.0
    return X[:, :, :14].reshape(n, -1), X[:, :, 14:].reshape(n, -1)


def halves_stores(root: Path, halves, chunk_rows: tuple[int, int]) -> tuple[str, str]:
    """The two views as uint8 Zarr arrays under ``root``, with different row chunks (misaligned views)."""
    paths = []
    for name, view, rows in zip(("a", "b"), halves, chunk_rows, strict=True):
        zarr.create_array(store=str(root / f"{name}.zarr"), data=(view * 255).astype("uint8"), chunks=(rows, 392))
        paths.append(str(root / f"{name}.zarr"))
    return tuple(paths)


@pytest.fixture
def blobs():
    rng = np.random.default_rng(42)
    centers = rng.normal(scale=3.0, size=(4, 5))
    X = np.concatenate([c + rng.normal(size=(150, 5)) for c in centers])
    return X[rng.permutation(len(X))]


#: Every kernel family with each shape parameter, for tests that run over all of them.
KERNEL_CASES = [
    KernelSpec("gaussian", 1.3),
    KernelSpec("laplacian", 2.0),
    KernelSpec("cauchy", 1.5),
    KernelSpec("matern", 1.7, nu=0.5),
    KernelSpec("matern", 1.7, nu=1.5),
    KernelSpec("matern", 1.7, nu=2.5),
    KernelSpec("arccos", 1.0, order=0),
    KernelSpec("arccos", 1.0, order=1),
    KernelSpec("arccos", 1.0, order=2),
]


def kernel_id(spec: KernelSpec) -> str:
    extra = f"nu{spec.nu}" if spec.nu is not None else f"order{spec.order}" if spec.order is not None else ""
    return f"{spec.name}{extra}"


def blas_threads() -> int:
    """The largest BLAS thread count in force now."""
    return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
