"""Kernel PCA of 1-D Gaussian data against its closed-form eigenfunctions.

For ``x ~ N(0, s^2)`` and the Gaussian kernel ``k(x, y) = exp(-(x - y)^2 / (2 l^2))`` the
uncentred covariance operator has eigenvalues ``lambda_i = sqrt(2a/A) B^i`` and
eigenfunctions ``v_i(x) ~ exp(-(c - a) x^2) H_i(sqrt(2c) x)`` (physicists' Hermite
polynomials), with ``a = 1/(4 s^2)``, ``b = 1/(2 l^2)``, ``c = sqrt(a^2 + 2ab)``,
``A = a + b + c`` and ``B = b / A`` (Zhu et al. 1998; Rasmussen & Williams, GPML 4.3.1).

The pipeline writes the data to a Zarr v3 store chunk by chunk, opens it lazily, fits
``KernelPCA`` (three components, uncentred) on it under the local dask scheduler and
records after every chunk of steps the *potential*: ``sin^2`` of the largest principal
angle between the estimated and the true top-3 functions on held-out points. Xie, Liang
& Song (NIPS 2015, Fig. 1) show it falling as ``O(1/t)``. Outputs, in ``--out``:

* ``data.zarr``: the training data (``n_samples x 1``, float64);
* ``kpca_1d_gaussian.png``: potential vs samples seen (log-log, with a fitted ``C/t``
  line), and the recovered vs true eigenfunctions;
* ``kpca_1d_gaussian.json``: parameters, timings, the potential curve, its log-log slope
  over the second half of the run, and the eigenvalues vs the closed form.

Run ``python pipelines/kpca_1d_gaussian.py`` (one to two minutes on two cores) or
``--size paper`` for the paper's 1M points and 262,144 features (much longer).
"""

from __future__ import annotations

import argparse
import contextlib
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

from dsgd_dask import KernelPCA
from dsgd_dask.metrics import principal_angle_sin2

N_COMPONENTS = 3

#: Problem sizes and step sizes. Steps default to one pass over the data and the feature
#: budget to ``steps x block_size``, so that a new block is added at every step of the run
#: (once the budget is used up, the potential levels off at the random-feature error).
#: The step size is ``eta_t = eta0 / (lambda_1 (1 + eta_decay t))`` with ``lambda_1`` the
#: estimator's initial top-eigenvalue estimate: ``eta_decay x steps`` of about 20 puts most
#: of the run in the ``1/t`` regime, and ``eta0 / eta_decay`` sets how fast the error
#: forgets its past (in units of log t), i.e. how smooth the curve is.
SIZES = {
    # Random-feature noise dominates the data noise here, so features per step are worth
    # more than rows per step: 8192 steps of 16 rows and 16 new features.
    "default": {"n_samples": 131_072, "n_features": 131_072, "block_size": 16, "batch_size": 16,
                "chunks": 1024, "eta0": 0.7, "eta_decay": 0.0025},
    # Xie et al. (2015): 1M points, 262,144 features, 128 features and 512 rows per step.
    "paper": {"n_samples": 1_000_000, "n_features": 262_144, "block_size": 128, "batch_size": 512,
              "chunks": 8192, "eta0": 0.7, "eta_decay": 0.01},
}
#: The data and kernel: ``x ~ N(0, SCALE^2)``, bandwidth ``BANDWIDTH`` (the data's own scale).
SCALE = 1.0
BANDWIDTH = 1.0
#: Held-out points on which the potential is measured.
N_HELDOUT = 2000
#: Spawn key separating the held-out points from the other streams derived from ``seed``.
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
def loglog_slope(samples, potential, start: float) -> tuple[float, float]:
    """Least-squares slope of ``log potential`` on ``log samples`` over ``samples >= start``.

    Returns ``(slope, C)`` where ``C / samples`` is the ``O(1/t)`` line fitted (in log
    space) to the same points; ``nan`` when fewer than two points qualify.
    """
    samples = np.asarray(samples, dtype=np.float64)
    potential = np.asarray(potential, dtype=np.float64)
    keep = (samples >= start) & (potential > 0)
    if keep.sum() < 2:
        return math.nan, math.nan
    lx, ly = np.log(samples[keep]), np.log(potential[keep])
    return float(np.polyfit(lx, ly, 1)[0]), float(np.exp(np.mean(ly + lx)))


def write_gaussian_zarr(path: Path, n_samples: int, chunks: int, scale: float, seed: int,
                        progress: bool = True) -> da.Array:
    """Write ``n_samples`` draws of N(0, scale^2) as an ``(n, 1)`` Zarr v3 array; open it lazily."""
    x = da.random.default_rng(seed).normal(0.0, scale, size=(n_samples, 1), chunks=(chunks, 1))
    with ProgressBar() if progress else contextlib.nullcontext():
        da.to_zarr(x, str(path), mode="w", zarr_format=3)
    return da.from_zarr(str(path))


class PotentialMonitor:
    """Fit callback recording the potential after every chunk of steps.

    While the features grow, an update right-multiplies the old coefficients by a
    ``k x k`` matrix and appends new blocks, so the held-out values are updated
    incrementally: ``H_new = H_old S + z_new(X) A_new``, with ``S`` solved from the old
    and new coefficients. That is exact up to rounding (the residual of the solve is
    checked, otherwise the model is evaluated in full; the summary also reports the final
    potential from a full evaluation) and costs only the new blocks, not the whole model.
    """

    def __init__(self, heldout: np.ndarray, truth: np.ndarray, batch_size: int):
        self.heldout = heldout
        self.truth = truth
        self.batch_size = batch_size
        self.steps: list[int] = []
        self.potential: list[float] = []
        self.seconds = 0.0
        self.n_full = 0
        self._coef: np.ndarray | None = None
        self._values: np.ndarray | None = None

    def __call__(self, n_steps: int, model) -> None:
        t0 = time.perf_counter()
        values = self.evaluate(model)
        self.steps.append(int(n_steps))
        self.potential.append(principal_angle_sin2(values, self.truth))
        self.seconds += time.perf_counter() - t0

    def evaluate(self, model) -> np.ndarray:
        """The raw model on the held-out points, incrementally when possible."""
        coef = model.coef
        old = self._coef
        values = None
        if old is not None and coef.shape[0] > old.shape[0] and not model.offset.any():
            n = old.shape[0]
            shrink, *_ = np.linalg.lstsq(old, coef[:n], rcond=None)
            if np.abs(old @ shrink - coef[:n]).max() <= 1e-10 * np.abs(coef[:n]).max():
                m = model.features.block_size
                new = model.features.transform(self.heldout, n // m, coef.shape[0] // m)
                values = self._values @ shrink + new.astype(np.float64) @ coef[n:]
        if values is None:
            values = model.evaluate(self.heldout)
            self.n_full += 1
        self._coef = coef.copy()
        self._values = values
        return values

    @property
    def samples(self) -> np.ndarray:
        return np.asarray(self.steps, dtype=np.int64) * self.batch_size


def binned_geomean(x: np.ndarray, y: np.ndarray, per_decade: int = 8):
    """Geometric means of ``y`` in log-spaced bins of ``x`` (a guide for the eye)."""
    edges = np.geomspace(x[0], x[-1] * (1 + 1e-9), max(2, round(per_decade * np.log10(x[-1] / x[0])) + 1))
    idx = np.digitize(x, edges) - 1
    bins = [i for i in range(len(edges) - 1) if (idx == i).any()]
    return (np.array([np.exp(np.log(x[idx == i]).mean()) for i in bins]),
            np.array([np.exp(np.log(y[idx == i]).mean()) for i in bins]))


# -- the figure ------------------------------------------------------------------------
def make_figure(path: Path, samples: np.ndarray, potential: np.ndarray, slopes: tuple[float, float],
                const: float, grid: np.ndarray, fitted: np.ndarray, truth: np.ndarray,
                eigenvalues: tuple[np.ndarray, np.ndarray], title: str) -> None:
    fig = Figure(figsize=(13, 5), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)

    half = samples[-1] / 2
    ax1.axvspan(half, samples[-1], color="0.9", zorder=0, label="second half of the run (slope fit)")
    ax1.loglog(samples, potential, ".", ms=3, color="C3", alpha=0.35, label="potential after each chunk")
    if len(samples) > 1 and samples[-1] > samples[0]:
        bx, by = binned_geomean(samples, potential)
        ax1.loglog(bx, by, "o-", ms=4, lw=1.5, color="C3", label="geometric mean per 1/8 decade")
    if np.isfinite(const):
        ref = np.geomspace(samples[0], samples[-1], 50)
        ax1.loglog(ref, const / ref, "--", lw=1.5, color="k", label="O(1/t): C/t fitted on the second half")
    ax1.plot([], [], " ", label=f"measured log-log slope: second half {slopes[0]:.2f}, last decade {slopes[1]:.2f}")
    if (potential > 0).any():
        ax1.set_ylim(bottom=potential[potential > 0].min() / 20)  # room for the legend below the data
    ax1.set_xlabel("samples seen (steps × batch size)")
    ax1.set_ylabel("potential: sin² of the largest principal angle")
    ax1.set_title("Convergence to the true top-3 eigen-subspace (held-out points)")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend(loc="lower left", fontsize="small")

    for i in range(truth.shape[1]):
        ax2.plot(grid, truth[:, i], "-", color=f"C{i}", lw=5, alpha=0.3, label=f"true $v_{i}$")
        ax2.plot(grid, fitted[:, i], "--", color=f"C{i}", lw=1.5, label=f"recovered $v_{i}$")
    ax2.set_xlabel("x")
    ax2.set_ylabel(r"eigenfunction, scaled to $E[v_i(x)^2] = \lambda_i$")
    ax2.set_title("Eigenfunctions: true vs recovered\n(recovered aligned onto the true ones by least squares)")
    ax2.grid(True, alpha=0.3)
    ax2.legend(ncol=2, fontsize="small", loc="lower right")
    fit_vals, true_vals = eigenvalues
    lines = [f"λ{i}  {f:.4f}   {t:.4f}" for i, (f, t) in enumerate(zip(fit_vals, true_vals, strict=True))]
    ax2.text(0.99, 0.99, "    fitted   closed form\n" + "\n".join(lines), transform=ax2.transAxes,
             ha="right", va="top", fontsize="small", family="monospace",
             bbox={"facecolor": "white", "edgecolor": "0.8"})

    fig.suptitle(title)
    fig.savefig(path, dpi=110)


# -- the pipeline ----------------------------------------------------------------------
def run(out, size: str = "default", *, n_samples: int | None = None, n_features: int | None = None,
        block_size: int | None = None, batch_size: int | None = None, n_steps: int | None = None,
        chunks: int | None = None, eta0: float | None = None, eta_decay: float | None = None,
        seed: int = 0, scale: float = SCALE, bandwidth: float = BANDWIDTH, n_heldout: int = N_HELDOUT,
        verbose: bool = True) -> dict:
    """Fit ``KernelPCA(solver="dsgd")`` on 1-D Gaussian data in Zarr and compare it with the closed form.

    Parameters
    ----------
    out : str or Path
        Output folder (created); receives ``data.zarr``, the figure and the JSON summary.
    size : {"default", "paper"}
        Preset for the sizes and step sizes below; any of them given explicitly overrides it.
    n_samples, n_features, block_size, batch_size, chunks : int, optional
        Rows of data, feature budget, features per step, rows per step, rows per Zarr chunk.
    n_steps : int, optional
        Update steps; default one pass over the data.
    eta0, eta_decay : float, optional
        Step size ``eta_t = eta0 / (lambda_1 (1 + eta_decay t))``.
    seed : int
        Seed of the data, the held-out points and the estimator.
    scale, bandwidth : float
        Standard deviation ``s`` of the data and kernel bandwidth ``l``.
    n_heldout : int
        Held-out points drawn from N(0, s^2) on which the potential is measured.
    verbose : bool
        Print progress bars and a short report.

    Returns
    -------
    dict
        The summary written to ``kpca_1d_gaussian.json``.
    """
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    given = {"n_samples": n_samples, "n_features": n_features, "block_size": block_size,
             "batch_size": batch_size, "chunks": chunks, "eta0": eta0, "eta_decay": eta_decay}
    cfg = {k: v if v is not None else SIZES[size][k] for k, v in given.items()}
    for key in ("n_samples", "n_features", "block_size", "batch_size", "chunks"):
        cfg[key] = int(cfg[key])
        if cfg[key] < 1:
            raise ValueError(f"{key} must be a positive integer, got {cfg[key]}")
    chunk_rows = [min(cfg["chunks"], cfg["n_samples"] - r) for r in range(0, cfg["n_samples"], cfg["chunks"])]
    steps_per_pass = sum(-(-rows // cfg["batch_size"]) for rows in chunk_rows)
    cfg["n_steps"] = int(n_steps) if n_steps is not None else steps_per_pass
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    # the data: written chunk by chunk to Zarr, read back lazily
    t0 = time.perf_counter()
    if verbose:
        print(f"writing {cfg['n_samples']:,} samples of N(0, {scale:g}²) to {out / 'data.zarr'}")
    X = write_gaussian_zarr(out / "data.zarr", cfg["n_samples"], cfg["chunks"], scale, seed, verbose)
    zarr_seconds = time.perf_counter() - t0

    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(HELDOUT_KEY,)))
    heldout = rng.normal(0.0, scale, size=(n_heldout, 1))
    truth_heldout = analytic_eigenfunctions(heldout, scale, bandwidth, N_COMPONENTS)
    monitor = PotentialMonitor(heldout, truth_heldout, cfg["batch_size"])

    kpca = KernelPCA(  # the paper's algorithm: random Fourier blocks, doubly stochastic steps
        n_components=N_COMPONENTS, kernel="gaussian", bandwidth=bandwidth, center=False,
        features="fourier", solver="dsgd",
        n_features=cfg["n_features"], block_size=cfg["block_size"], batch_size=cfg["batch_size"],
        max_iter=cfg["n_steps"], eta0=cfg["eta0"], eta_decay=cfg["eta_decay"], verbose=verbose,
        random_state=seed,
    )
    if verbose:
        print(f"fitting: {cfg['n_steps']:,} steps of {cfg['batch_size']} rows and {cfg['block_size']} "
              f"new features, feature budget {cfg['n_features']:,}")
    t0 = time.perf_counter()
    with dask.config.set(scheduler="threads"):
        kpca.fit(X, callback=monitor)
    fit_seconds = time.perf_counter() - t0

    samples = monitor.samples
    potential = np.asarray(monitor.potential)
    # The potential of one run fluctuates by a factor of a few around its O(1/t) trend, with
    # a correlation time of a sizeable fraction of log t: the slope over the second half
    # (a factor 2 in t) varies from seed to seed by several tenths; the slope over the
    # last decade is steadier.
    slope, const = loglog_slope(samples, potential, samples[-1] / 2)
    slope_decade, _ = loglog_slope(samples, potential, samples[-1] / 10)

    # eigenfunctions on a grid; the fitted components aligned (sign and rotation) onto the
    # true functions by least squares on the held-out points, for display only
    est_heldout = kpca.transform(heldout)
    final_full = principal_angle_sin2(est_heldout, truth_heldout)
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
        **cfg,
        "n_heldout": n_heldout,
        "n_features_used": int(kpca.n_features_),
        "features_grow_throughout": bool(cfg["n_steps"] * cfg["block_size"] <= cfg["n_features"]),
        "samples_seen": int(samples[-1]),
        "zarr_seconds": round(zarr_seconds, 2),
        "fit_seconds": round(fit_seconds, 2),
        "monitor_seconds": round(monitor.seconds, 2),
        "final_potential": float(potential[-1]),
        "final_potential_fitted_components": final_full,
        "loglog_slope_second_half": slope,
        "loglog_slope_last_decade": slope_decade,
        "reference_C": const,
        "eigenvalues": [float(v) for v in kpca.eigenvalues_],
        "eigenvalues_analytic": [float(v) for v in eig_true[:N_COMPONENTS]],
        "eigenvalue_relative_error": [float(v) for v in kpca.eigenvalues_ / eig_true[:N_COMPONENTS] - 1],
        "eigenvalue_ratio_k_plus_1_to_k": float(eig_true[N_COMPONENTS] / eig_true[N_COMPONENTS - 1]),
        "alignment_matrix": align.tolist(),
        "curve": {"steps": monitor.steps, "samples": samples.tolist(), "potential": potential.tolist()},
    }
    title = (f'KernelPCA(solver="dsgd"), x ~ N(0, {scale:g}²), Gaussian kernel ℓ = {bandwidth:g}: '
             f"{cfg['n_samples']:,} points read from Zarr, {kpca.n_features_:,} random features, "
             f"{cfg['n_steps']:,} steps of {cfg['batch_size']} rows")
    make_figure(out / "kpca_1d_gaussian.png", samples, potential, (slope, slope_decade), const, grid,
                fitted_grid, truth_grid, (kpca.eigenvalues_, eig_true[:N_COMPONENTS]), title)
    with open(out / "kpca_1d_gaussian.json", "w") as f:
        json.dump(summary, f, indent=2)
    if verbose:
        print(f"fit {fit_seconds:.1f} s (of which monitoring {monitor.seconds:.1f} s); final potential "
              f"{potential[-1]:.3g}; log-log slope: second half {slope:.2f}, last decade {slope_decade:.2f}")
        print("eigenvalues", np.round(kpca.eigenvalues_, 4), "analytic", np.round(eig_true[:N_COMPONENTS], 4))
        print(f"wrote {out / 'kpca_1d_gaussian.png'} and {out / 'kpca_1d_gaussian.json'}")
    return summary


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/kpca_1d", help="output folder (default: results/kpca_1d)")
    parser.add_argument("--size", choices=sorted(SIZES), default="default",
                        help="preset sizes and step sizes (default: default, one to two minutes); "
                        "paper = 1M points, 262,144 features (much longer)")
    parser.add_argument("--n-samples", type=int, help="rows of data (overrides --size)")
    parser.add_argument("--n-features", type=int, help="random-feature budget (overrides --size)")
    parser.add_argument("--block-size", type=int, help="new features per step (overrides --size)")
    parser.add_argument("--batch-size", type=int, help="rows per step (overrides --size)")
    parser.add_argument("--chunks", type=int, help="rows per Zarr chunk (overrides --size)")
    parser.add_argument("--n-steps", type=int, help="update steps (default: one pass over the data)")
    parser.add_argument("--eta0", type=float, help="step size numerator, relative to lambda_1 (overrides --size)")
    parser.add_argument("--eta-decay", type=float, help="step size decay theta_1 (overrides --size)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data, held-out points and model (default: 0)")
    args = parser.parse_args(argv)
    return run(args.out, args.size, n_samples=args.n_samples, n_features=args.n_features,
               block_size=args.block_size, batch_size=args.batch_size, n_steps=args.n_steps,
               chunks=args.chunks, eta0=args.eta0, eta_decay=args.eta_decay, seed=args.seed)


if __name__ == "__main__":
    main()
