"""What is known about each dataset: files, checksums, sources, shipped samples, citations.

The content digests (:func:`dsgd_dask.datasets.content_digest`) were computed from the
reference files described in ``dsgd_dask/datasets/data/README.md``; every file read or
fetched is checked against them. ``file_sha256`` is the SHA-256 of the bytes of those
reference files (for information: a re-compressed file has other bytes but the same
content digest).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Source:
    """One file downloaded by :func:`dsgd_dask.datasets.fetch`.

    ``checksum`` is ``"md5:<hex>"`` or ``"sha256:<hex>"`` of the downloaded bytes, or
    None where no published checksum is known (the converted result is then still
    checked by its content digest).
    """

    filename: str
    checksum: str | None


@dataclass(frozen=True)
class DatasetInfo:
    """A dataset: its full file in the data home, its shipped sample, its sources."""

    name: str
    title: str
    filename: str
    digest: str
    file_sha256: str
    rows: dict[str, int]
    sample_filename: str
    sample_digest: str
    sample_file_sha256: str
    sample_rows: dict[str, int]
    subsets: dict[str, tuple[str, str]]
    base_url: str
    sources: tuple[Source, ...]
    citation: str
    license: str
    extra: tuple[str, ...] = field(default=())

    @property
    def arrays(self) -> tuple[str, ...]:
        """Names of the arrays of the full file (and of the sample)."""
        return tuple(self.rows)


MNIST = DatasetInfo(
    name="mnist",
    title="MNIST handwritten digits (LeCun, Cortes, Burges)",
    filename="mnist.npz",
    digest="5e46235c90a23c768b02bf83e35109cc6690d8445ada9417ab71c3628c34b2bb",
    file_sha256="d2fc8bab397b964798b4c839bd1e705e10a4bb65f4d56a88002229d145796751",
    rows={"X_train": 60000, "y_train": 60000, "X_test": 10000, "y_test": 10000},
    sample_filename="mnist_sample.npz",
    sample_digest="7b78e46e8c42dfbec11f1cdfd66cc4506f2573c97f423fc80e7a85af230264f0",
    sample_file_sha256="70457f31b132344bc25aec46b8e3dd96349923e6e858bc8df83b4faad526c33d",
    sample_rows={"X_train": 5000, "y_train": 5000, "X_test": 2000, "y_test": 2000},
    subsets={"train": ("X_train", "y_train"), "test": ("X_test", "y_test")},
    base_url="https://ossci-datasets.s3.amazonaws.com/mnist/",
    sources=(
        Source("train-images-idx3-ubyte.gz", "md5:f68b3c2dcbeaaa9fbdd348bbdeb94873"),
        Source("train-labels-idx1-ubyte.gz", "md5:d53e105ee54ea40749a09fcbcd1e9432"),
        Source("t10k-images-idx3-ubyte.gz", "md5:9fb629c4189551a2d022fa330f9573f3"),
        Source("t10k-labels-idx1-ubyte.gz", "md5:ec29112dd5afa0611ce80d1b7f02629c"),
    ),
    citation=("Y. LeCun, L. Bottou, Y. Bengio, P. Haffner. Gradient-based learning applied to document "
              "recognition. Proc. IEEE 86(11), 1998."),
    license="MNIST by Y. LeCun and C. Cortes (from NIST SD-1/SD-3), commonly given as CC BY-SA 3.0",
)

USPS = DatasetInfo(
    name="usps",
    title="USPS handwritten digits, 16x16 (as distributed with The Elements of Statistical Learning)",
    filename="usps.npz",
    digest="75a2d34a41d807adc3d249d8c7c1123e89421aae4a2f8db6c77e2f9594c9d236",
    file_sha256="fe4d7e667fd96a351d3ceff5c22de1f647ca94d245c313e8599a16a341e165b6",
    rows={"X_train": 7291, "y_train": 7291, "X_test": 2007, "y_test": 2007},
    sample_filename="usps_sample.npz",
    sample_digest="0d631bf57e4dc406f7f3ee0e6db1d6ea431db7005034bb0dad9ccc43b4d10659",
    sample_file_sha256="8cd4e7045ff725a454d163e59290799d259c4655ec81e2680709d6910152d515",
    sample_rows={"X_train": 2000, "y_train": 2000, "X_test": 500, "y_test": 500},
    subsets={"train": ("X_train", "y_train"), "test": ("X_test", "y_test")},
    base_url="https://hastie.su.domains/ElemStatLearn/datasets/",
    sources=(Source("zip.train.gz", None), Source("zip.test.gz", None)),
    citation=("J. J. Hull. A database for handwritten text recognition research. IEEE TPAMI 16(5):550-554, 1994. "
              "(Data as distributed with Hastie, Tibshirani & Friedman, The Elements of Statistical Learning.)"),
    license="no explicit licence",
)

SARCOS = DatasetInfo(
    name="sarcos",
    title="SARCOS robot-arm inverse dynamics, official test file (4449 rows)",
    filename="sarcos_test.npz",
    digest="c4d084cb5f88d38d8b901405af31db67bd8f6c32a1d2a79faf6440e1286b0c62",
    file_sha256="172190f407cd70d9acb3c153a4551a54062d7c27eea58a97655982e94945464e",
    rows={"X": 4449, "y": 4449},
    sample_filename="sarcos_sample.npz",
    sample_digest="c30c762fab86b603149b8ee09a3f173064e4627b1b2ef56560af32529b1de937",
    sample_file_sha256="95bc6923581fdd3d6e4c5c3e2f92e6b1d40d77cfe56dcc847220d878d23c0bc2",
    sample_rows={"X": 2000, "y": 2000},
    subsets={"all": ("X", "y")},
    base_url="http://gaussianprocess.org/gpml/data/",
    sources=(Source("sarcos_inv_test.mat", "md5:16457799b816f22238e6dc7301c751f6"),),
    citation=("S. Vijayakumar, S. Schaal. Locally Weighted Projection Regression. ICML 2000; "
              "C. E. Rasmussen, C. K. I. Williams. Gaussian Processes for Machine Learning. MIT Press, 2006."),
    license="none stated",
)

A9A = DatasetInfo(
    name="a9a",
    title="LIBSVM a9a / a9a.t (UCI Adult, binarised: 123 binary features)",
    filename="a9a.npz",
    digest="215ba33ce856ca7d0982108eee8bcfe6f01ba88abdd7351f47b7b566f9862571",
    file_sha256="1dda86a965005de6f5cdf56a50351505710ebdaa8b41db19caff1131e753e6a9",
    rows={"X_train": 32561, "y_train": 32561, "X_test": 16281, "y_test": 16281},
    sample_filename="a9a_sample.npz",
    sample_digest="0b3088030a3553245eb3de0d88a75da7dda01feff1e0c3be8936407a9bf75fd6",
    sample_file_sha256="e6308734221488943199ae4e885f7de9035ee2068eb8ecc53b6fab2d8c71f73f",
    sample_rows={"X_train": 3000, "y_train": 3000, "X_test": 1000, "y_test": 1000},
    subsets={"train": ("X_train", "y_train"), "test": ("X_test", "y_test")},
    base_url="https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/",
    sources=(
        Source("a9a", "md5:fb3596510d780aaf76a06dc721d49662"),
        Source("a9a.t", "md5:f0bb16cf1ee3e80ff560e9d132ee647e"),
    ),
    citation=("J. C. Platt. Fast training of support vector machines using sequential minimal optimization. "
              "1998 (preprocessing); C.-C. Chang, C.-J. Lin, LIBSVM data sets; R. Kohavi. Scaling up the "
              "accuracy of naive-Bayes classifiers: a decision-tree hybrid. KDD 1996 (UCI Adult)."),
    license="UCI Adult: CC BY 4.0",
)

QM7 = DatasetInfo(
    name="qm7",
    title="QM7 small organic molecules: Coulomb matrices and atomization energies (kcal/mol)",
    filename="qm7.npz",
    digest="aa74186c1d83bde019238e82bb18270a088ee2e54582087ba720f9d06b3d18e4",
    file_sha256="98b25c6d27a1210dd06733b5a574c1e02f3cf713634e37956b00d3e0d9eb4e75",
    rows={"X": 7165, "y": 7165, "Z": 7165, "R": 7165},
    sample_filename="qm7_sample.npz",
    sample_digest="8f68cfab3d16f7df6777e58d0aaf16f5fec62267a91cd8ace22fb03f6f781821",
    sample_file_sha256="41fc8ffb11c6f4f6c1aee144660573c26fdbdc6507f78cb7af2224ad9f64f2da",
    sample_rows={"X": 1000, "y": 1000, "Z": 1000, "R": 1000},
    subsets={"all": ("X", "y")},
    base_url="https://raw.githubusercontent.com/SFdS-atelier-3/block-1/e090276a17f5ad9bcdec2f36011a6e001b8a11aa/",
    sources=(Source("qm7.npz", "md5:ebbe60e19aec41fbdc106933eae0fee6"),),
    citation=("M. Rupp, A. Tkatchenko, K.-R. Müller, O. A. von Lilienfeld. Fast and accurate modeling of "
              "molecular atomization energies with machine learning. PRL 108, 058301, 2012; L. C. Blum, "
              "J.-L. Reymond. 970 million druglike small molecules for virtual screening in the chemical "
              "universe database GDB-13. JACS 131, 8732, 2009."),
    license="not stated in the source",
    extra=("Z", "R"),
)

REGISTRY: dict[str, DatasetInfo] = {d.name: d for d in (MNIST, USPS, SARCOS, A9A, QM7)}
