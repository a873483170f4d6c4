"""Shared fixtures: a few hundred synthetic German-English pairs written as Multi30k-named .gz files, and a tiny checkpoint.

Tests that train pass the folder as --data-dir (or read it with load_multi30k): no network and no ../shared needed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from synthetic import synthetic_pairs, write_split


# Reading files that differ from the published Multi30k ones warns (annotated_transformer.data.multi30k_paths).
SYNTHETIC_DIFFERS = "ignore:Multi30k file differs from the published one:UserWarning"


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    "One epoch of the tiny preset through the console command's `train` on the synthetic pairs, trained once per test module."
    from annotated_transformer.cli import main

    folder = tmp_path_factory.mktemp("multi30k")
    pairs = synthetic_pairs()
    write_split(folder, "train", pairs[:160])
    write_split(folder, "val", pairs[160:176])
    out = tmp_path_factory.mktemp("run") / "run"
    assert (
        main(
            [
                "train",
                "--out",
                str(out),
                "--data-dir",
                str(folder),
                "--epochs",
                "1",
                "--model",
                "tiny",
                "--max-tokens",
                "400",
                "--warmup",
                "20",
                "--quiet",
            ]
        )
        == 0
    )
    return out / "last.pt"


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    # These files differ from the published ones on purpose: the commands the tests start need not warn about it
    # (a warning on their stderr would read as output of theirs; in this process pytest collects it instead).
    monkeypatch.setenv(
        "PYTHONWARNINGS",
        ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), SYNTHETIC_DIFFERS])),
    )
    pairs = synthetic_pairs()
    folder = tmp_path / "multi30k"
    folder.mkdir()
    write_split(folder, "train", pairs[:160])
    write_split(folder, "val", pairs[160:176])
    write_split(folder, "test2016", pairs[176:])
    return folder
