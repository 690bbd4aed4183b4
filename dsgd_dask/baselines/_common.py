"""Helpers shared by the baselines: fingerprints, the baselines' own seed tag."""

from __future__ import annotations

import hashlib

import numpy as np

#: Spawn-key tag of the baselines' own random stream (feature blocks use ``(j,)``;
#: data streams, samples and landmarks the tags in :mod:`dsgd_dask.streams.batches`).
KHA_TAG = 0x4B48


def fingerprint(*parts) -> str:
    """A hex digest of the parts: arrays by their bytes, anything else by its ``repr``.

    Identifies a fitted model in task names; pass arrays as parts of their own (the
    ``repr`` of a large array is abbreviated).
    """
    h = hashlib.sha1()
    for part in parts:
        if isinstance(part, np.ndarray):
            h.update(repr((part.dtype.str, part.shape)).encode())
            h.update(np.ascontiguousarray(part).tobytes())
        else:
            h.update(repr(part).encode())
    return h.hexdigest()
