"""Shared fixtures: the synthetic German-English corpus written as Multi30k-named .gz files, a tiny
checkpoint trained on it through the console command, and made-up parallel text of your own.

The synthetic corpus is written in one place, `write_synthetic_corpus`: tests that only read it use
the module's `synthetic_corpus`, tests that change it or start commands get their own `data_dir`.
Tests that train pass the folder as --data-dir (or read it with load_multi30k): no network and no
../shared needed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from clitools import TINY_RUN, own_file_args
from synthetic import made_up_pairs, synthetic_pairs, write_lines, write_split

# Reading files that differ from the published Multi30k ones warns (data.multi30k_paths).
SYNTHETIC_DIFFERS = "ignore:Multi30k file differs from the published one:UserWarning"


def write_synthetic_corpus(folder: Path) -> Path:
    """The 192 synthetic pairs as Multi30k's train (160), val (16) and test2016 (16) files in
    `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    pairs = synthetic_pairs()
    write_split(folder, "train", pairs[:160])
    write_split(folder, "val", pairs[160:176])
    write_split(folder, "test2016", pairs[176:])
    return folder


@pytest.fixture(scope="module")
def synthetic_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    "The synthetic corpus, written once for a module: for the tests that only read it."
    return write_synthetic_corpus(tmp_path_factory.mktemp("multi30k"))


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    "The synthetic corpus in a folder of the test's own (it may change it), $MULTI30K_DIR unset."
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    # These files differ from the published ones on purpose: the commands the tests start need not
    # warn about it (a warning on their stderr would read as output of theirs; in this process
    # pytest's configuration ignores it instead).
    monkeypatch.setenv(
        "PYTHONWARNINGS",
        ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), SYNTHETIC_DIFFERS])),
    )
    return write_synthetic_corpus(tmp_path / "multi30k")


@pytest.fixture(scope="module")
def tiny_checkpoint(synthetic_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    "One epoch of the tiny size through the console command's `train`, once per test module."
    from annotated_transformer.cli import main

    out = tmp_path_factory.mktemp("run") / "run"
    argv = ["train", "--out", str(out), "--data-dir", str(synthetic_corpus), "--epochs", "1"]
    assert main([*argv, *TINY_RUN]) == 0
    return out / "last.pt"


# ------------------------------------------------------------------------------ your own files
@pytest.fixture(scope="module")
def own_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Made-up parallel files: training (plain, three pairs with an empty side), validation
    (gzipped) and test (one empty source line)."""
    folder = tmp_path_factory.mktemp("corpus")
    pairs = made_up_pairs(330)
    train, valid, test = pairs[:300], pairs[300:320], pairs[320:]
    src = [s for s, _ in train]
    tgt = [t for _, t in train]
    src[5], tgt[9], src[20], tgt[20] = "", "", "", "  "  # three pairs with an empty side
    test_src = [s for s, _ in test]
    test_src[3] = ""
    return {
        "train_src": write_lines(folder / "train.xa", src),
        "train_tgt": write_lines(folder / "train.xb", tgt),
        "valid_src": write_lines(folder / "valid.xa.gz", [s for s, _ in valid], gzipped=True),
        "valid_tgt": write_lines(folder / "valid.xb.gz", [t for _, t in valid], gzipped=True),
        "test_src": write_lines(folder / "test.xa", test_src),
        "test_ref": write_lines(folder / "test.xb", [t for _, t in test]),
    }


@pytest.fixture(scope="module")
def own_run(own_corpus: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    "The run folder of one epoch of the tiny size on the made-up files, subwords of 400."
    from annotated_transformer.cli import main

    out = tmp_path_factory.mktemp("runs") / "mine"
    argv = ["train", "--out", str(out), *own_file_args(own_corpus), "--vocab-size", "400"]
    assert main([*argv, *TINY_RUN, "--epochs", "1"]) == 0
    return out
