"""Regenerate the dataset subsets shipped with dsgd_dask from the full files.

    python dsgd_dask/datasets/data/make_samples.py [SOURCE_DIR] [--check]

``SOURCE_DIR`` holds the full files (``mnist.npz``, ``usps.npz``, ``sarcos_test.npz``,
``a9a.npz``, ``qm7.npz``); by default they are looked up as the loaders do (the data
home, ``$DSGD_DATA_DIR``, ``~/dsgd_dask_data``, ``../shared/datasets`` beside a source
checkout). Each full file is verified against the content digest in the registry
(``dsgd_dask/datasets/_registry.py``); each sample keeps the same arrays, cut to their
first rows in the original order, and is written with ``np.savez_compressed`` next to
this script. The script prints every sample's size, SHA-256 and content digest, and
whether the digest is the one registered. ``--check`` writes nothing: it only checks that
the first rows of the full files have the registered sample digests and that the shipped
samples hold exactly those rows.

The content digest is reproducible; the SHA-256 of a regenerated file is not (the zip
members carry the time of writing), so a regenerated sample must be recorded in
``_registry.py`` and ``README.md`` only if its digest changed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from dsgd_dask.datasets._files import content_digest, file_checksum, read_verified, write_npz_atomic
from dsgd_dask.datasets._loaders import find_file
from dsgd_dask.datasets._registry import REGISTRY

HERE = Path(__file__).resolve().parent


def sample_arrays(name: str, source_dir=None) -> dict[str, np.ndarray]:
    """The first rows of each array of the verified full file of ``name``."""
    info = REGISTRY[name]
    path = Path(source_dir) / info.filename if source_dir is not None else find_file(name)
    full = read_verified(path, info.digest)
    return {k: np.ascontiguousarray(full[k][:n]) for k, n in info.sample_rows.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source_dir", nargs="?", type=Path, help="folder of the full .npz files")
    parser.add_argument("--check", action="store_true", help="compare only, write nothing")
    args = parser.parse_args(argv)
    failures = 0
    for name, info in REGISTRY.items():
        arrays = sample_arrays(name, args.source_dir)
        digest = content_digest(arrays)
        target = HERE / info.sample_filename
        if args.check:
            shipped = content_digest(np.load(target, allow_pickle=False)) if target.is_file() else None
            ok = digest == info.sample_digest == shipped
            failures += not ok
            print(f"{info.sample_filename:20s} rows {info.sample_rows}: {'ok' if ok else 'MISMATCH'}")
            continue
        write_npz_atomic(target, arrays)
        ok = digest == info.sample_digest
        failures += not ok
        print(f"{info.sample_filename:20s} {target.stat().st_size:>9,d} bytes  sha256 {file_checksum(target)}")
        print(f"{'':20s} content digest {digest} "
              f"({'as registered' if ok else 'NOT the registered ' + (info.sample_digest or '(none)')})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
