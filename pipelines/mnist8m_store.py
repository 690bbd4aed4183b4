"""The MNIST8M setting out of core: deformed training digits written chunk by chunk to a Zarr store.

Row ``r`` of the store is digit ``r mod 60,000`` of MNIST's training set: the digits
themselves first, then random deformations of each (integer shifts up to 2 pixels,
rotations up to 10 degrees, smooth elastic fields; :func:`dsgd_dask.datasets.digit_stream`),
8,100,000 rows x 784 uint8 pixels (6.4 GB; 25 GB as float32) by default, with the labels
beside them. Chunks are generated in parallel by the Dask scheduler (``--scheduler``:
threads, or a ``distributed.LocalCluster`` of ``--workers`` processes), each from its own
seed, so the bytes are the same from the same seed whatever the scheduler; never more
than a few chunks are in memory. The store is written under a temporary name and renamed
when complete.

Prints and writes (``<store>.json``) the rows, the wall time, the peak resident memory of
this process (and of the workers, on a cluster) and a SHA-256 digest of every chunk's
bytes in order. Needs ``mnist.npz`` in the data home.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import shutil
import time
from pathlib import Path

import numpy as np

CHUNK_ROWS = 8192


def _digest(array) -> str:
    h = hashlib.sha256()
    for r0 in range(0, array.shape[0], CHUNK_ROWS):
        h.update(np.ascontiguousarray(array[r0:r0 + CHUNK_ROWS]).tobytes())
    return h.hexdigest()


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_digit_store(path: Path, images: np.ndarray, labels: np.ndarray, n_rows: int, seed: int) -> None:
    """``n_rows`` rows of :func:`~dsgd_dask.datasets.digit_stream` and their labels into a uint8 Zarr group.

    Written under a temporary name beside ``path`` by the current Dask scheduler, one
    store chunk per stream chunk, and renamed to ``path`` (replacing it) when complete.
    """
    import dask.array as da
    import zarr

    from dsgd_dask.datasets import digit_stream

    X, y = digit_stream(images, labels, n_rows=n_rows, chunk_rows=CHUNK_ROWS, random_state=seed)
    tmp = path.with_name(f".{path.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    group = zarr.open_group(str(tmp), mode="w")
    targets = [group.create_array("X", shape=X.shape, chunks=(CHUNK_ROWS, X.shape[1]), dtype=np.uint8),
               group.create_array("y", shape=y.shape, chunks=(CHUNK_ROWS,), dtype=np.uint8)]
    group.attrs.update({"rows": n_rows, "seed": seed, "source": "MNIST training digits, deformed "
                        "(dsgd_dask.datasets.digit_stream defaults)"})
    da.store([X, y.astype(np.uint8)], targets, lock=False)  # chunk-aligned: no lock, no rechunk
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)


def reuse_or_write(path: Path, n_rows: int, seed: int, digits) -> Path:
    """``path`` when it already holds ``n_rows`` rows written from ``seed``, else written by :func:`write_digit_store`.

    ``digits()`` returns the ``(images, labels)`` to deform; it is called only when the
    store has to be written.
    """
    import zarr

    if (path / "zarr.json").exists():
        attrs = zarr.open_group(str(path), mode="r").attrs
        if attrs.get("rows") == n_rows and attrs.get("seed") == seed:
            return path
    images, labels = digits()
    write_digit_store(path, images.reshape(-1, 28, 28), labels, n_rows, seed)
    return path


def build(path: Path, n_rows: int = 8_100_000, seed: int = 0, scheduler: str = "threads", workers: int = 2,
          data_home=None, digest: bool = True) -> dict:
    import dask
    import zarr

    from dsgd_dask.datasets import load_mnist

    images, labels = load_mnist("train", data_home=data_home)
    images = images.reshape(-1, 28, 28)
    t0 = time.perf_counter()
    worker_rss = None
    if scheduler == "distributed":
        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
                Client(c) as client:
            write_digit_store(path, images, labels, n_rows, seed)
            worker_rss = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    else:
        with dask.config.set(scheduler=scheduler, num_workers=workers):
            write_digit_store(path, images, labels, n_rows, seed)
    seconds = time.perf_counter() - t0
    report = {"path": str(path), "rows": n_rows, "seed": seed, "scheduler": scheduler, "workers": workers,
              "seconds": seconds, "peak_rss_mib": _peak_rss_mib(),
              "worker_peak_rss_mib": list(worker_rss.values()) if worker_rss else None}
    if digest:
        stored = zarr.open_group(str(path), mode="r")
        report["sha256_X"] = _digest(stored["X"])
        report["sha256_y"] = _digest(stored["y"])
    path.with_name(path.name + ".json").write_text(json.dumps(report, indent=2))
    return report


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, help="the Zarr store to write (replaced when it exists)")
    parser.add_argument("--rows", type=int, default=8_100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scheduler", choices=("threads", "synchronous", "distributed"), default="threads")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--data-home", default=None)
    parser.add_argument("--no-digest", action="store_true", help="skip the digest (a second read of the store)")
    args = parser.parse_args(argv)
    report = build(args.path, args.rows, args.seed, args.scheduler, args.workers, args.data_home,
                   digest=not args.no_digest)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
