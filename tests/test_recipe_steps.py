"""The classifiers' step-size study (``pipelines/recipe_steps.py --eta0``): its first column is the defaults."""

from __future__ import annotations

import importlib.util
import json

import pytest
from conftest import ROOT


def _pipeline():
    spec = importlib.util.spec_from_file_location("recipe_steps", ROOT / "pipelines" / "recipe_steps.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_eta0_study_scores_the_defaults_and_each_step_size(tmp_path):
    import dsgd_dask

    recipe = _pipeline()
    recipe.main(["--datasets", "wine", "--eta0", "0.5", "0.1", "--out", str(tmp_path)])
    records = json.loads((tmp_path / "recipe_eta0.json").read_text())
    assert [(r["dataset"], r["estimator"]) for r in records] == [("wine", c) for c in recipe.CLASSIFIERS]
    X, y, Xt, yt = recipe.load("wine")
    for r in records:
        assert [s["eta0"] for s in r["scores"]] == [0.5, 0.1]
        cls = getattr(dsgd_dask, r["estimator"])
        # eta0=0.5 is the default: the same fit, the same score; 0.1 is its own fit
        assert r["scores"][0]["test"] == cls(random_state=recipe.SEED).fit(X, y).score(Xt, yt)
        assert r["scores"][1]["test"] == cls(random_state=recipe.SEED, eta0=0.1).fit(X, y).score(Xt, yt)
        assert r["scores"][0]["steps"] == 16
    table = (tmp_path / "recipe_eta0.md").read_text().splitlines()
    assert table[0].startswith("| dataset (training rows) | classifier | steps | eta0=0.5: test | eta0=0.1: test |")
    assert len(table) == 2 + len(records)
    with pytest.raises(SystemExit):
        recipe.main(["--datasets", "nope", "--eta0", "0.5"])
