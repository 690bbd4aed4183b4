"""How well Nyström blocks represent the kernel: one block of M landmarks against J blocks of M / J.

With ``whitening="block"`` block ``j`` is whitened by its own ``K_jj^{-1/2}``, so ``J``
blocks of ``m`` landmarks make the kernel ``(1/J) sum_j k_j`` of ``J`` independent Nyström
approximations of ``m`` landmarks each, not the Nyström approximation of all ``J m``;
``whitening="joint"`` whitens all ``J m`` together (one Cholesky factor) and should not
depend on ``m``. This study measures what the blocks cost in accuracy, and that the joint
whitening does not pay it, on data the MNIST frontier does not use (USPS digits, the a9a
census rows), against exact kernel PCA on the same rows:

* for each budget ``M``, block size ``m`` (``J = M / m`` blocks) and whitening,
  ``KernelPCA`` converged to ``tol = 1e-9`` on those features (so only the
  representation is judged), two landmark seeds;
* ``sin^2`` of the largest principal angle between its projections of held-out rows and
  those of ``KernelPCA(solver="exact")`` (dense, all training rows), at k = 10 and k = 50;
* one fixed bandwidth per dataset (the median trick on the training rows), shared by all.

Run ``python benchmarks/bench_block_size.py`` (a few minutes; ``--quick`` for a smoke
run). Writes ``results/block_size.json`` and ``block_size.png``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass, replace

import numpy as np
from _common import figure_path, machine_info, write_json


@dataclass(frozen=True)
class Params:
    datasets: tuple[str, ...] = ("usps", "a9a")
    train_rows: int = 8000
    test_rows: int = 2000
    components: tuple[int, ...] = (10, 50)
    budgets: tuple[int, ...] = (1024, 2048)
    block_sizes: tuple[int, ...] = (128, 256, 512, 1024, 2048)
    seeds: tuple[int, ...] = (0, 1)


PARAMS = Params()
QUICK = replace(PARAMS, datasets=("usps",), train_rows=2000, test_rows=500, components=(10,), budgets=(512,),
                block_sizes=(128, 512), seeds=(0,))


def load(name: str, p: Params) -> tuple[np.ndarray, np.ndarray]:
    """Training and held-out rows (float64): the first rows of the official splits."""
    from dsgd_dask import datasets

    loader = {"usps": datasets.load_usps, "a9a": datasets.load_a9a}[name]
    train = np.asarray(loader("train")[0], dtype=np.float64)[:p.train_rows]
    test = np.asarray(loader("test")[0], dtype=np.float64)[:p.test_rows]
    return train, test


def main(argv=None) -> dict:
    from dsgd_dask import KernelPCA
    from dsgd_dask.features.bandwidth import median_bandwidth
    from dsgd_dask.metrics import principal_angle_sin2

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    args = parser.parse_args(argv)
    p = QUICK if args.quick else PARAMS
    name = "block_size_quick" if args.quick else "block_size"
    t0 = time.perf_counter()
    rows = []
    for data in p.datasets:
        X, Xt = load(data, p)
        sigma = median_bandwidth(X[:1000])
        kmax = max(p.components)
        exact = KernelPCA(kmax, solver="exact", bandwidth=sigma).fit(X)
        E = exact.transform(Xt)
        for k in p.components:
            for M in p.budgets:
                for m in p.block_sizes:
                    if m > M:
                        continue
                    # one block: the two whitenings are the same problem
                    for whitening in ("block", "joint") if m < M else ("block",):
                        for seed in p.seeds:
                            est = KernelPCA(k, bandwidth=sigma, n_features=M, block_size=m, whitening=whitening,
                                                tol=1e-9, max_iter=60, random_state=seed).fit(X)
                            s2 = principal_angle_sin2(est.transform(Xt), E[:, :k])
                            rows.append({"dataset": data, "k": k, "n_features": M, "block_size": m,
                                         "n_blocks": M // m, "whitening": whitening, "seed": seed, "sin2": s2,
                                         "passes": est.n_iter_})
                            print(f"{data:5s} k={k:3d} M={M:5d} m={m:5d} {whitening:5s} seed={seed}: sin^2 {s2:.2e}",
                                  flush=True)
    payload = {"params": asdict(p), "machine": machine_info(), "rows": rows, "seconds": time.perf_counter() - t0}
    write_json(name, payload)
    plot(p, rows, figure_path(name))
    return payload


def plot(p: Params, rows: list[dict], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [(d, k) for d in p.datasets for k in p.components]
    fig, axes = plt.subplots(1, len(cases), figsize=(5 * len(cases), 4), squeeze=False)
    for ax, (data, k) in zip(axes[0], cases, strict=True):
        for i, M in enumerate(p.budgets):
            for whitening, style in (("block", "-"), ("joint", "--")):
                # the single block of M belongs to both curves
                sel = [r for r in rows if r["dataset"] == data and r["k"] == k and r["n_features"] == M
                       and (r.get("whitening", "block") == whitening or r["block_size"] == M)]
                ms = sorted({r["block_size"] for r in sel})
                med = [np.median([r["sin2"] for r in sel if r["block_size"] == m]) for m in ms]
                ax.plot(ms, med, style, marker="o", color=f"C{i}", label=f"M = {M}, {whitening} whitening")
                for r in sel:
                    ax.plot(r["block_size"], r["sin2"], ".", color="gray", ms=3)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("block size m (M / m blocks)")
        ax.set_ylabel("sin² to exact kernel PCA")
        ax.set_title(f"{data}, k = {k}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
