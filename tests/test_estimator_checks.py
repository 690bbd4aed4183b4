"""scikit-learn's estimator checks on numpy input."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from dsgd_dask import DSGDKernelPCA


def _estimators():
    yield DSGDKernelPCA()
    # Small budgets keep each of the ~50 checks fast; the checks exercise the API
    # contract, not the numerical quality (tested against exact kernel PCA elsewhere).
    yield DSGDKernelPCA(n_components=2, n_features=256, block_size=64, max_iter=20, random_state=0)
    yield DSGDKernelPCA(n_components=2, n_features=256, block_size=64, max_iter=20, ordered=True,
                        kernel="laplacian", random_state=0)


@parametrize_with_checks(list(_estimators()))
def test_sklearn_compatible(estimator, check):
    check(estimator)
