"""Tests for the console command `annotated-transformer` (annotated_transformer/cli.py): its checks and its exit statuses.

A usage error (a bad flag value, a wrong combination) exits with status 2, a failure the library reports
(a missing or corrupt file, input it cannot use) with status 1; either way with one line on standard
error, `annotated-transformer COMMAND: error: ...`, and no traceback. Checks that need no model come
before the model is loaded, and checks that need it before anything is translated.

1. Flags checked while parsing: every number, --device.
2. Checks after parsing, before any work: wrong combinations, empty input, --layer against the model.
3. Failures: checkpoints, data, output folders, sentences the model cannot read, non-UTF-8 standard input.
4. Beam search's numbers: alpha, a beam wider than the vocabulary.
5. The same through a real process: the exit status, and no traceback.

Most tests call `main` in this process; section 5 runs `python -m annotated_transformer.cli`.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from annotated_transformer.checkpoint import load_checkpoint, model_from_checkpoint
from annotated_transformer.cli import main, parser
from annotated_transformer.data import split_files


TRAIN_ARGS = ["--model", "tiny", "--max-tokens", "400", "--warmup", "20", "--quiet"]
SENTENCE = "Ein Mann sieht einen Ball."


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoint: Path) -> Path:
    "One epoch of the tiny preset on the synthetic pairs (conftest's `tiny_checkpoint`), trained once for this module."
    return tiny_checkpoint


def one_error_line(err: str, command: str) -> str:
    "The message of the one line a refused command writes to standard error."
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"annotated-transformer {command}: error: "), err
    return lines[0]


def refused_while_parsing(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    "Run `main(argv)`, which argparse must refuse: exit status 2, one line; return it."
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    return one_error_line(capsys.readouterr().err, argv[0])


def refused(argv: list[str], status: int, capsys: pytest.CaptureFixture) -> str:
    "Run `main(argv)`, which must return `status` having printed nothing but one line on standard error; return that line."
    assert main(argv) == status
    out, err = capsys.readouterr()
    assert out == "", f"something was printed before the error: {out!r}"
    return one_error_line(err, argv[0])


# =========================================================================== 1. flags checked while parsing
REQUIRED = {
    "train": ["--out", "unused-run"],
    "evaluate": ["--checkpoint", "unused.pt"],
    "translate": ["--checkpoint", "unused.pt", SENTENCE],
}
BAD_FLAGS = [
    ("translate", "--alpha", "nan", "expected a finite number at least 0, got nan"),
    ("translate", "--alpha", "inf", "expected a finite number at least 0, got inf"),
    ("evaluate", "--alpha", "-5", "expected a finite number at least 0, got -5"),
    ("evaluate", "--alpha", "high", "expected a finite number at least 0, got 'high'"),
    ("translate", "--beam", "0", "expected a whole number at least 1, got 0"),
    ("evaluate", "--beam", "2.5", "expected a whole number at least 1, got '2.5'"),
    ("translate", "--average-last", "-1", "expected a whole number at least 1, got -1"),
    ("train", "--dropout", "nan", "expected a probability at least 0 and below 1, got nan"),
    ("train", "--dropout", "1.5", "expected a probability at least 0 and below 1, got 1.5"),
    ("train", "--dropout", "1", "expected a probability at least 0 and below 1, got 1"),
    ("train", "--dropout", "-0.1", "expected a probability at least 0 and below 1, got -0.1"),
    ("train", "--epochs", "0", "expected a whole number at least 1, got 0"),
    ("train", "--max-tokens", "-400", "expected a whole number at least 1, got -400"),
    ("train", "--accum-iter", "0", "expected a whole number at least 1, got 0"),
    ("train", "--warmup", "0", "expected a whole number at least 1, got 0"),
    ("train", "--seed", "-1", "expected a whole number from 0 to 2**32 - 1, got -1"),
    ("train", "--seed", str(2**32), f"expected a whole number from 0 to 2**32 - 1, got {2**32}"),
    ("translate", "--device", "foo", "'foo' is not a device: use cpu, cuda, cuda:N or mps"),
    (
        "train",
        "--device",
        "meta",
        "'meta' is not a device this command runs on: use cpu, cuda, cuda:N or mps",
    ),
]


@pytest.mark.parametrize("command, flag, value, message", BAD_FLAGS)
def test_bad_flag_values_are_refused_while_parsing(
    command: str,
    flag: str,
    value: str,
    message: str,
    tmp_path: Path,
    capsys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # nothing may be written, but if it were, not into the repository
    line = refused_while_parsing([command, *REQUIRED[command], flag, value], capsys)
    assert line.endswith(f"error: argument {flag}: {message}")


def test_good_flag_values_are_accepted() -> None:
    train = parser().parse_args(
        ["train", "--out", "r", "--dropout", "0", "--seed", "0", "--epochs", "1", "--device", "cpu"]
    )
    assert (train.dropout, train.seed, train.epochs, train.device) == (0.0, 0, 1, "cpu")
    decode = parser().parse_args(
        ["evaluate", "--checkpoint", "c.pt", "--alpha", "0", "--beam", "1"]
    )
    assert (decode.alpha, decode.beam) == (0.0, 1)
    assert parser().parse_args(["translate", "--checkpoint", "c.pt", "--alpha", "1.5"]).alpha == 1.5


@pytest.mark.parametrize("command", ["train", "evaluate", "translate"])
def test_a_device_this_machine_lacks_is_refused_while_parsing(
    command: str, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        torch.cuda, "is_available", lambda: False
    )  # this machine, whatever it is, has no GPU
    line = refused_while_parsing([command, *REQUIRED[command], "--device", "cuda"], capsys)
    assert line.endswith(
        "argument --device: cuda is not available: this machine has no cuda device that PyTorch can use"
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # one GPU
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert (
        parser().parse_args([command, *REQUIRED[command], "--device", "cuda:0"]).device == "cuda:0"
    )
    line = refused_while_parsing([command, *REQUIRED[command], "--device", "cuda:1"], capsys)
    assert line.endswith(
        "argument --device: cuda:1 is not available: this machine has 1 cuda device(s), cuda:0 to cuda:0"
    )


# =========================================================================== 2. checks after parsing, before any work
def test_wrong_combinations_and_empty_input_are_refused_before_the_model_loads(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = str(tmp_path / "missing.pt")  # loading it would fail (status 1): these come first
    line = refused(["translate", "--checkpoint", missing, "--layer", "0", SENTENCE], 2, capsys)
    assert line.endswith("--layer chooses the layer that --attention draws: give --attention too")
    line = refused(
        ["translate", "--checkpoint", missing, "--attention", str(tmp_path / "a.jpg"), SENTENCE],
        2,
        capsys,
    )
    assert "--attention needs a .png file name, got" in line
    line = refused(["translate", "--checkpoint", missing, SENTENCE, "  "], 2, capsys)
    assert line.endswith("sentence 2 of the arguments is empty: there is nothing to translate")
    line = refused(
        ["translate", "--checkpoint", missing, "--beam", "2", "--nbest", "3", SENTENCE], 2, capsys
    )
    assert line.endswith(
        "--nbest 3 needs --beam 3 or more: a beam of 2 ends with at most 2 translations"
    )
    line = refused(
        [
            "translate",
            "--checkpoint",
            missing,
            "--nbest",
            "1",
            "--attention",
            str(tmp_path / "a.png"),
            SENTENCE,
        ],
        2,
        capsys,
    )
    assert line.endswith(
        "--attention draws the best translation of each sentence: leave out --nbest"
    )
    (tmp_path / "out.txt").write_text("kept\n")
    line = refused(
        ["translate", "--checkpoint", missing, "--output", str(tmp_path / "out.txt"), SENTENCE],
        2,
        capsys,
    )
    assert line.endswith(
        f"--output {tmp_path / 'out.txt'} exists: choose another name or delete it (it is never overwritten)"
    )
    assert (tmp_path / "out.txt").read_text() == "kept\n"
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\n  \n"))
    )  # no sentence on standard input: no usage error
    line = refused(["translate", "--checkpoint", missing], 1, capsys)
    assert "no checkpoint at" in line


@pytest.mark.parametrize("layer", ["2", "-1"])
def test_a_layer_the_model_lacks_is_refused_before_anything_is_translated(
    layer: str, checkpoint: Path, tmp_path: Path, capsys
) -> None:
    png = tmp_path / "maps" / "attention.png"
    line = refused(
        [
            "translate",
            "--checkpoint",
            str(checkpoint),
            "--attention",
            str(png),
            "--layer",
            layer,
            SENTENCE,
        ],
        2,
        capsys,
    )
    assert line.endswith(
        f"--layer {layer} is out of range: the model has 2 layers, numbered 0 to 1"
    )
    assert not png.exists()


# =========================================================================== 3. failures
def test_unusable_checkpoints_are_failures(tmp_path: Path, capsys) -> None:
    line = refused(["translate", "--checkpoint", str(tmp_path / "missing.pt"), SENTENCE], 1, capsys)
    assert "no checkpoint at" in line and "missing.pt" in line
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all")
    line = refused(["evaluate", "--checkpoint", str(garbage)], 1, capsys)
    assert "is not a readable checkpoint" in line


def test_unusable_data_is_a_failure(
    checkpoint: Path, data_dir: Path, tmp_path: Path, capsys
) -> None:
    german = data_dir / split_files("test2016")[0]
    german.write_bytes(b"not gzip")
    assert (
        main(["evaluate", "--checkpoint", str(checkpoint), "--data-dir", str(data_dir), "--quiet"])
        == 1
    )
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert (
        err.splitlines()[-1].startswith("annotated-transformer evaluate: error: ")
        and german.name in err.splitlines()[-1]
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (
        main(["evaluate", "--checkpoint", str(checkpoint), "--data-dir", str(empty), "--quiet"])
        == 1
    )
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.splitlines()[-1].startswith(
        "annotated-transformer evaluate: error: "
    )


@pytest.mark.parametrize(
    "inside, reason", [("a_file", "it is not a folder"), ("a_file/maps", "Not a directory")]
)
def test_an_attention_folder_that_cannot_be_made_is_a_failure_found_before_the_model_loads(
    inside: str, reason: str, tmp_path: Path, capsys
) -> None:
    (tmp_path / "a_file").write_text("")
    png = tmp_path / inside / "attention.png"
    line = refused(
        [
            "translate",
            "--checkpoint",
            str(tmp_path / "missing.pt"),
            "--attention",
            str(png),
            SENTENCE,
        ],
        1,
        capsys,
    )
    assert line.endswith(f"cannot use {png.parent} as the folder for --attention: {reason}")


def test_a_sentence_the_attention_maps_refuse_stops_the_command_before_any_output(
    checkpoint: Path, tmp_path: Path, capsys
) -> None:
    png = tmp_path / "attention.png"
    line = refused(
        [
            "translate",
            "--checkpoint",
            str(checkpoint),
            "--attention",
            str(png),
            SENTENCE,
            "The dog sees a ball.",
        ],
        1,
        capsys,
    )
    assert "is the sentence in the language the model translates from?" in line
    assert not list(tmp_path.glob("*.png"))


def test_non_utf8_standard_input_is_a_failure_naming_its_line(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        sys,
        "stdin",
        io.TextIOWrapper(io.BytesIO(f"{SENTENCE}\n\nEin \xff Hund.\n".encode("latin-1"))),
    )
    line = refused(
        ["translate", "--checkpoint", str(tmp_path / "missing.pt")], 1, capsys
    )  # read before the checkpoint
    assert line.endswith("standard input, line 3: byte 0xff at position 5 is not UTF-8 text")


def test_standard_input_is_read_as_utf8_lines(
    checkpoint: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    "Windows line ends change nothing, and a blank line gives a blank line: the output lines up with the input."
    second = "Zwei Männer sehen ein Auto im Schnee."
    assert main(["translate", "--checkpoint", str(checkpoint), SENTENCE, second]) == 0
    first_out, second_out = capsys.readouterr().out.splitlines()
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO(f"{SENTENCE}\r\n\r\n{second}\r\n".encode()))
    )
    assert main(["translate", "--checkpoint", str(checkpoint)]) == 0
    assert capsys.readouterr().out == f"{first_out}\n\n{second_out}\n"


# =========================================================================== 4. beam search's numbers
def test_an_alpha_too_large_for_the_length_penalty_is_a_failure(checkpoint: Path, capsys) -> None:
    line = refused(
        ["translate", "--checkpoint", str(checkpoint), "--beam", "2", "--alpha", "1000", SENTENCE],
        1,
        capsys,
    )
    assert "alpha=1000.0 is too large: the length penalty of" in line
    assert (
        main(
            ["translate", "--checkpoint", str(checkpoint), "--beam", "2", "--alpha", "0", SENTENCE]
        )
        == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_a_beam_wider_than_the_vocabulary_translates(checkpoint: Path, capsys) -> None:
    _, _, tgt_vocab = model_from_checkpoint(load_checkpoint(checkpoint))
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                str(checkpoint),
                "--beam",
                str(2 * len(tgt_vocab)),
                SENTENCE,
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and err == ""


# =========================================================================== 5. through a real process
def run_command(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    "Run `python -m annotated_transformer.cli ARGS` with `stdin` on its standard input; its output captured as bytes."
    return subprocess.run(
        [sys.executable, "-m", "annotated_transformer.cli", *args],
        input=stdin,
        capture_output=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )


@pytest.mark.parametrize(
    "args, stdin, status, message",
    [
        (
            ["--alpha", "nan", SENTENCE],
            b"",
            2,
            "argument --alpha: expected a finite number at least 0, got nan",
        ),
        (
            ["--layer", "5", "--attention", "{tmp}/a.png", SENTENCE],
            b"",
            2,
            "--layer 5 is out of range",
        ),
        (["--checkpoint", "{tmp}/missing.pt", SENTENCE], b"", 1, "no checkpoint at"),
        (
            [],
            b"Ein Mann.\n\xe4 ist kein UTF-8.\n",
            1,
            "standard input, line 2: byte 0xe4 at position 1 is not UTF-8 text",
        ),
    ],
    ids=["bad-flag", "layer", "missing-checkpoint", "latin-1-stdin"],
)
def test_a_real_process_exits_with_the_status_and_one_line(
    args: list[str], stdin: bytes, status: int, message: str, checkpoint: Path, tmp_path: Path
) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    done = run_command(
        "translate", "--checkpoint", str(checkpoint), *args, stdin=stdin
    )  # a later --checkpoint wins
    err = done.stderr.decode()
    assert done.returncode == status, err
    assert done.stdout == b"" and "Traceback" not in err
    assert message in one_error_line(err, "translate")


# =========================================================================== 6. conventions: --version, examples, --debug, only the flags a command uses
def test_version_and_examples(capsys) -> None:
    from annotated_transformer import __version__

    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert (
        exit.value.code == 0 and capsys.readouterr().out == f"annotated-transformer {__version__}\n"
    )
    for command in ("train", "evaluate", "translate"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        help_text = capsys.readouterr().out
        assert (
            "examples:\n" in help_text
            and f"annotated-transformer {command} --" in help_text.split("examples:")[1]
        )


def test_translate_does_not_offer_data_dir(capsys) -> None:
    "translate never reads a data folder, so it has no --data-dir; train and evaluate do."
    with pytest.raises(SystemExit) as exit:
        main(["translate", "--checkpoint", "x.pt", "--data-dir", "d", SENTENCE])
    assert exit.value.code == 2
    assert (
        capsys.readouterr().err
        == "annotated-transformer: error: unrecognized arguments: --data-dir\n"
    )
    assert parser().parse_args(
        ["evaluate", "--checkpoint", "x.pt", "--data-dir", "d"]
    ).data_dir == Path("d")


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    done = run_command(
        "translate", "--checkpoint", str(tmp_path / "missing.pt"), "--debug", SENTENCE
    )
    err = done.stderr.decode()
    assert (
        done.returncode == 1
        and err.startswith("Traceback")
        and err.rstrip().endswith(f"no checkpoint at {tmp_path / 'missing.pt'}")
    )
