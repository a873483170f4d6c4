"""Resources a command may be asked for, and what it says when they run out (issue 36), in one line,
never a traceback:

- out of memory (a real allocation that fails under a memory limit, and the three ways PyTorch and
  Python say it) names what needs less: --max-tokens to train, --batch-size or --beam to decode;
- --beam has a maximum (1,000), --max-parameters bounds what a checkpoint or export may declare on
  every command that loads one;
- anything else unexpected is the CLI's catch-all, one line naming the exception, and `--debug`
  shows its traceback instead.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
import sys

import pytest
import torch
from clitools import environment, one_error_line, refused

from annotated_transformer import cli
from annotated_transformer.cli import main
from annotated_transformer.config import MAX_PARAMETERS, RuntimeOptions
from annotated_transformer.fast_decoding import Search

CATCH_ALL = "internal error"


# ------------------------------------------------------------------------------- out of memory
def test_a_real_allocation_that_fails_is_out_of_memory_not_a_traceback(data_dir, tmp_path):
    "A model of 40 billion parameters under a 3 GB limit: PyTorch's CPU allocator gives up."
    config = tmp_path / "huge.toml"
    config.write_text("[model]\nd_model = 8192\nd_ff = 32768\nN = 48\nh = 8\n")
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))  # noqa: E731
    command = [sys.executable, "-m", "annotated_transformer.cli", "train", "--out"]
    command += [str(tmp_path / "run"), "--data-dir", str(data_dir), "--config", str(config)]
    done = subprocess.run(
        [*command, "--quiet"],
        capture_output=True,
        text=True,
        env=environment(),
        preexec_fn=limit,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    line = one_error_line(done.stderr, "train")
    assert line.endswith(
        "out of memory on this machine: a smaller --max-tokens (or model) needs less"
    )


CPU_ALLOCATOR = (
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
    "you tried to allocate 1073741824 bytes. Error code 12 (Cannot allocate memory)"
)
RAN_OUT = [  # (id, the error, where, the command and what the line says needs less)
    ("python-memory-error", MemoryError(), "this machine"),
    ("pytorch-cpu-allocator", RuntimeError(CPU_ALLOCATOR), "this machine"),
    ("cuda-out-of-memory", torch.OutOfMemoryError("CUDA out of memory. Tried 20 GiB"), "the GPU"),
]
COMMANDS = [  # (command, the name in cli.py it calls, what needs less memory)
    ("train", "train", "a smaller --max-tokens (or model)"),
    ("translate", "load_translator", "a smaller --batch-size or --beam"),
    ("evaluate", "load_translator", "a smaller --batch-size or --beam"),
    ("export", "export_checkpoint", None),
]


def argv_of(command: str, checkpoint, tmp_path) -> list[str]:
    "A command line of `command` that gets as far as loading (or training)."
    run = ["--checkpoint", str(checkpoint)]
    return {
        "train": ["train", "--out", str(tmp_path / "run")],
        "translate": ["translate", *run, "Ein Mann."],
        "evaluate": ["evaluate", *run, "--src", str(tmp_path / "s"), "--ref", str(tmp_path / "s")],
        "export": ["export", *run, "--out", str(tmp_path / "export")],
    }[command]


@pytest.mark.parametrize("command, name, less", COMMANDS, ids=[c[0] for c in COMMANDS])
@pytest.mark.parametrize("error, where", [r[1:] for r in RAN_OUT], ids=[r[0] for r in RAN_OUT])
def test_out_of_memory_is_one_line_naming_what_needs_less(
    tiny_checkpoint, tmp_path, monkeypatch, capsys, command, name, less, error, where
):
    (tmp_path / "s").write_text("Ein Mann.\n")

    def run_out(*args, **kwargs):
        raise error

    monkeypatch.setattr(cli, name, run_out)
    line = refused(argv_of(command, tiny_checkpoint, tmp_path), 1, capsys)
    said = f"out of memory on {where}" + (f": {less} needs less" if less else "")
    assert line.endswith(f"error: {said}") and CATCH_ALL not in line


# ------------------------------------------------------------------------------- the catch-all
UNEXPECTED = [
    ("zero-division", ZeroDivisionError("division by zero"), "ZeroDivisionError: division by zero"),
    ("key-error", KeyError("w_q"), "KeyError: 'w_q'"),
    ("two-lines", TypeError("first\nsecond"), "TypeError: first second"),
    ("long", AssertionError("x" * 10_000), "AssertionError: xxx"),
]


@pytest.mark.parametrize(
    "error, shown", [u[1:] for u in UNEXPECTED], ids=[u[0] for u in UNEXPECTED]
)
def test_anything_unexpected_is_one_line_and_debug_shows_the_traceback(
    tiny_checkpoint, tmp_path, monkeypatch, capsys, error, shown
):
    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(cli, "load_translator", fail)
    argv = ["translate", "--checkpoint", str(tiny_checkpoint), "Ein Mann."]
    assert main(argv) == 1
    err = capsys.readouterr().err  # the catch-all's line: one, and no traceback
    [line] = err.splitlines()
    assert "Traceback" not in err and f"error: {CATCH_ALL} ({shown}" in line and len(line) < 400
    assert line.endswith("); rerun with --debug for the traceback")
    with pytest.raises(type(error)):
        main([*argv, "--debug"])


def test_a_recursion_error_is_one_line(tiny_checkpoint, monkeypatch, capsys):
    def recurse(*args, **kwargs):
        return recurse()

    monkeypatch.setattr(cli, "load_translator", recurse)
    line = refused(["translate", "--checkpoint", str(tiny_checkpoint), "Ein Mann."], 1, capsys)
    assert "nested too deeply" in line and CATCH_ALL not in line


# ------------------------------------------------------------------------------------ --beam
@pytest.mark.parametrize("beam", ["1001", "100000", "10" + "0" * 400])
@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_beam_has_a_maximum(tiny_checkpoint, capsys, command, beam):
    line = refused([command, "--checkpoint", str(tiny_checkpoint), "--beam", beam], 2, capsys)
    assert "argument --beam: beam_size must be at least 1 and at most 1,000, got" in line
    assert len(line) < 200


def test_the_widest_beam_is_allowed():
    assert Search(beam_size=1_000, nbest=1_000).beam_size == 1_000


# --------------------------------------------------------------------------- --max-parameters
@pytest.mark.parametrize(
    "command", ["translate", "evaluate", "evaluate-average", "export", "export-average", "resume"]
)
def test_max_parameters_bounds_every_command_that_loads(tiny_checkpoint, tmp_path, capsys, command):
    run = tmp_path / "run"
    shutil.copytree(tiny_checkpoint.parent, run)  # resuming may not touch the fixture's run
    checkpoint = ["--checkpoint", str(run / "last.pt")]
    average = ["--average-last", "1"] if command.endswith("-average") else []
    (tmp_path / "s").write_text("Ein Mann.\n")
    argv = {
        "translate": ["translate", *checkpoint, "Ein Mann."],
        "evaluate": ["evaluate", *checkpoint, "--src", str(tmp_path / "s")],
        "export": ["export", *checkpoint, "--out", str(tmp_path / "export")],
        "resume": ["train", "--out", str(run), "--resume", "--epochs", "2", "--model", "tiny"],
    }[command.split("-")[0]]
    argv += ["--ref", str(tmp_path / "s")] if command.startswith("evaluate") else []
    line = refused([*argv, *average, "--max-parameters", "1000"], 1, capsys)
    assert "last.pt" in line and "more than the 1,000 allowed" in line
    assert "--max-parameters" in line and CATCH_ALL not in line
    assert not (tmp_path / "export").exists()


@pytest.mark.parametrize("command", ["train", "translate", "evaluate", "export"])
def test_max_parameters_is_checked_while_parsing(tmp_path, capsys, command):
    argv = [command, "--out" if command == "train" else "--checkpoint", str(tmp_path / "x")]
    line = refused([*argv, "--max-parameters", "0"], 2, capsys)
    assert "argument --max-parameters: max_parameters must be at least 1, got" in line


def test_max_parameters_defaults_to_the_stated_limit():
    assert RuntimeOptions().max_parameters == MAX_PARAMETERS == 500_000_000
