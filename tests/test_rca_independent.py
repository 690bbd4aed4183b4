"""``KernelCCA(solver="rca")`` with Fourier features against the same method written independently in numpy.

The independent version shares only the random draws (the seeded frequencies and phases of
each view's blocks): its own features ``sqrt(2 / M) cos(x W + b)``, centred on the training
rows, the ridge ``reg`` added to each view's covariance, CCA by whitening and an SVD, and
the test correlations by ``numpy.corrcoef``.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

from dsgd_dask import KernelCCA
from dsgd_dask._threads import one_blas_thread
from dsgd_dask.datasets import load_usps
from dsgd_dask.features.blocks import generate_block
from dsgd_dask.streams.batches import view_seed

N_TRAIN, N_TEST, M, BLOCK, K = 1500, 500, 256, 64, 5


@pytest.fixture(scope="module")
def usps_halves():
    X = load_usps("train", sample=True)[0][: N_TRAIN + N_TEST].astype(np.float64).reshape(-1, 16, 16)
    left, right = X[:, :, :8].reshape(len(X), -1), X[:, :, 8:].reshape(len(X), -1)
    return left[:N_TRAIN], right[:N_TRAIN], left[N_TRAIN:], right[N_TRAIN:]


def _features(X, W, b):
    return np.sqrt(2.0 / W.shape[1]) * np.cos(X @ W + b)


def _independent_cca(Xtr, Ytr, Xte, Yte, draws, reg, k):
    """Test correlation sum of regularised linear CCA on the random Fourier features (float64)."""
    (Wx, bx), (Wy, by) = draws
    zx, zy = _features(Xtr, Wx, bx), _features(Ytr, Wy, by)
    mx, my = zx.mean(axis=0), zy.mean(axis=0)
    zx, zy = zx - mx, zy - my
    n = len(zx)

    def whitening(z):
        w, V = scipy.linalg.eigh(z.T @ z / n + reg * np.eye(z.shape[1]))
        return V / np.sqrt(w)

    Wxh, Wyh = whitening(zx), whitening(zy)
    U, _, Vt = np.linalg.svd(Wxh.T @ (zx.T @ zy / n) @ Wyh)
    A, B = Wxh @ U[:, :k], Wyh @ Vt[:k].T
    u, v = (_features(Xte, Wx, bx) - mx) @ A, (_features(Yte, Wy, by) - my) @ B
    return sum(np.corrcoef(u[:, i], v[:, i])[0, 1] for i in range(k))


def _draws(model, d, view):
    """The frequencies and phases of the fit's blocks of one view, regenerated from their seeds."""
    spec = model.kernel_[view]
    blocks = [generate_block(spec, d, BLOCK, view_seed(model.seed_, view), j, "float64") for j in range(M // BLOCK)]
    return np.hstack([W for W, _ in blocks]), np.concatenate([b for _, b in blocks])


@pytest.mark.parametrize("compute_dtype", ["float32", "float64"])
@pytest.mark.parametrize("reg", [1e-7, 1e-4, 1e-2])
def test_rca_fourier_matches_independent_cca(usps_halves, reg, compute_dtype):
    Xtr, Ytr, Xte, Yte = usps_halves
    model = KernelCCA(
        n_components=K,
        solver="rca",
        features="fourier",
        n_features=M,
        block_size=BLOCK,
        reg=reg,
        compute_dtype=compute_dtype,
        random_state=3,
    ).fit(Xtr, Ytr)
    draws = (_draws(model, Xtr.shape[1], 0), _draws(model, Ytr.shape[1], 1))
    ours = model.score(Xte, Yte)
    with one_blas_thread():
        theirs = _independent_cca(Xtr, Ytr, Xte, Yte, draws, reg, K)
    # the task's tolerance on a sum of K correlations; float32 features differ from the
    # float64 ones by ~1e-7 relative, which the smallest ridge amplifies least of all on
    # the top pairs that carry the sum
    assert abs(ours - theirs) < 0.1, (ours, theirs)
    assert theirs > 1.0  # a real signal: the halves of a digit are strongly related
