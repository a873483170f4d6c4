"""Paths of a run folder (issue 36): no run file is read or written through a link or a special
file, epoch file names come from validated whole numbers only, `--overwrite` removes only what a
run's marker lists, and neither the root folder nor the home folder is a run folder.

Each case plants something in a copy of one tiny run (trained once for the module) and checks that
the command stops with status 1 and one line naming the file, before any training, leaving the
planted file's target as it was.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import torch
from clitools import TINY_RUN, copy_run, one_line_failure, train_argv

from annotated_transformer.checkpoint import load_checkpoint, torch_load_safely
from annotated_transformer.cli import main
from annotated_transformer.runs import (
    MARKER,
    RunFolder,
    claim_run_folder,
    epoch_file,
    read_marker,
    write_marker,
)


@pytest.fixture(scope="module")
def trained(synthetic_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One epoch of the tiny model, for the module's cases to copy, trained with --overwrite into a
    folder holding an empty run marker and the user's notes.txt; and what it logged."""
    out = tmp_path_factory.mktemp("runs") / "run"
    out.mkdir()
    write_marker(out, [])
    (out / "notes.txt").write_text("the user's\n")
    argv = ["train", "--out", str(out), "--data-dir", str(synthetic_corpus), "--epochs", "1"]
    with redirect_stdout(io.StringIO()) as logged:
        assert main([*argv, *TINY_RUN, "--overwrite"]) == 0
    return out, logged.getvalue()


@pytest.fixture
def run(trained: tuple[Path, str]) -> Path:
    "The tiny run's folder."
    return trained[0]


# ------------------------------------------------------------------- links and special files
def plant(kind: str, path: Path, target: Path) -> None:
    "Put a link or a special file of `kind` at `path` (pointing at `target` where it can)."
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    if kind == "symlink":
        path.symlink_to(target)
    elif kind == "hard link":
        os.link(target, path)
    elif kind == "FIFO":
        os.mkfifo(path)
    elif kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
        except PermissionError:
            pytest.skip("making a device file needs root")


PLANTED = [  # (name, kind, said): every file a run reads or writes, and every kind of link
    *[(name, "symlink", "a symbolic link") for name in ("last.pt", "epoch1.pt", "history.json")],
    *[(name, "symlink", "a symbolic link") for name in (".writer", ".lock", MARKER)],
    *[(name, "hard link", "a hard link") for name in ("last.pt", "history.json", ".lock")],
    (".writer", "hard link", "a hard link"),
    *[(name, "FIFO", "a FIFO") for name in ("last.pt", "epoch1.pt", ".lock", ".writer", MARKER)],
    ("last.pt", "device", "a device"),
    ("history.json", "device", "a device"),
]


@pytest.mark.parametrize(
    "name, kind, said", PLANTED, ids=[f"{kind}-{name}" for name, kind, _ in PLANTED]
)
def test_a_link_or_special_file_in_a_run_is_refused_before_training(
    run, synthetic_corpus, tmp_path, capsys, name, kind, said
):
    out, precious = copy_run(run, tmp_path / "run"), tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    plant(kind, out / name, precious)
    line = one_line_failure(train_argv(out, synthetic_corpus, "--resume", "--epochs", "2"), capsys)
    assert f"{out / name} is {said}" in line
    assert precious.read_text() == "keep me\n"
    assert load_checkpoint(run / "last.pt").epoch == 1 and not (out / "epoch2.pt").exists()


@pytest.mark.parametrize("kind", ["symlink", "file"])
def test_tensorboard_that_is_not_a_folder_of_its_own_is_refused(
    run, synthetic_corpus, tmp_path, capsys, kind
):
    out, elsewhere = copy_run(run, tmp_path / "run"), tmp_path / "elsewhere"
    elsewhere.mkdir()
    if kind == "symlink":
        (out / "tensorboard").symlink_to(elsewhere, target_is_directory=True)
    else:
        (out / "tensorboard").write_text("")
    argv = train_argv(out, synthetic_corpus, "--resume", "--epochs", "2", "--tensorboard")
    said = "a symbolic link" if kind == "symlink" else "not a folder"
    assert f"{out / 'tensorboard'} is {said}" in one_line_failure(argv, capsys)
    assert list(elsewhere.iterdir()) == []


def test_a_dangling_last_pt_link_is_refused_before_any_epoch(synthetic_corpus, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "last.pt").symlink_to(tmp_path / "nowhere" / "last.pt")
    line = one_line_failure(train_argv(out, synthetic_corpus, "--epochs", "1"), capsys)
    assert f"{out / 'last.pt'} is a symbolic link" in line
    assert sorted(p.name for p in out.iterdir()) == ["last.pt"]  # no epoch trained, no .lock
    assert not (tmp_path / "nowhere").exists()


# ------------------------------------------------------------- file names from whole numbers
EPOCHS = ["/../../../../../../../tmp/TRAVERSAL", "abc", 1.5, None, True, 0, -3, 10**30]


@pytest.mark.parametrize("epoch", EPOCHS, ids=[repr(e)[:20] for e in EPOCHS])
def test_an_epoch_file_is_named_only_after_a_whole_number(epoch):
    with pytest.raises(ValueError, match="is not a whole number from 1 to 100,000"):
        epoch_file(epoch)


@pytest.mark.parametrize("epoch", ["/../../../../../../../tmp/TRAVERSAL", "abc", 10**30])
def test_a_crafted_epoch_writes_no_file_outside_the_run(
    run, synthetic_corpus, tmp_path, capsys, epoch
):
    out = copy_run(run, tmp_path / "run")
    d = torch_load_safely(out / "last.pt")
    d["epoch"] = epoch
    torch.save(d, out / "last.pt")
    (out / "epoch1.pt").unlink()  # the resume would write it again, named after the epoch
    line = one_line_failure(train_argv(out, synthetic_corpus, "--resume", "--epochs", "2"), capsys)
    assert f"{out / 'last.pt'}" in line and "epoch" in line
    assert not Path("/tmp/TRAVERSAL.pt").exists()
    assert sorted(p.name for p in out.glob("*.pt")) == ["last.pt"]


# ----------------------------------------------------------------------------- --overwrite
NOT_RUNS = [  # (files in the folder, flags, what the message says)
    (["epoch_best.pt", "epochs-summary.pt", "notes.txt"], ["--overwrite"], "no run marker"),
    (["epoch_best.pt", "epochs-summary.pt", "notes.txt"], [], "listed by no run marker"),
    (["history.json"], ["--overwrite"], "no run marker"),
    (["history.json"], [], "listed by no run marker"),
]


@pytest.mark.parametrize(
    "files, flags, said", NOT_RUNS, ids=["overwrite", "plain", "history-overwrite", "history"]
)
def test_a_folder_that_is_not_a_run_is_refused_and_kept(
    synthetic_corpus, tmp_path, capsys, files, flags, said
):
    out = tmp_path / "mine"
    out.mkdir()
    for name in files:
        (out / name).write_text(f"the user's {name}\n")
    line = one_line_failure(train_argv(out, synthetic_corpus, "--epochs", "1", *flags), capsys)
    run_like = [name for name in files if name != "notes.txt"]
    assert said in line and all(name in line for name in run_like)
    assert "training run" not in line  # not called a run: no marker lists these files
    assert sorted(p.name for p in out.iterdir()) == sorted(files)  # nothing removed, no .lock
    assert all((out / n).read_text() == f"the user's {n}\n" for n in files)


@pytest.mark.parametrize("stray", ["epoch_best.pt", "epochs-summary.pt", "epoch01.pt"])
def test_overwrite_refuses_files_the_marker_does_not_list(
    run, synthetic_corpus, tmp_path, capsys, stray
):
    out = copy_run(run, tmp_path / "run")
    (out / stray).write_text("the user's\n")
    line = one_line_failure(
        train_argv(out, synthetic_corpus, "--epochs", "1", "--overwrite"), capsys
    )
    assert f"holds {stray}, which no run marker" in line
    assert (out / stray).read_text() == "the user's\n" and (out / "last.pt").exists()


def test_overwrite_refuses_an_older_run_without_a_marker(run, synthetic_corpus, tmp_path, capsys):
    out = copy_run(run, tmp_path / "run")
    (out / MARKER).unlink()
    line = one_line_failure(
        train_argv(out, synthetic_corpus, "--epochs", "1", "--overwrite"), capsys
    )
    assert "holds epoch1.pt, history.json, last.pt, which no run marker" in line
    assert sorted(p.name for p in out.iterdir()) == ["epoch1.pt", "history.json", "last.pt"]


@pytest.mark.parametrize(
    "marker", ['{"files": ["notes.txt"]}', '{"files": ["../../x.pt"]}', "[]", "{", ""]
)
def test_a_damaged_marker_is_one_line_naming_it(run, synthetic_corpus, tmp_path, capsys, marker):
    out = copy_run(run, tmp_path / "run")
    (out / MARKER).write_text(marker)
    (out / "notes.txt").write_text("the user's\n")
    line = one_line_failure(
        train_argv(out, synthetic_corpus, "--epochs", "1", "--overwrite"), capsys
    )
    assert f"{out / MARKER} is damaged" in line
    assert (out / "notes.txt").exists() and (out / "last.pt").exists()


def test_overwrite_removes_only_what_the_marker_lists(run, tmp_path):
    "The first save of the new run removes the old run's files and keeps (and names) the rest."
    out = copy_run(run, tmp_path / "run")
    (out / "epoch7.pt").write_bytes((out / "epoch1.pt").read_bytes())  # the old run's later epoch
    write_marker(out, [*read_marker(out), "epoch7.pt"])
    (out / "notes.txt").write_text("the user's\n")
    (out / "plots").mkdir()
    ckpt = load_checkpoint(out / "last.pt")
    with claim_run_folder(out, resume=False, overwrite=True) as folder:
        assert isinstance(folder, RunFolder) and folder.kept == ["notes.txt", "plots"]
        assert folder.replaced == ["epoch1.pt", "epoch7.pt", "history.json", "last.pt"]
        folder.save_epoch(ckpt, keep_epochs=5)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [MARKER, "epoch1.pt", "history.json", "last.pt", "notes.txt", "plots", ".lock"]
    )
    assert read_marker(out) == ["epoch1.pt", "history.json", "last.pt"]


def test_overwrite_names_the_files_it_keeps(trained):
    "Through the command (the module's run): the kept files are named in one line of the log."
    out, logged = trained
    assert f"--overwrite keeps notes.txt in {out}: no run wrote them\n" in logged
    assert (out / "notes.txt").read_text() == "the user's\n"
    assert read_marker(out) == ["epoch1.pt", "history.json", "last.pt"]


# ------------------------------------------------------------------ folders of everything else
@pytest.mark.parametrize("where", ["root", "home"])
def test_the_root_and_home_folders_are_not_run_folders(
    synthetic_corpus, tmp_path, capsys, monkeypatch, where
):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    out = Path("/") if where == "root" else home
    had_lock = (out / ".lock").exists()
    line = one_line_failure(train_argv(out, synthetic_corpus, "--epochs", "1"), capsys)
    assert f"is {'the root folder' if where == 'root' else 'your home folder'}" in line
    assert (out / ".lock").exists() == had_lock
    if where == "home":
        assert list(home.iterdir()) == []
