"""Helpers shared by the benchmark scripts: data, machine description, output files."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

#: Folder of the benchmark datasets (``load.py`` and ``mnist.npz``); override with
#: the environment variable ``DSGD_DATASETS``.
DATASETS_DIR = Path(os.environ.get("DSGD_DATASETS", "/work/shared/datasets"))
#: Where the JSON results and the figures go.
RESULTS_DIR = Path(__file__).resolve().parent / "results"

_PACKAGES = ("dsgd_dask", "numpy", "scipy", "scikit-learn", "dask", "distributed", "zarr", "matplotlib",
             "threadpoolctl")


def load_mnist():
    """MNIST as ``(X_train, X_test)``, float64 rows of 784 pixels scaled to [0, 1]."""
    sys.path.insert(0, str(DATASETS_DIR))
    try:
        from load import load
    except ImportError as err:
        raise SystemExit(f"no dataset loader in {DATASETS_DIR}; set DSGD_DATASETS to the folder of load.py") from err
    finally:
        sys.path.remove(str(DATASETS_DIR))
    d = load("mnist", path=str(DATASETS_DIR))
    x_train = d["X_train"].reshape(len(d["X_train"]), -1) / 255.0
    x_test = d["X_test"].reshape(len(d["X_test"]), -1) / 255.0
    return x_train, x_test


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
                if k.startswith(("OPENBLAS", "OMP_", "MKL_", "BLIS", "NVPL")) or k == "DSGD_DATASETS"},
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


def write_json(name: str, payload: dict) -> Path:
    """Write ``payload`` to ``results/<name>.json`` and return the path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(_jsonable(payload), indent=2) + "\n")
    return path


def figure_path(name: str) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    return RESULTS_DIR / f"{name}.png"
