"""Kernel CCA of the left and right halves of MNIST digits: KernelCCA's passes and steps against its one-pass RCA.

The papers' two-view benchmark (Lopez-Paz et al. 2014; Xie, Liang & Song 2015): view ``x``
is the left 392 pixels of a digit, view ``y`` the right 392; the quality of a method is
the sum of the top-50 canonical correlations of its variates on the 10,000 test digits.
The 60,000 training digits are split by a seeded permutation into 54,000 for training
and 6,000 for validation (the papers' sizes); the training halves are written to two
Zarr stores (uint8, chunks of 6,000 rows) that every method reads chunk by chunk.

The ridge ``reg`` is chosen once, on the validation digits, as the best of a grid for
``KernelCCA(solver="rca", features="nystroem")`` with 1,024 landmarks, and then used by
every method (``reg`` has one meaning for every solver): the comparison is of the solvers
and representations, not of their regularisation. Each method runs in a fresh process
(so its peak RSS is its own), one after the other, each row labelled with its class and
solver:

* linear CCA on the pixels (ridge CCA of the 392 + 392 pixel moments);
* ``KernelCCA(solver="rca")`` with Fourier and with Nyström features (one pass of
  ``(Mx + My)^2`` moments, one solve) at 1,024 ... 8,192 features per view;
* ``KernelCCA(solver="lobpcg")`` (full-data passes on Nyström blocks of 1,024 landmarks per
  view, until converged) at 4,096 ... 16,384 features per view;
* ``KernelCCA(solver="dsgd")`` (doubly stochastic steps on the same blocks) for a number of
  epochs.

Outputs in ``--out`` (default ``pipelines/results/mnist_halves``): ``mnist_halves.json``
(machine, parameters, one record per method: test correlation sum, fit time, peak RSS),
``mnist_halves.md`` (the table) and ``mnist_halves.png`` (test correlation sum against
fit time). Needs the full MNIST in the data home (``$DSGD_DATA_DIR``, ``~/dsgd_dask_data``
or ``../shared/datasets`` beside the checkout).

Run ``python pipelines/mnist_halves.py --quick`` (a few minutes: up to 2,048 features and
one DSGD configuration) or without ``--quick`` for the full table (about an hour on two
cores). ``--only REGEX`` runs a subset (searched in ``"<method> <features>"``, e.g.
``--only 'fourier.* 8192'``), ``--reg`` fixes the ridge instead of choosing it,
``--merge a,b --name c`` combines earlier outputs into one table. A method whose process
dies (out of memory, at 8,192 features per view on 24 GiB) gets a row saying so.
``run(..., sample=True)`` (what ``python -m benchmarks run mnist-halves --quick`` calls) runs
on the subsets shipped with the package with the :data:`SAMPLE` budgets.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import resource
import time
from pathlib import Path

import numpy as np

K = 50
N_TRAIN = 54_000
CHUNK_ROWS = 6_000
REG_GRID = (1e-3, 1e-4, 1e-5, 1e-6, 1e-7)
SEED = 0

#: The rows' labels: ``KernelCCA`` with its solver (and features for ``"rca"``).
RCA_FOURIER = 'KernelCCA(solver="rca", features="fourier")'
RCA_NYSTROEM = 'KernelCCA(solver="rca", features="nystroem")'
LOBPCG = 'KernelCCA(solver="lobpcg")'
DSGD = 'KernelCCA(solver="dsgd")'

FULL = {
    "rca_features": (1024, 2048, 4096, 8192),
    # (features per view, epochs of steps; 0: full-data passes, solver="lobpcg")
    "dsgd": [(4096, 0), (8192, 0), (16384, 0), (4096, 5)],
}
QUICK = {
    "rca_features": (1024, 2048),
    "dsgd": [(4096, 0), (4096, 2)],
}
#: ``sample=True``: the 5000 training and 2000 test digits shipped with the package (4500 for
#: training, 500 for validation), small feature counts (one block of 256), and one ridge (the
#: best of ``REG_GRID`` for ``KernelCCA(solver="rca", n_features=256)`` on these validation
#: digits) still scored on them: a fit process costs seconds of imports.
SAMPLE = {
    "rca_features": (256,),
    "dsgd": [(256, 0), (256, 2)],
    "reg_grid": (1e-5,),
    "valid_features": 256,
}


def halves(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Left and right 14-column halves of 28 x 28 digits, as (n, 392) arrays of the same dtype."""
    d = images.reshape(-1, 28, 28)
    return d[:, :, :14].reshape(len(d), -1), d[:, :, 14:].reshape(len(d), -1)


def prepare(out: Path, data_home=None, sample: bool = False) -> dict:
    """Split, write the training halves to Zarr, keep validation and test halves in ``.npy`` files.

    The split is 90 % / 10 % of the training digits (54,000 / 6,000 of MNIST's 60,000);
    ``sample=True`` splits the 5000 training digits shipped with the package (4500 / 500,
    chunks of 1125 rows) and names its files ``sample_*``.
    """
    import zarr

    from dsgd_dask.datasets import load_mnist

    x_train, _ = load_mnist("train", data_home=data_home, sample=sample)
    x_test, _ = load_mnist("test", data_home=data_home, sample=sample)
    n_train = min(N_TRAIN, round(0.9 * len(x_train)))
    chunk_rows = min(CHUNK_ROWS, -(-n_train // 4))
    prefix = "sample_" if sample else ""
    perm = np.random.default_rng(SEED).permutation(len(x_train))
    train, valid = x_train[perm[:n_train]], x_train[perm[n_train:]]
    paths = {}
    for name, part in (("train", train),):
        left, right = halves(part)
        for side, arr in (("left", left), ("right", right)):
            path = out / f"{prefix}{name}_{side}.zarr"
            if not path.exists():
                z = zarr.create_array(store=str(path), shape=arr.shape, dtype="uint8", chunks=(chunk_rows, 392))
                for r in range(0, len(arr), chunk_rows):
                    z[r:r + chunk_rows] = arr[r:r + chunk_rows]
            paths[f"{name}_{side}"] = str(path)
    for name, part in (("valid", valid), ("test", x_test)):
        left, right = halves(part)
        for side, arr in (("left", left), ("right", right)):
            path = out / f"{prefix}{name}_{side}.npy"
            np.save(path, arr)
            paths[f"{name}_{side}"] = str(path)
    return paths


def _scaled(path: str):
    """A store or ``.npy`` of uint8 pixels as float32 in [0, 1] (lazy for a store)."""
    import dask.array as da

    if path.endswith(".npy"):
        return np.load(path).astype(np.float32) / 255.0
    return da.from_zarr(path).astype(np.float32) / 255.0


def _make(method: str, m: int, reg: float, epochs: int, n_train: int = N_TRAIN):
    from dsgd_dask import KernelCCA

    # n_features=m exactly: blocks of 1024 landmarks or 256 Fourier features (one block below)
    if method == RCA_NYSTROEM:
        return KernelCCA(K, solver="rca", features="nystroem", n_features=m, reg=reg, random_state=SEED)
    if method == RCA_FOURIER:
        return KernelCCA(K, solver="rca", features="fourier", n_features=m, reg=reg, random_state=SEED)
    if method == LOBPCG:  # full-data passes until converged
        return KernelCCA(K, solver="lobpcg", n_features=m, reg=reg, random_state=SEED)
    if method == DSGD:
        steps = epochs * -(-n_train // 256)
        return KernelCCA(K, solver="dsgd", n_features=m, reg=reg, max_iter=steps, random_state=SEED)
    raise ValueError(method)


def _linear_cca(paths: dict, reg: float, which: str) -> tuple[float, float]:
    """Ridge CCA of the raw pixels (reg relative to the mean pixel variance); fit time and correlation sum."""
    from dsgd_dask.metrics import paired_correlations
    from dsgd_dask.rules.solutions import ridge_cca

    t0 = time.perf_counter()
    A = np.asarray(_scaled(paths["train_left"]), dtype=np.float64)
    B = np.asarray(_scaled(paths["train_right"]), dtype=np.float64)
    mA, mB = A.mean(axis=0), B.mean(axis=0)
    A -= mA
    B -= mB
    Caa, Cbb, Cab = A.T @ A / len(A), B.T @ B / len(B), A.T @ B / len(A)
    scale = 0.5 * (np.trace(Caa) / len(Caa) + np.trace(Cbb) / len(Cbb))
    _, Wa, Wb = ridge_cca(Caa, Cbb, Cab, reg * scale, K)
    fit = time.perf_counter() - t0
    At, Bt = _scaled(paths[f"{which}_left"]), _scaled(paths[f"{which}_right"])
    return fit, float(paired_correlations((At - mA) @ Wa, (Bt - mB) @ Wb).sum())


def run_one(method: str, m: int, reg: float, epochs: int, paths: dict, which: str, queue) -> None:
    """Fit one method on the training stores, score it on ``which`` (valid/test); report through ``queue``."""
    import dask

    extra = {}
    with dask.config.set(scheduler="threads"):
        if method == "linear CCA":
            fit, score = _linear_cca(paths, reg, which)
        else:
            A, B = _scaled(paths["train_left"]), _scaled(paths["train_right"])
            est = _make(method, m, reg, epochs, n_train=A.shape[0])
            t0 = time.perf_counter()
            est.fit(A, B)
            fit = time.perf_counter() - t0
            At, Bt = _scaled(paths[f"{which}_left"]), _scaled(paths[f"{which}_right"])
            score = est.score(At, Bt)
            if method in (LOBPCG, DSGD):
                extra = {"solver": est.solver_, "passes" if est.solver_ == "lobpcg" else "steps": int(est.n_iter_)}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB (Linux reports KiB)
    queue.put({"method": method, "features": m, "reg": reg, "epochs": epochs, "fit_seconds": fit,
               f"{which}_correlation_sum": score, "peak_rss_mib": peak, **extra})


def _exit_reason(code) -> str:
    import signal

    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}; at this size most likely out of memory"
    return f"exit code {code}"


def in_process(method, m, reg, epochs, paths, which) -> dict:
    """``run_one`` in a fresh process; a process that dies (e.g. killed for memory) gives a record saying so."""
    import queue as queues

    ctx = mp.get_context("spawn")
    channel = ctx.Queue()
    proc = ctx.Process(target=run_one, args=(method, m, reg, epochs, paths, which, channel))
    proc.start()
    while True:
        try:
            out = channel.get(timeout=5)
            break
        except queues.Empty:
            if not proc.is_alive():
                out = {"method": method, "features": m, "reg": reg, "epochs": epochs, "fit_seconds": None,
                       f"{which}_correlation_sum": None, "peak_rss_mib": None,
                       "failed": f"the process died ({_exit_reason(proc.exitcode)})"}
                break
    proc.join()
    return out


def run(out: Path, quick: bool = False, data_home=None, verbose: bool = True, only: str | None = None,
        reg: float | None = None, name: str = "mnist_halves", sample: bool = False) -> dict:
    """Choose the ridge (unless given), fit and score every method of the plan, each in a fresh process.

    ``quick``: the ``QUICK`` feature counts on the full data; ``sample=True``: the
    packaged subsets and the ``SAMPLE`` budgets (:data:`SAMPLE`), whatever ``quick``.
    """
    cfg = SAMPLE if sample else QUICK if quick else FULL
    out.mkdir(parents=True, exist_ok=True)
    paths = prepare(out, data_home, sample=sample)
    n_train = int(_scaled(paths["train_left"]).shape[0])
    valid_features = cfg.get("valid_features", 1024)

    def say(msg):
        if verbose:
            print(msg, flush=True)

    chosen = []
    for candidate in cfg.get("reg_grid", REG_GRID) if reg is None else ():
        rec = in_process(RCA_NYSTROEM, valid_features, candidate, 0, paths, "valid")
        say(f"validation: {RCA_NYSTROEM}, {valid_features} features, reg={candidate:g}: "
            f"{rec['valid_correlation_sum']:.2f}")
        chosen.append(rec)
    if reg is None:
        reg = max(chosen, key=lambda r: r["valid_correlation_sum"])["reg"]
        say(f"reg = {reg:g} (best on the validation digits)")
    plan = [("linear CCA", 784, 0)]
    plan += [(name, m, 0) for m in cfg["rca_features"] for name in (RCA_FOURIER, RCA_NYSTROEM)]
    plan += [(DSGD if epochs else LOBPCG, m, epochs) for m, epochs in cfg["dsgd"]]
    if only is not None:
        import re

        plan = [step for step in plan if re.search(only, f"{step[0]} {step[1]}")]
    records = []
    for method, m, epochs in plan:
        rec = in_process(method, m, reg, epochs, paths, "test")
        records.append(rec)
        if "failed" in rec:
            say(f"{method:>44} {m:>6} features: {rec['failed']}")
            continue
        how = f"{epochs:>2} epochs" if epochs else (f"{rec['passes']:>2} passes" if "passes" in rec else " " * 9)
        say(f"{method:>44} {m:>6} features {how}: "
            f"test correlation sum {rec['test_correlation_sum']:6.2f}, fit {rec['fit_seconds']:7.1f} s, "
            f"peak RSS {rec['peak_rss_mib']:6.0f} MiB")
    summary = {
        "machine": {"cores": mp.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d"), "quick": quick, "sample": sample, "k": K, "n_train": n_train, "reg": reg,
        "validation": chosen, "results": records,
    }
    (out / f"{name}.json").write_text(json.dumps(summary, indent=2))
    (out / f"{name}.md").write_text(table(records))
    plot(records, out / f"{name}.png", n_train=n_train)
    return summary


def table(records: list[dict]) -> str:
    lines = ["| method | features per view | epochs of steps / passes | test top-50 correlation sum | fit (s) "
             "| peak RSS (MiB) |",
             "|---|---|---|---|---|---|"]
    for r in records:
        if "failed" in r:
            lines.append(f"| {r['method']} | {r['features']} | {r['epochs'] or ''} | {r['failed']} | | |")
            continue
        how = f"{r['epochs']} epochs" if r["epochs"] else (f"{r['passes']} passes" if "passes" in r else "")
        lines.append(f"| {r['method']} | {r['features']} | {how} | {r['test_correlation_sum']:.2f} | "
                     f"{r['fit_seconds']:.1f} | {r['peak_rss_mib']:.0f} |")
    return "\n".join(lines) + "\n"


def plot(records: list[dict], path: Path, n_train: int = N_TRAIN) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.subplots()
    for method, marker in ((RCA_FOURIER, "s"), (RCA_NYSTROEM, "o"), (LOBPCG, "^"), (DSGD, "v"),
                           ("linear CCA", "x")):
        rs = [r for r in records if r["method"] == method and "failed" not in r]
        if rs:
            ax.plot([r["fit_seconds"] for r in rs], [r["test_correlation_sum"] for r in rs], marker=marker,
                    label=method)
            for r in rs:
                ax.annotate(str(r["features"]), (r["fit_seconds"], r["test_correlation_sum"]), fontsize=7,
                            textcoords="offset points", xytext=(3, 3))
    ax.set_xscale("log")
    ax.set_xlabel("fit time (s)")
    ax.set_ylabel(f"top-{K} test correlation sum")
    ax.set_title(f"MNIST left/right halves, {n_train / 1000:g}k training digits")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small feature counts and one DSGD configuration")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "mnist_halves")
    parser.add_argument("--data-home", default=None, help="directory holding mnist.npz (default: the data home)")
    parser.add_argument("--only", default=None, help="regular expression on 'method features' of the runs to do")
    parser.add_argument("--reg", type=float, default=None, help="the ridge (default: chosen on the validation digits)")
    parser.add_argument("--name", default="mnist_halves", help="base name of the output files")
    parser.add_argument("--merge", default=None,
                        help="comma-separated names of earlier outputs in --out to combine into --name (no fits)")
    args = parser.parse_args(argv)
    if args.merge:
        merge(args.out, args.merge.split(","), args.name)
        return
    run(args.out, quick=args.quick, data_home=args.data_home, only=args.only, reg=args.reg, name=args.name)


def merge(out: Path, names: list[str], name: str) -> dict:
    """One table and figure from the records of several runs with the same ridge (e.g. split by ``--only``)."""
    parts = [json.loads((out / f"{n}.json").read_text()) for n in names]
    regs = {p["reg"] for p in parts}
    if len(regs) != 1:
        raise SystemExit(f"the runs used different ridges {sorted(regs)}; merge runs of one ridge")
    summary = {**parts[0], "merged_from": names, "results": [r for p in parts for r in p["results"]]}
    (out / f"{name}.json").write_text(json.dumps(summary, indent=2))
    (out / f"{name}.md").write_text(table(summary["results"]))
    plot(summary["results"], out / f"{name}.png", n_train=summary.get("n_train", N_TRAIN))
    return summary


if __name__ == "__main__":
    main()
