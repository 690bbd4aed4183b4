"""Doubly stochastic kernel machines (Dai et al. 2014) as rules: squared, hinge, logistic and softmax losses.

The machine is ``f(x) = sum_j z_j(x) A_j`` with ``c`` outputs, minimising
``E[l(f(x), y)] + nu/2 ||f||^2``. A step on a batch with ``g = l'(f(X), y)`` (``B x c``)
shrinks every block, ``A_j <- (1 - eta nu) A_j``, and gives the step's block
``-eta z_t(X)^T g / B``: the functional gradient through one random block. As for the
component rules, the regulariser shrinks every block while each step feeds one block, so
``nu`` is in units of the kernel whatever the number of blocks: over a round of the ``J``
blocks, ``nu J A_t = -E[z_t^T g]``, the minimiser of ``E[l] + nu/2 J |A|^2``, the squared
RKHS norm of ``f`` under the blocks' average kernel ``z z^T / J``. For Fourier blocks that
average is the kernel's random-feature approximation; Nyström blocks whitened together
(:class:`~dsgd_dask.engine.ridge.JointNystroemBlocks`) make it the Nyström kernel of all
the landmarks, so the steps minimise the objective of the passes.

Losses (``targets`` as the rule's ``extra`` gives them):

* ``squared``: ``l = (f - y)^2 / 2``, ``g = f - y`` (``y`` real, ``c`` columns);
* ``hinge``: one-vs-rest, ``Y`` in ``{-1, +1}^c``, ``l = sum_c max(0, 1 - Y_c f_c)``,
  ``g = -Y [Y f < 1]``; binary problems have one column;
* ``logistic``: binary, ``l = log(1 + exp(-Y f))``, ``g = -Y sigma(-Y f)``;
* ``softmax``: multinomial, ``l = -log softmax(f)_y``, ``g = softmax(f) - onehot(y)``.

With ``preconditioner="block"`` (Dai et al.'s own code), the step's block gets the
gradient through the block multiplied by the inverse of the block's second moment on the
batch, ``-eta (C + epsilon I)^{-1} z_t^T g / B`` with ``C = z_t^T z_t / B`` and
``epsilon = jitter tr(C) / m``: at ``eta = 1`` on the squared loss, the ridge fit of the
batch's residual by the new block (a Newton step in the block's coefficients). ``z_t^T
z_t`` is then one of the sums, so a batch split over parts reduces to the same update; it
is taken in the features' precision on fixed slices of rows in parallel threads, added in
float64 in slice order (:func:`block_moment`). The jitter is relative to the mean
eigenvalue ``tr(C) / m``: the authors' ``1e-7`` on blocks of 8,192 features of unit
total variance is ``8.2e-4`` of it; :data:`BLOCK_JITTER` is of that order. With
``B`` rows barely above ``m`` the jitter is what keeps the block from interpolating
the batch.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.special import expit, softmax

from dsgd_dask._threads import imap_ordered
from dsgd_dask.rules.base import StepRule, Sums, Update, column_products, set_sums

LOSSES = ("squared", "hinge", "logistic", "softmax")
#: Step preconditioners: none (the functional gradient) or ``"block"`` (the step's block's own second moment).
PRECONDITIONERS = (None, "block")
#: Default jitter of the block preconditioner, relative to the mean eigenvalue ``tr(C) / m``
#: of the block's second moment ``C`` on the batch: ``C + jitter tr(C) / m I`` is factorised.
BLOCK_JITTER = 1e-3
#: Rows of a slice of :func:`block_moment`: the slices' products run in parallel threads and
#: are added in slice order, so the sum is the same on any number of threads.
MOMENT_SLICE_ROWS = 4096


def loss_gradient(loss: str, f: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``l'(f, y)`` row by row, ``(rows, c)``; ``targets``: real (squared), signs (hinge, logistic), codes (softmax)."""
    if loss == "squared":
        return f - targets
    if loss == "hinge":
        return np.where(targets * f < 1.0, -targets, 0.0)
    if loss == "logistic":
        return -targets * expit(-targets * f)
    if loss == "softmax":
        g = softmax(f, axis=1)
        g[np.arange(len(targets)), targets] -= 1.0
        return g
    raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")


def loss_value(loss: str, f: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``l(f, y)`` per row."""
    if loss == "squared":
        return 0.5 * ((f - targets) ** 2).sum(axis=1)
    if loss == "hinge":
        return np.maximum(0.0, 1.0 - targets * f).sum(axis=1)
    if loss == "logistic":
        return np.logaddexp(0.0, -targets * f).sum(axis=1)
    if loss == "softmax":
        shifted = f - f.max(axis=1, keepdims=True)
        return np.log(np.exp(shifted).sum(axis=1)) - shifted[np.arange(len(targets)), targets]
    raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")


class MachineRule(StepRule):
    """A kernel machine's step for ``loss`` with RKHS regulariser ``alpha`` (``nu``).

    ``encode`` turns the target columns of a batch into the loss's targets (real values,
    ``{-1, +1}`` signs or class codes); it is small and picklable. ``preconditioner``:
    ``None`` (the functional gradient) or ``"block"`` (see the module docstring).
    """

    set_views = (0,)

    def __init__(self, columns, guard_limit: float, loss: str, alpha: float, encode, preconditioner=None,
                 jitter: float = BLOCK_JITTER):
        super().__init__(columns, center=False, guard_limit=guard_limit)
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
        if preconditioner not in PRECONDITIONERS:
            raise ValueError(f"preconditioner must be one of {PRECONDITIONERS}, got {preconditioner!r}")
        self.loss = loss
        self.alpha = float(alpha)
        self.encode = encode
        self.preconditioner = preconditioner
        self.jitter = float(jitter)

    def extra(self, slab: np.ndarray) -> dict:
        return {"targets": self.encode(slab[:, self.columns[1]])}

    def sums(self, h: tuple, z: tuple, extra: dict, for_parts: bool) -> Sums:
        g = loss_gradient(self.loss, h[0], extra["targets"])
        c = h[0].shape[1]
        z_sum, zhg = column_products(z[0], np.hstack([h[0], g]))
        out = Sums({"n": np.array(float(len(g))), **set_sums(0, h[0], z[0], for_parts, (z_sum, zhg[:, :c])),
                    "zg": zhg[:, c:], "loss": np.array(float(loss_value(self.loss, h[0], extra["targets"]).sum()))})
        if self.preconditioner == "block" and "zz0" not in out:
            out["zz0"] = block_moment(z[0])
        return out

    def updates(self, total: Sums, eta: float, block: int = 0) -> tuple[Update, ...]:
        n = max(float(total["n"]), 1.0)
        c = total["zg"].shape[1]
        shrink = (1.0 - eta * self.alpha) * np.eye(c)
        if self.preconditioner == "block":
            return (Update(shrink, -eta * block_solve(total["zz0"] / n, total["zg"] / n, self.jitter, overwrite=True)),)
        return (Update(shrink, -eta * total["zg"] / n),)


def block_moment(z: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """``z^T z`` (or ``z^T w``) in float64: products in the inputs' precision, :data:`MOMENT_SLICE_ROWS` rows at a time.

    The slices run in parallel threads (one BLAS thread each; a symmetric rank-k update
    for ``z^T z``) and are added in slice order: the same sum on any number of threads.
    """
    if w is not None and len(w) != len(z):
        raise ValueError(f"z has {len(z)} rows but w has {len(w)}")

    def product(i: int) -> np.ndarray:
        a = z[i:i + MOMENT_SLICE_ROWS]
        return a.T @ (a if w is None else w[i:i + MOMENT_SLICE_ROWS])

    out = np.zeros((z.shape[1], z.shape[1] if w is None else w.shape[1]))
    for part in imap_ordered(product, list(range(0, len(z), MOMENT_SLICE_ROWS))):
        out += part
    return out


def block_factor(C: np.ndarray, jitter: float = BLOCK_JITTER, overwrite: bool = False):
    """The Cholesky factor of ``C + epsilon I``, ``epsilon = jitter tr(C) / m`` (``C``: m x m, PSD).

    ``overwrite``: add the jitter to ``C`` itself and factor it in place.
    """
    m = C.shape[0]
    A = C if overwrite else C.copy()
    A.flat[::m + 1] += jitter * max(float(np.trace(A)), np.finfo(np.float64).tiny) / m
    return cho_factor(A, lower=True, overwrite_a=True, check_finite=False)


def block_solve(C: np.ndarray, G: np.ndarray, jitter: float = BLOCK_JITTER, overwrite: bool = False) -> np.ndarray:
    """``(C + epsilon I)^{-1} G`` by Cholesky (:func:`block_factor`); ``overwrite``: factor ``C`` in place."""
    return cho_solve(block_factor(C, jitter, overwrite=overwrite), G, check_finite=False)
