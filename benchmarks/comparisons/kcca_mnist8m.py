"""kcca-mnist8m: kernel CCA of the left and right halves of 8.1M deformed digits, against RCA on subsamples.

The papers' MNIST8M two-view benchmark (Xie, Liang & Song 2015: DSGD-KCCA with 20,480
features, top-50 test correlation 43.5; random-feature CCA 4096 → 41.5; Nyström 4096 →
42.7). View ``x`` is the left 14 columns of each digit (392 pixels), view ``y`` the right
14. ``KernelCCA(solver="lobpcg")`` (full-data passes, Nyström blocks) reads both halves of
the first ``rows`` rows of the out-of-core store chunk by chunk, until its passes converge
or its wall-time budget is spent; ``KernelCCA(solver="rca")`` with Nyström or Fourier
features holds its ``(m_x + m_y)^2`` moments and its subsample, and each pass costs it
``4 n m^2`` products: it gets subsamples of the same rows. Quality: the sum of the
top-``k`` canonical correlations (``score``) on two sets: the 10,000 MNIST test digits, and
the paper's evaluation set, ``heldout`` rows drawn at random from the whole store (deformed
copies of the training digits, as MNIST8M's are) and left out of every method's training
rows. One ridge ``reg`` (the same objective for every solver), chosen on held-out training
digits with ``KernelCCA(solver="rca", features="nystroem", n_features=1024)`` (as
``pipelines/mnist_halves.py`` does).
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks.comparisons._digits import (
    SEED,
    Budget,
    OutOfBudget,
    check_parts,
    digit_store,
    store_arrays,
    subsample,
    test_digits,
)
from benchmarks.runner import Comparison, PeakMemory, Report, register

BOTH = ("nystroem", "fourier")
#: ``rows``: the first rows of the store (the 60,000 digits and 3 deformed copies of each).
#: The ``dsgd_*`` keys configure ``KernelCCA(solver="lobpcg")``: a pass at 8192 features per
#: view costs ``n M (d + 3q)`` products per view (``q`` about 160): in float64, about 80 s
#: per 240k rows here, and at the ridge chosen on 2026-11-25 (1e-7) the passes needed 18 to
#: converge (1460 s): these rows fit the budget. 8192 features per view: the two landmark preconditioners hold 1 GiB
#: (16,384 would hold 4 GiB).
#: ``dsgd_dtype``: the passes' features in float64, as the peers' are. The ridge lands at the
#: small end of the grid (1e-6 … 1e-7 of a unit-variance function), where float32 sections
#: (relative round-off 6e-8, plus the precision ridge scaled to it) cost accuracy: 43.48
#: in float32 against 44.32 in float64 on the same 240k rows at 1e-6, for twice the time
#: per pass.
#: Peers: ``(m, rows, features)`` of ``solver="rca"``; with Fourier features at 8192 it needed
#: 23 GB on 54k rows.
#: ``steps``: ``KernelCCA(solver="dsgd")`` at the paper's settings (Xie, Liang & Song 2015:
#: 20,480 Fourier frequencies per view in blocks of 2048, as ``[cos, sin]`` pairs, so 40,960
#: features in blocks of 4096; batches of 1024 rows, 3000 steps),
#: sampling batches from the whole store; scored every ``steps_every`` steps (rounded to whole
#: store chunks; scoring time not counted), stopped at ``steps_seconds``. ``()`` skips it.
#: ``steps_preconditioner``: each block's covariance measured once on the fit's sample
#: (``"sample"``), or on every batch (``"block"``). ``steps_jitter`` (the preconditioner's
#: relative jitter) and ``steps_eta0`` (the step size) were chosen on 10,000 validation rows
#: of the store, trained on the store less those and the held-out rows
#: (``python pipelines/mnist_halves_steps.py --features fourier_pairs --n-features 40960
#: --block-size 4096 --store STORE --steps 520 --jitter J --eta0 E``): top-50 sums at 520
#: steps, (jitter, eta0) = (0.1, 0.1): 40.77; (0.3, 0.1): 41.41; (1, 0.1): 39.58;
#: (0.3, 0.2): 40.98; (0.6, 0.2): 41.52; (0.03, 0.1): 24.92 at 208 steps; (0.1, 0.1) with
#: ``eta_decay=0.001``: 31.55 (36.39 as the mean of the iterates from step 200). Earlier,
#: eta0 among 0.05, 0.1 and 0.2 at jitter 0.1 on 10,000 MNIST training digits held out from
#: the other 50,000 (300 steps, 20,480 cosines): 39.61, 40.05, 36.32; the estimator's
#: default 0.5 diverged once and stalled at 16 to 26 there.
#: ``steps_eta_decay`` on the same validation rows over the whole 3000 steps at (0.6, 0.2)
#: (``... --steps 3000 --jitter 0.6 --eta0 0.2 --eta-decay D [--average-from T]``), the
#: fitted model's sum: 0.01: 43.11 (the mean of steps 1501-3000: 42.94; of 2251-3000:
#: 43.03); 0.003: 43.36 (43.23; 43.32); eta0 0.4 at 0.01 trailed by 1.5 after 1016 steps.
#: Near (0.6, 0.2, 0.003), raw functions, stopped when they trailed it at every reading (it:
#: 41.19, 42.13, 42.96 after 512, 1016, 2024 steps): decay 0.002: 40.79, 41.77, 42.63 after
#: 520, 1040, 1976; jitter 0.4: 40.00, 41.17, 41.63 after 520, 1040, 1352; eta0 0.3: 38.64,
#: 39.61 after 520, 832. Since each block is measured on 8 rows per feature (32,768 rows),
#: the jitter again at ``eta_decay=0.003``, raw functions after 104, 208, 312, 416, 520 steps:
#: 0.8: 38.34, 40.07, 40.83, 41.32, 41.63; 0.6 (on 40,000 rows): 38.34, 39.91, 40.61, 41.09,
#: 41.37; 0.3 (40,000 rows): 36.76, 37.75, 38.21, 38.66. Hence 0.8.
#: ``steps_bandwidth``: the steps' bandwidth, a multiple of each view's median distance (1: the
#: estimator's own median trick).
#: ``steps_rows``: the steps draw their batches from the store's first ``steps_rows`` rows
#: (``None``: all of them).
#: ``steps_average``: the fraction of the steps, the last ones, whose iterates the model is the
#: mean of (``KernelCCA(average=...)``, in rows seen); 0: the last iterate.
#: ``steps_seed``: the steps' ``random_state`` (their features, sample and batches), or a tuple of
#: them: one fit per seed in the same run, and the mean of their sums (the paper's figure is the
#: mean of 5 runs).
#: ``heldout``: rows drawn at random (seeded) from the whole store, never trained on, scored
#: beside the test digits (the paper's evaluation: 10,000 rows held out of MNIST8M).
#: ``run``: the parts of the comparison to run (the ridge is chosen in every run).
PARTS = ("passes", "steps", "peers")
FULL = {"k": 50, "rows": 240_000, "dsgd_features": 8192, "dsgd_dtype": "float64", "dsgd_seconds": 1800.0,
        "peers": [(4096, 120_000, BOTH), (8192, 60_000, ("nystroem",))],
        "reg_grid": (1e-3, 1e-4, 1e-5, 1e-6, 1e-7), "reg_rows": 60_000,
        "steps": (40960, 4096, 1024, 3000), "steps_every": 250, "steps_seconds": 5400.0,
        "steps_preconditioner": "sample", "steps_jitter": 0.8, "steps_eta0": 0.2, "steps_eta_decay": 0.003,
        "steps_features": "fourier_pairs", "steps_bandwidth": 1.0, "steps_rows": None, "steps_average": 0.0,
        "steps_seed": SEED, "heldout": 10_000, "run": PARTS}
QUICK = {"k": 5, "rows": 8192, "dsgd_features": 512, "dsgd_dtype": "float64", "dsgd_seconds": 60.0,
         "peers": [(256, 2048, BOTH)], "reg_grid": (1e-3, 1e-5), "reg_rows": 2048,
         "steps": (512, 256, 256, 24), "steps_every": 8, "steps_seconds": 60.0,
         "steps_preconditioner": "sample", "steps_jitter": 0.6, "steps_eta0": 0.2, "steps_eta_decay": 0.01,
         "steps_features": "fourier_pairs", "steps_bandwidth": 1.5, "steps_rows": None, "steps_average": 0.5,
         "steps_seed": (SEED, SEED + 1), "heldout": 1024, "run": PARTS}

#: Xie, Liang & Song (2015), Table 1: DSGD-KCCA on MNIST8M, 20,480 features, 3000 steps of 1024 rows, scored
#: on 10,000 rows held out of MNIST8M.
PAPER_STEPS = 43.5
#: The paper's settings of that figure, as ``(features, block, batch, steps)`` and the kind of features.
PAPER_SETTINGS = ((40960, 4096, 1024, 3000), "fourier_pairs")
LEFT = np.array([r * 28 + c for r in range(28) for c in range(14)])
RIGHT = LEFT + 14


#: The key of the steps' curve in the report (of the first seed; the others' add theirs).
STEPS_CURVE = 'KernelCCA(solver="dsgd")'


def steps_seeds(cfg: dict) -> tuple:
    """The steps' seeds: ``cfg["steps_seed"]``, one or a tuple."""
    seeds = cfg["steps_seed"]
    return tuple(seeds) if isinstance(seeds, (tuple, list)) else (seeds,)


def fit_steps(XL, XR, cfg: dict, k: int, reg: float, score_of, curves: dict, curve: str = STEPS_CURVE) -> dict:
    """``KernelCCA(solver="dsgd")`` at ``cfg["steps"]`` on the store's halves: its row (its curve into ``curves``)."""
    from dsgd_dask import KernelCCA
    from pipelines.mnist_halves_steps import scaled_bandwidths

    n_features, block, batch, steps = cfg["steps"]
    pre, eta0, decay = cfg["steps_preconditioner"], cfg["steps_eta0"], cfg["steps_eta_decay"]
    kind, jitter, scale = cfg["steps_features"], cfg["steps_jitter"], cfg["steps_bandwidth"]
    bandwidths = scaled_bandwidths(XL, XR, scale)  # {} at 1: the estimator's own median trick
    first = steps - round(cfg["steps_average"] * steps) + 1  # the first step of the mean
    average = (first - 1) * batch + 1 if first <= steps else False
    name = (f'KernelCCA(solver="dsgd", features="{kind}", preconditioner="{pre}", preconditioner_jitter={jitter:g}, '
            f"eta0={eta0:g}, eta_decay={decay:g}" + (f", average={average}" if average else "")
            + f"), blocks of {block}, batches of {batch}"
            + (f", bandwidth {scale:g} x the median" if bandwidths else "")
            + (f", the mean of the iterates of steps {first:,} to {steps:,}" if average else "")
            + (f", random_state={cfg['steps_seed']}" if cfg["steps_seed"] != SEED else ""))
    # the callback comes once per chunk task (a store chunk's steps)
    every = max(1, round(cfg["steps_every"] * batch / XL.chunks[0][0]))
    budget = Budget(cfg["steps_seconds"], score_of, every=every)
    est = KernelCCA(k, solver="dsgd", features=kind, n_features=n_features, block_size=block, batch_size=batch,
                    max_iter=steps, reg=reg, preconditioner=pre, preconditioner_jitter=jitter, eta0=eta0,
                    eta_decay=decay, average=average, random_state=cfg["steps_seed"], **bandwidths)
    with PeakMemory() as mem:
        try:
            est.fit(XL, XR, callback=budget)
            stop = f"{steps:,} steps of {batch:,} rows ({steps * batch:,} rows drawn from the store)"
        except OutOfBudget:
            stop = f"wall-time budget ({cfg['steps_seconds']:.0f} s) spent after {budget.curve[-1]['n']:,} steps"
    seconds = budget.seconds
    if budget.stopped:  # no fitted model: the raw functions of the last callback
        fitted = {key: budget.curve[-1][key] for key in ("correlation_sum", "heldout_sum")}
    else:
        # the curve holds the raw functions of the callbacks; the row, the fitted model: the same
        # functions rotated to the canonical pairs of their span on the fit's sample
        budget.curve.append({"n": steps, "seconds": seconds, **score_of(budget.model)})
        fitted = score_of(tuple(est.models_))
        budget.curve.append({"n": steps, "seconds": seconds, "fitted": True, **fitted})
    curves[curve] = budget.curve
    return {"method": name, "rows": XL.shape[0], "features": n_features, **fitted,
            "raw_correlation_sum": budget.curve[-1 - (not budget.stopped)]["correlation_sum"],
            "raw_heldout_sum": budget.curve[-1 - (not budget.stopped)]["heldout_sum"],
            "seconds": seconds, "peak_rss_gib": mem.peak / 2**30, "stopped": stop,
            "sample_rows": min(XL.shape[0], est._sample_size(est._params))}


def training_rows(X, y, held: np.ndarray, rows: int | None):
    """The store's first ``rows`` rows (``None``: all), lazily, without the held-out rows ``held`` (sorted)."""
    if rows is not None:
        X, y = X[:rows], y[:rows]
    keep = np.ones(X.shape[0], dtype=bool)
    keep[held[held < X.shape[0]]] = False
    return X[keep], y[keep]


def draw(path, passes: dict | None, steps: dict | None, peers: list, curves: dict, k: int, n: int) -> None:
    """Sums against fit time: the test digits (left), the held-out store rows and the paper's figure (right)."""
    import textwrap

    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 6.2), sharey=True)
    for ax, key, title in zip(axes, ("correlation_sum", "heldout_sum"),
                              ("MNIST test digits", "held-out store rows (the paper's evaluation)"), strict=True):
        for name, r in (("KernelCCA", passes), ('KernelCCA(solver="dsgd")', steps)):
            c = curves.get(name)
            if c and r is not None:
                raw = [p for p in c if not p.get("fitted")]
                line, = ax.plot([p["seconds"] for p in raw], [p[key] for p in raw], marker=".",
                                label=textwrap.fill(r["method"], 70))
                for p in c:
                    if p.get("fitted"):
                        ax.scatter(p["seconds"], p[key], marker="*", s=90, color=line.get_color(), zorder=3,
                                   label="the same, fitted model (the raw functions' curve rotated to canonical "
                                         "pairs)" if key == "heldout_sum" else None)
        for r in peers:
            ax.scatter(r["seconds"], r[key], marker="x", label=f"{r['method']}, {r['rows']:,} rows")
        if steps is not None and key == "heldout_sum":
            ax.axhline(PAPER_STEPS, color="grey", ls=":", lw=1,
                       label=f"paper (held-out MNIST8M rows): DSGD-KCCA, 20,480 features, {PAPER_STEPS}")
        ax.set_xscale("log")
        ax.set_xlabel("fit wall time (s)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"top-{k} correlation sum")
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", fontsize=7, ncol=2, frameon=False)
    fig.suptitle(f"Kernel CCA of MNIST8M-like halves ({n:,} rows for the passes)")
    fig.tight_layout(rect=(0, 0.2, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def measure(ctx) -> Report:
    from dsgd_dask import KernelCCA
    from dsgd_dask.metrics import paired_correlations
    from pipelines.mnist_halves_steps import HELDOUT_SEED, heldout_rows

    cfg = ctx.config(FULL, QUICK)
    check_parts(cfg["run"], PARTS)
    k = cfg["k"]
    path = digit_store(ctx)
    X_store, y_store = store_arrays(path)
    held = heldout_rows(X_store.shape[0], cfg["heldout"])
    H = np.asarray(X_store[held])
    HL, HR = H[:, LEFT], H[:, RIGHT]
    X, y = training_rows(X_store, y_store, held, cfg["rows"])
    n = X.shape[0]
    XL, XR = X[:, LEFT], X[:, RIGHT]
    Xt, _ = test_digits(ctx)
    TL, TR = Xt[:, LEFT], Xt[:, RIGHT]

    # the ridge: KernelCCA(solver="rca", n_features=1024) on training digits, scored on other training digits
    Xs, _ = subsample(X, y, min(n, 2 * cfg["reg_rows"]), seed=SEED + 1)
    half = len(Xs) // 2
    trials = []
    for reg in cfg["reg_grid"]:
        est = KernelCCA(k, solver="rca", n_features=min(1024, half), reg=reg, random_state=SEED)
        est.fit(Xs[:half][:, LEFT], Xs[:half][:, RIGHT])
        trials.append((est.score(Xs[half:][:, LEFT], Xs[half:][:, RIGHT]), reg))
    reg = max(trials)[1]
    del Xs
    ctx.log(f"{n:,} rows; reg {reg:g} (validation sums {[round(t[0], 2) for t in trials]})")
    rows, curves = [], {}

    def score_of(models):
        fx, fy = models
        return {"correlation_sum": float(paired_correlations(fx.evaluate(TL), fy.evaluate(TR)).sum()),
                "heldout_sum": float(paired_correlations(fx.evaluate(HL), fy.evaluate(HR)).sum())}

    if "passes" in cfg["run"]:
        budget = Budget(cfg["dsgd_seconds"], score_of)
        est = KernelCCA(k, reg=reg, solver="lobpcg", n_features=cfg["dsgd_features"], compute_dtype=cfg["dsgd_dtype"],
                        random_state=SEED)
        with PeakMemory() as mem:
            try:
                est.fit(XL, XR, callback=budget)
                score, held_score = est.score(TL, TR), est.score(HL, HR)
                stop = f"converged (tol) after {est.n_iter_} passes"
            except OutOfBudget:
                score, held_score = budget.curve[-1]["correlation_sum"], budget.curve[-1]["heldout_sum"]
                stop = f"wall-time budget ({cfg['dsgd_seconds']:.0f} s) spent after {budget.curve[-1]['n']} passes"
        rows.append({"method": f'KernelCCA(solver="lobpcg", {cfg["dsgd_dtype"]} features)', "rows": n,
                     "features": cfg["dsgd_features"], "correlation_sum": score, "heldout_sum": held_score,
                     "seconds": budget.seconds, "peak_rss_gib": mem.peak / 2**30, "stopped": stop})
        curves["KernelCCA"] = budget.curve
        ctx.log(f'KernelCCA(solver="lobpcg"): {score:.2f} in {budget.seconds:.0f} s ({stop})')
        ctx.keep(rows)

    if cfg["steps"] and "steps" in cfg["run"]:
        X_all, _ = training_rows(X_store, y_store, held, cfg["steps_rows"])
        for i, seed in enumerate(steps_seeds(cfg)):
            curve = STEPS_CURVE if i == 0 else f"{STEPS_CURVE}, random_state={seed}"
            rows.append(fit_steps(X_all[:, LEFT], X_all[:, RIGHT], {**cfg, "steps_seed": seed}, k, reg, score_of,
                                  curves, curve))
            ctx.log(f'{rows[-1]["method"]}: {rows[-1]["correlation_sum"]:.2f} in {rows[-1]["seconds"]:.0f} s')
            ctx.keep(rows)

    for m, n_sub, kinds in (cfg["peers"] if "peers" in cfg["run"] else ()):
        n_sub = min(n_sub, n)
        Xs, _ = subsample(X, y, n_sub)
        for kind in kinds:
            name = f'KernelCCA(solver="rca", features="{kind}", n_features={m})'
            with PeakMemory() as mem:
                t0 = time.perf_counter()
                est = KernelCCA(k, solver="rca", features=kind, n_features=m, reg=reg, random_state=SEED)
                est.fit(Xs[:, LEFT], Xs[:, RIGHT])
                seconds = time.perf_counter() - t0
            score = est.score(TL, TR)
            rows.append({"method": name, "rows": n_sub, "features": m, "correlation_sum": score,
                         "heldout_sum": est.score(HL, HR), "seconds": seconds, "peak_rss_gib": mem.peak / 2**30,
                         "stopped": "one pass of 4 n m^2 products over a subsample in memory; see the notes"})
            ctx.log(f"{name} on {n_sub:,} rows: {score:.2f} in {seconds:.0f} s")
            ctx.keep(rows)
        del Xs

    passes = next((r for r in rows if 'solver="lobpcg"' in r["method"]), None)
    steps = [r for r in rows if 'solver="dsgd"' in r["method"]]
    peers = [r for r in rows if 'solver="rca"' in r["method"]]
    notes = []
    if peers and passes:
        peer = max(peers, key=lambda r: r["correlation_sum"])
        ahead = "the passes are ahead" if passes["correlation_sum"] > peer["correlation_sum"] else "the peer is ahead"
        notes.append(f"Top-{k} test correlation sum: {passes['method']} {passes['correlation_sum']:.2f} on {n:,} rows; "
                     f"best peer {peer['method']} on {peer['rows']:,} rows {peer['correlation_sum']:.2f}: {ahead}.")
    settings = (tuple(cfg["steps"]), cfg["steps_features"])
    same = "at the same settings" if settings == PAPER_SETTINGS else (
        f"at other settings: (features, block, batch, steps) {settings[0]} with {settings[1]} features, "
        f"the paper's {PAPER_SETTINGS[0]}")
    curve = curves.get(STEPS_CURVE, [])
    reached = next((c for c in curve if c["heldout_sum"] >= PAPER_STEPS), None)
    for i, r in enumerate(steps):
        side = "at or above" if r["heldout_sum"] >= PAPER_STEPS else "below"
        raw = "the mean of the iterates" if "average=" in r["method"] else "the steps' raw functions"
        notes.append(f"{r['method']}: {r['heldout_sum']:.2f} on the held-out store rows in {r['seconds']:.0f} s "
                     f"({side} the paper's {PAPER_STEPS}, {same}, scored the same way); "
                     f"{r['correlation_sum']:.2f} on the MNIST test digits. The fitted model: {raw} "
                     f"({r['raw_heldout_sum']:.2f} and {r['raw_correlation_sum']:.2f}, the curve's last "
                     f"point) rotated to the canonical pairs of their span on the fit's {r['sample_rows']:,}-row "
                     "sample. "
                     + ("" if i > 0 else f"The curve first reached {PAPER_STEPS} after {reached['n']:,} steps "
                        f"({reached['seconds']:.0f} s)." if reached else f"The curve never reached {PAPER_STEPS}."))
    if len(steps) > 1:
        held_sums = np.array([r["heldout_sum"] for r in steps])
        test_sums = np.array([r["correlation_sum"] for r in steps])
        side = "at or above" if held_sums.mean() >= PAPER_STEPS else "below"
        seeds = ", ".join(str(s) for s in steps_seeds(cfg))
        notes.append(f"The steps over {len(steps)} seeds (random_state {seeds}), as the paper averages 5 runs: "
                     f"mean {held_sums.mean():.3f} (standard deviation {held_sums.std(ddof=1):.3f}) on the held-out "
                     f"store rows, {side} the paper's {PAPER_STEPS}; mean {test_sums.mean():.3f} on the MNIST test "
                     f"digits; {sum(r['seconds'] for r in steps):.0f} s of fits in all.")
    notes += [
             "Papers (MNIST8M): DSGD-KCCA 20,480 features 43.5; random-feature CCA 4096 41.5; Nyström 4096 42.7; "
             f"scored on 10,000 rows held out from MNIST8M's training rows (here: {len(held):,} rows held out of "
             "the store, and the MNIST test digits), the mean of 5 runs, Fourier features as [cos, sin] pairs "
             "(4096 pairs: 8192 numbers per row).",
             'Peers\' sizes: a pass of KernelCCA(solver="rca") costs 4 n m^2 products, so 8192 Nyström landmarks '
             "get the smallest subsample (about 15 GB resident on 54k rows in pipelines/mnist_halves.py); 8192 "
             "Fourier features needed 23 GB there, the edge of this machine, and are not run."]

    def figure(path):
        draw(path, passes, steps[0] if steps else None, peers, curves, k, n)

    return Report(
        columns={"method": "method", "rows": "training rows", "features": "features per view",
                 "correlation_sum": f"top-{k} sum, MNIST test digits",
                 "heldout_sum": f"top-{k} sum, {len(held):,} held-out store rows", "seconds": "fit (s)",
                 "peak_rss_gib": "fit peak RSS (GiB)", "stopped": "why it stopped there"},
        rows=rows, notes=notes, figure=figure, curves={**curves, "reg_trials": trials},
        params={**cfg, "n": n, "reg": reg, "heldout_seed": HELDOUT_SEED})


register(Comparison(
    name="kcca-mnist8m", title="Kernel CCA of the halves of 8.1M deformed digits",
    data="MNIST8M-like Zarr store, left/right 14 pixel columns; MNIST test digits and held-out store rows",
    methods=('KernelCCA(solver="lobpcg")', 'KernelCCA(solver="dsgd")', 'KernelCCA(solver="rca", features="nystroem")',
             'KernelCCA(solver="rca", features="fourier")'),
    budgets=('KernelCCA(solver="lobpcg"): passes over the first 240k rows, 8192 features per view, until converged '
             'or 30 min; solver="dsgd": the paper\'s 3000 steps of 1024 rows drawn from the whole store, 20,480 '
             'Fourier frequencies per view as [cos, sin] pairs (at most 90 min); solver="rca": m = 4096 on 120k '
             'rows, Nyström m = 8192 on 60k rows'),
    measure=measure))
