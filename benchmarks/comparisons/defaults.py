"""defaults: every estimator with a ridge, as a new user runs it, against a grid search of itself and a plain peer.

On public datasets no default was chosen on, each task fits, in one run:

* the estimator with its defaults (only ``random_state`` and, for the component
  analyses, ``n_components`` set);
* the same estimator grid-searched: every pair of a bandwidth (0.5, 1 and 2 times the
  median distance of the training rows) and a ridge (``alpha`` or ``reg``) of a small
  grid, fitted on 80 % of the training rows and scored on the other 20 % (seeded), the
  best pair refitted on all training rows;
* a plain peer of a few lines of scikit-learn and numpy with the median-distance
  bandwidth: a closed-form ridge (``RidgeClassifierCV`` / ``RidgeCV``, leave-one-out
  over its own ridge grid) on random Fourier features for the classifiers, kernel ridge
  and SIR, random-Fourier-feature CCA for kernel CCA.

Scores on the test rows: accuracy (classifiers), R² (kernel ridge; SIR's directions
followed by a linear regression), the top-``k`` test correlation sum (CCA). The table
gives each default's fraction of its grid-searched score and its margin over the peer.
Kernel PCA and SVD have no ridge and no held-out score to choose one; their defaults are
checked against exact references by the tests.
"""

from __future__ import annotations

import math
import time

import numpy as np

from benchmarks.runner import Comparison, Report, register

SEED = 0
#: ``tasks``: ``(estimator, dataset)`` pairs; ``rows``: at most that many training rows per dataset
#: (a seeded subsample), so that the grid's fits stay within minutes; ``peer_features``: the peers'
#: random features for (classifiers and kernel ridge, SIR and CCA); ``scales``: bandwidth multiples.
CLASSIFIERS = ("KernelSVC", "KernelLogisticRegression")
FULL = {"tasks": [(e, d) for e in CLASSIFIERS for d in ("digits", "usps", "breast-cancer", "a9a")]
        + [("KernelRidge", d) for d in ("diabetes", "sarcos", "friedman", "sin-sq")]
        + [("KernelSIR", d) for d in ("diabetes", "sarcos", "friedman", "sin-sq")]
        + [("KernelCCA", d) for d in ("digits-halves", "usps-halves", "mnist-halves", "two-view")],
        "rows": 10_000, "peer_features": (4096, 2048), "scales": (0.5, 1.0, 2.0),
        "alphas": (1e-8, 1e-6, 1e-4, 1e-2), "sir_regs": (1e-5, 1e-3, 1e-1), "cca_regs": (1e-6, 1e-4, 1e-2),
        "classifier_alphas": (1e-6, 1e-4, 1e-2),
        "solvers": {"KernelRidge": ("dsgd", "cg", "exact"), "KernelSIR": ("dsgd", "rca", "exact")}}
QUICK = {"tasks": [("KernelSVC", "digits"), ("KernelLogisticRegression", "breast-cancer"),
                   ("KernelRidge", "diabetes"), ("KernelSIR", "sin-sq"), ("KernelCCA", "digits-halves")],
         "rows": 600, "peer_features": (256, 128), "scales": (1.0, 2.0), "alphas": (1e-6, 1e-3),
         "sir_regs": (1e-3, 1e-1), "cca_regs": (1e-4, 1e-2), "classifier_alphas": (1e-4,),
         "solvers": {"KernelRidge": ("dsgd", "exact")}}
#: ``solvers``: for these estimators, every named solver with the other defaults on the same
#: data as well (the evidence for what ``solver="auto"`` runs), in the JSON's ``curves``.
#: Components: SIR's directions and CCA's pairs.
K_SIR, K_CCA = 2, 10


# -- data -------------------------------------------------------------------------------------
def _split(X, y, test: float = 0.25, seed: int = SEED):
    idx = np.random.default_rng(seed).permutation(len(X))
    cut = round(len(X) * (1 - test))
    return X[idx[:cut]], y[idx[:cut]], X[idx[cut:]], y[idx[cut:]]


def _standard(Xa, Xb):
    mu, sd = Xa.mean(axis=0), Xa.std(axis=0)
    sd[sd == 0] = 1.0
    return ((Xa - mu) / sd).astype(np.float32), ((Xb - mu) / sd).astype(np.float32)


def _sin_sq(n: int, seed: int):
    """y = sin(2 x1) + x2^2 + noise, 10 Gaussian inputs: two directions explain it."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 10)).astype(np.float32)
    y = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.standard_normal(n)
    return X, y


def _two_view(n: int, seed: int):
    """Two views sharing three latent variables through different nonlinear maps, both noisy, plus noise coordinates."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(-np.pi, np.pi, (n, 3))
    noise = rng.standard_normal((n, 24))
    X = np.hstack([np.cos(t) + 0.3 * noise[:, :3], np.sin(t) + 0.3 * noise[:, 3:6], noise[:, 6:12]])
    Y = np.hstack([np.sin(2 * t) + 0.3 * noise[:, 12:15], t ** 2 / 4 + 0.3 * noise[:, 15:18], noise[:, 18:]])
    return X.astype(np.float32), Y.astype(np.float32)


def load_task_data(name: str, ctx, rows: int):
    """``(X, y, X_test, y_test)`` of a dataset (two views: ``y`` is the second view)."""
    from sklearn import datasets as skd

    from benchmarks.comparisons._data import load

    quick = ctx.quick
    if name in ("digits", "digits-halves"):
        d = skd.load_digits()
        X, y, Xt, yt = _split((d.data / 16).astype(np.float32), d.target)
    elif name in ("usps", "usps-halves"):
        (X, y), (Xt, yt) = load("usps", "train", ctx), load("usps", "test", ctx)
    elif name == "mnist-halves":
        (X, y), (Xt, yt) = load("mnist", "train", ctx), load("mnist", "test", ctx)
        X = X.reshape(len(X), -1).astype(np.float32) / 255
        Xt = Xt.reshape(len(Xt), -1).astype(np.float32) / 255
    elif name == "breast-cancer":
        d = skd.load_breast_cancer()
        X, y, Xt, yt = _split(d.data, d.target)
        X, Xt = _standard(X, Xt)
    elif name == "a9a":
        (X, y), (Xt, yt) = load("a9a", "train", ctx), load("a9a", "test", ctx)
        X, Xt = X.astype(np.float32), Xt.astype(np.float32)
    elif name == "diabetes":
        d = skd.load_diabetes()
        X, y, Xt, yt = _split(d.data, d.target)
        X, Xt = _standard(X, Xt)
    elif name == "sarcos":
        from dsgd_dask.datasets import load_sarcos

        Xa, Ya = load_sarcos(sample=quick, data_home=ctx.data_home)
        X, y, Xt, yt = _split(Xa, Ya[:, 0])
        X, Xt = _standard(X, Xt)
    elif name == "friedman":
        Xa, ya = skd.make_friedman1(n_samples=600 if quick else 6000, n_features=10, noise=1.0, random_state=SEED)
        X, y, Xt, yt = _split(Xa.astype(np.float32), ya)
    elif name == "sin-sq":
        Xa, ya = _sin_sq(600 if quick else 6000, SEED)
        X, y, Xt, yt = _split(Xa, ya)
    elif name == "two-view":
        Xa, Ya = _two_view(600 if quick else 8000, SEED)
        X, y, Xt, yt = _split(Xa, Ya)
    else:
        raise ValueError(f"unknown dataset {name!r}")
    if len(X) > rows:
        keep = np.sort(np.random.default_rng(SEED + 1).choice(len(X), rows, replace=False))
        X, y = X[keep], y[keep]
    if name.endswith("-halves"):
        side = math.isqrt(X.shape[1])
        left = np.array([r * side + c for r in range(side) for c in range(side // 2)])
        right = left + side // 2
        X, y, Xt, yt = X[:, left], X[:, right], Xt[:, left], Xt[:, right]
    return X, y, Xt, yt


# -- the estimators, their scores, their grids ------------------------------------------------
def _estimator(name: str, **params):
    import dsgd_dask

    if name == "KernelSIR":
        params.setdefault("n_components", K_SIR)
    if name == "KernelCCA":
        params.setdefault("n_components", K_CCA)
    return getattr(dsgd_dask, name)(random_state=SEED, **params)


def _bandwidth_params(name: str, scale: float, X, Y) -> dict:
    from dsgd_dask import median_bandwidth

    def bw(A):
        sample = A[np.random.default_rng(SEED).choice(len(A), min(len(A), 2000), replace=False)]
        return scale * median_bandwidth(np.asarray(sample, dtype=np.float64))

    if name == "KernelCCA":
        return {"bandwidth_x": bw(X), "bandwidth_y": bw(Y)}
    return {"bandwidth": bw(X)}


def _ridge_grid(name: str, cfg: dict) -> tuple[str, tuple]:
    if name in CLASSIFIERS:
        return "alpha", cfg["classifier_alphas"]
    if name == "KernelRidge":
        return "alpha", cfg["alphas"]
    return "reg", cfg["sir_regs"] if name == "KernelSIR" else cfg["cca_regs"]


def _score(name: str, est, X, y, Xt, yt) -> float:
    """The task's test score of a fitted estimator (``X, y``: its training rows, for SIR's regression)."""
    if name == "KernelSIR":
        from sklearn.linear_model import LinearRegression

        head = LinearRegression().fit(np.asarray(est.transform(X)), y)
        return float(head.score(np.asarray(est.transform(Xt)), yt))
    return float(est.score(Xt, yt))


def _fit_score(name: str, params: dict, X, y, Xt, yt) -> tuple[float, float, object]:
    t0 = time.perf_counter()
    est = _estimator(name, **params).fit(X, y)
    seconds = time.perf_counter() - t0
    return _score(name, est, X, y, Xt, yt), seconds, est


def grid_search(name: str, cfg: dict, X, y, Xt, yt) -> dict:
    """The best (bandwidth, ridge) pair on a seeded 20 % of the training rows, refitted on all of them."""
    idx = np.random.default_rng(SEED + 2).permutation(len(X))
    cut = int(0.8 * len(X))
    fit_rows, val_rows = np.sort(idx[:cut]), np.sort(idx[cut:])
    key, values = _ridge_grid(name, cfg)
    trials, t0 = [], time.perf_counter()
    for scale in cfg["scales"]:
        # the bandwidth of the rows the trial fits on, as the default computes it on its own rows
        bw = _bandwidth_params(name, scale, X[fit_rows], y[fit_rows] if name == "KernelCCA" else None)
        for value in values:
            params = {**bw, key: value}
            score, _, _ = _fit_score(name, params, X[fit_rows], y[fit_rows], X[val_rows], y[val_rows])
            trials.append((score if np.isfinite(score) else -np.inf, scale, value))
    _, scale, value = max(trials, key=lambda t: t[0])
    params = {**_bandwidth_params(name, scale, X, y if name == "KernelCCA" else None), key: value}
    score, _, est = _fit_score(name, params, X, y, Xt, yt)
    return {"score": score, "seconds": time.perf_counter() - t0, "scale": scale, key: value,
            "trials": [(float(s), sc, v) for s, sc, v in trials], "features": _n_features(est)}


def _n_features(est) -> int:
    return int(getattr(est, "n_features_", 0) or 0)


# -- the plain peers --------------------------------------------------------------------------
def _gamma(X) -> float:
    from dsgd_dask import median_bandwidth

    sample = X[np.random.default_rng(SEED).choice(len(X), min(len(X), 2000), replace=False)]
    return 1.0 / (2 * median_bandwidth(np.asarray(sample, dtype=np.float64)) ** 2)


def _rff(X, m: int, seed: int = SEED):
    from sklearn.kernel_approximation import RBFSampler

    return RBFSampler(gamma=_gamma(X), n_components=m, random_state=seed).fit(X)


def peer(name: str, cfg: dict, X, y, Xt, yt) -> dict:
    """The plain peer of the task: its test score, time, features and a label."""
    from sklearn.linear_model import RidgeClassifierCV, RidgeCV

    alphas = np.logspace(-6, 3, 10)
    m_big, m_small = cfg["peer_features"]
    t0 = time.perf_counter()
    if name in CLASSIFIERS:
        rff = _rff(X, m_big)
        model = RidgeClassifierCV(alphas=alphas).fit(rff.transform(X), y)
        score, label, m = model.score(rff.transform(Xt), yt), f"RBFSampler({m_big}) + RidgeClassifierCV", m_big
    elif name in ("KernelRidge", "KernelSIR"):
        m = m_big if name == "KernelRidge" else m_small
        rff = _rff(X, m)
        model = RidgeCV(alphas=alphas).fit(rff.transform(X), y)
        score, label = model.score(rff.transform(Xt), yt), f"RBFSampler({m}) + RidgeCV"
    else:
        score, m = rff_cca(X, y, Xt, yt, m_small, K_CCA), m_small
        label = f"random-Fourier-feature CCA (numpy), m = {m_small}, ridge 1e-4 tr/m"
    return {"score": float(score), "seconds": time.perf_counter() - t0, "method": label, "features": m}


def rff_cca(X, Y, Xt, Yt, m: int, k: int) -> float:
    """Top-``k`` test correlation sum of linear CCA on ``m`` random Fourier features of each view."""
    fx, fy = _rff(X, m, SEED), _rff(Y, m, SEED + 1)
    A, B = fx.transform(X), fy.transform(Y)
    ma, mb = A.mean(axis=0), B.mean(axis=0)
    A, B = A - ma, B - mb
    n = len(A)
    Caa, Cbb, Cab = A.T @ A / n, B.T @ B / n, A.T @ B / n
    Caa += 1e-4 * np.trace(Caa) / m * np.eye(m)
    Cbb += 1e-4 * np.trace(Cbb) / m * np.eye(m)
    La, Lb = np.linalg.cholesky(Caa), np.linalg.cholesky(Cbb)
    M = np.linalg.solve(La, np.linalg.solve(Lb, Cab.T).T)
    U, _, Vt = np.linalg.svd(M)
    Wa = np.linalg.solve(La.T, U[:, :k])
    Wb = np.linalg.solve(Lb.T, Vt[:k].T)
    from dsgd_dask.metrics import paired_correlations

    return float(paired_correlations((fx.transform(Xt) - ma) @ Wa, (fy.transform(Yt) - mb) @ Wb).sum())


# -- the comparison ---------------------------------------------------------------------------
def measure(ctx) -> Report:
    cfg = ctx.config(FULL, QUICK)
    rows, grids, solvers = [], {}, {}
    for name, dataset in cfg["tasks"]:
        X, y, Xt, yt = load_task_data(dataset, ctx, cfg["rows"])
        score, seconds, est = _fit_score(name, {}, X, y, Xt, yt)
        chosen = {k: float(getattr(est, k)) for k in ("alpha_", "reg_") if hasattr(est, k)}
        grid = grid_search(name, cfg, X, y, Xt, yt)
        grids[f"{name} on {dataset}"] = grid
        other = peer(name, cfg, X, y, Xt, yt)
        for solver in cfg["solvers"].get(name, ()):
            s_score, s_seconds, _ = _fit_score(name, {"solver": solver}, X, y, Xt, yt)
            solvers.setdefault(f"{name} on {dataset}", {})[solver] = {"score": s_score, "seconds": s_seconds}
            ctx.log(f"  {name}(solver={solver!r}) on {dataset}: {s_score:.4f} ({s_seconds:.1f} s)")
        fraction = score / grid["score"] if grid["score"] > 0 else float("nan")
        rows.append({"method": f"{name}(), solver {getattr(est, 'solver_', None) or est.solver}", "dataset": dataset,
                     "rows": len(X), "features": _n_features(est), "score": score, "seconds": seconds,
                     "chosen": ", ".join(f"{k} {v:.3g}" for k, v in chosen.items()) or "fixed",
                     "grid_score": grid["score"], "grid_seconds": grid["seconds"], "fraction": fraction,
                     "peer": other["method"], "peer_features": other["features"], "peer_score": other["score"],
                     "peer_seconds": other["seconds"], "margin": score - other["score"],
                     "holds": "yes" if fraction >= 0.95 and score >= other["score"] else "no"})
        ctx.log(f"{name} on {dataset}: defaults {score:.4f} ({seconds:.1f} s), grid {grid['score']:.4f}, "
                f"peer {other['score']:.4f}")
        ctx.keep(rows)

    misses = [r for r in rows if r["holds"] == "no"]
    notes = [f"{len(rows) - len(misses)} of {len(rows)} tasks: defaults at >= 95 % of the grid-searched score and "
             "level with or ahead of the peer."]
    for r in misses:
        why = []
        if not r["fraction"] >= 0.95:
            why.append(f"{100 * r['fraction']:.1f} % of the grid-searched score")
        if r["margin"] < 0:
            why.append(f"{-r['margin']:.4f} behind the peer")
        notes.append(f"Not held: {r['method']} on {r['dataset']}: {'; '.join(why)}.")
    for task, by_solver in solvers.items():
        notes.append(f"{task}, each solver with the other defaults: " + ", ".join(
            f"{k} {v['score']:.4f} in {v['seconds']:.1f} s" for k, v in by_solver.items()) + ".")
    notes.append("Scores: accuracy (classifiers), R² (KernelRidge; KernelSIR directions + LinearRegression), "
                 f"top-{K_CCA} test correlation sum (KernelCCA).")

    def figure(path):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.6))
        labels = [f"{r['method'].split('(')[0]} / {r['dataset']}" for r in rows]
        ypos = np.arange(len(rows))
        ax.barh(ypos - 0.2, [r["fraction"] for r in rows], height=0.4, label="defaults / grid-searched")
        ax.barh(ypos + 0.2, [r["score"] / r["peer_score"] if r["peer_score"] > 0 else np.nan for r in rows],
                height=0.4, label="defaults / plain peer")
        ax.axvline(0.95, color="grey", ls=":", lw=1)
        ax.axvline(1.0, color="black", lw=0.8)
        ax.set_yticks(ypos, labels, fontsize=7)
        ax.set_xlabel("score ratio")
        ax.set_xlim(0.5, 1.3)
        ax.legend(fontsize=7)
        ax.set_title("Defaults against a grid search of themselves and a plain peer")
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    return Report(
        columns={"method": "estimator (defaults), solver run", "dataset": "dataset", "rows": "training rows",
                 "features": "features", "score": "score", "seconds": "fit (s)", "chosen": "chosen ridge",
                 "grid_score": "grid-searched score", "fraction": "defaults / grid", "peer": "plain peer",
                 "peer_score": "peer score", "margin": "defaults - peer", "holds": "holds"},
        rows=rows, notes=notes, figure=figure, curves={"grids": grids, "solvers": solvers}, params=cfg)


register(Comparison(
    name="defaults", title="Defaults against a grid search of themselves and a plain peer",
    data="scikit-learn's bundled digits, breast-cancer, diabetes and Friedman #1; USPS, a9a, SARCOS, MNIST "
         "halves; two synthetic problems with known structure",
    methods=("KernelSVC", "KernelLogisticRegression", "KernelRidge", "KernelSIR", "KernelCCA"),
    budgets="defaults; grid: 3 bandwidths x 3-4 ridges on 80 % / 20 % of the training rows; peers: 4096 (2048 for "
            "SIR and CCA) random Fourier features",
    measure=measure))
