"""The named comparisons of the runner; importing this package registers them all."""

from benchmarks.comparisons import defaults, kcca_mnist8m, kha_usps, kpca_scale, pipelines, qm7_kpca, svm_mnist8m

__all__ = ["defaults", "kcca_mnist8m", "kha_usps", "kpca_scale", "pipelines", "qm7_kpca", "svm_mnist8m"]
