"""Helpers of the tests of the console command `annotated-transformer`: its one-line errors, runs
in a process of its own, and the flags of a run on your own files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from resource import RLIMIT_FSIZE, setrlimit
from pathlib import Path

import pytest

from annotated_transformer.cli import main

TINY_RUN = ["--model", "tiny", "--max-tokens", "400", "--warmup", "20", "--quiet"]
OWN_FILE_FLAGS = ("train_src", "train_tgt", "valid_src", "valid_tgt")


def own_file_args(corpus: dict[str, Path]) -> list[str]:
    "The four flags of train that name your own files, with the corpus's files."
    return [
        arg for name in OWN_FILE_FLAGS for arg in ("--" + name.replace("_", "-"), str(corpus[name]))
    ]


def one_error_line(err: str, command: str) -> str:
    "The one line a refused command writes to standard error: no traceback, not the catch-all."
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"annotated-transformer {command}: error: "), err
    assert "Traceback" not in err and "internal error" not in err, err
    return lines[0]


def refused(argv: list[str], status: int, capsys: pytest.CaptureFixture) -> str:
    "Run `main(argv)`, which must end with `status` (argparse's exit too) and one line on stderr."
    try:
        assert main(argv) == status
    except SystemExit as exit:  # a bad flag: argparse's usage error
        assert exit.code == status
    out, err = capsys.readouterr()
    assert out == "", f"something was printed before the error: {out!r}"
    return one_error_line(err, argv[0])


def refused_while_parsing(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    "Run `main(argv)`, which argparse must refuse: exit status 2, one line; return it."
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    return one_error_line(capsys.readouterr().err, argv[0])


def environment() -> dict[str, str]:
    """The environment of a command the tests start: this one's now, one thread (the cores are
    shared)."""
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def cli(
    *args: str,
    stdin: str | bytes | None = None,
    cwd: Path | None = None,
    env: dict | None = None,
    size_limit: int | None = None,  # the file-size limit (`ulimit -f`) in bytes; None: as is
) -> subprocess.CompletedProcess:
    "`python -m annotated_transformer.cli ARGS` to the end; text in and out (bytes for bytes in)."
    text = not isinstance(stdin, bytes)
    limit = (size_limit, size_limit)
    return subprocess.run(
        [sys.executable, "-m", "annotated_transformer.cli", *args],
        input=stdin,
        capture_output=True,
        text=text,
        encoding="utf-8" if text else None,
        cwd=cwd,
        env=env or environment(),
        timeout=600,
        preexec_fn=None if size_limit is None else lambda: setrlimit(RLIMIT_FSIZE, limit),
    )


def train_argv(out: Path, data: Path, *flags: str) -> list[str]:
    "The argv of a tiny `train` into `out` on the corpus in `data`."
    return ["train", "--out", str(out), "--data-dir", str(data), *TINY_RUN, *flags]


def copy_run(run: Path, to: Path) -> Path:
    "A copy of a run's files, its marker included (not its lock, nor a user's notes.txt)."
    shutil.copytree(run, to, ignore=shutil.ignore_patterns(".lock", ".writer", "notes.txt"))
    return to


def one_line_failure(argv: list[str], capsys: pytest.CaptureFixture, status: int = 1) -> str:
    "Run `argv`: it must exit with `status` and one error line, no traceback, no catch-all."
    assert main(argv) == status
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    return err.strip()
