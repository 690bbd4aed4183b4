"""Helpers shared by the benchmark scripts: data, machine description, output files."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

#: Where the JSON results and the figures go.
RESULTS_DIR = Path(__file__).resolve().parent / "results"

_PACKAGES = ("dsgd_dask", "numpy", "scipy", "scikit-learn", "dask", "distributed", "zarr", "matplotlib",
             "threadpoolctl", "numba")


def load_mnist():
    """MNIST as ``(X_train, X_test)``, float64 rows of 784 pixels scaled to [0, 1].

    The full dataset, read (and verified) by :func:`dsgd_dask.datasets.load_mnist` from the
    data home: ``$DSGD_DATA_DIR`` when set, else ``~/dsgd_dask_data`` or
    ``../shared/datasets`` beside the checkout. Download it once with
    ``python -c "import dsgd_dask.datasets as d; d.fetch('mnist')"``.
    """
    from dsgd_dask.datasets import load_mnist as _load_mnist

    try:
        x_train, _ = _load_mnist("train")
        x_test, _ = _load_mnist("test")
    except FileNotFoundError as err:
        raise SystemExit(str(err)) from err
    return x_train / 255.0, x_test / 255.0


#: Where generated benchmark stores go (not versioned).
STORES_DIR = RESULTS_DIR / "stores"


def shifted_digits(images: np.ndarray, n: int, seed, max_shift: int = 2) -> np.ndarray:
    """``n`` rows: seeded random training digits moved by up to ``max_shift`` pixels each way (zero fill)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(images), n)
    shifts = rng.integers(-max_shift, max_shift + 1, (n, 2))
    out = np.zeros((n, 28, 28), np.uint8)
    for dy in range(-max_shift, max_shift + 1):
        for dx in range(-max_shift, max_shift + 1):
            sel = np.nonzero((shifts[:, 0] == dy) & (shifts[:, 1] == dx))[0]
            src = images[idx[sel]]
            out[sel, max(dy, 0):28 + min(dy, 0), max(dx, 0):28 + min(dx, 0)] = \
                src[:, max(-dy, 0):28 + min(-dy, 0), max(-dx, 0):28 + min(-dx, 0)]
    return out.reshape(n, 784)


def shifted_mnist_store(n: int, chunk_rows: int = 8192, seed: int = 0) -> Path:
    """A uint8 Zarr store of ``n`` shifted MNIST training digits (made once, then reused).

    Written chunk by chunk (each chunk seeded by ``(seed, chunk index)``), so stores of
    any size are made in bounded memory; a store left incomplete is rebuilt.
    """
    import zarr

    from dsgd_dask.datasets import load_mnist as _load_mnist

    path = STORES_DIR / f"shifted_mnist_{n}_{chunk_rows}_{seed}.zarr"
    if path.exists():
        try:
            if zarr.open_array(str(path), mode="r").attrs.get("complete"):
                return path
        except Exception:
            pass
    images = _load_mnist("train")[0].reshape(-1, 28, 28)
    STORES_DIR.mkdir(parents=True, exist_ok=True)
    arr = zarr.create_array(store=str(path), shape=(n, 784), chunks=(chunk_rows, 784), dtype="uint8",
                            overwrite=True)
    for c, r0 in enumerate(range(0, n, chunk_rows)):
        rows = min(chunk_rows, n - r0)
        arr[r0:r0 + rows] = shifted_digits(images, rows, seed=np.random.SeedSequence(seed, spawn_key=(c,)))
    arr.attrs["complete"] = True
    arr.attrs["description"] = f"{n} MNIST training digits shifted by up to 2 pixels, seed {seed}"
    return path


def gemm_rate(d: int = 784) -> float:
    """float32 GEMM flop/s on all cores (best of 3), for predicting a configuration's time."""
    a = np.random.default_rng(0).random((4096, d), dtype=np.float32)
    b = np.random.default_rng(1).random((d, 4096), dtype=np.float32)
    best = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * 4096 * d * 4096 / best


def default_budget(k: int) -> int:
    """``KernelPCA``'s default number of Nyström features (equal blocks of at most 4096)."""
    budget = max(2048, 64 * k)
    n_blocks = -(-budget // 4096)
    return -(-budget // n_blocks) * n_blocks


def pass_flops(n: int, M: int, k: int, passes: float = 2.5, d: int = 784) -> float:
    """Flops of ``passes`` full-data passes with ``M`` features and ``2 k + 10`` directions."""
    return passes * 2 * n * M * (d + 2 * (2 * k + 10))


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages (other work on the machine skews timings)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _busy_seconds() -> tuple[float, float]:
    """CPU seconds used by the whole machine and by this process (with its threads) so far."""
    import psutil

    t = psutil.cpu_times()
    busy = sum(t) - t.idle - getattr(t, "iowait", 0.0)
    own = psutil.Process().cpu_times()
    return busy, own.user + own.system


class ForeignLoad:
    """Cores kept busy by *other* processes while a block of code runs.

    Other work on the machine (e.g. another job) slows multithreaded BLAS far more than
    its share of the cores; timings taken with ``cores`` well above 0 are suspect::

        with ForeignLoad() as load:
            ...
        load.cores  # average number of cores used by other processes
    """

    def __enter__(self):
        self._t0 = time.perf_counter()
        self._busy0, self._own0 = _busy_seconds()
        return self

    def __exit__(self, *exc):
        busy, own = _busy_seconds()
        wall = time.perf_counter() - self._t0
        self.seconds = wall
        self.cores = max(0.0, (busy - self._busy0) - (own - self._own0)) / wall if wall > 0 else 0.0
        return False


def wait_for_idle(max_cores: float = 0.2, window: float = 2.0, timeout: float = 900.0) -> dict:
    """Wait until other processes use less than ``max_cores`` cores over ``window`` seconds.

    Returns ``{"waited": seconds, "cores": last measurement}``; after ``timeout`` seconds
    it warns and returns anyway.
    """
    t0 = time.perf_counter()
    while True:
        with ForeignLoad() as load:
            time.sleep(window)
        waited = time.perf_counter() - t0
        if load.cores < max_cores:
            return {"waited": waited, "cores": load.cores}
        if waited >= timeout:
            warnings.warn(f"the machine stayed busy ({load.cores:.2f} cores used by other processes); "
                          "timings will be slowed", RuntimeWarning, stacklevel=2)
            return {"waited": waited, "cores": load.cores}


def run_clean(fn, max_cores: float = 0.25, attempts: int = 3, wait: bool = True, window: float = 2.0,
              timeout: float = 900.0):
    """Run ``fn()`` while the machine is otherwise idle; repeat it if other work interfered.

    Before each attempt, waits for other processes to use less than ``max_cores`` cores
    (unless ``wait`` is false); the attempt counts as clean when they used less than
    ``max_cores`` on average while it ran. Returns ``(result, info)`` of the cleanest
    attempt, ``info`` holding ``foreign_cores``, ``attempts`` and ``waited`` seconds.
    """
    best = None
    info = {"foreign_cores": None, "attempts": 0, "waited": 0.0}
    while info["attempts"] < max(1, attempts):
        info["attempts"] += 1
        if wait:
            info["waited"] += wait_for_idle(max_cores, window, timeout)["waited"]
        with ForeignLoad() as load:
            result = fn()
        if best is None or load.cores < info["foreign_cores"]:
            best, info["foreign_cores"] = result, load.cores
        if load.cores < max_cores:
            break
    return best, info


def machine_info() -> dict:
    """CPU, memory, BLAS and library versions, recorded with every result file."""
    info = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average": load_average(),
        "versions": {name: _version(name) for name in _PACKAGES},
        "git_commit": _git_commit(),
        "env": {k: v for k, v in os.environ.items()
                if k.startswith(("OPENBLAS", "OMP_", "MKL_", "BLIS", "NVPL")) or k == "DSGD_DATA_DIR"},
    }
    try:
        import psutil

        info["memory_bytes"] = psutil.virtual_memory().total
    except ImportError:
        info["memory_bytes"] = None
    try:
        from threadpoolctl import threadpool_info

        info["threadpools"] = threadpool_info()
    except ImportError:
        info["threadpools"] = None
    return info


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def result_path(name: str) -> Path:
    return RESULTS_DIR / f"{name}.json"


def write_json(name: str, payload: dict) -> Path:
    """Write ``payload`` to ``results/<name>.json`` and return the path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = result_path(name)
    path.write_text(json.dumps(_jsonable(payload), indent=2) + "\n")
    return path


def figure_path(name: str) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    return RESULTS_DIR / f"{name}.png"
