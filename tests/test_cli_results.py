"""Machine-readable results and reproducible settings, through the real console command.

1. `evaluate --json`: sacreBLEU's JSON fields plus the decoding settings, the same score as the `sacrebleu`
   command gives for the same files.
2. `train` keeps `history.json` beside the checkpoints, and TensorBoard logs with `--tensorboard`.
3. `train --config FILE` (JSON or TOML) sets up a run; flags given override it; a bad file is one clear line.
4. `--model small`: the notebooks' CPU model from the command line.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from synthetic import synthetic_pairs, write_split

from annotated_transformer._chapters import CPU_CONFIG
from annotated_transformer.checkpoint import load_checkpoint, model_from_checkpoint
from annotated_transformer.model import count_parameters

FAST = ["--max-tokens", "400", "--warmup", "20", "--quiet"]


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    "The console command in a fresh process, text in and out."
    return subprocess.run(
        [sys.executable, "-m", "annotated_transformer.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=600,
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    "Synthetic Multi30k-named files (German-English)."
    folder = tmp_path_factory.mktemp("multi30k")
    pairs = synthetic_pairs()
    write_split(folder, "train", pairs[:160])
    write_split(folder, "val", pairs[160:176])
    write_split(folder, "test2016", pairs[176:])
    return folder


@pytest.fixture(scope="module")
def run(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    "Two epochs of the tiny preset with TensorBoard logs."
    out = tmp_path_factory.mktemp("runs") / "run"
    done = cli(
        "train",
        "--out",
        str(out),
        "--data-dir",
        str(corpus),
        "--model",
        "tiny",
        "--epochs",
        "2",
        "--tensorboard",
        *FAST,
    )
    assert done.returncode == 0, done.stderr
    return out


# =========================================================================== 1. evaluate --json
def test_evaluate_json_is_sacrebleus_score_with_the_settings(
    run: Path, corpus: Path, tmp_path: Path
) -> None:
    out = tmp_path / "hypotheses.txt"
    done = cli(
        "evaluate",
        "--checkpoint",
        str(run / "last.pt"),
        "--data-dir",
        str(corpus),
        "--beam",
        "2",
        "--json",
        "--output",
        str(out),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (
        result["name"],
        result["data"],
        result["sentences"],
        result["beam"],
        result["alpha"],
    ) == ("BLEU", "test2016", 16, 2, 0.6)
    model, _, _ = model_from_checkpoint(load_checkpoint(run / "last.pt"))
    assert (result["arch"], result["parameters"]) == ("transformer", count_parameters(model))
    references = tmp_path / "references.txt"
    references.write_text("".join(en + "\n" for _, en in synthetic_pairs()[176:]))
    reference = subprocess.run(
        [sys.executable, "-m", "sacrebleu", str(references), "-i", str(out), "-m", "bleu"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    theirs = json.loads(reference.stdout)
    assert (
        round(result["score"], 1) == theirs["score"] and result["signature"] == theirs["signature"]
    )


# =========================================================================== 2. history.json and TensorBoard
def test_history_json_holds_every_epochs_figures(run: Path) -> None:
    history = json.loads((run / "history.json").read_text())
    assert history == load_checkpoint(run / "last.pt")["history"] and [
        h["epoch"] for h in history
    ] == [1, 2]
    for entry in history:
        assert {
            "train_loss",
            "val_loss",
            "val_ppl",
            "val_bleu",
            "lr",
            "tokens_per_second",
            "seconds",
        } <= set(entry)
        assert entry["lr"] > 0 and entry["tokens_per_second"] > 0 and entry["seconds"] > 0


def test_validation_perplexity_is_of_the_true_words_without_smoothing(run: Path) -> None:
    "val_ppl is exp of the mean cross-entropy of the reference words, computed here with F.cross_entropy, not the smoothed loss."
    import torch
    import torch.nn.functional as F

    from annotated_transformer.checkpoint import tokenizers_from_checkpoint
    from annotated_transformer.data import encode_pairs, make_loader, tokenize_all

    ckpt = load_checkpoint(run / "last.pt")
    model, src_vocab, tgt_vocab = model_from_checkpoint(ckpt)
    tok_src, tok_tgt = tokenizers_from_checkpoint(ckpt)
    val = synthetic_pairs()[160:176]
    data = encode_pairs(
        tokenize_all([de for de, _ in val], tok_src, progress=False),
        tokenize_all([en for _, en in val], tok_tgt, progress=False),
        src_vocab,
        tgt_vocab,
    )
    total, tokens = 0.0, 0
    with torch.no_grad():
        for batch in make_loader(data, tgt_vocab.pad, 400, shuffle=False):
            logits = model.generator.proj(
                model(batch.src, batch.tgt, batch.src_mask, batch.tgt_mask)
            )  # (B, T, V)
            total += F.cross_entropy(
                logits.flatten(0, 1),
                batch.tgt_y.flatten(),
                ignore_index=tgt_vocab.pad,
                reduction="sum",
            ).item()
            tokens += batch.ntokens
    last = ckpt["history"][-1]
    assert last["val_ppl"] == pytest.approx(math.exp(total / tokens), rel=1e-4)
    assert last["val_ppl"] != pytest.approx(
        math.exp(last["val_loss"]), rel=1e-2
    )  # the smoothed loss would give another figure


def test_fused_loss_trains_the_same_run(run: Path, corpus: Path, tmp_path: Path) -> None:
    "train --fused-loss (the loss from the decoder's outputs in chunks, Part 2) gives the readable path's figures."
    out = tmp_path / "fused"
    done = cli(
        "train",
        "--out",
        str(out),
        "--data-dir",
        str(corpus),
        "--model",
        "tiny",
        "--epochs",
        "2",
        "--fused-loss",
        *FAST,
    )
    assert done.returncode == 0, done.stderr
    readable, fused = (json.loads((folder / "history.json").read_text()) for folder in (run, out))
    for a, b in zip(readable, fused, strict=True):
        for key in ("train_loss", "val_loss", "val_ppl", "lr"):
            assert b[key] == pytest.approx(a[key], rel=1e-4), key


def test_tensorboard_logs_the_same_figures(run: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logs = EventAccumulator(str(run / "tensorboard"))
    logs.Reload()
    history = json.loads((run / "history.json").read_text())
    assert {"train_loss", "val_loss", "val_bleu", "lr", "tokens_per_second"} <= set(
        logs.Tags()["scalars"]
    )
    assert [(e.step, pytest.approx(e.value, rel=1e-5)) for e in logs.Scalars("val_loss")] == [
        (h["epoch"], h["val_loss"]) for h in history
    ]


# =========================================================================== 3. --config
@pytest.mark.parametrize(
    "suffix, text",
    [
        (
            ".json",
            '{"epochs": 1, "warmup": 30, "seed": 3, "model": {"N": 1, "d_model": 32, "d_ff": 64, "h": 2}}',
        ),
        (
            ".toml",
            "epochs = 1\nwarmup = 30\nseed = 3\n[model]\nN = 1\nd_model = 32\nd_ff = 64\nh = 2\n",
        ),
    ],
)
def test_a_config_file_sets_up_the_run_and_flags_override_it(
    suffix: str, text: str, corpus: Path, tmp_path: Path
) -> None:
    config = tmp_path / f"config{suffix}"
    config.write_text(text)
    out = tmp_path / "run"
    done = cli(
        "train",
        "--out",
        str(out),
        "--data-dir",
        str(corpus),
        "--config",
        str(config),
        "--seed",
        "5",
        "--max-tokens",
        "400",
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    stored = load_checkpoint(out / "last.pt")["config"]
    assert (stored["epochs"], stored["warmup"], stored["seed"], stored["max_tokens"]) == (
        1,
        30,
        5,
        400,
    )  # --seed beats the file
    assert (stored["model"]["N"], stored["model"]["d_model"], stored["model"]["dropout"]) == (
        1,
        32,
        0.1,
    )  # the rest: defaults


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"epochs": 1, "learning_rate": 3}', "unexpected keyword argument 'learning_rate'"),
        ('{"epochs": 0}', "epochs must be at least 1, got 0"),
        ("{not json", "Expecting property name"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_it(
    text: str, message: str, corpus: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text(text)
    done = cli(
        "train",
        "--out",
        str(tmp_path / "run"),
        "--data-dir",
        str(corpus),
        "--config",
        str(config),
        *FAST,
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert (
        done.stderr.startswith(f"annotated-transformer train: error: --config {config}: ")
        and message in done.stderr
    )


def test_config_and_resume_do_not_go_together(run: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text("{}")
    done = cli("train", "--out", str(run), "--resume", "--config", str(config))
    assert (
        done.returncode == 2
        and "a resumed run keeps the configuration in its checkpoint" in done.stderr
    )


# =========================================================================== 4. --model small
def test_model_small_is_the_notebooks_cpu_model(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = cli(
        "train",
        "--out",
        str(out),
        "--data-dir",
        str(corpus),
        "--model",
        "small",
        "--epochs",
        "1",
        *FAST,
    )
    assert done.returncode == 0, done.stderr
    assert load_checkpoint(out / "last.pt")["config"]["model"] == CPU_CONFIG.to_dict()["model"]
