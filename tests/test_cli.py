"""The console command `annotated-transformer` (annotated_transformer/cli.py): its arguments, its
checks and its exit statuses. What each command does is tested in test_cli_train.py (train) and
test_cli_translate.py (translate, evaluate); a --config file's errors in test_config.py.

A usage error (a bad flag value, a wrong combination) exits with status 2, a failure the library
reports (a missing or corrupt file, input it cannot use) with status 1; either way with one line on
standard error, `annotated-transformer COMMAND: error: ...`, and no traceback. Checks that need no
model come before the model is loaded, and checks that need it before anything is translated.

1. Flags checked while parsing: every number, --device.
2. Checks after parsing, before any work: wrong combinations, empty input, --layer against the
   model, the flags of your own files and of evaluate, the output folder.
3. Failures: checkpoints, data, output folders, sentences the model cannot read, non-UTF-8 input.
4. Beam search's numbers: alpha, a beam wider than the vocabulary.
5. The same through a real process: the exit status, and no traceback.
6. Conventions: --version, examples, --debug, warnings in one line, only the flags a command uses.
7. Flags made from the records: at most 400 lines of cli.py, every bad value refused with its
   record's own message, no rule of a record's in cli.py, and a new option that is one field.

Most tests call `main` in this process; section 5 runs `python -m annotated_transformer.cli`.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import torch
from clitools import TINY_RUN, cli, environment, one_error_line, own_file_args, refused
from clitools import refused_while_parsing

import annotated_transformer.cli as command_line
from annotated_transformer.checkpoint import load_checkpoint
from annotated_transformer.cli import main, parser
from annotated_transformer.config import ChoiceError, Choices, RuntimeOptions, TrainConfig, setting
from annotated_transformer.data import split_files
from annotated_transformer.fast_decoding import Search

SENTENCE = "Ein Mann sieht einen Ball."


# =================================================================== 1. flags checked while parsing
REQUIRED = {
    "train": ["--out", "unused-run"],
    "evaluate": ["--checkpoint", "unused.pt"],
    "translate": ["--checkpoint", "unused.pt", SENTENCE],
}
BAD_FLAGS = [  # the messages are the records' own (config.check_setting): see section 7
    ("translate", "--alpha", "nan", "alpha must be a finite number, got alpha=nan"),
    ("translate", "--alpha", "inf", "alpha must be a finite number, got alpha=inf"),
    ("evaluate", "--alpha", "-5", "alpha must be at least 0, got alpha=-5.0"),
    ("evaluate", "--alpha", "high", "alpha must be a finite number, got alpha='high'"),
    ("translate", "--beam", "0", "beam_size must be at least 1 and at most 1,000, got beam_size=0"),
    ("evaluate", "--beam", "2.5", "beam_size must be a whole number, got beam_size='2.5'"),
    ("translate", "--nbest", "0", "nbest must be at least 1, got nbest=0"),
    ("train", "--dropout", "nan", "dropout must be a finite number, got dropout=nan"),
    ("train", "--dropout", "1.5", "dropout must be at least 0 and below 1, got dropout=1.5"),
    ("train", "--dropout", "1", "dropout must be at least 0 and below 1, got dropout=1.0"),
    ("train", "--dropout", "-0.1", "dropout must be at least 0 and below 1, got dropout=-0.1"),
    ("train", "--epochs", "0", "epochs must be at least 1 and at most 100,000, got epochs=0"),
    ("train", "--max-tokens", "-400", "max_tokens must be at least 1 and at most 10,000,000"),
    ("train", "--accum-iter", "0", "accum_iter must be at least 1 and at most 100,000, got"),
    ("train", "--warmup", "0", "warmup must be at least 1 and at most 100,000,000, got warmup=0"),
    ("train", "--smoothing", "1", "smoothing must be at least 0 and below 1, got smoothing=1.0"),
    ("train", "--factor", "0", "factor must be above 0 and at most 1,000.0, got factor=0.0"),
    ("train", "--max-grad-norm", "0", "max_grad_norm must be above 0, got max_grad_norm=0.0"),
    ("train", "--seed", "-1", "seed must be at least 0 and at most 4,294,967,295, got seed=-1"),
    ("train", "--seed", str(2**32), "seed must be at least 0 and at most 4,294,967,295, got seed="),
    ("train", "--subset-seed", "-1", "subset_seed must be at least 0 and at most 4,294,967,295"),
    ("train", "--vocab-size", "100", "vocab_size must be at least 261 and at most 1,000,000"),
    ("train", "--model", "huge", "size must be one of base, big, multi30k, small, tiny, got"),
    ("train", "--src-lang", "German", "src_lang must be a language code such as de, en or fr, got"),
    ("translate", "--device", "foo", "'foo' is not a device: use cpu, cuda, cuda:N or mps"),
    ("train", "--device", "meta", "'meta' is not a device this command runs on: use cpu, cuda"),
    ("translate", "--average-last", "x", "invalid int value: 'x'"),
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
    assert f"error: argument {flag}: {message}" in line


def test_good_flag_values_are_accepted() -> None:
    train = parser().parse_args(
        ["train", "--out", "r", "--dropout", "0", "--seed", "0", "--epochs", "1", "--device", "cpu"]
    )
    # exact: the flags, parsed
    assert (train.dropout, train.seed, train.epochs, train.device) == (0.0, 0, 1, "cpu")
    decode = parser().parse_args(
        ["evaluate", "--checkpoint", "c.pt", "--alpha", "0", "--beam", "1"]
    )
    # exact: the flags, parsed; the dest is the field's name
    assert (decode.alpha, decode.beam_size) == (0.0, 1)
    # exact: "1.5", parsed
    assert parser().parse_args(["translate", "--checkpoint", "c.pt", "--alpha", "1.5"]).alpha == 1.5


def test_every_training_setting_has_its_flag() -> None:
    "Each TrainConfig field that changes training is set by a flag built from it (§5.3, §5.4)."
    from annotated_transformer.cli import given
    from annotated_transformer.config import TrainConfig

    flags = ["--smoothing", "0.2", "--factor", "2", "--max-grad-norm", "5"]
    args = parser().parse_args(["train", "--out", "r", *flags])
    # exact: the flags, parsed
    assert given(args, TrainConfig) == {"smoothing": 0.2, "factor": 2.0, "max_grad_norm": 5.0}
    unflagged = [f.name for f in dataclasses.fields(TrainConfig) if not f.metadata.get("help")]
    assert unflagged == ["model", "vocab_size"]  # set by --model, --arch, ... and --vocab-size


def test_model_offers_the_named_sizes(capsys) -> None:
    "--model's choices are the configuration's sizes, each of which it accepts."
    from annotated_transformer.config import PRESETS

    assert list(PRESETS) == ["base", "big", "multi30k", "small", "tiny"]
    for name in PRESETS:
        assert parser().parse_args(["train", "--out", "r", "--model", name]).size == name
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "--model {base,big,multi30k,small,tiny}" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["train", "evaluate", "translate"])
def test_a_device_this_machine_lacks_is_refused_while_parsing(
    command: str, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    # this machine, whatever it is, has no GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    line = refused_while_parsing([command, *REQUIRED[command], "--device", "cuda"], capsys)
    assert line.endswith(
        "argument --device: cuda is not available: "
        "this machine has no cuda device that PyTorch can use"
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # one GPU
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert (
        parser().parse_args([command, *REQUIRED[command], "--device", "cuda:0"]).device == "cuda:0"
    )
    line = refused_while_parsing([command, *REQUIRED[command], "--device", "cuda:1"], capsys)
    assert line.endswith(
        "argument --device: cuda:1 is not available: "
        "this machine has 1 cuda device(s), cuda:0 to cuda:0"
    )


# ========================================================= 2. checks after parsing, before any work
WRONG_COMBINATIONS = [
    (
        ["--layer", "0", SENTENCE],
        "--layer chooses the layer that --attention draws: give --attention too",
    ),
    (
        ["--attention", "{tmp}/a.jpg", SENTENCE],
        "--attention needs a .png file name, got {tmp}/a.jpg",
    ),
    ([SENTENCE, "  "], "sentence 2 of the arguments is empty: nothing to translate"),
    (["--buffer-size", "0", SENTENCE], "--buffer-size must be at least 1, got 0"),
    (
        ["--beam", "2", "--nbest", "3", SENTENCE],
        "nbest=3 needs beam_size=3 or more: a beam of 2 ends with at most 2 translations",
    ),
    (
        ["--nbest", "1", "--attention", "{tmp}/a.png", SENTENCE],
        "--attention draws each sentence's best translation: leave out --nbest",
    ),
    (
        ["--output", "{tmp}/out.txt", SENTENCE],
        "--output {tmp}/out.txt exists: it is never overwritten",
    ),
]


@pytest.mark.parametrize(
    "args, message",
    WRONG_COMBINATIONS,
    ids=[
        "layer",
        "attention-jpg",
        "empty",
        "buffer-size",
        "nbest-beam",
        "nbest-attention",
        "output-exists",
    ],
)
def test_wrong_combinations_and_empty_input_are_refused_before_the_model_loads(
    args: list[str], message: str, tmp_path: Path, capsys
) -> None:
    missing = str(tmp_path / "missing.pt")  # loading it would fail (status 1): these come first
    (tmp_path / "out.txt").write_text("kept\n")
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    line = refused(["translate", "--checkpoint", missing, *args], 2, capsys)
    assert line.endswith(message.replace("{tmp}", str(tmp_path)))
    assert (tmp_path / "out.txt").read_text() == "kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # nothing made


def test_standard_input_without_a_sentence_is_no_usage_error(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    "Blank lines only: read before the checkpoint loads, and no usage error (it loads, and fails)."
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\n  \n")))
    line = refused(["translate", "--checkpoint", str(tmp_path / "missing.pt")], 1, capsys)
    assert "no checkpoint at" in line


@pytest.mark.parametrize("layer", ["2", "-1", "7"])
def test_a_layer_the_model_lacks_is_refused_before_anything_is_translated(
    layer: str, tiny_checkpoint: Path, tmp_path: Path, capsys
) -> None:
    png = tmp_path / "maps" / "attention.png"
    argv = ["translate", "--checkpoint", str(tiny_checkpoint), "--attention", str(png)]
    line = refused([*argv, "--layer", layer, SENTENCE], 2, capsys)
    assert line.endswith(
        f"--layer {layer} is out of range: the model has 2 layers, numbered 0 to 1"
    )
    assert not png.exists()


@pytest.mark.parametrize(
    "drop, extra, message",
    [
        ("--valid-tgt", [], "--train-src, --train-tgt, --valid-src, --valid-tgt go together"),
        (None, ["--data-dir", "somewhere"], "--data-dir does not go with --train-src"),
        (None, ["--src-lang", "fr"], "src_lang and tgt_lang choose the languages of a named"),
    ],
    ids=["three-files", "data-dir", "src-lang"],
)
def test_flags_of_your_own_files_that_do_not_go_together_are_usage_errors(
    drop: str | None,
    extra: list[str],
    message: str,
    own_corpus: dict[str, Path],
    tmp_path: Path,
    capsys,
) -> None:
    args = own_file_args(own_corpus)
    if drop:
        del args[args.index(drop) : args.index(drop) + 2]
    line = refused(["train", "--out", str(tmp_path / "run"), *args, *extra, *TINY_RUN], 2, capsys)
    assert message in line
    if drop:
        assert line.endswith("--valid-tgt missing")
    assert not (tmp_path / "run").exists()


def test_a_file_of_your_own_that_is_missing_is_a_usage_error(
    own_corpus: dict[str, Path], tmp_path: Path, capsys
) -> None:
    args = own_file_args(own_corpus)
    args[args.index("--valid-src") + 1] = str(tmp_path / "nope")
    line = refused(["train", "--out", str(tmp_path / "run"), *args, *TINY_RUN], 2, capsys)
    assert line.endswith(f"--valid-src {tmp_path / 'nope'}: no such file")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--src", "{src}"], "--src, --ref go together: --ref missing"),
        (["--src", "{src}", "--ref", "{tmp}/nope"], "--ref {tmp}/nope: no such file"),
        (
            ["--src", "{src}", "--ref", "{ref}", "--split", "val"],
            "--split does not go with --src: give one of them",
        ),
        (["--src", "{src}", "--ref", "{ref}", "--output", "{src}"], "--output {src} exists"),
    ],
    ids=["src-without-ref", "missing-ref", "split", "output-exists"],
)
def test_evaluate_flags_are_checked_before_the_checkpoint_loads(
    args: list[str], message: str, own_corpus: dict[str, Path], tmp_path: Path, capsys
) -> None:
    names = {"{src}": own_corpus["test_src"], "{ref}": own_corpus["test_ref"], "{tmp}": tmp_path}

    def filled(text: str) -> str:
        for name, value in names.items():
            text = text.replace(name, str(value))
        return text

    argv = ["evaluate", "--checkpoint", str(tmp_path / "missing.pt"), *map(filled, args)]
    assert filled(message) in refused(argv, 2, capsys)


def test_an_unusable_output_folder_is_reported_before_anything_else(tmp_path: Path, capsys) -> None:
    (tmp_path / "some_file").write_text("")
    missing_data = tmp_path / "no-such-data"  # would fail too, but later: the folder comes first
    out = tmp_path / "some_file" / "run"
    argv = ["train", "--out", str(out), "--data-dir", str(missing_data), *TINY_RUN]
    line = refused(argv, 1, capsys)
    assert f"cannot use {out} as the output folder" in line


# =========================================================================== 3. failures
def test_unusable_checkpoints_are_failures(tiny_checkpoint: Path, tmp_path: Path, capsys) -> None:
    line = refused(["translate", "--checkpoint", str(tmp_path / "missing.pt"), SENTENCE], 1, capsys)
    assert "no checkpoint at" in line and "missing.pt" in line
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all")
    line = refused(["evaluate", "--checkpoint", str(garbage)], 1, capsys)
    assert f"{garbage} is not a readable checkpoint" in line
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(tiny_checkpoint.read_bytes()[:1000])
    line = refused(["translate", "--checkpoint", str(truncated), SENTENCE], 1, capsys)
    assert f"{truncated} is not a readable checkpoint" in line


def test_unusable_data_is_a_failure(tiny_checkpoint: Path, data_dir: Path, tmp_path: Path, capsys):
    german = data_dir / split_files("test2016")[0]
    german.write_bytes(b"not gzip")
    argv = ["evaluate", "--checkpoint", str(tiny_checkpoint), "--quiet"]
    line = refused([*argv, "--data-dir", str(data_dir)], 1, capsys)
    assert german.name in line
    empty = tmp_path / "empty"
    empty.mkdir()
    line = refused([*argv, "--data-dir", str(empty)], 1, capsys)
    assert str(empty) in line


@pytest.mark.parametrize(
    "inside, reason", [("a_file", "it is not a folder"), ("a_file/maps", "Not a directory")]
)
def test_an_attention_folder_that_cannot_be_made_is_a_failure_found_before_the_model_loads(
    inside: str, reason: str, tmp_path: Path, capsys
) -> None:
    (tmp_path / "a_file").write_text("")
    png = tmp_path / inside / "attention.png"
    argv = ["translate", "--checkpoint", str(tmp_path / "missing.pt"), "--attention", str(png)]
    line = refused([*argv, SENTENCE], 1, capsys)
    assert line.endswith(f"cannot use {png.parent} as --attention's folder: {reason}")


def test_a_sentence_the_attention_maps_refuse_stops_the_command_before_any_output(
    tiny_checkpoint: Path, tmp_path: Path, capsys
) -> None:
    png = tmp_path / "attention.png"
    argv = ["translate", "--checkpoint", str(tiny_checkpoint), "--attention", str(png)]
    line = refused([*argv, SENTENCE, "The dog sees a ball."], 1, capsys)
    assert (
        "5 of the 6 tokens of 'The dog sees a ball.' are not in the model's source vocabulary"
        in line
    )
    assert "is the sentence in the language the model translates from?" in line
    assert not list(tmp_path.glob("*.png"))


def test_non_utf8_standard_input_is_a_failure_naming_its_line(
    tiny_checkpoint: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    "The lines before it are translated and written first (round four: they were lost)."
    text = f"{SENTENCE}\n\nEin \xff Hund.\n".encode("latin-1")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text)))
    assert main(["translate", "--checkpoint", str(tiny_checkpoint)]) == 1
    out, err = capsys.readouterr()
    assert out.count("\n") == 2 and out.endswith("\n\n")  # the sentence's line, the blank one
    line = one_error_line(err, "translate")
    assert line.endswith("standard input, line 3: byte 0xff at position 5 is not UTF-8 text")


def test_standard_input_is_read_as_utf8_lines(
    tiny_checkpoint: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    "Windows line ends change nothing, and a blank line gives a blank line: the output lines up."
    second = "Zwei Männer sehen ein Auto im Schnee."
    assert main(["translate", "--checkpoint", str(tiny_checkpoint), SENTENCE, second]) == 0
    first_out, second_out = capsys.readouterr().out.splitlines()
    text = f"{SENTENCE}\r\n\r\n{second}\r\n".encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text)))
    assert main(["translate", "--checkpoint", str(tiny_checkpoint)]) == 0
    assert capsys.readouterr().out == f"{first_out}\n\n{second_out}\n"


# ========================================================================= 4. beam search's numbers
def test_an_alpha_too_large_for_the_length_penalty_is_a_failure(
    tiny_checkpoint: Path, capsys
) -> None:
    argv = ["translate", "--checkpoint", str(tiny_checkpoint), "--beam", "2"]
    line = refused([*argv, "--alpha", "1000", SENTENCE], 1, capsys)
    assert "alpha=1000.0 is too large: the length penalty of" in line
    assert main([*argv, "--alpha", "0", SENTENCE]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_a_beam_wider_than_the_vocabulary_translates(tiny_checkpoint: Path, capsys) -> None:
    width = 2 * len(load_checkpoint(tiny_checkpoint).tgt_vocab)
    argv = ["translate", "--checkpoint", str(tiny_checkpoint), "--beam", str(width), SENTENCE]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and err == ""


# ======================================================================== 5. through a real process
@pytest.mark.parametrize(
    "args, stdin, status, message",
    [
        (
            ["--alpha", "nan", SENTENCE],
            b"",
            2,
            "argument --alpha: alpha must be a finite number, got alpha=nan",
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
    args: list[str], stdin: bytes, status: int, message: str, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    # a later --checkpoint wins
    done = cli("translate", "--checkpoint", str(tiny_checkpoint), *args, stdin=stdin)
    err = done.stderr.decode()
    assert done.returncode == status, err
    # the lines before a bad one are written (the latin-1 case's first line), nothing else
    assert done.stdout.count(b"\n") == stdin.count(b"\n") - 1 if stdin else done.stdout == b""
    assert "Traceback" not in err
    assert message in one_error_line(err, "translate")


# =========================================================================== 6. conventions
def test_version_and_examples(capsys) -> None:
    from annotated_transformer import __version__

    assert __version__ == "0.3.0"
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out == f"annotated-transformer {__version__}\n"
    for command in ("train", "evaluate", "translate"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        help_text = capsys.readouterr().out
        assert "examples:\n" in help_text
        assert f"annotated-transformer {command} --" in help_text.split("examples:")[1]


def test_translate_does_not_offer_data_dir(capsys) -> None:
    "translate never reads a data folder, so it has no --data-dir; train and evaluate do."
    with pytest.raises(SystemExit) as exit:
        main(["translate", "--checkpoint", "x.pt", "--data-dir", "d", SENTENCE])
    assert exit.value.code == 2
    assert (
        capsys.readouterr().err
        == "annotated-transformer: error: unrecognized arguments: --data-dir\n"
    )
    evaluate = parser().parse_args(["evaluate", "--checkpoint", "x.pt", "--data-dir", "d"])
    assert evaluate.data_dir == Path("d")


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pt"
    done = cli("translate", "--checkpoint", str(missing), "--debug", SENTENCE)
    assert done.returncode == 1 and done.stderr.startswith("Traceback")
    assert done.stderr.rstrip().endswith(f"no checkpoint at {missing}")


@pytest.mark.filterwarnings(  # this test wants it
    "default:Multi30k file differs from the published one:UserWarning"
)
def test_warnings_are_one_line_in_the_console(
    tiny_checkpoint: Path, synthetic_corpus: Path, capsys
) -> None:
    capsys.readouterr()
    argv = ["evaluate", "--checkpoint", str(tiny_checkpoint), "--split", "test2016"]
    assert main([*argv, "--data-dir", str(synthetic_corpus), "--quiet"]) == 0
    err = capsys.readouterr().err
    # the synthetic files differ from the published ones
    assert (
        "annotated-transformer evaluate: warning: Multi30k file differs from the published one"
        in err
    )
    assert "warnings.warn" not in err
    assert all(
        line.startswith("annotated-transformer evaluate: warning:") for line in err.splitlines()
    )


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--split", "dev"], "split 'dev': multi30k has train, val, test2016"),
        (["--average-last", "0"], "average_last must be at least 1, got average_last=0"),
    ],
    ids=["unknown-split", "average-none"],
)
def test_evaluate_refuses_a_split_or_average_it_cannot_have(
    tiny_checkpoint: Path, synthetic_corpus: Path, flags: list[str], message: str, capsys
) -> None:
    argv = ["evaluate", "--checkpoint", str(tiny_checkpoint), "--data-dir", str(synthetic_corpus)]
    assert main([*argv, *flags, "--quiet"]) == 2
    assert capsys.readouterr().err == f"annotated-transformer evaluate: error: {message}\n"


# ======================================================================= 7. flags made from records
RECORDS = {"train": (Choices, TrainConfig, RuntimeOptions), "translate": (Search,)}


def test_cli_is_at_most_400_lines() -> None:
    "The command line parses and calls: what it decides lives in the library."
    lines = Path(command_line.__file__).read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 400, f"cli.py has {len(lines)} lines"


def bad_values(cls: type, f: dataclasses.Field) -> list[str]:
    "Texts that break the rules of a field declared with `setting`: its type, range or choices."
    m, hint = f.metadata, typing.get_type_hints(cls)[f.name]
    bad = [] if str in typing.get_args(hint) or hint is str else ["x"]  # not a number
    bad += [str(m["low"] - 1)] if m["low"] is not None else []
    bad += [str(m["high"] + 1)] if m["high"] is not None else []
    bad += ["-1"] if m["above"] is not None else []
    bad += ["1.5"] if m["below"] is not None and m["below"] <= 1 else []
    bad += ["nope"] if m["choices"] or m["check"] else []  # a device or choice that is not one
    return bad + (["NOT ONE!"] if m["pattern"] else [])


def record_error(cls: type, name: str, text: str) -> str:
    "The one-line error the record itself raises for the text (as a number when it is one)."
    hint = typing.get_type_hints(cls)[name]
    kind = next(k for k in typing.get_args(hint) or (hint,) if k is not type(None))
    try:
        value = kind(text) if kind in (int, float) else text
    except ValueError:
        value = text
    with pytest.raises(ChoiceError) as error:
        cls(**{name: value})
    return str(error.value)


CHECKED = [
    (command, cls, f, text)
    for command, records in RECORDS.items()
    for cls in records
    for f in dataclasses.fields(cls)
    if f.metadata.get("help") and typing.get_type_hints(cls)[f.name] is not bool
    for text in bad_values(cls, f)
]


@pytest.mark.parametrize(
    "command, cls, f, text", CHECKED, ids=[f"{f.name}={t}" for _, _, f, t in CHECKED]
)
def test_a_bad_value_is_refused_with_the_records_own_message(
    command: str, cls: type, f: dataclasses.Field, text: str, capsys
) -> None:
    "cli.py has no rule of its own for a setting: the record's check and message, at parse time."
    flag = f.metadata["flag"] or "--" + f.name.replace("_", "-")
    line = refused_while_parsing([command, *REQUIRED[command], flag, text], capsys)
    assert line.endswith(f"argument {flag}: {record_error(cls, f.name, text)}")


def test_cli_compares_no_records_setting_with_a_value() -> None:
    """No `args.FIELD < ...`, `== ...` or `in ...` in cli.py for a record's field: its rules are the
    record's (cli.py only asks whether a flag was given: `is None`)."""
    records = (Choices, TrainConfig, RuntimeOptions, Search)
    fields = {f.name for cls in records for f in dataclasses.fields(cls) if f.metadata.get("help")}
    tree = ast.parse(Path(command_line.__file__).read_text(encoding="utf-8"))
    compared = {
        node.attr
        for compare in ast.walk(tree)
        if isinstance(compare, ast.Compare)
        and not all(isinstance(op, (ast.Is, ast.IsNot)) for op in compare.ops)
        for node in ast.walk(compare)
        if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "args"
    }
    assert compared, "the check finds nothing: cli.py compares --buffer-size with 1"
    assert not compared & fields, sorted(compared & fields)


def test_a_new_option_is_one_field(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """The change plan "a new CLI option": a field declared with `setting` in the record it sets
    (here a search option, in fast decoding's Search) is a flag with its help, default and range,
    checked by the record; cli.py is not touched."""

    @dataclasses.dataclass(frozen=True)
    class Patient(Search):
        patience: int = setting(3, "stop after N steps without a better hypothesis", low=1, high=9)

    about, run, _ = command_line.COMMANDS["translate"]
    monkeypatch.setitem(command_line.COMMANDS, "translate", (about, run, (Patient,)))
    with pytest.raises(SystemExit):
        main(["translate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--patience PATIENCE stop after N steps without a better hypothesis (default 3)" in (
        help_text
    )
    args = parser().parse_args(["translate", *REQUIRED["translate"], "--patience", "4"])
    assert Patient(**command_line.given(args, Patient)).patience == 4
    line = refused_while_parsing(["translate", *REQUIRED["translate"], "--patience", "10"], capsys)
    assert line.endswith(
        "argument --patience: patience must be at least 1 and at most 9, got patience=10"
    )


@pytest.mark.parametrize(
    "given, expected",
    [({}, "10000"), ({"OMP_WAIT_POLICY": "PASSIVE"}, None), ({"GOMP_SPINCOUNT": "5"}, "5")],
    ids=["unset", "a wait policy of the user's", "a spin count of the user's"],
)
def test_the_command_line_spins_briefly_unless_told_otherwise(given, expected):
    """Round four, item 3: beside other work, OpenMP's default spinning made training and
    translation many times slower (chapter 16's table); the command sets a short spin before
    PyTorch loads, and keeps a setting of the user's."""
    env = {k: v for k, v in environment().items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    code = (
        "import os, sys\n"
        "import annotated_transformer.cli\n"
        "print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**env, **given}, capture_output=True, text=True
    )
    spin, policy = done.stdout.split()
    assert (None if spin == "None" else spin) == expected, done.stderr
    assert (None if policy == "None" else policy) == given.get("OMP_WAIT_POLICY")
    source = Path(command_line.__file__).read_text()  # set before the package's imports
    assert source.index('os.environ["GOMP_SPINCOUNT"]') < source.index(
        "\nfrom annotated_transformer"
    )
