"""Linear and kernel EOFs of winter Pacific sea surface temperature anomalies.

Kernel PCA of a field through the ``.dsgd`` accessor (``dim="time"``, latitude weights,
a land mask), next to the linear EOFs of ``xeofs`` on the same field, and what the
nonlinear components add.

Data: ``sst_ndjfm_anom.nc``, shipped with the ``eofs`` package: November--March mean SST
anomalies (K) of the Pacific, 50 winters (1963--2012, labelled by the year of their
January), 18 latitudes (22.5S--62.5N) x 30 longitudes (117.5E--97.5W) at 5 degrees, 90
of the 540 points land (NaN at every time). The field is chunked along time (10 winters
a chunk). Methods, in one run:

* ``xeofs.single.EOF(n_modes=3, use_coslat=True)``: linear EOFs of the field weighted by
  ``sqrt(cos(latitude))`` (and, for reference, ``use_coslat=False``);
* ``KernelPCA(3)`` with its defaults (Gaussian kernel, median bandwidth; solver
  ``"auto"``, which is the subspace solver on Nystroem features, here all 50 winters as
  landmarks), fitted with ``field.dsgd.fit(..., dim="time", weights=sqrt(cos(lat)))``,
  checked against ``KernelPCA(3, solver="exact")``;
* the same at half the median bandwidth. How the smaller bandwidth is chosen, from the
  distances between winters alone: at the median bandwidth ``h`` the typical pair of
  winters has a kernel value ``exp(-1/2) = 0.61`` and the kernel is close to linear. The
  nearest other winter lies at 0.58 ``h`` (median over winters); at ``h / 2`` it keeps a
  kernel value of 0.51 (the farthest nearest neighbour, at 0.71 ``h``, 0.37), while at
  ``h / 4`` the typical nearest neighbour has 0.07 and the kernel matrix is nearly the
  identity, each winter a cluster of its own (its three leading eigenvalues are nearly
  equal: see ``bandwidth_diagnostics`` in the JSON). Half the median is the smaller of the
  two that keeps each winter's neighbours in view. The choice is a constant,
  ``SMALL_BANDWIDTH``, not tuned on the results.

Every score is standardised (zero mean, unit variance) and its sign set so that its
regression map is positive at the map's largest absolute value; the maps are regressions
of the unweighted field on the standardised scores (K per standard deviation), for the
kernel components ``field.dsgd.patterns(..., kind="regression")`` times the score's
standard deviation.

Measured: the correlations of each kernel component's scores with each linear EOF's scores
(weighted EOFs), with ``EOF1**2``, ``EOF1*EOF2`` and ``|EOF1|``; the R^2 of each kernel
score on the three linear scores, and on them and ``EOF1**2``; the share of the weighted
field's variance each score explains (its regression map's variance over the field's; for
the linear EOFs, xeofs' explained variance ratio) and, for the kernel components, their
share of the variance of the kernel features (eigenvalue over ``1 - mean(K)``); what each
kernel score, ``EOF1**2``, ``|EOF1|`` and ``EOF1*EOF2`` adds to the share of the three
linear scores together (with EOF4, the most one more score can add, and 200 seeded random
Gaussian series as references); the asymmetry of El Nino and La Nina: the regression map
of the field on EOF1 over the winters with a positive EOF1 score and over those with a
negative one (through the origin), their pattern correlation, amplitude ratio and the
longitude of their largest equatorial anomaly, and the pattern correlation of each kernel
component's map with half their difference (the part of the field that grows with
``|EOF1|``).

Outputs in ``--out`` (default ``pipelines/results/sst_eofs``): ``sst_eofs.json``,
``sst-eofs-patterns.png`` (the maps) and ``sst-eofs-scores.png`` (the scores against
time). A few seconds.
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import time
import warnings
from pathlib import Path

import numpy as np

N_MODES = 3
SEED = 0
#: The smaller bandwidth, as a fraction of the median one (see the module notes).
SMALL_BANDWIDTH = 0.5
#: Fractions of the median bandwidth whose kernel is described in ``bandwidth_diagnostics``.
DIAGNOSED = (1.0, 0.5, 0.25)
CHUNK = 10
#: Random series whose share of the field beyond the linear EOFs is the reference for a kernel component's.
N_NULL = 200
#: The equatorial band (degrees of latitude) where the largest anomaly of each phase is located.
EQUATOR = (-5.0, 5.0)


def load():
    """The SST anomalies ``(time, latitude, longitude)`` shipped with ``eofs``, in memory."""
    import xarray as xr

    ref = importlib.resources.files("eofs") / "examples" / "example_data" / "sst_ndjfm_anom.nc"
    with importlib.resources.as_file(ref) as path, xr.open_dataset(path, engine="scipy") as ds:
        return ds["sst"].load()


def standardise(s: np.ndarray) -> np.ndarray:
    return (s - s.mean(axis=0)) / s.std(axis=0)


def regression_map(anom: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``cov(field, z) / var(z)`` at every point of the time-centred ``anom`` ``(time, points)``; ``z`` standardised."""
    return np.einsum("t...,t->...", anom, z) / len(z)


def oriented(z: np.ndarray, maps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scores and maps with each sign set so that the map is positive at its largest absolute value."""
    flat = maps.reshape(len(maps), -1)
    signs = np.sign(flat[np.arange(len(flat)), np.nanargmax(np.abs(flat), axis=1)])
    return z * signs, maps * signs[:, None, None]


def pattern_correlation(a: np.ndarray, b: np.ndarray) -> float:
    ok = np.isfinite(a) & np.isfinite(b)
    return float(np.corrcoef(a[ok], b[ok])[0, 1])


def r2(y: np.ndarray, X: np.ndarray) -> float:
    """R^2 of the least-squares fit of ``y`` on the columns of ``X`` and an intercept."""
    A = np.c_[np.ones(len(y)), X]
    resid = y - A @ np.linalg.lstsq(A, y, rcond=None)[0]
    return float(1.0 - resid.var() / y.var())


def run(out: Path, verbose: bool = True) -> dict:
    import xeofs
    from scipy.spatial.distance import pdist, squareform

    import dsgd_dask  # noqa: F401  (registers the accessor)
    from dsgd_dask import KernelPCA

    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    sst = load()
    field = sst.chunk({"time": CHUNK})
    weights = np.sqrt(np.cos(np.deg2rad(sst["latitude"])))
    ocean = ~sst.isnull().all("time").values
    years = sst["time"].dt.year.values
    anom = (sst - sst.mean("time")).values                 # (time, lat, lon), NaN on land
    wanom = (anom * weights.values[None, :, None])[:, ocean]  # (time, ocean points), the weighted field
    total_ss = float((wanom ** 2).sum())  # n times the field's total variance
    n_winters = len(wanom)

    def field_share(z: np.ndarray) -> list[float]:
        """The share of the weighted field's variance each standardised score's regression explains."""
        return [float(n_winters * (regression_map(wanom, z[:, k]) ** 2).sum() / total_ss) for k in range(z.shape[1])]

    def joint_share(z: np.ndarray) -> float:
        """The share of the weighted field's variance that the regression on all the columns of ``z`` explains."""
        Q = np.linalg.qr(z - z.mean(axis=0))[0]
        return float(((Q.T @ wanom) ** 2).sum() / total_ss)

    # -- linear EOFs (xeofs) --------------------------------------------------------------
    linear = {}
    for key, coslat in (("coslat", True), ("unweighted", False)):
        with warnings.catch_warnings():  # xeofs' own use of a pandas deprecation
            warnings.filterwarnings("ignore", category=FutureWarning, module="xeofs")
            eof = xeofs.single.EOF(n_modes=N_MODES, use_coslat=coslat).fit(sst, dim="time")
        z = standardise(eof.scores().transpose("time", "mode").values)
        maps = np.stack([regression_map(anom, z[:, k]) for k in range(N_MODES)])
        z, maps = oriented(z, maps)
        linear[key] = {"z": z, "maps": maps, "ratio": eof.explained_variance_ratio().values.tolist()}
    L = linear["coslat"]["z"]

    # -- the distances between winters, which the bandwidths are read against -------------
    dist = squareform(pdist(wanom))
    np.fill_diagonal(dist, np.inf)
    nearest = dist.min(axis=1)
    pair = pdist(wanom)

    # -- kernel PCA through the accessor --------------------------------------------------
    def fit_kpca(**params):
        t0 = time.perf_counter()
        est = KernelPCA(N_MODES, random_state=SEED, **params)
        model = field.dsgd.fit(est, dim="time", weights=weights)
        scores = field.dsgd.transform(model, dim="time", weights=weights).values
        maps = field.dsgd.patterns(model, dim="time", weights=weights, kind="regression").values
        seconds = time.perf_counter() - t0
        sd = scores.std(axis=0)
        z, maps = oriented(standardise(scores), maps * sd[:, None, None])
        K = np.exp(-squareform(pdist(wanom, "sqeuclidean")) / (2.0 * model.bandwidth_ ** 2))
        return model, z, maps, seconds, float(1.0 - K.mean())

    kernel, h = {}, None
    for key in ("median", "small"):
        bw = "median" if h is None else SMALL_BANDWIDTH * h
        model, z, maps, seconds, feature_var = fit_kpca(bandwidth=bw)
        h = float(model.bandwidth_) if h is None else h
        exact = KernelPCA(N_MODES, bandwidth=model.bandwidth_, solver="exact", random_state=SEED)
        exact = field.dsgd.fit(exact, dim="time", weights=weights)
        ze = field.dsgd.transform(exact, dim="time", weights=weights).values
        kernel[key] = {
            "estimator": (f"KernelPCA({N_MODES}, bandwidth={'median' if bw == 'median' else f'{bw:.2f}'}), "
                          f"solver={model.solver_!r}, features={model.features!r}, "
                          f"n_features={model.n_features_}"),
            "bandwidth": float(model.bandwidth_), "bandwidth_over_median": float(model.bandwidth_ / h),
            "fit_transform_patterns_seconds": seconds, "z": z, "maps": maps,
            "feature_variance_share": (model.eigenvalues_ / feature_var).tolist(),
            "field_variance_share": field_share(z), "field_variance_share_together": joint_share(z),
            "abs_correlation_with_exact_solver": [float(abs(np.corrcoef(z[:, k], ze[:, k])[0, 1]))
                                                  for k in range(N_MODES)],
        }

    diagnostics = []
    for frac in DIAGNOSED:
        bw = frac * h
        K = np.exp(-squareform(pdist(wanom, "sqeuclidean")) / (2.0 * bw * bw))
        vals = np.linalg.eigvalsh(K - K.mean(axis=0) - K.mean(axis=1)[:, None] + K.mean())[::-1] / len(K)
        diagnostics.append({
            "bandwidth_over_median": frac, "bandwidth": bw,
            "kernel_at_median_pair_distance": float(np.exp(-np.median(pair) ** 2 / (2 * bw * bw))),
            "kernel_at_median_nearest_neighbour": float(np.exp(-np.median(nearest) ** 2 / (2 * bw * bw))),
            "kernel_at_farthest_nearest_neighbour": float(np.exp(-nearest.max() ** 2 / (2 * bw * bw))),
            "leading_feature_variance_shares": (vals[:N_MODES] / vals.sum()).tolist()})

    # -- what the nonlinear components add ---------------------------------------------------
    z1 = L[:, 0]
    nonlinear_terms = {"EOF1^2": z1 ** 2, "EOF1*EOF2": z1 * L[:, 1], "|EOF1|": np.abs(z1)}
    warm, cold = z1 > 0, z1 < 0
    sst_anom = np.where(ocean, anom, np.nan)

    def half_map(sel):
        return np.einsum("t...,t->...", sst_anom[sel], z1[sel]) / (z1[sel] ** 2).sum()

    el_nino, la_nina = half_map(warm), half_map(cold)
    asym = (el_nino - la_nina) / 2.0
    lat = sst["latitude"].values
    band = (lat >= EQUATOR[0]) & (lat <= EQUATOR[1])
    lon = sst["longitude"].values

    def equatorial_peak(m):
        prof = np.nanmean(m[band], axis=0)
        return {"longitude_E": float(lon[np.nanargmax(prof)]), "K_per_sd": float(np.nanmax(prof))}

    asymmetry = {
        "n_winters_positive_EOF1": int(warm.sum()), "n_winters_negative_EOF1": int(cold.sum()),
        "pattern_correlation_positive_vs_negative": pattern_correlation(el_nino, la_nina),
        "rms_ratio_positive_over_negative": float(np.sqrt(np.nanmean(el_nino ** 2) / np.nanmean(la_nina ** 2))),
        "equatorial_peak_positive": equatorial_peak(el_nino), "equatorial_peak_negative": equatorial_peak(la_nina),
        "EOF1_skewness": float((z1 ** 3).mean()),
        "linear_eofs_correlation_with_nonlinear_terms": {
            name: [float(np.corrcoef(L[:, k], t)[0, 1]) for k in range(N_MODES)]
            for name, t in nonlinear_terms.items()},
    }
    for res in kernel.values():
        z = res["z"]
        res["correlation_with_linear_eofs"] = np.corrcoef(z.T, L.T)[:N_MODES, N_MODES:].tolist()
        res["correlation_with_unweighted_eofs"] = np.corrcoef(z.T, linear["unweighted"]["z"].T)[
            :N_MODES, N_MODES:].tolist()
        res["correlation_with_nonlinear_terms"] = {
            name: [float(np.corrcoef(z[:, k], t)[0, 1]) for k in range(N_MODES)]
            for name, t in nonlinear_terms.items()}
        res["r2_on_linear_scores"] = [r2(z[:, k], L) for k in range(N_MODES)]
        res["r2_on_linear_scores_and_EOF1^2"] = [r2(z[:, k], np.c_[L, z1 ** 2]) for k in range(N_MODES)]
        res["map_correlation_with_asymmetric_part"] = [pattern_correlation(res["maps"][k], asym)
                                                       for k in range(N_MODES)]

    linear_share = joint_share(L)
    rng = np.random.default_rng(SEED)
    noise = [joint_share(np.c_[L, rng.standard_normal(n_winters)]) - linear_share for _ in range(N_NULL)]
    singular = np.linalg.svd(wanom - wanom.mean(axis=0), compute_uv=False)
    beyond = {"EOF4 (the most one more score can add)": float(singular[N_MODES] ** 2 / total_ss),
              f"a random Gaussian series, mean of {N_NULL}": float(np.mean(noise)),
              f"a random Gaussian series, 95th percentile of {N_NULL}": float(np.quantile(noise, 0.95)),
              **{name: joint_share(np.c_[L, t]) - linear_share for name, t in nonlinear_terms.items()}}
    for res in kernel.values():
        res["field_variance_share_beyond_3_eofs"] = [joint_share(np.c_[L, res["z"][:, k]]) - linear_share
                                                     for k in range(N_MODES)]
    seconds = time.perf_counter() - t_start
    summary = {
        "date": time.strftime("%Y-%m-%d"), "data": "eofs sst_ndjfm_anom.nc", "n_winters": int(sst.sizes["time"]),
        "grid": [int(sst.sizes["latitude"]), int(sst.sizes["longitude"])], "n_land": int((~ocean).sum()),
        "chunk": CHUNK, "weights": "sqrt(cos(latitude))", "median_bandwidth": h,
        "pairwise_distance_quantiles_0_10_50_90_100": np.quantile(pair, [0, .1, .5, .9, 1]).tolist(),
        "nearest_neighbour_distance_quantiles_0_50_100": np.quantile(nearest, [0, .5, 1]).tolist(),
        "bandwidth_diagnostics": diagnostics,
        "linear": {key: {"estimator": f"xeofs.single.EOF(n_modes={N_MODES}, use_coslat={key == 'coslat'})",
                         "explained_variance_ratio": v["ratio"],
                         "field_variance_share_together": joint_share(v["z"])} for key, v in linear.items()},
        "linear_coslat_vs_unweighted_correlation": np.corrcoef(L.T, linear["unweighted"]["z"].T)[
            :N_MODES, N_MODES:].tolist(),
        "kernel": {key: {k: v for k, v in res.items() if k not in ("z", "maps")} for key, res in kernel.items()},
        "field_variance_share_beyond_3_eofs": beyond, "asymmetry": asymmetry, "seconds": seconds,
    }
    (out / "sst_eofs.json").write_text(json.dumps(summary, indent=2))
    plot_patterns(sst, linear["coslat"]["maps"], kernel, (el_nino, la_nina, asym), out / "sst-eofs-patterns.png")
    plot_scores(years, L, kernel, nonlinear_terms["EOF1^2"], out / "sst-eofs-scores.png")
    if verbose:
        report(summary)
    return summary


def report(summary: dict) -> None:
    print(f"median bandwidth {summary['median_bandwidth']:.2f}; nearest-neighbour distances "
          f"{np.round(summary['nearest_neighbour_distance_quantiles_0_50_100'], 2)}")
    for d in summary["bandwidth_diagnostics"]:
        print(f"  h = {d['bandwidth_over_median']:.2f} median: kernel at median pair "
              f"{d['kernel_at_median_pair_distance']:.2f}, at median nearest neighbour "
              f"{d['kernel_at_median_nearest_neighbour']:.2f}; leading shares "
              f"{np.round(d['leading_feature_variance_shares'], 3)}")
    for v in summary["linear"].values():
        print(f"{v['estimator']}: explained {np.round(v['explained_variance_ratio'], 3)}")
    for res in summary["kernel"].values():
        print(res["estimator"], f"(h = {res['bandwidth']:.2f}, {res['fit_transform_patterns_seconds']:.1f} s)")
        print("  corr with EOF1..3 (rows: components)\n", np.round(res["correlation_with_linear_eofs"], 3))
        for name, r in res["correlation_with_nonlinear_terms"].items():
            print(f"  corr with {name}: {np.round(r, 3)}")
        print(f"  R2 on EOF1..3 {np.round(res['r2_on_linear_scores'], 3)}, with EOF1^2 "
              f"{np.round(res['r2_on_linear_scores_and_EOF1^2'], 3)}")
        print(f"  field variance {np.round(res['field_variance_share'], 3)}, feature variance "
              f"{np.round(res['feature_variance_share'], 3)}; map corr with asymmetric part "
              f"{np.round(res['map_correlation_with_asymmetric_part'], 3)}; |corr| with exact "
              f"{np.round(res['abs_correlation_with_exact_solver'], 6)}")
        print(f"  field variance beyond EOF1..3 {np.round(res['field_variance_share_beyond_3_eofs'], 4)}")
    print("beyond EOF1..3:", json.dumps(summary["field_variance_share_beyond_3_eofs"]))
    print("asymmetry", json.dumps(summary["asymmetry"]))
    print(f"{summary['seconds']:.1f} s")


def best_match(res: dict, k: int) -> tuple[str, float]:
    """The linear score or nonlinear term that kernel component ``k`` correlates with most, and the correlation."""
    cands = {f"EOF{j + 1}": r for j, r in enumerate(res["correlation_with_linear_eofs"][k])}
    cands.update({name: r[k] for name, r in res["correlation_with_nonlinear_terms"].items() if name != "EOF1*EOF2"})
    name = max(cands, key=lambda c: abs(cands[c]))
    return name, cands[name]


def kernel_label(key: str, res: dict) -> str:
    return f"KernelPCA, h = {res['bandwidth']:.1f}" + (" (median)" if key == "median" else " (median / 2)")


def plot_patterns(sst, linear_maps, kernel, halves, path: Path) -> None:
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    lon, lat = sst["longitude"].values, sst["latitude"].values
    cmap = colormaps["RdBu_r"].copy()
    cmap.set_bad("0.75")
    fig = Figure(figsize=(11, 11), layout="constrained")
    axes = fig.subplots(N_MODES + 1, 3, sharex=True, sharey=True)

    def draw(ax, m, vmax, title):
        ax.set_title(title, fontsize=8.5)
        return ax.pcolormesh(lon, lat, np.ma.masked_invalid(m), cmap=cmap, vmin=-vmax, vmax=vmax, shading="nearest")

    for k in range(N_MODES):
        vmax = max(np.nanmax(np.abs(m[k])) for m in [linear_maps] + [r["maps"] for r in kernel.values()])
        mesh = draw(axes[k, 0], linear_maps[k], vmax, f"xeofs EOF{k + 1} (coslat)")
        for j, (key, res) in enumerate(kernel.items(), start=1):
            name, r = best_match(res, k)
            draw(axes[k, j], res["maps"][k], vmax,
                 f"{kernel_label(key, res)}: component {k + 1}\nclosest: {name} (r = {r:.2f})")
        fig.colorbar(mesh, ax=axes[k, :], shrink=0.9, label="K per s.d. of the score")
    el_nino, la_nina, asym = halves
    vmax = max(np.nanmax(np.abs(el_nino)), np.nanmax(np.abs(la_nina)))
    draw(axes[-1, 0], el_nino, vmax, "on EOF1, winters with EOF1 > 0 (El Niño)")
    mesh = draw(axes[-1, 1], la_nina, vmax, "on EOF1, winters with EOF1 < 0 (La Niña)")
    fig.colorbar(mesh, ax=axes[-1, :2], shrink=0.9, label="K per s.d. of EOF1")
    mesh = draw(axes[-1, 2], asym, np.nanmax(np.abs(asym)), "half their difference (own scale)")
    fig.colorbar(mesh, ax=axes[-1, 2], shrink=0.9)
    for ax in axes[-1]:
        ax.set_xlabel("longitude (°E)")
    for ax in axes[:, 0]:
        ax.set_ylabel("latitude (°N)")
    fig.suptitle("Winter Pacific SST anomalies (eofs example data, 50 winters): regression maps of the field on the "
                 "standardised scores\nfield weighted by sqrt(cos lat); KernelPCA: Gaussian kernel, "
                 "solver='subspace', features='nystroem', all 50 winters as landmarks", fontsize=9.5)
    fig.savefig(path, dpi=100)


def plot_scores(years, L, kernel, eof1_squared, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 9), layout="constrained")
    axes = fig.subplots(N_MODES + 1, 1, sharex=True)
    styles = {"median": dict(color="tab:red", ls="-"), "small": dict(color="tab:green", ls="--")}
    for k in range(N_MODES):
        axes[k].plot(years, L[:, k], color="k", lw=2, label=f"xeofs EOF{k + 1} (coslat)")
    axes[-1].plot(years, standardise(eof1_squared), color="k", lw=2, label="EOF1², standardised")
    for key, res in kernel.items():
        C = np.asarray(res["correlation_with_linear_eofs"])
        corr = [C[:, k] for k in range(N_MODES)] + [np.asarray(res["correlation_with_nonlinear_terms"]["EOF1^2"])]
        for ax, c in zip(axes, corr, strict=True):
            j = int(np.argmax(np.abs(c)))
            sign = np.sign(c[j])
            ax.plot(years, sign * res["z"][:, j], lw=1.2, **styles[key],
                    label=f"{'−' if sign < 0 else ''}{kernel_label(key, res)}: component {j + 1} "
                          f"(r = {abs(c[j]):.2f})")
    for k, ax in enumerate(axes):
        ax.axhline(0, color="0.6", lw=0.5)
        ax.set_ylabel(f"EOF{k + 1}" if k < N_MODES else "EOF1²")
        ax.legend(fontsize=7, loc="upper left", ncols=3)
    axes[-1].set_xlabel("winter (year of its January)")
    fig.suptitle("Standardised scores: each xeofs EOF (sqrt(cos lat) weights) and the kernel component of each "
                 "bandwidth closest to it\nKernelPCA: Gaussian kernel, solver='subspace', features='nystroem', "
                 "all 50 winters as landmarks", fontsize=9.5)
    fig.savefig(path, dpi=100)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "sst_eofs")
    args = parser.parse_args(argv)
    run(args.out)


if __name__ == "__main__":
    main()
