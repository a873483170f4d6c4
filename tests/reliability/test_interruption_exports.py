"""Interrupted exports: `export --overwrite` stopped between its two renames (a fault, or a real
kill) always leaves the old or the new model at --out, and the next start puts back or removes
what it left, but never a folder that another export holds or that holds someone else's file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from clitools import environment
from test_files_exports import tiny_run_checkpoint

from annotated_transformer.checkpoint import save_checkpoint
from annotated_transformer.cli import main
from annotated_transformer.engines import INFO_FILE, export_model, is_exported, recover_export


@pytest.fixture(scope="module")
def ckpt():
    return tiny_run_checkpoint()


def quantization(out: Path) -> str:
    return json.loads((out / INFO_FILE).read_text())["quantization"]


def failing_after(calls: int, monkeypatch: pytest.MonkeyPatch, times: int = 10**9) -> None:
    "os.rename works `calls` times, then fails `times` times (a kill stops every later call)."
    rename, count = os.rename, [0]

    def faulty(src, dst, *args, **kwargs):
        count[0] += 1
        if calls < count[0] <= calls + times:
            raise OSError("injected fault between the renames")
        return rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", faulty)


def test_a_fault_between_the_renames_puts_the_old_model_back(ckpt, tmp_path, monkeypatch):
    out = export_model(ckpt, tmp_path / "model")
    failing_after(1, monkeypatch, times=1)  # the second rename fails; putting back works
    with pytest.raises(OSError, match="injected fault"):
        export_model(ckpt, out, "int8", overwrite=True)
    assert is_exported(out) and quantization(out) == "float32"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no debris


def test_stopped_between_the_renames_the_next_start_restores_the_old_model(
    ckpt, tmp_path, monkeypatch
):
    out = export_model(ckpt, tmp_path / "model")
    failing_after(1, monkeypatch)  # as a kill: nothing after the first rename happens
    with pytest.raises(OSError, match="injected fault"):
        export_model(ckpt, out, "int8", overwrite=True)
    assert not out.exists()
    assert [p.suffix for p in tmp_path.iterdir()] == [".old"]
    monkeypatch.undo()
    recover_export(out)  # what export (and the command's check of --out) does first
    assert is_exported(out) and quantization(out) == "float32"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_real_kill_between_the_renames_loses_nothing(ckpt, tmp_path, capsys):
    checkpoint, out = tmp_path / "last.pt", tmp_path / "model"
    save_checkpoint(checkpoint, ckpt)
    export_model(ckpt, out)
    child = f"""
import os, signal, sys
from annotated_transformer.cli import main
rename, calls = os.rename, []
def killed_at_the_second(*args):
    calls.append(args)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return rename(*args)
os.rename = killed_at_the_second
main(["export", "--checkpoint", {str(checkpoint)!r}, "--out", {str(out)!r}, "--overwrite",
      "--quantization", "int8"])
"""
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, env=environment(), timeout=300
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    left = sorted(p.suffix for p in tmp_path.iterdir())
    assert not out.exists() and left == [".old", ".pt", ".tmp"]  # the old model, aside
    argv = ["export", "--checkpoint", str(checkpoint), "--out", str(out)]
    assert main(argv) == 2  # the old model is back: refused without --overwrite
    assert quantization(out) == "float32"
    assert main([*argv, "--overwrite", "--quantization", "int8"]) == 0
    assert quantization(out) == "int8"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt", "model"]


def debris(out: Path, suffix: str, files: list[str]) -> Path:
    "A folder as an interrupted export to `out` would leave it, holding `files`."
    left = out.with_name(f".{out.name}.{uuid.uuid4().hex}.{suffix}")
    left.mkdir()
    for name in files:
        (left / name).write_text("x")
    return left


def test_the_next_start_removes_only_what_is_export_s_and_no_export_holds(ckpt, tmp_path):
    out = export_model(ckpt, tmp_path / "model")
    dead = debris(out, "tmp", ["model.bin", "config.json"])
    old = debris(out, "old", ["model.bin", "config.json", INFO_FILE])  # --out is there: debris
    someone_s = debris(out, "tmp", ["model.bin", "notes.txt"])
    held = debris(out, "tmp", ["model.bin"])
    other_name = tmp_path / f".model.{uuid.uuid4().hex}.bak"
    other_name.mkdir()
    with _locked(held):  # an export at work
        export_model(ckpt, out, "int8", overwrite=True)
    assert not dead.exists() and not old.exists()
    assert someone_s.exists() and held.exists() and other_name.exists()
    assert quantization(out) == "int8"


class _locked:
    "Hold `folder`'s lock as a running export does (fcntl.flock; released on exit)."

    def __init__(self, folder: Path):
        self.fd = os.open(folder, os.O_RDONLY)

    def __enter__(self):
        import fcntl

        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc):
        os.close(self.fd)


def appearing_while_writing(monkeypatch: pytest.MonkeyPatch, out: Path, name: str) -> None:
    "A user's file `name` put in `out` (made if missing) while export writes its folder."
    from annotated_transformer import engines

    write = engines._write_folder

    def and_meanwhile(*args, **kwargs):
        write(*args, **kwargs)
        out.mkdir(exist_ok=True)
        (out / name).write_text("mine")

    monkeypatch.setattr(engines, "_write_folder", and_meanwhile)


@pytest.mark.parametrize("overwrite", [False, True], ids=["new folder", "--overwrite"])
def test_a_folder_or_file_that_appears_while_export_runs_is_kept(
    ckpt, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overwrite: bool
) -> None:
    "Round four: export deleted a folder made at --out while it ran, or a file added to it."
    from annotated_transformer.config import ChoiceError

    out = tmp_path / "m"
    if overwrite:
        export_model(ckpt, out)  # the export --overwrite replaces
    appearing_while_writing(monkeypatch, out, "notes.txt")
    with pytest.raises(ChoiceError, match="notes.txt" if overwrite else "exists"):
        export_model(ckpt, out, overwrite=overwrite)
    assert (out / "notes.txt").read_text() == "mine"
    assert is_exported(out) == overwrite  # the earlier export, whole, where there was one
    assert [p.name for p in tmp_path.iterdir()] == ["m"]  # nothing of this export left


def test_two_exports_at_once_to_one_folder_leave_one_whole_model(ckpt, tmp_path: Path) -> None:
    """Round four, item 6: two writers. Both start before either has written: one export lands,
    the other is refused in one line (at its start or at its final rename), and neither leaves a
    temporary folder behind."""
    pytest.importorskip("ctranslate2")
    save_checkpoint(tmp_path / "last.pt", ckpt)
    out = tmp_path / "m"
    argv = [sys.executable, "-m", "annotated_transformer.cli", "export"]
    argv += ["--checkpoint", str(tmp_path / "last.pt"), "--out", str(out)]
    both = [
        subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=environment())
        for _ in range(2)
    ]
    ended = sorted((p.wait(timeout=600), p.stderr.read()) for p in both)
    (landed, _), (refused, said) = ended
    assert landed == 0 and refused in (1, 2), ended
    assert said.count("\n") == 1 and f"--out {out} exists" in said, said
    assert is_exported(out) and sorted(p.name for p in tmp_path.iterdir()) == ["last.pt", "m"]
