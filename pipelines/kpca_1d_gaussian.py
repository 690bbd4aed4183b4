"""Kernel PCA of 1-D Gaussian data against its closed-form eigenfunctions.

For ``x ~ N(0, s^2)`` and the Gaussian kernel ``k(x, y) = exp(-(x - y)^2 / (2 l^2))`` the
uncentred covariance operator has eigenvalues ``lambda_i = sqrt(2a/A) B^i`` and
eigenfunctions ``v_i(x) ~ exp(-(c - a) x^2) H_i(sqrt(2c) x)`` (physicists' Hermite
polynomials), with ``a = 1/(4 s^2)``, ``b = 1/(2 l^2)``, ``c = sqrt(a^2 + 2ab)``,
``A = a + b + c`` and ``B = b / A`` (Zhu et al. 1998; Rasmussen & Williams, GPML 4.3.1).

The pipeline writes the data to a Zarr v3 store chunk by chunk, opens it lazily, fits
``DSGDKernelPCA`` (three components, uncentred) on it under the local dask scheduler and
records after every chunk of steps the *potential*: ``sin^2`` of the largest principal
angle between the estimated and the true top-3 functions on held-out points. Xie, Liang
& Song (NIPS 2015, Fig. 1) show it falling as ``O(1/t)``. Outputs, in ``--out``:

* ``data.zarr``: the training data (``n_samples x 1``, float64);
* ``kpca_1d_gaussian.png``: potential vs samples seen (log-log, with a fitted ``C/t``
  line), and the recovered vs true eigenfunctions;
* ``kpca_1d_gaussian.json``: parameters, timings, the potential curve, its log-log slope
  over the second half of the run, and the eigenvalues vs the closed form.

Run ``python pipelines/kpca_1d_gaussian.py`` (about a minute on two cores) or
``--size paper`` for the paper's 1M points and 262,144 features (much longer).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np
from dask.diagnostics import ProgressBar
from matplotlib.figure import Figure
from numpy.polynomial import hermite, hermite_e

from dsgd_dask import DSGDKernelPCA
from dsgd_dask.metrics import principal_angle_sin2

N_COMPONENTS = 3
REPO_ROOT = Path(__file__).resolve().parents[1]

#: Problem sizes. Steps default to one pass over the data; the feature budget is at
#: least ``steps x block_size`` so that a new block is added at every step of the run
#: (once the budget is used up, the potential levels off at the random-feature error).
SIZES = {
    "default": {"n_samples": 262_144, "n_features": 65_536, "block_size": 64, "batch_size": 256,
                "chunks": 4096},
    # Xie et al. (2015): 1M points, 262,144 features, 128 features and 512 rows per step.
    "paper": {"n_samples": 1_000_000, "n_features": 262_144, "block_size": 128, "batch_size": 512,
              "chunks": 8192},
}
#: The data and kernel: ``x ~ N(0, SCALE^2)``, bandwidth ``BANDWIDTH`` (the data's own scale).
SCALE = 1.0
BANDWIDTH = 1.0
#: Step size ``eta_t = ETA0 / (lambda_1 (1 + ETA_DECAY t))`` (lambda_1: initial estimate).
ETA0 = 0.5
ETA_DECAY = 0.01
#: Held-out points for the potential, and potential evaluations per decade of samples.
N_HELDOUT = 2000
POINTS_PER_DECADE = 30
#: Spawn keys separating the random streams derived from ``seed``.
HELDOUT_KEY = 1


# -- the closed form -------------------------------------------------------------------
def analytic_constants(scale: float, bandwidth: float) -> dict:
    a = 1.0 / (4.0 * scale**2)
    b = 1.0 / (2.0 * bandwidth**2)
    c = math.sqrt(a * a + 2.0 * a * b)
    big_a = a + b + c
    return {"a": a, "b": b, "c": c, "A": big_a, "B": b / big_a}


def analytic_eigenvalues(scale: float, bandwidth: float, k: int) -> np.ndarray:
    """``lambda_i = sqrt(2a/A) B^i``, ``i < k``."""
    p = analytic_constants(scale, bandwidth)
    return math.sqrt(2.0 * p["a"] / p["A"]) * p["B"] ** np.arange(k)


def analytic_eigenfunctions(x: np.ndarray, scale: float, bandwidth: float, k: int) -> np.ndarray:
    """``v_i(x)``, ``i < k``, as columns, scaled to ``E[v_i(x)^2] = lambda_i``.

    That is the scale of the RKHS-normalised eigenfunctions the estimator finds
    (``<v_i, v_i>_H = 1``); the norms come from Gauss-Hermite quadrature under N(0, s^2).
    """
    p = analytic_constants(scale, bandwidth)

    def raw(u):
        u = np.asarray(u, dtype=np.float64).reshape(-1)
        envelope = np.exp(-(p["c"] - p["a"]) * u**2)
        return np.stack([envelope * hermite.hermval(math.sqrt(2.0 * p["c"]) * u, np.eye(k)[i])
                         for i in range(k)], axis=1)

    nodes, weights = hermite_e.hermegauss(100)
    second_moment = (weights[:, None] * raw(scale * nodes) ** 2).sum(axis=0) / math.sqrt(2.0 * math.pi)
    return raw(x) * np.sqrt(analytic_eigenvalues(scale, bandwidth, k) / second_moment)


# -- helpers ---------------------------------------------------------------------------
def loglog_slope(samples: np.ndarray, potential: np.ndarray) -> tuple[float, float]:
    """Least-squares slope of ``log potential`` on ``log samples`` over the second half of the run.

    Returns ``(slope, C)`` where ``C / samples`` is the ``O(1/t)`` line fitted to the same points.
    """
    samples = np.asarray(samples, dtype=np.float64)
    potential = np.asarray(potential, dtype=np.float64)
    keep = (samples >= samples[-1] / 2) & (potential > 0)
    if keep.sum() < 2:
        return math.nan, math.nan
    lx, ly = np.log(samples[keep]), np.log(potential[keep])
    slope = float(np.polyfit(lx, ly, 1)[0])
    return slope, float(np.exp(np.mean(ly + lx)))


def write_gaussian_zarr(path: Path, n_samples: int, chunks: int, scale: float, seed: int) -> da.Array:
    """Write ``n_samples`` draws of N(0, scale^2) as an ``(n, 1)`` Zarr v3 array; open it lazily."""
    x = da.random.default_rng(seed).normal(0.0, scale, size=(n_samples, 1), chunks=(chunks, 1))
    with ProgressBar():
        da.to_zarr(x, str(path), mode="w", zarr_format=3)
    return da.from_zarr(str(path))


class PotentialMonitor:
    """Fit callback: records the potential at roughly log-spaced numbers of steps.

    ``__call__(n_steps, model)`` evaluates the raw model on the held-out points when
    ``n_steps`` reaches the next target (``POINTS_PER_DECADE`` per decade) or the last step.
    """

    def __init__(self, heldout: np.ndarray, truth: np.ndarray, batch_size: int, total_steps: int):
        self.heldout = heldout
        self.truth = truth
        self.batch_size = batch_size
        self.total_steps = total_steps
        self.steps: list[int] = []
        self.potential: list[float] = []
        self.seconds = 0.0
        self._next = 1.0

    def __call__(self, n_steps: int, model) -> None:
        if n_steps < self._next and n_steps < self.total_steps:
            return
        t0 = time.perf_counter()
        self.steps.append(int(n_steps))
        self.potential.append(principal_angle_sin2(model.evaluate(self.heldout), self.truth))
        while self._next <= n_steps:
            self._next *= 10.0 ** (1.0 / POINTS_PER_DECADE)
        self.seconds += time.perf_counter() - t0

    @property
    def samples(self) -> np.ndarray:
        return np.asarray(self.steps, dtype=np.int64) * self.batch_size


# -- the figure ------------------------------------------------------------------------
def make_figure(path: Path, monitor: PotentialMonitor, slope: float, const: float, grid: np.ndarray,
                fitted: np.ndarray, truth: np.ndarray, title: str) -> None:
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)

    samples = monitor.samples
    ax1.loglog(samples, monitor.potential, "o-", ms=3, lw=1, color="C3", label="DSGD kernel PCA")
    half = samples >= samples[-1] / 2
    ax1.axvspan(samples[-1] / 2, samples[-1], color="0.92", zorder=0, label="second half (slope fit)")
    ref = np.geomspace(samples[0], samples[-1], 50)
    ax1.loglog(ref, const / ref, "--", color="C0", label=f"fitted C/t;  measured slope {slope:.2f}")
    ax1.loglog(samples[half], monitor.potential[np.flatnonzero(half)[0]:], "o", ms=4, color="C3")
    ax1.set_xlabel("samples seen (steps × batch size)")
    ax1.set_ylabel("potential: sin² of the largest principal angle")
    ax1.set_title("Convergence to the top-3 eigen-subspace")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend(loc="lower left")

    for i in range(truth.shape[1]):
        ax2.plot(grid, truth[:, i], "--", color=f"C{i}", lw=2.5, alpha=0.6, label=f"true $v_{i}$")
        ax2.plot(grid, fitted[:, i], "-", color=f"C{i}", lw=1.2, label=f"recovered $v_{i}$")
    ax2.set_xlabel("x")
    ax2.set_ylabel("function value (E[v_i²] = λ_i)")
    ax2.set_title("Eigenfunctions: recovered (least-squares aligned onto the truth)")
    ax2.grid(True, alpha=0.3)
    ax2.legend(ncol=2, fontsize="small")

    fig.suptitle(title)
    fig.savefig(path, dpi=120)


# -- the pipeline ----------------------------------------------------------------------
def run(out, size: str = "default", *, n_samples: int | None = None, n_features: int | None = None,
        block_size: int | None = None, batch_size: int | None = None, n_steps: int | None = None,
        chunks: int | None = None, seed: int = 0, scale: float = SCALE, bandwidth: float = BANDWIDTH,
        eta0: float = ETA0, eta_decay: float = ETA_DECAY, n_heldout: int = N_HELDOUT,
        data_dir=None, verbose: bool = True) -> dict:
    """Fit DSGD kernel PCA on 1-D Gaussian data in Zarr and compare with the closed form.

    Parameters
    ----------
    out : str or Path
        Output folder (created); holds ``data.zarr``, the figure and the JSON summary.
    size : {"default", "paper"}
        Preset for the sizes below; any of them given explicitly overrides it.
    n_samples, n_features, block_size, batch_size, chunks : int, optional
        Rows of data, feature budget, features per step, rows per step, rows per Zarr chunk.
    n_steps : int, optional
        Update steps; default one pass over the data.
    seed : int
        Seed of the data, the held-out points and the estimator.
    scale, bandwidth : float
        Standard deviation ``s`` of the data and kernel bandwidth ``l``.
    eta0, eta_decay : float
        Step size ``eta_t = eta0 / (lambda_1 (1 + eta_decay t))``.
    n_heldout : int
        Held-out points drawn from N(0, s^2) on which the potential is measured.
    data_dir : str or Path, optional
        Directory of the real datasets; not used by this pipeline.
    verbose : bool
        Print progress bars and a short report.

    Returns
    -------
    dict
        The summary written to ``kpca_1d_gaussian.json``.
    """
    del data_dir  # accepted for uniformity with the other pipelines
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    given = {"n_samples": n_samples, "n_features": n_features, "block_size": block_size,
             "batch_size": batch_size, "chunks": chunks}
    cfg = {k: int(v if v is not None else SIZES[size][k]) for k, v in given.items()}
    steps_per_pass = sum(-(-min(cfg["chunks"], cfg["n_samples"] - r) // cfg["batch_size"])
                         for r in range(0, cfg["n_samples"], cfg["chunks"]))
    cfg["n_steps"] = int(n_steps) if n_steps is not None else steps_per_pass
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    # data on disk, opened lazily
    t0 = time.perf_counter()
    if verbose:
        print(f"writing {cfg['n_samples']:,} samples of N(0, {scale:g}^2) to {out / 'data.zarr'}")
    X = write_gaussian_zarr(out / "data.zarr", cfg["n_samples"], cfg["chunks"], scale, seed)
    zarr_seconds = time.perf_counter() - t0

    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(HELDOUT_KEY,)))
    heldout = rng.normal(0.0, scale, size=(n_heldout, 1))
    truth_heldout = analytic_eigenfunctions(heldout, scale, bandwidth, N_COMPONENTS)
    monitor = PotentialMonitor(heldout, truth_heldout, cfg["batch_size"], cfg["n_steps"])

    kpca = DSGDKernelPCA(
        n_components=N_COMPONENTS, kernel="gaussian", bandwidth=bandwidth, center=False,
        n_features=cfg["n_features"], block_size=cfg["block_size"], batch_size=cfg["batch_size"],
        max_iter=cfg["n_steps"], eta0=eta0, eta_decay=eta_decay, verbose=verbose, random_state=seed,
    )
    if verbose:
        print(f"fitting: {cfg['n_steps']} steps of {cfg['batch_size']} rows and {cfg['block_size']} "
              f"features, budget {cfg['n_features']:,} features")
    t0 = time.perf_counter()
    with dask.config.set(scheduler="threads"):
        kpca.fit(X, callback=monitor)
    fit_seconds = time.perf_counter() - t0

    samples = monitor.samples
    potential = np.asarray(monitor.potential)
    slope, const = loglog_slope(samples, potential)

    # eigenfunctions on a grid, aligned (sign and rotation) onto the truth by least squares
    # on the held-out points
    est_heldout = kpca.transform(heldout)
    align, *_ = np.linalg.lstsq(est_heldout, truth_heldout, rcond=None)
    grid = np.linspace(-4.0 * scale, 4.0 * scale, 401)
    truth_grid = analytic_eigenfunctions(grid, scale, bandwidth, N_COMPONENTS)
    fitted_grid = kpca.transform(grid[:, None]) @ align

    eig_true = analytic_eigenvalues(scale, bandwidth, N_COMPONENTS + 1)
    summary = {
        "size": size,
        "seed": seed,
        "scale": scale,
        "bandwidth": bandwidth,
        "eta0": eta0,
        "eta_decay": eta_decay,
        **cfg,
        "n_heldout": n_heldout,
        "n_features_used": int(kpca.n_features_),
        "features_grow_throughout": bool(cfg["n_steps"] * cfg["block_size"] <= cfg["n_features"]),
        "samples_seen": int(samples[-1]),
        "zarr_seconds": round(zarr_seconds, 2),
        "fit_seconds": round(fit_seconds, 2),
        "monitor_seconds": round(monitor.seconds, 2),
        "final_potential": float(potential[-1]),
        "loglog_slope_second_half": slope,
        "reference_C": const,
        "eigenvalues": [float(v) for v in kpca.eigenvalues_],
        "eigenvalues_analytic": [float(v) for v in eig_true[:N_COMPONENTS]],
        "eigenvalue_relative_error": [float(v) for v in kpca.eigenvalues_ / eig_true[:N_COMPONENTS] - 1],
        "eigengap_ratio": float(eig_true[N_COMPONENTS] / eig_true[N_COMPONENTS - 1]),
        "alignment_matrix": align.tolist(),
        "curve": {"steps": monitor.steps, "samples": samples.tolist(), "potential": potential.tolist()},
    }
    title = (f"1-D Gaussian data, s = {scale:g}, Gaussian kernel l = {bandwidth:g}: "
             f"{cfg['n_samples']:,} points (Zarr), {kpca.n_features_:,} random features, "
             f"batch {cfg['batch_size']}")
    make_figure(out / "kpca_1d_gaussian.png", monitor, slope, const, grid, fitted_grid, truth_grid, title)
    with open(out / "kpca_1d_gaussian.json", "w") as f:
        json.dump(summary, f, indent=2)
    if verbose:
        print(f"fit {fit_seconds:.1f} s (monitoring {monitor.seconds:.1f} s); final potential "
              f"{potential[-1]:.3g}; log-log slope over the second half {slope:.2f}")
        print("eigenvalues", np.round(kpca.eigenvalues_, 4), "analytic", np.round(eig_true[:N_COMPONENTS], 4))
        print(f"wrote {out / 'kpca_1d_gaussian.png'} and {out / 'kpca_1d_gaussian.json'}")
    return summary


def _default_data_dir() -> Path | None:
    path = REPO_ROOT.parent / "shared" / "datasets"
    return path if path.is_dir() else None


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--out", default="results/kpca_1d", help="output folder")
    parser.add_argument("--size", choices=sorted(SIZES), default="default",
                        help="preset sizes; paper = 1M points, 262,144 features")
    parser.add_argument("--n-samples", type=int, help="rows of data (overrides --size)")
    parser.add_argument("--n-features", type=int, help="random-feature budget (overrides --size)")
    parser.add_argument("--block-size", type=int, help="features added per step (overrides --size)")
    parser.add_argument("--batch-size", type=int, help="rows per step (overrides --size)")
    parser.add_argument("--chunks", type=int, help="rows per Zarr chunk (overrides --size)")
    parser.add_argument("--n-steps", type=int, help="update steps (default: one pass over the data)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data, held-out points and model")
    parser.add_argument("--eta0", type=float, default=ETA0, help="step size numerator (relative to lambda_1)")
    parser.add_argument("--eta-decay", type=float, default=ETA_DECAY, help="step size decay theta_1")
    parser.add_argument("--data-dir", type=Path, default=_default_data_dir(),
                        help="real-datasets directory (not used by this pipeline)")
    args = parser.parse_args(argv)
    return run(args.out, args.size, n_samples=args.n_samples, n_features=args.n_features,
               block_size=args.block_size, batch_size=args.batch_size, n_steps=args.n_steps,
               chunks=args.chunks, seed=args.seed, eta0=args.eta0, eta_decay=args.eta_decay,
               data_dir=args.data_dir)


if __name__ == "__main__":
    main()
