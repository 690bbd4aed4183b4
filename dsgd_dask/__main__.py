"""``python -m dsgd_dask``: the ``dsgd-dask`` command line."""

from dsgd_dask.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
