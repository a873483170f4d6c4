"""Input from a careless or a hostile user (issue 36), each refused in one line that names the file
or the flag, before any work starts, never a traceback nor the CLI's "internal error":

- config files too large, nested too deeply, with too many keys or a key of 50,000 dotted parts,
  or numbers of 400 digits (a seed, a factor);
- `translate` with standard input closed (`<&-`), `evaluate` on two empty files;
- pipes as input files: read once where a file is read once (`--src <(...)`, `--config <(...)`),
  named as pipes where training reads a file twice;
- a model too short for any sentence (max_len=1).

And, from the earlier rounds: a tiny vocabulary, a too long line, a folder given as a file.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from clitools import environment, one_error_line, refused

from annotated_transformer.checkpoint import load_checkpoint, save_checkpoint
from annotated_transformer.cli import main
from annotated_transformer.config import ChoiceError
from annotated_transformer.data import ParallelFiles


def in_a_pipe(path: Path, text: str) -> threading.Thread:
    "A named pipe at `path` that a thread writes `text` into once a reader opens it."
    os.mkfifo(path)
    writer = threading.Thread(target=lambda: path.write_text(text), daemon=True)
    writer.start()
    return writer


# ----------------------------------------------------------------------------------- config files
NINES = "9" * 400
BOMBS = [  # (id, file name, text, what the one line says after the file's name)
    ("50000-dotted-parts", "bomb.toml", ".".join(["a"] * 50_000) + " = 1", "line 1 is longer"),
    ("deep-toml-arrays", "deep.toml", "seed = " + "[\n" * 100_000, "nested more than 8 deep"),
    ("deep-inline-tables", "deep.toml", "a = " + "{b = " * 100_000, "line 1 is longer"),
    ("deep-json-arrays", "deep.json", "[" * 100_000, "nested more than 8 deep"),
    ("nested-9-deep", "deep.json", '{"model": {"N": [[[[[[[1]]]]]]]}}', "nested more than 8"),
    ("50000-keys-json", "k.json", json.dumps({f"k{i}": 1 for i in range(50_000)}), "1,000 keys"),
    ("50000-dotted-keys", "k.toml", "".join(f"k{i}.a = 1\n" for i in range(50_000)), "1,000 keys"),
    ("over-1-MB", "big.json", " " * 1_000_001, "larger than 1,000,000 bytes"),
    ("seed-400-digits", "seed.toml", f"seed = {NINES}", "got seed=99999999...9999 (400 digits)"),
    ("seed-400-digits-json", "seed.json", f'{{"seed": {NINES}}}', "got seed=99999999...9999 (400"),
    ("factor-400-digits", "f.toml", f"factor = {NINES}", "factor must be a finite number, got"),
    ("clip-400-digits", "c.json", f'{{"max_grad_norm": {NINES}}}', "max_grad_norm must be a"),
    ("warmup-400-digits", "w.toml", f"warmup = {NINES}", "warmup must be at least 1 and at most"),
    ("long-language", "l.json", json.dumps({"src_lang": "x" * 100_000}), "src_lang must be a"),
]  # fmt: skip


@pytest.mark.parametrize("name, text, says", [b[1:] for b in BOMBS], ids=[b[0] for b in BOMBS])
def test_a_config_file_bomb_is_one_line_naming_the_file(tmp_path, capsys, name, text, says):
    config = tmp_path / name
    config.write_text(text)
    out = tmp_path / "run"
    line = refused(["train", "--out", str(out), "--config", str(config)], 1, capsys)
    assert line.startswith(f"annotated-transformer train: error: --config {config}: ")
    assert says in line and len(line) < 300, line  # a value of 400 digits is shown short
    assert not out.exists()  # refused before the run's folder was made


def test_a_device_as_config_file_is_read_no_further_than_the_limit(tmp_path, capsys):
    line = refused(["train", "--out", str(tmp_path / "run"), "--config", "/dev/zero"], 1, capsys)
    assert "--config /dev/zero: larger than 1,000,000 bytes" in line


def test_a_seed_of_400_digits_on_the_command_line_is_one_short_line(tmp_path, capsys):
    line = refused(["train", "--out", str(tmp_path / "run"), "--seed", NINES], 2, capsys)
    assert line.endswith("argument --seed: seed must be at least 0 and at most 4,294,967,295, got "
                         "seed=99999999...9999 (400 digits)")  # fmt: skip


# ------------------------------------------------------------------------ standard input, empty
def test_translate_with_standard_input_closed_is_a_usage_error(tiny_checkpoint):
    "`<&-` closes file descriptor 0 (DEVNULL would not): Python then has no sys.stdin."
    command = [sys.executable, "-m", "annotated_transformer.cli", "translate"]
    command += ["--checkpoint", str(tiny_checkpoint)]
    done = subprocess.run(
        ["bash", "-c", '"$@" <&-', "bash", *command],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=300,
    )
    assert done.returncode == 2 and done.stdout == ""
    line = one_error_line(done.stderr, "translate")
    assert line.endswith("no sentences: none given as arguments, and standard input is closed")


@pytest.mark.parametrize("kind", ["empty-files", "dev-null"])
def test_evaluate_on_two_empty_files_is_one_line(tiny_checkpoint, tmp_path, capsys, kind):
    src, ref = (tmp_path / "test.src", tmp_path / "test.ref")
    if kind == "dev-null":  # a device, read once: no lines
        src = ref = Path("/dev/null")
    else:
        src.write_text("")
        ref.write_text("")
    argv = ["evaluate", "--checkpoint", str(tiny_checkpoint), "--src", str(src), "--ref", str(ref)]
    line = refused(argv, 1, capsys)
    assert f"--src {src} holds no sentences: nothing to evaluate" in line


# ------------------------------------------------------------------------------------ pipes
def test_evaluate_reads_its_test_set_from_named_pipes(tiny_checkpoint, tmp_path, capsys):
    src, ref = tmp_path / "src.fifo", tmp_path / "ref.fifo"
    writers = [in_a_pipe(src, "Ein Mann.\nEin Hund.\n"), in_a_pipe(ref, "A man.\nA dog.\n")]
    argv = ["evaluate", "--checkpoint", str(tiny_checkpoint), "--src", str(src), "--ref", str(ref)]
    assert main(argv) == 0
    assert "(2 sentences, greedy): sacreBLEU" in capsys.readouterr().out
    assert not any(w.is_alive() for w in writers)


def test_evaluate_reads_process_substitutions_and_gzip_in_a_pipe(tiny_checkpoint):
    "`--src <(...)` is /dev/fd/63, a pipe the shell opened: read once, gzip seen by its bytes."
    src = "<(printf 'Ein Mann.\\nEin Hund.\\n' | gzip)"
    ref = "<(printf 'A man.\\nA dog.\\n')"
    command = (
        f"{sys.executable} -m annotated_transformer.cli evaluate --checkpoint {tiny_checkpoint}"
    )
    done = subprocess.run(
        ["bash", "-c", f"{command} --src {src} --ref {ref}"],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "(2 sentences, greedy): sacreBLEU" in done.stdout and "Traceback" not in done.stderr


def test_a_config_file_in_a_pipe_is_read(tmp_path, capsys):
    config = tmp_path / "run.json"
    in_a_pipe(config, '{"epochs": 0}')  # read, so refused for what it says
    line = refused(["train", "--out", str(tmp_path / "run"), "--config", str(config)], 1, capsys)
    assert f"--config {config}: epochs must be at least 1" in line


def test_training_files_in_a_pipe_are_named_as_pipes(tmp_path, capsys):
    pipe, text = tmp_path / "train.de", tmp_path / "train.en"
    os.mkfifo(pipe)  # never opened: refused by what it is
    text.write_text("A man.\n")
    files = [pipe, text, text, text]
    flags = [a for f, n in zip(files, ("train-src", "train-tgt", "valid-src", "valid-tgt"))
             for a in (f"--{n}", str(f))]  # fmt: skip
    line = refused(["train", "--out", str(tmp_path / "run"), *flags], 2, capsys)
    assert line.endswith(
        f"--train-src {pipe} (train source) is a pipe, not a file: a run reads it twice "
        "(save it to a file)"
    )
    with pytest.raises(ChoiceError, match=r"\(train source\) is a pipe, not a file: a run reads"):
        ParallelFiles((pipe, text), (text, text))  # Python callers are told the same


# ------------------------------------------------------------------------------ the model's size
def test_a_model_too_short_for_any_sentence_says_so(tiny_checkpoint, tmp_path, capsys):
    ckpt = load_checkpoint(tiny_checkpoint)
    model = replace(ckpt.config.model, max_len=1)
    save_checkpoint(tmp_path / "short.pt", replace(ckpt, config=replace(ckpt.config, model=model)))
    line = refused(
        ["translate", "--checkpoint", str(tmp_path / "short.pt"), "Ein Mann."], 1, capsys
    )
    assert "too long for this model (max_len=1 leaves room for none)" in line and "-51" not in line


# ------------------------------------------------------------------------------ earlier rounds
@pytest.mark.parametrize("size", ["1", "2", "3"])
def test_a_tiny_vocabulary_is_a_usage_error(tmp_path, capsys, size):
    line = refused(["train", "--out", str(tmp_path / "run"), "--vocab-size", size], 2, capsys)
    assert "argument --vocab-size: vocab_size must be at least 261 and at most 1,000,000" in line
    assert line.endswith(f", got vocab_size={size}")


def test_a_too_long_line_is_named_by_its_input_line(tiny_checkpoint, monkeypatch, capsys):
    lines = ["Ein Mann sieht einen Ball."] * 149 + ["Ball " * 5000] + ["Ein Hund."] * 3
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(line + "\n" for line in lines)))
    argv = ["translate", "--checkpoint", str(tiny_checkpoint), "--buffer-size", "100"]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out.count("\n") == 149  # the first chunk, and the lines of the second before line 150
    line = one_error_line(err, "translate")
    assert "stopped at input line 150 after writing 149 lines: line 150 has 5000 tokens" in line


@pytest.mark.parametrize("flag", ["--checkpoint", "--src", "--config", "--train-src"])
def test_a_folder_given_as_a_file_is_called_a_folder(tiny_checkpoint, tmp_path, capsys, flag):
    folder, run = tmp_path / "a_folder", str(tmp_path / "run")
    folder.mkdir()
    own = [
        a for f in ("train-src", "train-tgt", "valid-src", "valid-tgt") for a in (f"--{f}", folder)
    ]
    args = {
        "--checkpoint": ["translate", "--checkpoint", str(folder), "Ein Mann."],
        "--src": ["evaluate", "--checkpoint", str(tiny_checkpoint), "--src", str(folder)]
        + ["--ref", str(folder)],
        "--config": ["train", "--out", run, "--config", str(folder)],
        "--train-src": ["train", "--out", run, *map(str, own)],
    }[flag]  # fmt: skip
    line = refused(args, 2, capsys)  # names the flag and the folder, and says it is one
    assert f"{flag} {folder}" in line and "a folder, not a " in line


# ------------------------------------------------------------------------ round four: input lines
def bytes_stdin(monkeypatch, data: bytes) -> None:
    "Standard input holding `data`, bytes under its text layer as a real one has."
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_a_line_that_is_not_utf8_stops_after_the_lines_before_it(
    tiny_checkpoint, monkeypatch, capsys
):
    "Round four: four good lines, then an invalid byte, wrote nothing; now the four, then one line."
    bytes_stdin(monkeypatch, b"Ein Mann.\n" * 4 + b"Ein \xff Hund\nEin Hund.\n")
    assert main(["translate", "--checkpoint", str(tiny_checkpoint)]) == 1
    out, err = capsys.readouterr()
    assert out.count("\n") == 4
    assert "standard input, line 5: byte 0xff at position 5 is not UTF-8 text" in err


def test_a_huge_line_is_refused_before_it_is_tokenized(tiny_checkpoint, monkeypatch, capsys):
    "Round four: a line of 300 MB aborted in the tokenizer (std::bad_alloc); it is read 1 MiB far."
    from annotated_transformer.translator import MAX_LINE_BYTES

    bytes_stdin(monkeypatch, b"Ein Mann.\n" + b"\0" * (3 * MAX_LINE_BYTES) + b"\nEin Hund.\n")
    argv = ["translate", "--checkpoint", str(tiny_checkpoint), "--buffer-size", "1"]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out.count("\n") == 1
    assert f"standard input, line 2: over {MAX_LINE_BYTES:,} bytes, not a sentence" in err


def test_a_byte_order_mark_is_not_text(tiny_checkpoint, monkeypatch, capsys, tmp_path):
    "Round four: a BOM was kept as text (a reference identical but for it scored 99.71)."
    bytes_stdin(monkeypatch, "\ufeffEin Mann sieht einen Ball.\n".encode())
    assert main(["translate", "--checkpoint", str(tiny_checkpoint)]) == 0
    with_mark = capsys.readouterr().out
    assert (
        main(["translate", "--checkpoint", str(tiny_checkpoint), "Ein Mann sieht einen Ball."]) == 0
    )
    assert with_mark == capsys.readouterr().out
    ref = tmp_path / "ref.en"
    ref.write_text("\ufeffA man sees a ball.\nA dog.\n", encoding="utf-8")
    from annotated_transformer.data import read_lines

    assert read_lines(ref) == ["A man sees a ball.", "A dog."]


# ---------------------------------------------------------------- round four, item 6: the probes
def test_evaluate_refuses_a_sentence_of_10000_words_naming_its_line(
    tiny_checkpoint, tmp_path, capsys
):
    src = tmp_path / "src.de"
    src.write_text("Ein Hund läuft.\n" + "Hund " * 10_000 + "\nEin Mann.\n")
    argv = ["evaluate", "--checkpoint", str(tiny_checkpoint), "--src", str(src), "--ref", str(src)]
    assert main(argv) == 1
    line = one_error_line(capsys.readouterr().err, "evaluate")
    assert f"--src {src}, line 2: has 10000 tokens, too long for this model" in line, line


def test_nul_bytes_are_text_and_the_output_lines_up(tiny_checkpoint, monkeypatch, capsys):
    "A NUL in a line is a character of a word, as any other: it neither ends the line nor stops."
    bytes_stdin(monkeypatch, b"Ein\0Hund.\n\0\nEin Mann.\n")
    assert main(["translate", "--checkpoint", str(tiny_checkpoint)]) == 0
    out, err = capsys.readouterr()
    assert out.count("\n") == 3 and err == ""


def test_training_files_with_nul_bytes_train(own_corpus, tmp_path, capsys):
    "NUL bytes in a training file are characters of its words: subwords learn them, training runs."
    from clitools import TINY_RUN, own_file_args

    lines = own_corpus["train_src"].read_text().splitlines()
    lines[3] = "Ein\0Hund\0."
    files = {**own_corpus, "train_src": tmp_path / "train.xa"}
    files["train_src"].write_text("\n".join(lines) + "\n")
    argv = ["train", "--out", str(tmp_path / "run"), *own_file_args(files), "--vocab-size", "400"]
    assert main([*argv, *TINY_RUN, "--epochs", "1"]) == 0, capsys.readouterr().err
    assert load_checkpoint(tmp_path / "run" / "last.pt").epoch == 1
