"""A full disk and a file-size limit (round four, issue 52 item 1): every write names its file and
its cause in one line and leaves nothing a next start cannot clean. `train` and `export` refuse
before the work starts when the size is known (a checkpoint's or an export's, from the model); a
write that fails anyway names the file being written; an `--output` file keeps whole lines.

A size limit here is real: RLIMIT_FSIZE, set for a command's process or, around one call, for this
one (Python ignores SIGXFSZ, so a write past it fails with EFBIG). A full disk is made by reporting
less free space (`shutil.disk_usage`), or by a writer that fails with ENOSPC as a full disk's does.
"""

from __future__ import annotations

import errno
import os
import resource
from collections import namedtuple
from contextlib import contextmanager
from pathlib import Path

import pytest
from clitools import cli, one_error_line, train_argv

from annotated_transformer import checkpoint, engines, translator
from annotated_transformer.checkpoint import load_checkpoint, save_checkpoint
from annotated_transformer.cli import main
from annotated_transformer.engines import WEIGHT_FILES, export_bytes, export_model
from annotated_transformer.translator import LineFile

Usage = namedtuple("Usage", "total used free")


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    "Every disk reported with 1,000 bytes free."
    monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda path: Usage(10**9, 10**9, 1000))


@contextmanager
def size_limit(limit: int):
    "This process's file-size limit (`ulimit -f`) at `limit` bytes while the block runs."
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)


def debris(folder: Path) -> list[str]:
    "What a failed write left in `folder`: temporary files and folders, run locks and markers."
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# ------------------------------------------------------------------------------ train
def test_train_refuses_a_full_disk_before_its_first_epoch(
    synthetic_corpus: Path, tmp_path: Path, full_disk: None, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    assert main(train_argv(run, synthetic_corpus, "--epochs", "1")) == 1
    out, err = capsys.readouterr()
    line = one_error_line([e for e in err.splitlines() if "warning" not in e][0], "train")
    assert f"no space left on device for {run / 'last.pt'} (" in line, line
    assert line.endswith(" MB needed, 0.0 MB free)"), line
    assert "epoch 1" not in out  # said before training
    assert not run.exists() or not list(run.iterdir())  # no lock, no marker


def test_a_checkpoint_the_size_limit_stops_names_it_and_keeps_the_old_one(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    ckpt = load_checkpoint(tiny_checkpoint)
    path = tmp_path / "last.pt"
    save_checkpoint(path, ckpt.weights_only())
    before = path.read_bytes()
    with size_limit(100_000), pytest.raises(OSError) as failed:
        save_checkpoint(path, ckpt)
    assert str(failed.value) == f"file too large writing {path} (a size limit of 100,000 bytes)"
    assert path.read_bytes() == before and debris(tmp_path) == []


def test_a_checkpoint_a_full_disk_stops_names_it_and_what_it_needs(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    "torch.save's stream says only 'unexpected pos': the free space tells a full disk."

    def stopped(data, f):
        f.write(b"x" * 1000)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1000 vs 64")

    ckpt = load_checkpoint(tiny_checkpoint)
    monkeypatch.setattr(checkpoint.torch, "save", stopped)
    monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda path: Usage(10**9, 10**9, 1000))
    with pytest.raises(OSError) as failed:
        save_checkpoint(tmp_path / "last.pt", ckpt)
    needed = checkpoint.tensor_bytes(ckpt.to_dict()) / 2**20
    path = tmp_path / "last.pt"
    assert str(failed.value) == (
        f"no space left on device writing {path} ({needed:,.1f} MB needed, 0.0 MB free)"
    )
    assert debris(tmp_path) == [] and not path.exists()


def test_tensor_bytes_counts_a_tied_weight_once() -> None:
    import torch

    shared, other = torch.zeros(10, 5), torch.zeros(3)
    assert checkpoint.tensor_bytes({"a": shared, "b": [shared, (other,)], "n": 1}) == 212


# ------------------------------------------------------------------------------ export
FORMATS = ["ctranslate2", "transformers", "onnx"]


def needs(format: str) -> None:
    "Skip unless the format's writer is installed."
    pytest.importorskip(dict(onnx="onnxruntime").get(format, format))


@pytest.fixture(scope="module")
def subword_ckpt(own_run: Path):
    "The made-up files' subword run: every format exports it."
    return load_checkpoint(own_run / "last.pt")


@pytest.mark.parametrize("format", FORMATS)
def test_export_refuses_a_full_disk_before_writing(
    format: str, subword_ckpt, tmp_path: Path, full_disk: None
) -> None:
    needs(format)
    out = tmp_path / "model"
    needed = export_bytes(subword_ckpt, "float32", format) / 2**20
    with pytest.raises(OSError) as failed:
        export_model(subword_ckpt, out, format=format)
    assert str(failed.value) == (
        f"no space left on device for {out} ({needed:,.1f} MB needed, 0.0 MB free)"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("format", FORMATS)
def test_export_refuses_a_size_limit_its_weights_cannot_fit(
    format: str, subword_ckpt, tmp_path: Path
) -> None:
    needs(format)
    out = tmp_path / "model"
    with size_limit(50_000), pytest.raises(OSError) as failed:
        export_model(subword_ckpt, out, format=format)
    said = f"file too large for {out / WEIGHT_FILES[format]} (a size limit of 50,000 bytes, "
    assert str(failed.value).startswith(said), failed.value
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("format", FORMATS)
def test_an_export_the_size_limit_stops_names_the_file(
    format: str, subword_ckpt, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the check (a limit that its estimate fits, as when the disk fills meanwhile), the
    writer's own failure names the file: safetensors' too, whose error hides the errno in its
    text and which removes what it wrote."""
    needs(format)
    monkeypatch.setattr(engines, "export_bytes", lambda *args: 0)
    out = tmp_path / "model"
    with size_limit(200_000), pytest.raises(OSError) as failed:
        export_model(subword_ckpt, out, format=format)
    said = str(failed.value)
    assert said.startswith(f"file too large writing {out}/") and "200,000 bytes" in said, said
    if format != "onnx":  # ONNX's first graph, the encoder, may be the one it stops
        assert f"{out / WEIGHT_FILES[format]} " in said, said
    assert list(tmp_path.iterdir()) == []


def test_an_export_a_full_disk_stops_names_the_newest_file(
    subword_ckpt, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(tmp, *args):
        (tmp / "config.json").write_text("{}")
        (tmp / "model.bin").write_bytes(b"x" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(engines, "_write_folder", full)
    out = tmp_path / "model"
    with pytest.raises(OSError) as failed:
        export_model(subword_ckpt, out)
    assert str(failed.value).startswith(f"no space left on device writing {out / 'model.bin'} (")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------ --output
def test_translate_output_under_a_size_limit_keeps_whole_lines(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    out, limit = tmp_path / "out.txt", 4096
    stdin = "".join(f"Ein Hund läuft {i}\n" for i in range(400))
    argv = ["translate", "--checkpoint", str(tiny_checkpoint), "--output", str(out)]
    done = cli(*argv, stdin=stdin, size_limit=limit)
    assert done.returncode == 1, done.stderr
    line = one_error_line(done.stderr, "translate")
    text = out.read_text()
    kept = text.count("\n")
    assert text.endswith("\n") and 0 < len(text.encode()) <= limit
    said = f"file too large writing {out} (a size limit of 4,096 bytes); it keeps its first {kept}"
    assert line.endswith(f"{said} lines"), line


def test_a_full_disk_cuts_the_output_back_to_its_last_whole_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    "The system writes what fits, then refuses the rest (ENOSPC): the cut line goes."
    room, real = [14], os.write

    def write(fd, data):
        if room[0] == 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real(fd, bytes(data[: room[0]]))
        room[0] -= n
        return n

    path = tmp_path / "out.txt"
    with LineFile(path) as out:
        out.writelines(["one\n", "two\n"])
        out.flush()
        monkeypatch.setattr(translator.os, "write", write)
        out.writelines(["three\n", "four and more\n"])  # 14 bytes fit: 'four and' is cut
        with pytest.raises(OSError) as failed:
            out.flush()
    assert path.read_text() == "one\ntwo\nthree\n"
    assert str(failed.value).startswith(f"no space left on device writing {path} (")
    assert str(failed.value).endswith("; it keeps its first 3 lines")


def test_an_output_file_is_never_one_that_exists(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    path.write_text("mine\n")
    with pytest.raises(FileExistsError):
        LineFile(path)
    assert path.read_text() == "mine\n"


def test_evaluate_output_under_a_size_limit_says_so_in_one_line(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    src = tmp_path / "src.txt"
    src.write_text("".join(f"Ein Hund läuft {i}\n" for i in range(200)))
    out, limit = tmp_path / "out.txt", 1000
    argv = ["evaluate", "--checkpoint", str(tiny_checkpoint), "--src", str(src), "--ref", str(src)]
    done = cli(*argv, "--output", str(out), size_limit=limit)
    assert done.returncode == 1, done.stderr
    line = one_error_line(done.stderr, "evaluate")
    assert f"file too large writing {out} (a size limit of 1,000 bytes); it keeps" in line, line
    assert out.read_text().endswith("\n")
