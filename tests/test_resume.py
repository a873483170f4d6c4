"""`train --out RUN --resume` needs no other flag, whatever the run was trained on.

1. Every kind of run resumes from `--out` alone: your own files (subwords), Multi30k in words and in
   subwords, the treebank (§6.3), a recurrent system. The data's default places ($MULTI30K_DIR,
   $TREEBANK_DIR) point at nothing, so the data must come from what the run recorded; the debris of
   a cut-off write is cleaned when the start claims the folder.
2. Data that moved: one line naming the file or folder and the flag that says where it is now; the
   flag given, the run goes on.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from clitools import TINY_RUN, one_error_line, own_file_args
from synthetic import write_treebank

from annotated_transformer.checkpoint import load_checkpoint
from annotated_transformer.cli import main

DEBRIS = ".last.pt.0123abcd.tmp"  # what a write cut off by a kill leaves


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    "The corpora's default folders point at a folder that does not exist."
    monkeypatch.setenv("MULTI30K_DIR", str(tmp_path / "no-multi30k"))
    monkeypatch.setenv("TREEBANK_DIR", str(tmp_path / "no-treebank"))


def resumes_from_out_alone(out: Path, capsys: pytest.CaptureFixture) -> None:
    "Resume the one-epoch run in `out` by `--out` alone: a second epoch, the debris cleaned."
    (out / DEBRIS).write_bytes(b"cut off")
    status = main(["train", "--out", str(out), "--resume", "--epochs", "2", "--quiet"])
    assert status == 0, capsys.readouterr().err
    ckpt = load_checkpoint(out / "last.pt")
    assert ckpt.epoch == 2 and [h["epoch"] for h in ckpt.history] == [1, 2]
    assert not (out / DEBRIS).exists()


def first_epoch(out: Path, *flags: str, size: tuple[str, ...] = TINY_RUN[:2]) -> None:
    "One epoch of the tiny size (or `size`) into `out`, with the data flags given."
    run = [*size, *TINY_RUN[2:], "--epochs", "1"]  # TINY_RUN[:2] is the Transformer's size
    assert main(["train", "--out", str(out), *flags, *run]) == 0


# ============================================================ 1. every kind, from --out alone
def test_a_run_on_your_own_files(own_corpus, tmp_path, nowhere, capsys) -> None:
    first_epoch(tmp_path / "run", *own_file_args(own_corpus), "--vocab-size", "400")
    resumes_from_out_alone(tmp_path / "run", capsys)


@pytest.mark.parametrize("flags", [(), ("--vocab-size", "300")], ids=["words", "subwords"])
def test_a_run_on_multi30k(data_dir, tmp_path, nowhere, capsys, flags) -> None:
    first_epoch(tmp_path / "run", "--data-dir", str(data_dir), *flags)
    resumes_from_out_alone(tmp_path / "run", capsys)


def test_a_run_on_the_treebank(tmp_path, nowhere, capsys) -> None:
    treebank = write_treebank(tmp_path / "treebank")
    first_epoch(tmp_path / "run", "--corpus", "treebank", "--data-dir", str(treebank))
    resumes_from_out_alone(tmp_path / "run", capsys)


def test_a_recurrent_system(data_dir, tmp_path, nowhere, capsys) -> None:
    lstm = ("--arch", "lstm", "--enc-layers", "1", "--dec-layers", "1")
    first_epoch(tmp_path / "run", "--data-dir", str(data_dir), size=lstm)
    resumes_from_out_alone(tmp_path / "run", capsys)
    assert load_checkpoint(tmp_path / "run" / "last.pt").config.model.arch == "lstm"


# ============================================================ 2. data that moved
def test_moved_files_are_named_with_their_flag(own_corpus, tmp_path, nowhere, capsys) -> None:
    files = {name: shutil.copy(path, tmp_path) for name, path in own_corpus.items()}
    files = {name: Path(path) for name, path in files.items()}
    first_epoch(tmp_path / "run", *own_file_args(files), "--vocab-size", "400")
    files["valid_tgt"].rename(tmp_path / "elsewhere.gz")
    resume = ["train", "--out", str(tmp_path / "run"), "--resume", "--epochs", "2", "--quiet"]
    assert main(resume) == 2
    line = one_error_line(capsys.readouterr().err, "train")
    assert f"{files['valid_tgt']}, which {tmp_path / 'run' / 'last.pt'} was trained on" in line
    assert "pass --valid-tgt" in line
    files["valid_tgt"] = tmp_path / "elsewhere.gz"
    assert main([*resume, *own_file_args(files)]) == 0  # the same contents, found again


def test_a_moved_folder_is_named_with_its_flag(data_dir, tmp_path, nowhere, capsys) -> None:
    first_epoch(tmp_path / "run", "--data-dir", str(data_dir))
    moved = data_dir.rename(tmp_path / "moved")
    resume = ["train", "--out", str(tmp_path / "run"), "--resume", "--epochs", "2", "--quiet"]
    assert main(resume) == 2
    line = one_error_line(capsys.readouterr().err, "train")
    assert f"{data_dir}, the multi30k folder" in line and "pass --data-dir" in line
    assert main([*resume, "--data-dir", str(moved)]) == 0
    assert load_checkpoint(tmp_path / "run" / "last.pt").epoch == 2
