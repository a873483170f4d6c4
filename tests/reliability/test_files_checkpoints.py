"""Files from others: checkpoints (issue 36). Every field the checkpoint reader uses is checked for
its type and range before use, so a crafted or damaged last.pt is one line naming the file and the
field, never a traceback nor the CLI's "internal error":

1. Plain fields, through `translate` (and `--average-last`, which names epoch files after the
   epoch): the epoch ("abc", 1.5, None, 10**30, a path that climbs out of the run folder, 0, True),
   the history, run_id, data origin, vocabularies (not text, lone surrogates), the loop's counts.
2. Weights: quantized, sparse, expanded (stride 0) and integer tensors.
3. Resume state, through `train --resume`: optimizer `{}` or of another shape, its settings, the
   random states, the schedule; the traversing epoch writes nothing outside the run folder.
4. Size: a tiny file declaring a model over --max-parameters (the issue's 945M expanded one, and
   N=48, d_model=8192) is refused quickly, and with the limit raised still refused (not whole).
"""

from __future__ import annotations

import io
import random
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from clitools import TINY_RUN, refused

from annotated_transformer.checkpoint import RunCheckpoint, load_checkpoint, save_checkpoint
from annotated_transformer.config import TrainConfig, preset
from annotated_transformer.data import Vocab


@pytest.fixture(autouse=True)
def a_sentence_to_translate(monkeypatch: pytest.MonkeyPatch) -> None:
    "Standard input for `translate`, which reads it before it loads the checkpoint."
    monkeypatch.setattr("sys.stdin", io.StringIO("Ein Mann fährt Fahrrad.\n"))


@pytest.fixture(scope="module")
def stored(tiny_checkpoint: Path) -> dict:
    "The tiny run's last.pt as plain data (it holds a resume state: optimizer, schedule, rng)."
    return torch.load(tiny_checkpoint, weights_only=True)


def crafted(tiny_checkpoint: Path, tmp_path: Path, d: dict) -> Path:
    "A copy of the tiny run's folder whose last.pt is `d`; the path of that last.pt."
    run = tmp_path / "run"
    shutil.copytree(tiny_checkpoint.parent, run, ignore=shutil.ignore_patterns(".lock", ".writer"))
    torch.save(d, run / "last.pt")
    return run / "last.pt"


def one_line_naming(line: str, path: Path, field: str) -> None:
    "The refusal names the file and the field, and is neither a traceback nor the catch-all."
    assert str(path) in line and field in line, line
    assert "Traceback" not in line and "internal error" not in line, line


def changed(**fields: object) -> Callable[[dict], dict]:
    "A change to a checkpoint's plain data: these top-level fields replaced."
    return lambda d: {**d, **fields}


def vocab_token(name: str, token: object) -> Callable[[dict], dict]:
    "A change: token 4 of vocabulary `name` replaced."
    return lambda d: {**d, name: {"itos": [*d[name]["itos"][:4], token, *d[name]["itos"][5:]]}}


def weight(make: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[dict], dict]:
    "A change: the generator's weight replaced by `make(weight)`."
    name = "generator.proj.weight"
    return lambda d: {**d, "model": {**d["model"], name: make(d["model"][name])}}


def quantized(w: torch.Tensor) -> torch.Tensor:
    "`w` quantized to 8 bits (PyTorch warns that quantized tensors are deprecated)."
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(w, 0.1, 0, torch.qint8)


# ------------------------------------------------------------------------------ 1. plain fields
PLAIN = [  # id, change, the field the message names
    ("epoch-text", changed(epoch="abc"), "its epoch must be a whole number"),
    ("epoch-fraction", changed(epoch=1.5), "its epoch must be a whole number"),
    ("epoch-none", changed(epoch=None), "its epoch must be a whole number"),
    ("epoch-10**30", changed(epoch=10**30), "its epoch must be a whole number"),
    ("epoch-traversal", changed(epoch="/../../../../x/TRAVERSAL"), "its epoch must be"),
    ("epoch-zero", changed(epoch=0), "its epoch must be a whole number from 1"),
    ("epoch-bool", changed(epoch=True), "its epoch must be a whole number"),
    ("history-text", changed(history="abc"), "its history must be a list"),
    ("history-entry-list", changed(history=[{"epoch": [1]}]), "its history must be a list"),
    ("run-id-int", changed(run_id=5), "its run_id must be None or text"),
    ("run-id-surrogate", changed(run_id="\ud800"), "its run_id must be None or text"),
    ("data-int", changed(data=5), "its data must be None or where the data came from"),
    ("data-nan", changed(data={"train": {"files": [float("nan")]}}), "its data must be"),
    ("data-deep", changed(data={"train": [[[[["a"]]]]]}), "its data must be"),
    ("vocab-int", vocab_token("src_vocab", 7), "its src_vocab's token 4 is 7, not a text"),
    ("vocab-surrogate", vocab_token("tgt_vocab", "\udc80"), "its tgt_vocab's token 4 is"),
    ("vocab-not-list", changed(src_vocab={"itos": "abc"}), "its src_vocab must be a dictionary"),
    ("vocab-not-dict", changed(tgt_vocab=["a"]), "its tgt_vocab must be a dictionary"),
    ("counts-text", changed(train_state={"batches": "1"}), "its train_state must be"),
    ("counts-negative", changed(train_state={"batches": -1}), "its train_state must be"),
    ("weight-quantized", weight(quantized), "'generator.proj.weight' is not stored whole"),
    ("weight-sparse", weight(lambda w: w.to_sparse()), "'generator.proj.weight' is not stored"),
    ("weight-expanded", weight(lambda w: torch.zeros(1).expand(w.shape)), "is not stored whole"),
    ("weight-int", weight(lambda w: w.long()), "'generator.proj.weight' is torch.int64"),
]


@pytest.mark.parametrize("change, field", [row[1:] for row in PLAIN], ids=[r[0] for r in PLAIN])
def test_a_crafted_field_is_one_line_naming_it(
    stored, tiny_checkpoint, tmp_path, capsys, change, field
):
    path = crafted(tiny_checkpoint, tmp_path, change(stored))
    one_line_naming(refused(["translate", "--checkpoint", str(path)], 1, capsys), path, field)
    with pytest.raises(ValueError, match=field.replace("*", r"\*")):
        load_checkpoint(path)


EPOCHS = ["abc", 1.5, None, 10**30, "/../../../../x/TRAVERSAL", 0]


@pytest.mark.parametrize("epoch", EPOCHS, ids=["text", "fraction", "none", "10**30", "path", "0"])
def test_a_crafted_epoch_with_average_last_is_one_line(
    stored, tiny_checkpoint, tmp_path, capsys, epoch
):
    path = crafted(tiny_checkpoint, tmp_path, {**stored, "epoch": epoch})
    argv = ["translate", "--checkpoint", str(path), "--average-last", "1"]
    one_line_naming(refused(argv, 1, capsys), path, "its epoch must be a whole number")


# ------------------------------------------------------------------------------ 3. resume state
def optimizer_state(change: Callable[[dict], dict]) -> Callable[[dict], dict]:
    "A change to the optimizer's state: `change(its state of parameter 0)`."

    def apply(d: dict) -> dict:
        state = {**d["optimizer"]["state"], 0: change(d["optimizer"]["state"][0])}
        return {**d, "optimizer": {**d["optimizer"], "state": state}}

    return apply


def first_group(**settings: object) -> Callable[[dict], dict]:
    "A change to the optimizer's first parameter group."
    return lambda d: {
        **d,
        "optimizer": {
            **d["optimizer"],
            "param_groups": [{**d["optimizer"]["param_groups"][0], **settings}],
        },
    }


def rng(**state: object) -> Callable[[dict], dict]:
    "A change to the first process's random states."
    return lambda d: {**d, "rng": [{**d["rng"][0], **state}]}


def without(key: str) -> Callable[[dict], dict]:
    return lambda d: {k: v for k, v in d.items() if k != key}


RESUME = [  # id, change, the field the message names
    ("optimizer-empty", changed(optimizer={}), "its optimizer does not fit its model"),
    ("optimizer-text", changed(optimizer="abc"), "its optimizer must be a dictionary"),
    (
        "optimizer-shapes",
        optimizer_state(lambda s: {**s, "exp_avg": torch.zeros(3)}),
        "its optimizer does not fit its model: parameter 0's 'exp_avg'",
    ),
    (
        "optimizer-expanded",
        optimizer_state(lambda s: {**s, "exp_avg_sq": torch.zeros(1).expand(s["exp_avg"].shape)}),
        "its optimizer does not fit its model: parameter 0's 'exp_avg_sq'",
    ),
    ("optimizer-lr-text", first_group(lr="abc"), "its optimizer does not fit its model"),
    ("optimizer-params", first_group(params=[0, 1]), "its optimizer does not fit its model"),
    ("rng-text", changed(rng="abc"), "its rng must be a list"),
    ("rng-empty", changed(rng=[]), "its rng must be a list"),
    ("rng-torch-short", rng(torch=torch.zeros(3, dtype=torch.uint8)), "its rng must be"),
    ("rng-python", rng(python=(3, (1, 2), None)), "its rng must be a list"),
    ("scheduler-empty", changed(scheduler={}), "its scheduler is not the state of"),
    ("scheduler-text", changed(scheduler="abc"), "its scheduler must be a dictionary"),
    (
        "scheduler-epoch-text",
        lambda d: {**d, "scheduler": {**d["scheduler"], "last_epoch": "3"}},
        "its scheduler is not the state of",
    ),
    ("no-scheduler", without("scheduler"), "has no scheduler"),
    ("scaler-text", changed(scaler={"scale": "big"}), "its scaler must be None or"),
]


@pytest.mark.parametrize("change, field", [row[1:] for row in RESUME], ids=[r[0] for r in RESUME])
def test_a_broken_resume_state_is_one_line_before_training(
    stored, tiny_checkpoint, synthetic_corpus, tmp_path, capsys, change, field
):
    path = crafted(tiny_checkpoint, tmp_path, change(stored))
    before = sorted(p.name for p in path.parent.iterdir())
    argv = ["train", "--out", str(path.parent), "--resume", "--data-dir", str(synthetic_corpus)]
    line = refused([*argv, "--epochs", "2", *TINY_RUN], 1, capsys)
    one_line_naming(line, path, field)
    assert sorted(p.name for p in path.parent.iterdir() if p.name != ".lock") == before


def test_an_epoch_that_climbs_out_of_the_run_folder_writes_nothing(
    stored, tiny_checkpoint, synthetic_corpus, tmp_path, capsys
):
    outside = tmp_path / "outside"
    outside.mkdir()
    path = crafted(tiny_checkpoint, tmp_path, {**stored, "epoch": "/../../outside/TRAVERSAL"})
    argv = ["train", "--out", str(path.parent), "--resume", "--data-dir", str(synthetic_corpus)]
    line = refused([*argv, "--epochs", "2", *TINY_RUN], 1, capsys)
    one_line_naming(line, path, "its epoch must be a whole number from 1 to 100,000")
    assert list(outside.iterdir()) == [] and not list(tmp_path.glob("**/*TRAVERSAL*"))


# ------------------------------------------------------------------------------ 4. size
def expanded_checkpoint(path: Path, **sizes: int) -> Path:
    "A checkpoint of a model of `sizes`, every weight expanded from one number (a small file)."
    model = replace(preset("tiny"), **sizes)
    vocab = Vocab(["<s>", "</s>", "<blank>", "<unk>", *(f"w{i}" for i in range(60))])
    with torch.device("meta"):
        shapes = model.build(len(vocab), len(vocab)).state_dict()
    weights = {name: torch.zeros(1).expand(w.shape) for name, w in shapes.items()}
    save_checkpoint(path, RunCheckpoint(TrainConfig(model=model), weights, vocab, vocab, 1, []))
    return path


@pytest.fixture(scope="module")
def declared_945m(tmp_path_factory) -> Path:
    "The issue's probe: a file of about 100 KB declaring a model of 940M parameters."
    path = tmp_path_factory.mktemp("crafted") / "last.pt"
    return expanded_checkpoint(path, N=8, d_model=2048, d_ff=8192, h=16)


def test_a_small_file_declaring_a_huge_model_is_refused_for_its_size(declared_945m, capsys):
    assert declared_945m.stat().st_size < 200_000
    for command in ("translate", "export"):
        argv = [command, "--checkpoint", str(declared_945m)]
        argv += ["--out", str(declared_945m.parent / "export")] if command == "export" else []
        line = refused(argv, 1, capsys)
        one_line_naming(line, declared_945m, "parameters, more than the 500,000,000 allowed")
        assert "--max-parameters" in line and "declares 9" in line


def test_with_the_limit_raised_an_expanded_model_is_still_refused(declared_945m, capsys):
    argv = ["translate", "--checkpoint", str(declared_945m), "--max-parameters", "2000000000"]
    one_line_naming(refused(argv, 1, capsys), declared_945m, "is not stored whole")


def test_the_largest_sizes_are_refused_quickly(tmp_path, capsys):
    path = expanded_checkpoint(tmp_path / "last.pt", N=48, d_model=8192, d_ff=32768, h=128)
    start = time.perf_counter()
    line = refused(["translate", "--checkpoint", str(path)], 1, capsys)
    one_line_naming(line, path, "parameters, more than the 500,000,000 allowed")
    assert time.perf_counter() - start < 60


def test_average_last_takes_the_limit_too(tiny_checkpoint, capsys):
    from annotated_transformer.checkpoint import average_last

    count = sum(w.numel() for w in load_checkpoint(tiny_checkpoint).model.values())
    with pytest.raises(ValueError, match=r"declares [\d,]+ parameters, more than the 1,000 "):
        average_last(tiny_checkpoint, 1, max_parameters=1_000)
    assert average_last(tiny_checkpoint, 1, max_parameters=count).epoch == 1
    argv = ["translate", "--checkpoint", str(tiny_checkpoint), "--average-last", "1"]
    line = refused([*argv, "--max-parameters", "1000"], 1, capsys)
    one_line_naming(line, tiny_checkpoint, "more than the 1,000 allowed")


def test_the_random_state_check_leaves_this_process_alone(stored):
    "Damaged random states are tried on throwaway generators, never on this process's."
    before = (torch.get_rng_state(), random.getstate())
    broken = {**stored, "rng": [{**stored["rng"][0], "python": (3, (1, 2), None)}]}
    with pytest.raises(ValueError, match="its rng must be"):
        RunCheckpoint.from_dict(broken, "last.pt")
    # exact: random states, put back
    assert torch.equal(torch.get_rng_state(), before[0]) and random.getstate() == before[1]
