"""The solver table: which solvers each estimator has, with which features, and what they record.

Every estimator owns one objective; ``solver`` only says how it is minimised. One name
means one algorithm family in every estimator:

* ``"dsgd"``: doubly stochastic gradient steps (the papers' algorithm; the step engine);
* the full-data pass solvers, named for their algorithm (``"subspace"``, ``"lobpcg"``,
  ``"cg"``): iterations over all rows on the pass driver;
* ``"rca"``: one pass of the feature moments, then a dense solve;
* ``"exact"``: the ``n x n`` kernel matrix, for small ``n`` only;
* ``"auto"``: one of the above, chosen by the estimator from the input and the budget and
  recorded in ``solver_``.

A combination missing from :data:`SOLVERS` is refused with a ``ValueError`` before any
work is done.
"""

from __future__ import annotations

# the records are made by the pass driver and the step runner alike: re-exported here
from dsgd_dask.engine.driver import Clock as Clock
from dsgd_dask.engine.driver import record as record

#: For each estimator, its solvers and the ``features`` each solver accepts. ``"exact"``
#: takes every training row as a landmark: it accepts the default ``features="nystroem"``
#: and ignores the budget.
SOLVERS: dict[str, dict[str, tuple[str, ...]]] = {
    "KernelPCA": {"dsgd": ("nystroem", "fourier"), "subspace": ("nystroem", "fourier"),
                  "rca": ("nystroem", "fourier"), "exact": ("nystroem",)},
    "KernelSVD": {"dsgd": ("nystroem", "fourier", "fourier_pairs"), "exact": ("nystroem",)},
    "KernelCCA": {"dsgd": ("nystroem", "fourier", "fourier_pairs"), "lobpcg": ("nystroem",),
                  "rca": ("nystroem", "fourier", "fourier_pairs"), "exact": ("nystroem",)},
    "KernelSIR": {"dsgd": ("nystroem", "fourier"), "rca": ("nystroem", "fourier"), "exact": ("nystroem",)},
    "KernelRidge": {"dsgd": ("nystroem", "fourier", "fourier_pairs"), "cg": ("nystroem", "fourier", "fourier_pairs"),
                    "exact": ("nystroem",)},
    "KernelSVC": {"dsgd": ("nystroem", "fourier", "fourier_pairs")},
    "KernelLogisticRegression": {"dsgd": ("nystroem", "fourier", "fourier_pairs")},
}

#: What one iteration is (what ``max_iter`` bounds and ``n_iter_`` counts) for each solver.
ITERATION: dict[str, str] = {
    "dsgd": "one step: one mini-batch of rows and one block of features",
    "subspace": "one full-data pass of block subspace iteration (sampled stages before the passes not counted)",
    "lobpcg": "one full-data pass of the preconditioned block eigensolver",
    "cg": ("one full-data pass: the first (which gathers the right-hand side) counts, and each later one is a "
           "step of preconditioned conjugate gradients"),
    "rca": "the single full-data pass of the feature moments",
    "exact": "the single dense solve on the n x n kernel matrix",
}

#: The ``measure`` of a ``convergence_`` record (what ``tol`` is compared with) for each solver.
MEASURE: dict[str, str] = {
    "dsgd": "none (NaN): the steps run max_iter steps and have no stopping test",
    "subspace": "estimated sin^2 of the largest principal angle between the top-k subspace and the converged one",
    "lobpcg": "largest change of a canonical correlation over the pass",
    "cg": "largest relative residual of the normal equations over the outputs",
    "rca": "none (NaN): one pass, no iterations",
    "exact": "none (NaN): one dense solve, no iterations",
}

#: Solver values of model stores written before the solver table, and the solver each now is
#: (each old value belonged to one estimator: ``"oja"`` kernel PCA's steps, ``"sgd"`` the
#: machines', ``"steps"``/``"passes"`` kernel CCA's).
RENAMED: dict[str, str] = {"oja": "dsgd", "sgd": "dsgd", "steps": "dsgd", "passes": "lobpcg"}


def renamed(params: dict) -> dict:
    """``params`` of a saved model with an old ``solver`` value mapped to its name in :data:`SOLVERS`."""
    if params.get("solver") in RENAMED:
        params["solver"] = RENAMED[params["solver"]]
    return params


#: Keys every ``convergence_`` record has, in every estimator and solver; solvers add their own.
RECORD_KEYS: tuple[str, ...] = ("iteration", "rows", "seconds", "measure")


def check_solver(estimator, features: str) -> str:
    """``estimator.solver`` checked against the table: the name, ``"auto"`` left for the estimator to resolve."""
    # a user's subclass takes the table of the estimator it extends
    name = next(c.__name__ for c in type(estimator).__mro__ if c.__name__ in SOLVERS)
    table = SOLVERS[name]
    solver = estimator.solver
    if solver != "auto" and solver not in table:
        raise ValueError(f"solver must be one of {['auto', *table]} for {name}, got {solver!r}")
    if solver != "auto" and features not in table[solver]:
        raise ValueError(f"{name}(solver={solver!r}) takes features in {list(table[solver])}, got "
                         f"features={features!r}")
    return solver


def check_partial_fit(estimator) -> None:
    """Refuse :meth:`partial_fit` with a solver that does not stream, or with a ``checkpoint``.

    Only ``"dsgd"`` (or ``"auto"``) steps stream. A checkpoint is the state of one
    :meth:`fit`, resumed by running that fit again; the state of a stream of
    ``partial_fit`` calls is the estimator itself.
    """
    if getattr(estimator, "checkpoint", None) is not None:
        raise ValueError(f"checkpoint={estimator.checkpoint!r} applies to fit, and partial_fit writes no "
                         "checkpoint: the state of a stream is the estimator itself; save it between calls with "
                         "save(path) and resume with dsgd_dask.load(path), and set checkpoint=None to stream")
    solver = estimator.solver
    if solver not in ("auto", "dsgd"):
        raise ValueError(f"partial_fit takes doubly stochastic steps over the rows given; solver={solver!r} "
                         "needs all the data at once: call fit, or use solver='dsgd' (or 'auto') to stream")
