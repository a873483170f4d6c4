"""§6.3's two scripts at small sizes on a made-up treebank: tools/parsing_runs.sh trains a system
and scores it on the test files under the four searches and on the validation files epoch by epoch;
tools/parsing_recipes.sh retrains with one setting changed, or continues a three-seed run for more
epochs, and scores the validation files only (a recipe is never chosen on the test files).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SMALL = "--max-tokens 500 --warmup 10"  # each script's own sizes: a few seconds on 48 trees
SEARCHES = ("greedy", "beam21", "tree-greedy", "tree-beam21")


def script(name: str, treebank: Path, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TREEBANK_DIR": str(treebank), "SCORE_ARGS": "--limit 3", **env}
    done = subprocess.run(
        ["bash", str(ROOT / "tools" / name)], capture_output=True, text=True, env=env, timeout=900
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    "The LSTM's seed 1 for one epoch, then two recipes for two: (the results, the runs)."
    from synthetic import write_treebank

    treebank = write_treebank(tmp_path_factory.mktemp("treebank") / "tb")
    work = tmp_path_factory.mktemp("parsing")
    runs, results = work / "runs", work / "results"
    folders = dict(RUNS_DIR=str(runs / "parsing"), RESULTS_DIR=str(results))
    script(
        "parsing_runs.sh",
        treebank,
        SYSTEMS="lstm",
        SEEDS="1",
        EPOCHS="1",
        TRAIN_ARGS=SMALL,
        **folders,
    )
    script(
        "parsing_recipes.sh",
        treebank,
        RECIPES="transformer-dropout0.3 lstm-epochs40",
        TRAIN_ARGS=f"{SMALL} --epochs 2 --keep-epochs 2",
        RUNS_DIR=str(runs / "recipes"),
        RESULTS_DIR=str(results / "recipes"),
        PARSING_RUNS=str(runs / "parsing"),
    )
    return results, runs


def test_a_run_is_scored_on_the_test_files_under_four_searches_and_each_epoch_on_validation(
    recorded,
) -> None:
    results, _ = recorded
    for search in SEARCHES:
        scores = json.loads((results / f"lstm-seed1-{search}.json").read_text())
        assert scores["epochs"] == 1 and scores["all"]["sentences"] == 3
    constrained = json.loads((results / "lstm-seed1-tree-greedy.json").read_text())
    assert constrained["well_formed"] == pytest.approx(100.0)
    validation = json.loads((results / "lstm-seed1-val.json").read_text())
    assert [e["epoch"] for e in validation["epochs"]] == [1]
    assert (results / "right-branching.json").is_file()


def test_recipes_are_scored_on_validation_only(recorded) -> None:
    results, _ = recorded
    recipes = results / "recipes"
    for name in ("transformer-dropout0.3", "lstm-epochs40"):
        validation = json.loads((recipes / f"{name}-val.json").read_text())
        assert [e["epoch"] for e in validation["epochs"]] == [1, 2]
        assert all(0 <= e["all"] <= 100 for e in validation["epochs"])
    left = {path.name for path in recipes.iterdir()}
    assert not {name for name in left if any(f"-{s}." in name for s in SEARCHES)}
    assert "right-branching.json" not in left  # the test files were not read


def test_a_recipe_of_more_epochs_continues_the_recorded_run(recorded) -> None:
    results, runs = recorded
    first = json.loads((results / "lstm-seed1-history.json").read_text())
    continued = json.loads((results / "recipes" / "lstm-epochs40-history.json").read_text())
    assert [e["epoch"] for e in continued] == [1, 2]
    assert continued[0] == first[0]  # epoch 1 is the recorded run's, not trained again
    assert (runs / "parsing" / "lstm-seed1" / "last.pt").is_file()  # the recorded run is kept
    fresh = json.loads((results / "recipes" / "transformer-dropout0.3-history.json").read_text())
    assert len(fresh) == 2
