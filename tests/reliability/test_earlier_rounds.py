"""Nothing lost, round two (issue 35's numbers): what a careful and a careless user can do to a run
folder and to the commands, case by case. Issue 36 organised the reliability tests by threat in
this folder; the input cases of round two (a tiny vocabulary, a too long line, a folder given as a
file) moved to test_input.py, and these stay together, on one trained run:

1. `--overwrite` keeps the old run until the new one writes its first checkpoint.
2. No file is written through a planted link.
3. `--resume` accepts the command that started the run.
4. Temporary files a kill left are cleaned on the next start; a kill between last.pt and the
   epoch file loses nothing; a folder without last.pt says how to continue.
5. One-line errors instead of tracebacks (checkpoints without an epoch, Ctrl-C).
6. Messages that name the file (a damaged subword model).
7. No progress bars in a log file.
8. Over-long training pairs named, and `--skip-long`; a model whose weights are not finite warns.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from annotated_transformer.checkpoint import load_checkpoint, save_checkpoint
from annotated_transformer.cli import main

TINY = ["--model", "tiny", "--max-tokens", "400", "--warmup", "20", "--quiet"]


def train(out: Path, data_dir: Path, *flags: str, epochs: int = 1) -> int:
    "`annotated-transformer train` on the synthetic pairs, in this process."
    args = ["train", "--out", str(out), "--data-dir", str(data_dir), "--epochs", str(epochs)]
    return main([*args, *TINY, *flags])


def snapshot(folder: Path) -> dict[str, str]:
    "Every file of a folder and the SHA-256 of its bytes."
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.iterdir()
        if p.is_file() and not p.name.startswith(".")
    }


def one_line_error(capsys) -> str:
    "The command's standard error, checked to be one line."
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.fixture(scope="module")
def trained(tmp_path_factory, request) -> tuple[Path, Path]:
    "A one-epoch run on the synthetic pairs and its data folder, copied before a test changes it."
    from synthetic import synthetic_pairs, write_split

    folder = tmp_path_factory.mktemp("multi30k")
    pairs = synthetic_pairs()
    for split, rows in (("train", pairs[:160]), ("val", pairs[160:176]), ("test2016", pairs[176:])):
        write_split(folder, split, rows)
    out = tmp_path_factory.mktemp("runs") / "run"
    assert train(out, folder) == 0
    return out, folder


def copy_run(run: Path, to: Path) -> Path:
    to.mkdir(parents=True)
    for p in run.iterdir():
        if p.is_file() and not p.name.startswith("."):
            (to / p.name).write_bytes(p.read_bytes())
    return to


# ------------------------------------------------------------------------------------------- 1.
def test_overwrite_keeps_the_old_run_when_the_new_one_cannot_start(trained, tmp_path, capsys):
    run = copy_run(trained[0], tmp_path / "run")
    before = snapshot(run)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train.de").write_text("eins\nzwei\n")
    (bad / "train.en").write_text("one\n")  # one line short
    files = [
        "--train-src",
        bad / "train.de",
        "--train-tgt",
        bad / "train.en",
        "--valid-src",
        bad / "train.de",
        "--valid-tgt",
        bad / "train.de",
    ]
    args = ["train", "--out", str(run), "--overwrite", *map(str, files), *TINY]
    assert main(args) == 1
    assert "has 2 lines but" in one_line_error(capsys)
    assert snapshot(run) == before  # the old run, every file as it was


def test_overwrite_replaces_the_old_run_at_the_first_checkpoint(trained, tmp_path, capsys):
    run = copy_run(trained[0], tmp_path / "run")
    # an old run's later epoch, which it wrote (a file it did not write would be kept: issue 36)
    assert train(run, trained[1], "--resume", epochs=2) == 0
    assert train(run, trained[1], "--overwrite", "--seed", "3") == 0
    assert sorted(p.name for p in run.glob("*.pt")) == ["epoch1.pt", "last.pt"]  # no stale epoch
    assert load_checkpoint(run / "last.pt").config.seed == 3


# ------------------------------------------------------------------------------------------- 2.
@pytest.mark.parametrize("name", [".writer", "last.pt", "epoch2.pt", "history.json"])
def test_no_file_is_written_through_a_planted_link(trained, tmp_path, capsys, name):
    run = copy_run(trained[0], tmp_path / "run")
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(target)
    assert train(run, trained[1], "--resume", epochs=2) == 1
    assert f"{run / name} is a symbolic link" in one_line_error(capsys)
    assert target.read_text() == "keep me\n"


# ------------------------------------------------------------------------------------------- 3.
def test_resume_accepts_the_command_that_started_the_run(trained, tmp_path, capsys):
    run = tmp_path / "run"
    subwords = ["--vocab-size", "400", "--dropout", "0.1", "--seed", "2"]
    assert train(run, trained[1], *subwords) == 0
    assert (
        train(run, trained[1], *subwords, "--resume", epochs=2) == 0
    )  # the same flags, more epochs
    assert load_checkpoint(run / "last.pt").epoch == 2
    capsys.readouterr()
    assert train(run, trained[1], *subwords[:-1], "3", "--resume", epochs=3) == 1  # another seed
    assert "seed=3 (the run has 2)" in one_line_error(capsys)


# ------------------------------------------------------------------------------------------- 4.
def test_the_next_start_removes_what_a_cut_off_write_left(trained, tmp_path, capsys):
    run = copy_run(trained[0], tmp_path / "run")
    debris = [".last.pt.0f1e.tmp", ".epoch1.pt.0f1e.tmp", ".history.json.0f1e.tmp"]
    for name in debris:
        (run / name).write_bytes(b"half a checkpoint")
    assert train(run, trained[1], "--resume", epochs=2) == 0
    assert "removed 3 temporary file(s)" in capsys.readouterr().out
    assert list(run.glob(".*.tmp")) == []


def test_a_kill_during_a_write_leaves_nothing_the_next_start_keeps(trained, tmp_path):
    "Kill -9 a training whenever a temporary checkpoint file appears; the next start cleans up."
    run, killed_mid_write = tmp_path / "run", 0
    command = [
        sys.executable,
        "-m",
        "annotated_transformer.cli",
        "train",
        "--out",
        str(run),
        "--data-dir",
        str(trained[1]),
        *TINY,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for attempt in range(3):
        flags = ["--epochs", "30", *(["--resume"] if (run / "last.pt").exists() else [])]
        process = subprocess.Popen(
            command + flags, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.time() + 120
        while process.poll() is None and time.time() < deadline and not list(run.glob(".*.tmp")):
            time.sleep(0.001)
        process.send_signal(signal.SIGKILL)
        process.wait()
        killed_mid_write += bool(list(run.glob(".*.tmp")))
    left = len(list(run.glob(".*.tmp")))
    resumable = (run / "last.pt").exists()  # else the kill came during the first last.pt
    flags = ["--epochs", "1", "--resume" if resumable else "--overwrite"]
    done = subprocess.run(command + flags, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert list(run.glob(".*.tmp")) == [], f"{left} temporary files were left by the kills"
    assert load_checkpoint(run / "last.pt").epoch >= 1
    print(f"{killed_mid_write} of 3 kills came while a temporary file existed; {left} left")


def test_a_kill_between_last_pt_and_the_epoch_file_loses_nothing(trained, tmp_path, capsys):
    run = copy_run(trained[0], tmp_path / "run")
    (run / "epoch1.pt").unlink()  # last.pt is written first: the kill came after it
    assert train(run, trained[1], "--resume", epochs=2) == 0
    assert "wrote epoch1.pt again from last.pt" in capsys.readouterr().out
    assert sorted(p.name for p in run.glob("epoch*.pt")) == ["epoch1.pt", "epoch2.pt"]


def test_a_folder_without_last_pt_says_how_to_continue(trained, tmp_path, capsys):
    run = copy_run(trained[0], tmp_path / "run")
    (run / "last.pt").unlink()
    assert train(run, trained[1], "--resume", epochs=2) == 1
    message = one_line_error(capsys)
    assert "holds only epoch1.pt, history.json, no last.pt" in message and "--overwrite" in message


# ------------------------------------------------------------------------------------------- 5.
def test_averaging_a_checkpoint_without_an_epoch_is_one_line(trained, tmp_path, capsys):
    run = copy_run(trained[0], tmp_path / "run")
    d = torch.load(run / "last.pt", weights_only=True)
    del d["epoch"]
    torch.save(d, run / "last.pt")
    assert main(["evaluate", "--checkpoint", str(run / "last.pt"), "--average-last", "1"]) == 1
    assert "has no epoch: it is not a checkpoint that `train` wrote" in one_line_error(capsys)


def test_ctrl_c_during_translate_is_one_line_saying_what_was_written(trained):
    checkpoint = trained[0] / "last.pt"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "annotated_transformer.cli",
            "translate",
            "--checkpoint",
            str(checkpoint),
            "--buffer-size",
            "1",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        # as in a terminal: a shell's background job (CI's, say) starts with Ctrl-C ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    process.stdin.write("Ein Mann sieht einen Ball.\n")
    process.stdin.flush()
    first = process.stdout.readline()  # the first line is translated and written
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert first.strip() and process.returncode == 130
    assert err.strip() == "annotated-transformer translate: interrupted after writing 1 line"


# ------------------------------------------------------------------------------------------- 6.
def test_a_damaged_subword_model_names_the_checkpoint(trained, tmp_path, capsys):
    run = tmp_path / "run"
    assert train(run, trained[1], "--vocab-size", "400") == 0
    d = torch.load(run / "last.pt", weights_only=True)
    model = bytearray(d["tokenizer"]["model"])
    for i in range(len(model) // 2, len(model) // 2 + 8):  # a run of damaged bytes
        model[i] ^= 0xFF
    d["tokenizer"] = {
        **d["tokenizer"],
        "model": bytes(model),
        "sha256": hashlib.sha256(bytes(model)).hexdigest(),
    }
    torch.save(d, run / "damaged.pt")
    d["tokenizer"] = {**d["tokenizer"], "model": b"", "sha256": hashlib.sha256(b"").hexdigest()}
    torch.save(d, run / "empty.pt")
    for name in ("damaged.pt", "empty.pt"):
        assert main(["translate", "--checkpoint", str(run / name), "Ein Mann."]) == 1
        err = one_line_error(capsys)
        assert f"{run / name}'s subword model: not a sentencepiece model" in err, err
        assert "could run code" not in err


# ------------------------------------------------------------------------------------------- 7.
def test_a_log_file_gets_lines_not_progress_bars(trained, tmp_path):
    log = tmp_path / "train.log"
    run = ["train", "--out", str(tmp_path / "run"), "--data-dir", str(trained[1]), "--epochs", "2"]
    tiny = [
        "--model",
        "tiny",
        "--max-tokens",
        "400",
        "--warmup",
        "20",
    ]  # no --quiet: bars asked for
    quiet = "ignore:Multi30k file differs from the published one:UserWarning"  # synthetic data
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": quiet}
    with open(log, "w") as f:
        command = [sys.executable, "-m", "annotated_transformer.cli", *run, *tiny]
        done = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, env=env)
    text = log.read_text()
    assert done.returncode == 0, text
    assert "\r" not in text and text.count("\n") == 3, text  # the summary and one line an epoch
    assert "epoch 2: train loss" in text


# ------------------------------------------------------------------------------------------- 8.
def test_an_over_long_training_pair_is_named_and_can_be_left_out(trained, tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    for side, lang in ((0, "de"), (1, "en")):
        rows = gzip.open(trained[1] / f"train.{lang}.gz", "rt").read().splitlines()
        rows[5] = " ".join(["Ball"] * 6000) if side == 0 else rows[5]
        with gzip.open(data / f"train.{lang}.gz", "wt") as f:
            f.write("".join(r + "\n" for r in rows))
        (data / f"val.{lang}.gz").write_bytes((trained[1] / f"val.{lang}.gz").read_bytes())
    assert train(tmp_path / "run", data) == 1
    err = one_line_error(capsys)
    assert "training pair 6 ('Ball Ball" in err and "max_len=5000" in err and "--skip-long" in err
    assert train(tmp_path / "run", data, "--skip-long") == 0
    assert "left out 1 training pairs longer than max_len=5000" in capsys.readouterr().out


def test_a_model_with_weights_that_are_not_finite_warns(trained, tmp_path, capsys):
    ckpt = load_checkpoint(trained[0] / "last.pt")
    ckpt.model["generator.proj.bias"] = torch.full_like(
        ckpt.model["generator.proj.bias"], torch.nan
    )
    save_checkpoint(tmp_path / "nan.pt", ckpt)
    assert main(["translate", "--checkpoint", str(tmp_path / "nan.pt"), "Ein Mann."]) == 0
    err = capsys.readouterr().err
    assert "translate: warning:" in err and "weights are not all finite" in err
