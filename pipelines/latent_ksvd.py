"""Kernel SVD of a two-view latent variable model: a Gaussian and a Gamma component.

The papers' latent-variable experiment (Xie, Liang & Song 2015, §7.2, after Song et al.
2014): a hidden label ``h`` is 0 or 1 with probability 1/2 each; given ``h``, two views
``x1`` and ``x2`` are drawn independently from the same conditional distribution,
``N(-1, 1)`` for ``h = 0`` and ``Gamma(shape 2, scale 1)`` for ``h = 1``. The views are
dependent only through ``h``, so the centred cross-covariance operator is of rank one::

    C_12 = 1/4 (mu_0 - mu_1) (x) (mu_0 - mu_1),   mu_h = E[k(x, .) | h]

and its top singular function is, up to scale and an additive constant, the difference
of the two conditional mean embeddings ``mu_0(t) - mu_1(t)`` (a smoothed difference of
the conditional densities), which this pipeline computes by quadrature. Quality: ``sin^2``
of the angle between a method's top singular function and that truth on a grid of
``t`` (constants removed under the mixture density), against samples seen.

Methods, on the same data: ``KernelSVD(solver="dsgd")`` (defaults, Nyström blocks, doubly
stochastic steps; the error after every chunk of steps), the top singular vectors of the
cross-covariance of fixed random Fourier or Nyström features (2,048 per view; the
papers' two comparisons) and ``KernelSVD(solver="exact")`` on a 2,000-row subsample.

Outputs in ``--out`` (default ``pipelines/results/latent_ksvd``): ``latent_ksvd.json``
and ``latent_ksvd.png`` (error against samples seen; recovered functions against the
truth). ``--n-samples`` sets the size (default 200,000; the papers used 1,000,000).
About two minutes on two cores at the default size.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

SEED = 0
GAMMA_SHAPE = 2.0
N_FIXED = 2048
N_SUBSAMPLE = 2000
GRID = np.linspace(-5.0, 10.0, 601)


def sample(n: int, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows of the two views, shape (n, 1) each."""
    rng = np.random.default_rng(seed)
    h = rng.integers(0, 2, n)

    def draw():
        return np.where(h == 0, rng.normal(-1.0, 1.0, n), rng.gamma(GAMMA_SHAPE, 1.0, n))

    return draw()[:, None], draw()[:, None]


def mixture_density(t: np.ndarray) -> np.ndarray:
    from scipy import stats

    return 0.5 * stats.norm.pdf(t, -1.0, 1.0) + 0.5 * stats.gamma.pdf(t, GAMMA_SHAPE)


def truth(t: np.ndarray, bandwidth: float) -> np.ndarray:
    """``mu_0(t) - mu_1(t)`` for the Gaussian kernel of ``bandwidth``, by quadrature on a fine grid."""
    from scipy import stats

    x = np.linspace(-12.0, 40.0, 40_001)
    dx = x[1] - x[0]
    diff = stats.norm.pdf(x, -1.0, 1.0) - stats.gamma.pdf(x, GAMMA_SHAPE)
    K = np.exp(-(t[:, None] - x[None, :]) ** 2 / (2 * bandwidth**2))
    return K @ diff * dx


def error(values: np.ndarray, target: np.ndarray, weights: np.ndarray) -> float:
    """``sin^2`` of the angle between two functions on the grid, constants removed under ``weights``."""
    w = weights / weights.sum()
    a = values - w @ values
    b = target - w @ target
    a, b = a * np.sqrt(w), b * np.sqrt(w)
    cos2 = (a @ b) ** 2 / ((a @ a) * (b @ b))
    return float(max(0.0, 1.0 - cos2))


def fixed_feature_svd(X1, X2, fmap1, fmap2, rows: int = 20_000) -> np.ndarray:
    """Top left singular vector of the cross-covariance of explicit features, accumulated in slices."""
    from dsgd_dask.rules.solutions import cross_svd

    M1, M2 = fmap1(X1[:1]).shape[1], fmap2(X2[:1]).shape[1]
    C, s1, s2 = np.zeros((M1, M2)), np.zeros(M1), np.zeros(M2)
    for r in range(0, len(X1), rows):
        z1 = np.asarray(fmap1(X1[r:r + rows]), dtype=np.float64)
        z2 = np.asarray(fmap2(X2[r:r + rows]), dtype=np.float64)
        C += z1.T @ z2
        s1 += z1.sum(axis=0)
        s2 += z2.sum(axis=0)
    n = len(X1)
    _, A, _ = cross_svd(C / n - np.outer(s1 / n, s2 / n), 1)
    return A[:, 0]


def run(out: Path, n_samples: int = 200_000, verbose: bool = True) -> dict:
    from dsgd_dask import KernelSVD
    from dsgd_dask.baselines._moments import FourierMap, NystroemMap
    from dsgd_dask.features import RandomFeatures, kernel_matrix
    from dsgd_dask.features.nystroem import inverse_sqrt
    from dsgd_dask.streams.batches import view_seed

    out.mkdir(parents=True, exist_ok=True)
    X1, X2 = sample(n_samples)
    weights = mixture_density(GRID)
    t = GRID[:, None]
    curve = []
    target = None

    def monitor(steps, models):
        curve.append({"samples_seen": steps * est.batch_size, "sin2": error(models[0].evaluate(t)[:, 0], target,
                                                                            weights)})

    est = KernelSVD(1, solver="dsgd", random_state=SEED)
    # the truth depends on the bandwidth, which the fit sets from the median trick first
    bw = KernelSVD(1, max_iter=1, n_features=1024, random_state=SEED).fit(X1[:20_000], X2[:20_000]).bandwidth_
    est.set_params(bandwidth_x=bw[0], bandwidth_y=bw[1])
    target = truth(GRID, bw[0])
    t0 = time.perf_counter()
    est.fit(X1, X2, callback=monitor)
    fit = time.perf_counter() - t0
    f_dsgd = est.transform(t)[:, 0]
    records = [{"method": 'KernelSVD(solver="dsgd")', "features": est.n_features_, "fit_seconds": fit,
                "sin2": error(f_dsgd, target, weights)}]
    spec1, spec2 = est.kernel_
    fourier = [FourierMap(RandomFeatures(s, 1, 256, view_seed(SEED, v), "float64"), N_FIXED // 256)
               for v, s in enumerate((spec1, spec2))]
    idx = np.random.default_rng(SEED).choice(n_samples, N_FIXED, replace=False)
    nystroem = []
    for s, Xv in ((spec1, X1), (spec2, X2)):
        L = Xv[idx]
        nystroem.append(NystroemMap(s, L, inverse_sqrt(kernel_matrix(s, L))))
    functions = {'KernelSVD(solver="dsgd")': f_dsgd}
    for name, maps in (("Fourier features, fixed", fourier), ("Nyström features, fixed", nystroem)):
        t0 = time.perf_counter()
        a = fixed_feature_svd(X1, X2, *maps)
        f = np.asarray(maps[0](t), dtype=np.float64) @ a
        records.append({"method": name, "features": N_FIXED, "fit_seconds": time.perf_counter() - t0,
                        "sin2": error(f, target, weights)})
        functions[name] = f
    t0 = time.perf_counter()
    exact = KernelSVD(1, solver="exact", bandwidth_x=bw[0], bandwidth_y=bw[1], random_state=SEED)
    exact.fit(X1[:N_SUBSAMPLE], X2[:N_SUBSAMPLE])
    f = exact.transform(t)[:, 0]
    records.append({"method": f'KernelSVD(solver="exact"), {N_SUBSAMPLE} rows', "features": N_SUBSAMPLE,
                    "fit_seconds": time.perf_counter() - t0, "sin2": error(f, target, weights)})
    functions[records[-1]["method"]] = f
    if verbose:
        for r in records:
            print(f"{r['method']:>32}: sin^2 {r['sin2']:.2e}  fit {r['fit_seconds']:6.1f} s", flush=True)
    summary = {"date": time.strftime("%Y-%m-%d"), "n_samples": n_samples, "bandwidth": bw,
               "gamma_shape": GAMMA_SHAPE, "results": records, "dsgd_curve": curve}
    (out / "latent_ksvd.json").write_text(json.dumps(summary, indent=2))
    plot(summary, functions, target, weights, out / "latent_ksvd.png")
    return summary


def plot(summary, functions, target, weights, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.8))
    ax, bx = fig.subplots(1, 2)
    curve = summary["dsgd_curve"]
    ax.loglog([c["samples_seen"] for c in curve], [max(c["sin2"], 1e-12) for c in curve],
              label='KernelSVD(solver="dsgd")')
    for i, r in enumerate(summary["results"][1:]):
        ax.axhline(max(r["sin2"], 1e-12), ls="--", lw=1, label=r["method"], color=f"C{i + 1}")
    ax.set_xlabel("samples seen")
    ax.set_ylabel("sin^2 to the truth")
    ax.legend(fontsize=7)
    w = weights / weights.sum()

    def unit(f):
        f = f - w @ f
        return f / np.sqrt(w @ f**2)

    bx.plot(GRID, unit(target), "k", lw=2.5, label="truth: mu_0 - mu_1")
    for name, f in functions.items():
        u = unit(f)
        bx.plot(GRID, u * np.sign(u @ (w * unit(target))), lw=1, label=name)
    bx.set_xlabel("t")
    bx.set_title("top singular function (constants removed, unit norm)", fontsize=9)
    bx.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "latent_ksvd")
    parser.add_argument("--n-samples", type=int, default=200_000)
    args = parser.parse_args(argv)
    run(args.out, n_samples=args.n_samples)


if __name__ == "__main__":
    main()
