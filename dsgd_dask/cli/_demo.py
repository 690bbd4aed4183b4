"""The demo: kernel PCA of 1-D Gaussian data read from a local Zarr store, against the closed form."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

#: Rows of data, rows per Zarr chunk, components.
N_SAMPLES, CHUNK_ROWS, N_COMPONENTS = 32_768, 2048, 3


def analytic_eigenvalues(scale: float, bandwidth: float, k: int) -> np.ndarray:
    """The top ``k`` eigenvalues of the uncentred covariance operator of the Gaussian kernel under N(0, s²).

    ``lambda_i = sqrt(2a/A) B^i`` with ``a = 1/(4 s²)``, ``b = 1/(2 l²)``,
    ``c = sqrt(a² + 2ab)``, ``A = a + b + c``, ``B = b / A`` (Zhu et al. 1998; Rasmussen &
    Williams, GPML 4.3.1).

    Examples
    --------
    >>> analytic_eigenvalues(1.0, 1.0, 3).round(4)
    array([0.618 , 0.2361, 0.0902])
    """
    a, b = 1.0 / (4.0 * scale**2), 1.0 / (2.0 * bandwidth**2)
    c = math.sqrt(a * a + 2.0 * a * b)
    big_a = a + b + c
    return math.sqrt(2.0 * a / big_a) * (b / big_a) ** np.arange(k)


def run_demo(out, seed: int = 0, verbose: bool = True) -> dict:
    """Write 1-D Gaussian data to a Zarr store, fit ``KernelPCA`` (k = 3) on it, compare with the closed form.

    Two fits of the uncentred kernel PCA with the Gaussian kernel of bandwidth 1 on
    ``x ~ N(0, 1)``: ``solver="subspace"`` (full-data passes over Nyström blocks, what
    ``"auto"`` runs), and ``solver="dsgd"`` (the papers' doubly stochastic steps over
    random Fourier blocks). The first is saved as a
    model store for the other commands to use. About ten seconds.

    Parameters
    ----------
    out : str or Path
        Folder receiving ``data.zarr``, ``model.zarr`` and ``demo.json``.
    seed : int
        Seed of the data and of the estimators.
    verbose : bool
        Print the comparison and the commands to try next.

    Returns
    -------
    dict
        The summary written to ``demo.json``.
    """
    import dask
    import dask.array as da

    from dsgd_dask import KernelPCA
    from dsgd_dask.model.store import atomic_directory

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data, model_path = out / "data.zarr", out / "model.zarr"
    x = da.random.default_rng(seed).normal(0.0, 1.0, size=(N_SAMPLES, 1), chunks=(CHUNK_ROWS, 1))
    with atomic_directory(data, overwrite=True) as (tmp, _):
        da.to_zarr(x, str(tmp), zarr_format=3)
    X = da.from_zarr(str(data))
    fits = {
        "passes": {"solver": "subspace", "features": "nystroem", "n_features": 512},
        "steps": {"solver": "dsgd", "features": "fourier", "n_features": 4096, "block_size": 64, "batch_size": 64,
                  "max_iter": 512, "eta0": 0.7, "eta_decay": 0.02},
    }
    truth = analytic_eigenvalues(1.0, 1.0, N_COMPONENTS)
    summary = {"n_samples": N_SAMPLES, "data": str(data), "model": str(model_path),
               "eigenvalues_analytic": truth.tolist(), "fits": {}}
    for name, params in fits.items():
        kpca = KernelPCA(N_COMPONENTS, bandwidth=1.0, center=False, random_state=seed, **params)
        t0 = time.perf_counter()
        with dask.config.set(scheduler="threads"):
            kpca.fit(X)
        summary["fits"][name] = {"params": params, "seconds": round(time.perf_counter() - t0, 2),
                                 "eigenvalues": kpca.eigenvalues_.tolist(),
                                 "relative_error": (kpca.eigenvalues_ / truth - 1).tolist()}
        if name == "passes":
            kpca.save(model_path, overwrite=True)
    (out / "demo.json").write_text(json.dumps(summary, indent=2))
    if verbose:
        print(f"{N_SAMPLES:,} samples of N(0, 1) in {data}; Gaussian kernel, bandwidth 1, k = {N_COMPONENTS}")
        print(f"{'':<34}" + "".join(f"{'λ' + str(i):>10}" for i in range(N_COMPONENTS)) + f"{'seconds':>10}")
        print(f"{'closed form':<34}" + "".join(f"{v:>10.4f}" for v in truth))
        labels = {"passes": 'KernelPCA(solver="subspace")', "steps": 'KernelPCA(solver="dsgd")'}
        for name, fit in summary["fits"].items():
            print(f"{labels[name]:<34}" + "".join(f"{v:>10.4f}" for v in fit["eigenvalues"])
                  + f"{fit['seconds']:>10.1f}")
        print(f"saved the first model to {model_path}; try:\n"
              f"  dsgd-dask info {model_path}\n"
              f"  dsgd-dask transform {model_path} {data} --out {out / 'components.zarr'}\n"
              f"  dsgd-dask evaluate {model_path} {data}")
    return summary
