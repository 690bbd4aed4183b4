"""Sorted and randomly sorted Coulomb matrices (QM7), and their lazy stream."""

import dask
import dask.array as da
import numpy as np
import pytest

from dsgd_dask.datasets import load_qm7
from dsgd_dask.datasets.coulomb import coulomb_stream, sorted_coulomb


@pytest.fixture(scope="module")
def qm7():
    X, y = load_qm7(sample=True)
    return X[:200], y[:200]


def test_sorted_coulomb_is_invariant_to_the_atom_order(qm7):
    X, _ = qm7
    C = X.reshape(-1, 23, 23)
    perm = np.random.default_rng(0).permutation(23)
    shuffled = C[:, perm][:, :, perm]
    F = sorted_coulomb(C)
    assert F.shape == (200, 276)
    np.testing.assert_array_equal(sorted_coulomb(shuffled), F)
    # the first entry is the largest row's diagonal; the norms of the rows decrease
    C0 = C[0].astype(np.float64)
    assert F[0, 0] == np.float32(C0[np.argmax(np.linalg.norm(C0, axis=1)), np.argmax(np.linalg.norm(C0, axis=1))])


def test_random_sortings_are_the_same_molecule(qm7):
    X, _ = qm7
    a = sorted_coulomb(X, noise=1.0, random_state=1)
    b = sorted_coulomb(X, noise=1.0, random_state=1)
    np.testing.assert_array_equal(a, b)
    c = sorted_coulomb(X, noise=1.0, random_state=2)
    assert not np.array_equal(a, c)
    # a permutation of the atoms: the same multiset of diagonal entries as the sorted matrix
    diag = np.cumsum(np.arange(23, 0, -1)) - np.arange(23, 0, -1)  # positions of the diagonal in the triangle
    np.testing.assert_array_equal(np.sort(a[:, diag], axis=1), np.sort(sorted_coulomb(X)[:, diag], axis=1))
    # padding atoms (zero rows) stay last
    n_atoms = (X.reshape(-1, 23, 23)[:, np.arange(23), np.arange(23)] > 0).sum(axis=1)
    for i in range(20):
        assert (a[i, diag[n_atoms[i]:]] == 0).all()
        assert (a[i, diag[:n_atoms[i]]] > 0).all()


def test_stream_is_lazy_seeded_and_scheduler_independent(qm7):
    X, y = qm7
    F, t = coulomb_stream(X, y, n_rows=1000, chunk_rows=200, random_state=3)
    assert isinstance(F, da.Array)
    assert F.shape == (1000, 276)
    assert F.chunks[0] == (200,) * 5
    graph = dict(F.__dask_graph__())
    # the molecules enter the graph once, not once per chunk
    assert sum(isinstance(v, tuple) and any(isinstance(x, np.ndarray) and x.size == X.size for x in v)
               for v in graph.values()) <= 1
    a, ta = dask.compute(F, t, scheduler="threads")
    b, tb = dask.compute(F, t, scheduler="sync")
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ta, tb)
    # each chunk holds every molecule once, with its own target
    first = a[:200]
    ref = sorted_coulomb(X)
    order = np.argsort(ta[:200])
    assert sorted(ta[:200].tolist()) == sorted(y.astype(np.float32).tolist())
    np.testing.assert_allclose(np.linalg.norm(first[order], axis=1), np.linalg.norm(ref[np.argsort(y)], axis=1),
                               rtol=1e-5)


def test_bad_input():
    with pytest.raises(ValueError, match="square"):
        sorted_coulomb(np.zeros((3, 10)))
    with pytest.raises(ValueError, match="NaN"):
        sorted_coulomb(np.full((2, 4), np.nan))
    with pytest.raises(TypeError, match="numeric"):
        sorted_coulomb(np.array([[["a"]]]))
    with pytest.raises(ValueError, match="noise"):
        sorted_coulomb(np.zeros((2, 4)), noise=-1.0)
    with pytest.raises(ValueError, match="3 values for 2 molecules"):
        coulomb_stream(np.zeros((2, 4)), np.zeros(3), n_rows=4)
    with pytest.raises(ValueError, match="n_rows"):
        coulomb_stream(np.zeros((2, 4)), n_rows=0)
    with pytest.raises(ValueError, match="no molecules"):
        coulomb_stream(np.zeros((0, 4)), n_rows=4)
