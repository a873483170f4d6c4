"""Tests for annotated_transformer.translation and .trainer, and the `annotated-transformer` console command.

They train on the synthetic German-English pairs that conftest.py's `data_dir` fixture writes as
Multi30k-named .gz files to a temporary folder: no network and no ../shared needed.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import torch

from annotated_transformer.cli import main
from annotated_transformer.data import load_multi30k, load_tokenizers, tokenize_all
from annotated_transformer.model import ModelConfig
from annotated_transformer.checkpoint import load_checkpoint, model_from_checkpoint, save_checkpoint
from annotated_transformer.trainer import TrainConfig, train
from annotated_transformer.translation import bleu, detokenize, translate

TRAIN_ARGS = ["--model", "tiny", "--max-tokens", "400", "--warmup", "20", "--quiet"]


def test_cli_train_resume_evaluate_translate(
    data_dir: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    out = tmp_path / "run"
    assert (
        main(
            ["train", "--out", str(out), "--data-dir", str(data_dir), "--epochs", "2", *TRAIN_ARGS]
        )
        == 0
    )
    assert sorted(p.name for p in out.glob("*.pt")) == ["epoch1.pt", "epoch2.pt", "last.pt"]
    assert not list(out.glob(".*.tmp")), "no temporary checkpoint file is left behind"
    first = load_checkpoint(out / "last.pt")
    assert first["epoch"] == 2 and len(first["history"]) == 2  # epochs completed

    # --resume takes the configuration from the checkpoint: only the new number of epochs is given
    assert (
        main(
            [
                "train",
                "--out",
                str(out),
                "--data-dir",
                str(data_dir),
                "--epochs",
                "3",
                "--resume",
                "--quiet",
            ]
        )
        == 0
    )
    resumed = load_checkpoint(out / "last.pt")
    assert resumed["epoch"] == 3 and [h["epoch"] for h in resumed["history"]] == [1, 2, 3]
    assert resumed["train_state"]["optimizer_steps"] > first["train_state"]["optimizer_steps"]
    assert (
        resumed["src_vocab"] == first["src_vocab"]
    )  # the vocabulary is the checkpoint's, not rebuilt
    capsys.readouterr()
    assert (
        main(
            [
                "train",
                "--out",
                str(out),
                "--data-dir",
                str(data_dir),
                "--epochs",
                "4",
                "--resume",
                "--model",
                "base",
            ]
        )
        == 1
    )
    assert "another configuration than" in capsys.readouterr().err
    capsys.readouterr()

    assert (
        main(
            [
                "evaluate",
                "--checkpoint",
                str(out / "last.pt"),
                "--split",
                "test2016",
                "--data-dir",
                str(data_dir),
            ]
        )
        == 0
    )
    report = capsys.readouterr().out
    assert (
        "test2016 (16 sentences, greedy): sacreBLEU" in report
        and "tok:13a" in report
        and "tokenized lowercased BLEU" in report
    )

    assert (
        main(
            [
                "translate",
                "--checkpoint",
                str(out / "last.pt"),
                "Ein Mann sieht einen Ball.",
                "Ein Hund hat ein Auto.",
            ]
        )
        == 0
    )
    assert len(capsys.readouterr().out.strip().splitlines()) == 2

    monkeypatch.setattr(
        sys, "stdin", io.StringIO("Eine Frau mag einen Baum.\n\nEin Kind sieht ein Haus im Park.\n")
    )
    assert main(["translate", "--checkpoint", str(out / "last.pt")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        len(lines) == 3 and lines[0] and lines[1] == "" and lines[2]
    )  # one line per input line: an empty one stays empty

    # beam search and checkpoint averaging (the decoding chapter)
    args = [
        "--checkpoint",
        str(out / "last.pt"),
        "--beam",
        "3",
        "--alpha",
        "1.0",
        "--average-last",
        "2",
    ]
    assert main(["evaluate", *args, "--data-dir", str(data_dir), "--quiet"]) == 0
    assert (
        "(16 sentences, beam 3, alpha 1.0, average of the last 2 epochs): sacreBLEU"
        in capsys.readouterr().out
    )
    assert main(["translate", *args, "Ein Mann sieht einen Ball."]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 1
    assert (
        main(
            ["translate", "--checkpoint", str(out / "last.pt"), "--average-last", "4", "Ein Mann."]
        )
        == 1
    )
    assert "from epoch 3: there are not 4 epochs to average" in capsys.readouterr().err
    (out / "epoch1.pt").unlink()
    assert (
        main(
            ["translate", "--checkpoint", str(out / "last.pt"), "--average-last", "3", "Ein Mann."]
        )
        == 1
    )
    assert "needs epoch1.pt beside it" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["translate", "--checkpoint", str(out / "last.pt"), "--beam", "0", "Ein Mann."])


def test_resume_reaches_the_uninterrupted_result(data_dir: Path, tmp_path: Path) -> None:
    "Two epochs, then a resume for the third, end with the same weights as three epochs in one go."
    pairs = {split: load_multi30k(split, data_dir) for split in ("train", "val")}
    config = TrainConfig(
        model=ModelConfig(N=1, d_model=16, d_ff=32, h=2, norm_first=True),
        epochs=3,
        max_tokens=300,
        warmup=10,
    )
    whole = train(tmp_path / "a", config, pairs=pairs, progress=False, log=lambda _: None)
    train(
        tmp_path / "b",
        TrainConfig(**{**config.__dict__, "epochs": 2}),
        pairs=pairs,
        progress=False,
        log=lambda _: None,
    )
    resumed = train(
        tmp_path / "b", config, pairs=pairs, resume=True, progress=False, log=lambda _: None
    )
    for name, tensor in whole["model"].items():
        torch.testing.assert_close(resumed["model"][name], tensor, atol=1e-6, rtol=1e-6, msg=name)


def test_resume_with_another_config_is_refused(data_dir: Path, tmp_path: Path) -> None:
    pairs = {split: load_multi30k(split, data_dir) for split in ("train", "val")}
    config = TrainConfig(
        model=ModelConfig(N=1, d_model=16, d_ff=32, h=2), epochs=1, max_tokens=300, warmup=10
    )
    train(tmp_path, config, pairs=pairs, progress=False, log=lambda _: None)
    other = TrainConfig(
        model=ModelConfig(N=1, d_model=32, d_ff=32, h=2), epochs=2, max_tokens=300, warmup=10
    )
    with pytest.raises(ValueError, match="another configuration than"):
        train(tmp_path, other, pairs=pairs, resume=True, progress=False, log=lambda _: None)


@pytest.fixture
def checkpoint(data_dir: Path, tmp_path: Path) -> Path:
    pairs = {split: load_multi30k(split, data_dir) for split in ("train", "val")}
    config = TrainConfig(
        model=ModelConfig(N=1, d_model=16, d_ff=32, h=2), epochs=1, max_tokens=300, warmup=10
    )
    train(tmp_path / "ckpt", config, pairs=pairs, progress=False, log=lambda _: None)
    return tmp_path / "ckpt" / "last.pt"


def test_bad_checkpoints_give_clear_errors(checkpoint: Path, tmp_path: Path, capsys) -> None:
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(checkpoint.read_bytes()[:1000])
    with pytest.raises(ValueError, match="is not a readable checkpoint"):
        load_checkpoint(truncated)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ValueError, match="is not a readable checkpoint"):
        load_checkpoint(garbage)
    future = tmp_path / "future.pt"
    save_checkpoint(future, config={})
    torch.save({**torch.load(future, weights_only=True), "format": 99}, future)
    with pytest.raises(ValueError, match="checkpoint format 99"):
        load_checkpoint(future)
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "missing.pt")
    # Through the CLI: one line on stderr, exit status 1 (a failure, not a usage error), no traceback.
    assert main(["translate", "--checkpoint", str(truncated), "Ein Mann."]) == 1
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


def test_translate_refuses_empty_and_too_long_sentences(checkpoint: Path, capsys) -> None:
    model, src_vocab, tgt_vocab = model_from_checkpoint(load_checkpoint(checkpoint))
    with pytest.raises(ValueError, match="sentence 1 is empty"):
        translate(model, ["Ein Mann sieht einen Ball.", "   "], src_vocab, tgt_vocab)
    with pytest.raises(ValueError, match="too long for this model"):
        translate(model, ["Mann " * 5000], src_vocab, tgt_vocab)
    assert main(["translate", "--checkpoint", str(checkpoint), ""]) == 2
    assert "is empty" in capsys.readouterr().err


def test_translate_batches_like_single_sentences(checkpoint: Path) -> None:
    model, src_vocab, tgt_vocab = model_from_checkpoint(load_checkpoint(checkpoint))
    sentences = [
        "Ein Mann sieht einen Ball.",
        "Ein Hund hat ein Auto im Schnee.",
        "Eine Frau mag ein Haus.",
    ]
    together = translate(model, sentences, src_vocab, tgt_vocab)
    alone = [translate(model, [s], src_vocab, tgt_vocab)[0] for s in sentences]
    assert together == alone


@pytest.mark.parametrize("beam", [1, 3])
def test_translate_bans_unk_unless_allowed(checkpoint: Path, beam: int, capsys) -> None:
    model, src_vocab, tgt_vocab = model_from_checkpoint(load_checkpoint(checkpoint))
    with torch.no_grad():
        model.generator.proj.bias[tgt_vocab.unk] += 100.0  # the model now wants <unk> everywhere
    sentences = ["Ein Mann sieht einen Ball.", "Ein Hund hat ein Auto im Schnee."]
    allowed = translate(model, sentences, src_vocab, tgt_vocab, beam_size=beam, allow_unk=True)
    assert all("<unk>" in out for out in allowed)
    banned = translate(model, sentences, src_vocab, tgt_vocab, beam_size=beam)
    assert all(out and "<unk>" not in out for out in banned)


@pytest.mark.parametrize(
    "sentence",
    [
        "Two young, White males are outside near many bushes.",
        "A man's dog isn't running; it's sitting (quietly) by the door!",
        'She says "hello" to the children.',
    ],
)
def test_detokenize_inverts_the_english_tokenizer(sentence: str) -> None:
    _, tok_en = load_tokenizers()
    assert detokenize(tokenize_all([sentence], tok_en, progress=False)[0]) == sentence


def test_bleu_scores() -> None:
    refs = ["A man rides a bike.", "Two dogs play in the snow."]
    _, tok_en = load_tokenizers()
    perfect = bleu(tokenize_all(refs, tok_en, progress=False), refs)
    assert perfect.sacrebleu == pytest.approx(
        100.0
    ) and perfect.tokenized_lowercase == pytest.approx(100.0)
    lowered = bleu(
        [[t.lower() for t in s] for s in tokenize_all(refs, tok_en, progress=False)], refs
    )
    assert lowered.tokenized_lowercase == pytest.approx(
        100.0
    )  # case does not matter for this one...
    assert lowered.sacrebleu < 100.0  # ...but does for sacreBLEU
    assert "case:mixed" in perfect.signature and "tok:13a" in perfect.signature
    with pytest.raises(ValueError, match="1 hypotheses for 2 references"):
        bleu([["A"]], refs)


def test_train_config_validation() -> None:
    for bad in ({"epochs": 0}, {"max_tokens": 0}, {"accum_iter": 0}, {"warmup": 0}):
        with pytest.raises(ValueError, match="must be at least 1"):
            TrainConfig(**bad)
    with pytest.raises(ValueError, match="smoothing"):
        TrainConfig(smoothing=1.0)


def test_only_the_last_epoch_checkpoints_are_kept(data_dir: Path, tmp_path: Path) -> None:
    pairs = {split: load_multi30k(split, data_dir) for split in ("train", "val")}
    config = TrainConfig(
        model=ModelConfig(N=1, d_model=16, d_ff=32, h=2), epochs=3, max_tokens=300, warmup=10
    )
    train(tmp_path, config, pairs=pairs, keep_epochs=2, progress=False, log=lambda _: None)
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == ["epoch2.pt", "epoch3.pt", "last.pt"]
    weights = load_checkpoint(tmp_path / "epoch3.pt")
    assert "optimizer" not in weights and weights["epoch"] == 3
    model, _, _ = model_from_checkpoint(weights)  # enough to translate and to average
    torch.testing.assert_close(model.state_dict(), load_checkpoint(tmp_path / "last.pt")["model"])


def test_old_import_path_warns_and_reexports() -> None:
    import importlib

    import annotated_transformer.translation as translation

    sys.modules.pop("annotated_transformer.translate", None)
    with pytest.warns(DeprecationWarning, match="annotated_transformer.translate is deprecated"):
        old = importlib.import_module("annotated_transformer.translate")
    assert old.translate is translation.translate and old.TrainConfig is TrainConfig


def test_no_module_imports_upward() -> None:
    "Each module imports only from the modules below it in the layering (the map in the package docstring)."
    import ast

    import annotated_transformer

    order = [
        "model",
        "training",
        "decoding",
        "recurrent",
        "data",
        "subwords",
        "checkpoint",
        "translation",
        "distributed",
        "trainer",
        "visualization",
        "_chapters",
        "cli",
    ]
    package = Path(annotated_transformer.__file__).parent
    for rank, name in enumerate(order):
        tree = ast.parse((package / f"{name}.py").read_text())
        imported = set()
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom) and node.module
            ):  # `from .data import` or `from annotated_transformer.data import`
                parts = node.module.split(".") if node.level == 1 else node.module.split(".")[1:]
                imported.update(
                    parts[:1]
                    if node.level == 1 or node.module.startswith("annotated_transformer.")
                    else []
                )
        above = imported & set(order[rank:])
        assert not above, f"{name} imports {sorted(above)}, which are not below it"


# =========================================================================== one writer, no silent overwrite, early checks
def test_two_trainings_into_one_folder_one_refuses_and_a_killed_run_releases_the_lock(
    data_dir: Path, tmp_path: Path, capsys
) -> None:
    import signal
    import subprocess
    import time

    out = tmp_path / "run"
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "annotated_transformer.cli",
            "train",
            "--out",
            str(out),
            "--data-dir",
            str(data_dir),
            "--epochs",
            "50",
            *TRAIN_ARGS,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 120
        while not (out / ".writer").exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert (out / ".writer").exists(), (
            first.stderr.read()
            if first.poll() is not None
            else "the first run never claimed the folder"
        )
        assert (
            main(
                [
                    "train",
                    "--out",
                    str(out),
                    "--data-dir",
                    str(data_dir),
                    "--epochs",
                    "1",
                    *TRAIN_ARGS,
                ]
            )
            != 0
        )
        err = capsys.readouterr().err
        assert (
            f"is in use by another training run (pid {first.pid} on" in err and err.count("\n") == 1
        )
        while not (out / "last.pt").exists() and first.poll() is None:
            time.sleep(0.1)
    finally:
        first.send_signal(
            signal.SIGKILL
        )  # the harshest exit: the operating system releases the lock
        first.wait()
    ckpt = load_checkpoint(out / "last.pt")
    assert (
        main(
            [
                "train",
                "--out",
                str(out),
                "--data-dir",
                str(data_dir),
                "--epochs",
                str(ckpt["epoch"] + 1),
                "--resume",
                "--quiet",
            ]
        )
        == 0
    )
    assert load_checkpoint(out / "last.pt")["epoch"] == ckpt["epoch"] + 1
    assert not (out / ".writer").exists()  # released and cleaned up on a normal exit


def test_train_refuses_to_replace_a_run_unless_told(data_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    args = ["train", "--out", str(out), "--data-dir", str(data_dir), *TRAIN_ARGS]
    assert main([*args, "--epochs", "2"]) == 0
    before = {p.name: p.read_bytes() for p in out.glob("*.pt")}
    capsys.readouterr()
    assert main([*args, "--epochs", "1"]) != 0
    assert (
        "already holds a training run (epoch1.pt, epoch2.pt, history.json, last.pt): pass --resume"
        in capsys.readouterr().err
    )
    assert {p.name: p.read_bytes() for p in out.glob("*.pt")} == before  # untouched
    assert main([*args, "--epochs", "1", "--resume", "--overwrite"]) != 0
    assert "give one of them" in capsys.readouterr().err
    assert main([*args, "--epochs", "1", "--overwrite"]) == 0
    assert sorted(p.name for p in out.glob("*.pt")) == [
        "epoch1.pt",
        "last.pt",
    ]  # no stale epoch2.pt mixes in
    assert load_checkpoint(out / "last.pt")["epoch"] == 1
    assert [h["epoch"] for h in json.loads((out / "history.json").read_text())] == [
        1
    ]  # the new run's history only


def test_an_unusable_output_folder_is_reported_before_anything_else(tmp_path: Path, capsys) -> None:
    (tmp_path / "some_file").write_text("")
    missing_data = (
        tmp_path / "no-such-data"
    )  # would fail too, but later: the folder is checked first
    assert (
        main(
            [
                "train",
                "--out",
                str(tmp_path / "some_file" / "run"),
                "--data-dir",
                str(missing_data),
                *TRAIN_ARGS,
            ]
        )
        != 0
    )
    err = capsys.readouterr().err
    assert (
        "cannot use" in err
        and "some_file/run as the output folder" in err
        and "Traceback" not in err
    )


def test_too_long_sentences_are_refused_before_training(data_dir: Path, tmp_path: Path) -> None:
    pairs = {split: load_multi30k(split, data_dir) for split in ("train", "val")}
    pairs["val"] = pairs["val"] + [("Ein Mann " * 10 + "sieht einen Ball.", "A man sees a ball.")]
    config = TrainConfig(
        model=ModelConfig(N=1, d_model=16, d_ff=32, h=2, max_len=60),
        epochs=1,
        max_tokens=300,
        warmup=10,
    )
    logged = []
    with pytest.raises(
        ValueError, match=f"validation pair {len(pairs['val'])} needs 76 positions .*max_len=60"
    ):
        train(tmp_path / "run", config, pairs=pairs, progress=False, log=logged.append)
    assert not logged and not list(
        (tmp_path / "run").glob("*.pt")
    )  # refused before the first epoch


@pytest.mark.filterwarnings(
    "default:Multi30k file differs from the published one:UserWarning"
)  # this test wants it
def test_warnings_are_one_line_in_the_console(checkpoint: Path, data_dir: Path, capsys) -> None:
    capsys.readouterr()
    assert (
        main(
            [
                "evaluate",
                "--checkpoint",
                str(checkpoint),
                "--split",
                "test2016",
                "--data-dir",
                str(data_dir),
                "--quiet",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert (
        "annotated-transformer evaluate: warning: Multi30k file differs from the published one"
        in err
    )  # synthetic files
    assert "warnings.warn" not in err and all(
        line.startswith("annotated-transformer evaluate: warning:") for line in err.splitlines()
    )
