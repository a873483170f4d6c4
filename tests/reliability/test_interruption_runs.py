"""Interruptions of a run folder (issue 36): a start that fails leaves no `.lock`, `.writer` or
folder it made; what a kill leaves (temporary files, a stale lock) is cleaned at the next start; the
marker lists every file of the run whenever a kill comes; `--resume` with nothing left to train
says so in one line.

One tiny run is trained for the module; the cases copy it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from clitools import copy_run, one_line_failure, train_argv

from annotated_transformer import runs
from annotated_transformer.checkpoint import load_checkpoint
from annotated_transformer.cli import main
from annotated_transformer.runs import MARKER, claim_run_folder, existing_run, read_marker


@pytest.fixture(scope="module")
def run(tiny_checkpoint: Path) -> Path:
    "One epoch of the tiny model (conftest's), for the module's cases to copy."
    return tiny_checkpoint.parent


# ---------------------------------------------------------------------- a start that fails
FAILED_STARTS = [  # (what the folder holds before, the flags, a word of the error)
    ("nothing", ["--resume"], "no checkpoint at"),
    ("notes", ["--resume"], "no checkpoint at"),
    ("notes", ["--train-pairs", "100000"], "more than the 160 training pairs"),
    ("missing", ["--train-pairs", "100000"], "more than the 160 training pairs"),
    ("epoch_best", [], "listed by no run marker"),
]


@pytest.mark.parametrize(
    "before, flags, said",
    FAILED_STARTS,
    ids=["empty-resume", "notes-resume", "notes-bad-setting", "new-folder", "not-a-run"],
)
def test_a_failed_start_leaves_nothing_it_made(
    synthetic_corpus, tmp_path, capsys, before, flags, said
):
    out = tmp_path / "out"
    if before != "missing":
        out.mkdir()
    if before == "notes":
        (out / "notes.txt").write_text("the user's\n")
    if before == "epoch_best":
        (out / "epoch_best.pt").write_text("the user's\n")
    assert said in one_line_failure(
        train_argv(out, synthetic_corpus, "--epochs", "1", *flags), capsys
    )
    left = sorted(p.name for p in out.iterdir()) if out.exists() else None
    expected = {"nothing": [], "notes": ["notes.txt"], "missing": None}
    assert left == expected.get(before, ["epoch_best.pt"])  # no .lock, no .writer, no folder


def test_a_kept_lock_is_not_removed_by_a_failed_start(run, synthetic_corpus, tmp_path, capsys):
    "A .lock the start did not make (a killed run's) stays: the next run reuses it."
    out = copy_run(run, tmp_path / "run")
    (out / ".lock").write_text("")
    one_line_failure(
        train_argv(out, synthetic_corpus, "--epochs", "1", "--train-pairs", "999"), capsys
    )
    assert (out / ".lock").exists() and not (out / ".writer").exists()


# ------------------------------------------------------------- what a kill leaves behind
DEBRIS = [".last.pt.0f1e.tmp", ".epoch2.pt.0f1e.tmp", ".history.json.0f1e.tmp"]
DEBRIS += [f".{MARKER}.0f1e.tmp", ".writer.0f1e.tmp"]


def test_the_next_start_cleans_what_a_kill_left(run, synthetic_corpus, tmp_path, capsys):
    out = copy_run(run, tmp_path / "run")
    for name in DEBRIS:
        (out / name).write_bytes(b"half a file")
    (out / ".lock").write_text("")  # a killed run's lock and holder: stale, reused
    (out / ".writer").write_text("pid 1 on elsewhere, since long ago\n")
    assert main(train_argv(out, synthetic_corpus, "--epochs", "1", "--resume")) == 0
    assert f"removed {len(DEBRIS)} temporary file(s)" in capsys.readouterr().out
    assert list(out.glob(".*.tmp")) == [] and not (out / ".writer").exists()


def test_resume_with_nothing_left_says_so_and_trains_nothing(
    run, synthetic_corpus, tmp_path, capsys
):
    """Status 0: the run is as complete as asked (a job restarted after it finished is not an
    error); one line says so, before any data is read."""
    out = copy_run(run, tmp_path / "run")
    before = (out / "last.pt").read_bytes()
    assert main(train_argv(out, synthetic_corpus, "--epochs", "1", "--resume")) == 0
    out_text, err = capsys.readouterr()
    assert err == ""
    said = [line for line in out_text.splitlines() if "nothing left to train" in line]
    assert said == [
        f"{out / 'last.pt'} has trained 1 epochs and --epochs is 1: nothing left to train "
        f"(give a larger --epochs to continue the run)"
    ]
    assert "training pairs" not in out_text  # no data was read
    assert (out / "last.pt").read_bytes() == before


# ---------------------------------------------------------------- the marker and the kill
class Killed(BaseException):
    "A kill, simulated: nothing after it runs."


@pytest.mark.parametrize("at", [1, 2, 3, 4, 5])
def test_a_kill_at_any_write_leaves_every_run_file_listed(run, tmp_path, monkeypatch, at):
    """A kill before the `at`-th write of a save (marker, last.pt, epoch file, history, marker):
    every file named like a run's is one the marker lists, so --overwrite can replace the run."""
    out = copy_run(run, tmp_path / "run")
    ckpt = load_checkpoint(out / "last.pt")
    ckpt.epoch, ckpt.history = 2, [*ckpt.history, dict(ckpt.history[-1], epoch=2)]
    writes = {"n": 0}

    def counting(real):
        def write(*args, **kwargs):
            writes["n"] += 1
            if writes["n"] == at:
                raise Killed
            return real(*args, **kwargs)

        return write

    for name in ("save_checkpoint", "write_history", "write_marker"):
        monkeypatch.setattr(runs, name, counting(getattr(runs, name)))
    with pytest.raises(Killed):
        with claim_run_folder(out, resume=True, overwrite=False) as folder:
            folder.save_epoch(ckpt, keep_epochs=1)  # epoch1.pt leaves the window
    monkeypatch.undo()
    assert set(existing_run(out)) <= set(read_marker(out))
    with claim_run_folder(out, resume=False, overwrite=True) as folder:
        assert sorted(folder.replaced) == existing_run(out)  # all of it the run's to replace
