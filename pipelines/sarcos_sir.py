"""Kernel sliced inverse regression on robot-arm inverse dynamics (SARCOS): 21 joint readings to 7 torques.

The papers' robot-arm experiment (Xie, Liang & Song 2015): reduce the 21 inputs (joint
positions, velocities, accelerations) to ``k = 7`` directions by kernel SIR with the 7
torques as the (multi-output) response, then fit a linear regression of the torques on
the 7 projections. Quality: the test mean squared error, averaged over the 7 torques
(standardised on the training rows, so 1.0 is the error of predicting the mean).

Data: ``sarcos_test.npz`` (4,449 rows), shuffled with a fixed seed, 80 % for training and
20 % for testing; inputs standardised on the training rows. Methods, in one run:

* linear regression on the 21 raw inputs;
* ``KernelSIR(solver="dsgd")`` (Nyström blocks, doubly stochastic steps) with the default
  settings;
* ``KernelSIR(solver="rca", features="fourier")``: random Fourier features of the same
  kernel and bandwidth at 512 ... 4,096 features, one pass of their moments and slice
  means, the generalised problem solved exactly on them;
* ``KernelSIR(solver="rca")``: the same with the default Nyström landmarks (3,072 rows);
* ``KernelSIR(solver="exact")``: exact kernel SIR on the training rows.

Every fit has the same seed, hence the same slices, kernel and bandwidth: the response is
sliced by k-means of the standardised torques (20 slices, seeded), the kernel is Gaussian
with the median-trick bandwidth, the ridge the estimator's default (the same problem for
every solver).
Outputs in ``--out`` (default ``pipelines/results/sarcos_sir``): ``sarcos_sir.json`` and
``sarcos_sir.png`` (test MSE per method and feature count). One to two minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

K = 7
N_SLICES = 20
SEED = 0
RF_FEATURES = (512, 1024, 2048, 4096)


def load(data_home=None):
    from dsgd_dask.datasets import load_sarcos

    X, Y = load_sarcos(data_home=data_home)
    perm = np.random.default_rng(SEED).permutation(len(X))
    cut = int(0.8 * len(X))
    tr, te = perm[:cut], perm[cut:]
    mx, sx = X[tr].mean(axis=0), X[tr].std(axis=0)
    my, sy = Y[tr].mean(axis=0), Y[tr].std(axis=0)
    sx[sx == 0] = 1.0
    return (X[tr] - mx) / sx, (Y[tr] - my) / sy, (X[te] - mx) / sx, (Y[te] - my) / sy


def regression_mse(P_train, Y_train, P_test, Y_test) -> float:
    """Test MSE (mean over outputs) of a least-squares fit of ``Y`` on ``P`` with an intercept."""
    from sklearn.linear_model import LinearRegression

    reg = LinearRegression().fit(P_train, Y_train)
    return float(((reg.predict(P_test) - Y_test) ** 2).mean())


def run(out: Path, data_home=None, verbose: bool = True) -> dict:
    from dsgd_dask import KernelSIR

    out.mkdir(parents=True, exist_ok=True)
    X, Y, Xt, Yt = load(data_home)
    records = []

    def record(method, features, fit, mse):
        records.append({"method": method, "features": features, "fit_seconds": fit, "test_mse": mse})
        if verbose:
            print(f"{method:>44} {features or '':>6}: test MSE {mse:.4f}  fit {fit:6.1f} s", flush=True)

    def fit_sir(label, **params):
        t0 = time.perf_counter()
        est = KernelSIR(K, n_slices=N_SLICES, random_state=SEED, **params).fit(X, Y)
        fit = time.perf_counter() - t0
        record(label, est.n_features_, fit, regression_mse(est.transform(X), Y, est.transform(Xt), Yt))
        return est

    record("linear regression", None, 0.0, regression_mse(X, Y, Xt, Yt))
    sir = fit_sir('KernelSIR(solver="dsgd")', solver="dsgd")
    for m in RF_FEATURES:
        fit_sir('KernelSIR(solver="rca", features="fourier")', solver="rca", features="fourier", n_features=m)
    fit_sir('KernelSIR(solver="rca")', solver="rca")
    fit_sir('KernelSIR(solver="exact")', solver="exact")
    summary = {"date": time.strftime("%Y-%m-%d"), "k": K, "n_slices": N_SLICES, "n_train": len(X),
               "n_test": len(Xt), "bandwidth": sir.bandwidth_, "reg": sir.reg, "slices": sir.slicer_.kind,
               "results": records}
    (out / "sarcos_sir.json").write_text(json.dumps(summary, indent=2))
    plot(records, out / "sarcos_sir.png")
    return summary


def plot(records, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.2))
    ax = fig.subplots()
    labels = [f"{r['method']}\n{r['features'] or ''}" for r in records]
    ax.bar(range(len(records)), [r["test_mse"] for r in records], color="tab:blue")
    ax.set_xticks(range(len(records)), labels, fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("test MSE (standardised torques)")
    ax.set_title(f"SARCOS: linear regression on {K} SIR directions")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "sarcos_sir")
    parser.add_argument("--data-home", default=None, help="directory holding sarcos_test.npz (default: the data home)")
    args = parser.parse_args(argv)
    run(args.out, data_home=args.data_home)


if __name__ == "__main__":
    main()
