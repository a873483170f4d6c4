"""Tests for annotated_transformer.checkpoint: what a run saves, and reading it back.

1. Checkpoint averaging: copies give the checkpoint, two give the mean, dtypes and non-float
   buffers, mismatched checkpoints refused; `average_last` averages one run's epochs only.
2. The record: a `RunCheckpoint` with everything (resume state, scaler, subword model) survives
   `save_checkpoint` and `load_checkpoint` field by field; what the trainer writes (last.pt and the
   weights-only epochK.pt) loads with PyTorch's restricted unpickler.
3. Older checkpoints still load: the layouts of versions 0.1 and 0.2, written with torch.save as
   those versions wrote them, read by `load_checkpoint` and `Translator.from_checkpoint`; the
   training loop's counts under their old names (`train_state_from_dict`).
4. Safety and consistency: a planted pickle payload is refused and never runs, temporary files
   are unique and get the umask's permissions, a failed write leaves the old file, and files that
   are not checkpoints or do not fit their configuration get clear one-line errors.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch

from annotated_transformer._chapters import synthetic_pairs
from annotated_transformer.checkpoint import (
    CHECKPOINT_FORMAT,
    ResumeState,
    RunCheckpoint,
    average_checkpoints,
    average_last,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    train_state_from_dict,
)
from annotated_transformer.config import RuntimeOptions, TrainConfig
from annotated_transformer.data import SPECIALS, InMemory, Vocab
from annotated_transformer.model import ModelConfig
from annotated_transformer.pipeline import train
from annotated_transformer.subwords import SubwordTokenizer
from annotated_transformer.training import TrainState, noam_optimizer
from annotated_transformer.translator import Translator

SMALL = ModelConfig(N=1, d_model=16, d_ff=32, h=2)
QUIET = dict(options=RuntimeOptions(progress=False), log=lambda _: None)


def tiny_run(out: Path, seed: int = 0, epochs: int = 2) -> Path:
    "A run of a small model on the synthetic pairs; its last.pt."
    pairs = synthetic_pairs()
    config = TrainConfig(model=SMALL, epochs=epochs, max_tokens=300, warmup=10, seed=seed)
    train(out, config, corpus=InMemory(pairs[:150], pairs[150:160]), **QUIET)
    return out / "last.pt"


def record(epoch: int = 1, seed: int = 0) -> RunCheckpoint:
    "A small checkpoint made by hand: a fresh model of SMALL and a vocabulary of seven tokens."
    vocab = Vocab([*SPECIALS, "a", "b", "c"])
    torch.manual_seed(seed)
    weights = SMALL.build(len(vocab), len(vocab)).state_dict()
    return RunCheckpoint(TrainConfig(model=SMALL), weights, vocab, vocab, epoch, [], run_id="r")


# =========================================================================== 1. averaging
def save_states(tmp_path: Path, n: int, seed: int = 0) -> list[Path]:
    "n checkpoint files of small random models, the state dict under 'model', as train writes."
    paths = []
    for i in range(n):
        torch.manual_seed(seed + i)
        state = SMALL.build(7, 7).state_dict()
        paths.append(tmp_path / f"c{i}.pt")
        torch.save({"model": state, "epoch": i + 1, "config": {"N": 1}}, paths[-1])
    return paths


def test_averaging_copies_of_one_checkpoint_gives_it_back(tmp_path: Path) -> None:
    [path] = save_states(tmp_path, 1)
    state = torch.load(path, weights_only=True)["model"]
    averaged = average_checkpoints([path, path, path])
    assert averaged.keys() == state.keys()
    for k, v in state.items():
        torch.testing.assert_close(averaged[k], v, atol=1e-6, rtol=0)


def test_averaging_two_gives_their_mean_and_keeps_dtypes(tmp_path: Path) -> None:
    paths = save_states(tmp_path, 2)
    a, b = (torch.load(p, weights_only=True)["model"] for p in paths)
    averaged = average_checkpoints(paths)
    for k in a:
        torch.testing.assert_close(averaged[k], (a[k] + b[k]) / 2)
    # a plain state dict works too; half precision is averaged in float32 and cast back;
    # integers come from the last
    half = [
        {"w": torch.tensor([1.0, 2.0], dtype=torch.float16), "n": torch.tensor(i)} for i in (3, 7)
    ]
    for i, state in enumerate(half):
        torch.save(state, tmp_path / f"h{i}.pt")
    mixed = average_checkpoints([tmp_path / "h0.pt", tmp_path / "h1.pt"])
    assert mixed["w"].dtype == torch.float16 and mixed["n"].item() == 7


def test_averaging_refuses_mismatched_checkpoints(tmp_path: Path) -> None:
    [path] = save_states(tmp_path, 1)
    torch.save(SMALL.build(9, 7).state_dict(), tmp_path / "other.pt")
    with pytest.raises(ValueError, match=r"'src_embed.0.lut.weight' is \(9, 16\)"):
        average_checkpoints([path, tmp_path / "other.pt"])
    torch.save(replace(SMALL, N=2).build(7, 7).state_dict(), tmp_path / "deeper.pt")
    with pytest.raises(ValueError, match="different parameters"):
        average_checkpoints([path, tmp_path / "deeper.pt"])
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(ValueError, match="neither a state dict"):
        average_checkpoints([tmp_path / "list.pt"])
    with pytest.raises(ValueError, match="no checkpoints"):
        average_checkpoints([])


def test_average_last_averages_one_runs_epochs_only(tmp_path: Path) -> None:
    last = tiny_run(tmp_path / "a", seed=0)
    other = tiny_run(tmp_path / "b", seed=1)
    averaged = average_last(last, 2)  # one run's epochs average
    assert isinstance(averaged, RunCheckpoint) and averaged.epoch == 2
    epochs = [load_checkpoint(tmp_path / "a" / f"epoch{e}.pt").model for e in (1, 2)]
    for name, value in averaged.model.items():
        torch.testing.assert_close(value, (epochs[0][name] + epochs[1][name]) / 2)
    assert averaged.run_id == load_checkpoint(last).run_id
    assert average_last(last, 1).model.keys() == epochs[1].keys()
    with pytest.raises(ValueError, match="from epoch 2: there are not 3 epochs to average"):
        average_last(last, 3)
    with pytest.raises(ValueError, match="must be at least 1, got 0"):
        average_last(last, 0)
    (tmp_path / "a" / "epoch1.pt").write_bytes((other.parent / "epoch1.pt").read_bytes())
    with pytest.raises(ValueError, match="epoch1.pt is from another training run than .*last.pt"):
        average_last(last, 2)
    (tmp_path / "a" / "epoch1.pt").unlink()
    with pytest.raises(FileNotFoundError, match="needs epoch1.pt beside it"):
        average_last(last, 2)


# =========================================================================== 2. the record
def test_everything_a_checkpoint_holds_comes_back(tmp_path: Path) -> None:
    ckpt = record(epoch=3)
    model = SMALL.build(len(ckpt.src_vocab), len(ckpt.tgt_vocab))
    optimizer, scheduler = noam_optimizer(model, 16, warmup=5)
    subwords = SubwordTokenizer.train(["Ein Mann fährt.", "A man rides."] * 50, vocab_size=300)
    counts = TrainState(batches=12, optimizer_steps=6, samples=50, tokens=400)
    scaler = {"scale": 0.5, "growth_factor": 2.0}
    resume = ResumeState(
        optimizer.state_dict(), scheduler.state_dict(), counts, [rng_state()], scaler
    )
    full = replace(
        ckpt,
        config=replace(ckpt.config, vocab_size=300, src_lang="fr", train_pairs=100),
        history=[{"epoch": e, "val_loss": 1.0 / e} for e in (1, 2, 3)],
        data={"pairs": "0123"},
        tokenizer=subwords,
        resume=resume,
    )
    save_checkpoint(tmp_path / "last.pt", full)
    back = load_checkpoint(tmp_path / "last.pt")
    assert (back.config, back.epoch, back.history, back.run_id, back.data) == (
        full.config,
        3,
        full.history,
        "r",
        {"pairs": "0123"},
    )
    assert back.src_vocab.itos == back.tgt_vocab.itos == ckpt.src_vocab.itos
    assert back.tokenizer.model == subwords.model
    assert back.resume.counts == counts and back.resume.scaler == scaler  # exact: read back
    assert back.resume.scheduler == scheduler.state_dict()
    assert back.resume.optimizer["param_groups"] == optimizer.state_dict()["param_groups"]
    assert torch.equal(back.resume.rng[0]["torch"], full.resume.rng[0]["torch"])  # exact: copies
    assert back.resume.rng[0]["python"] == full.resume.rng[0]["python"]
    for name, value in ckpt.model.items():
        assert torch.equal(back.model[name], value), name  # exact: saved and read back
    stored = torch.load(tmp_path / "last.pt", weights_only=True)
    assert (stored["format"], stored["version"]) == (CHECKPOINT_FORMAT, "0.3.0")
    # the keys the checkpoint has always used, so that older readers of last.pt find them
    assert stored["train_state"] == asdict(counts) and stored["scaler"] == scaler
    assert {"optimizer", "scheduler", "rng", "tokenizer"} <= set(stored)
    weights_only = full.weights_only()
    assert weights_only.resume is None and full.resume is resume  # a copy, the original kept
    assert not {"optimizer", "scheduler", "rng", "train_state"} & set(weights_only.to_dict())


def test_everything_the_trainer_saves_loads_with_the_restricted_unpickler(tmp_path: Path) -> None:
    last = tiny_run(tmp_path / "run")
    for path, resumable in ((last, True), (tmp_path / "run" / "epoch1.pt", False)):
        # raises if anything but tensors and plain data was saved
        stored = torch.load(path, weights_only=True)
        assert stored["format"] == CHECKPOINT_FORMAT and stored["run_id"]
        assert ("optimizer" in stored) == resumable
        ckpt = load_checkpoint(path)
        assert (ckpt.resume is not None) == resumable
    ckpt = load_checkpoint(last)
    model = ckpt.build_model()  # enough to translate and to average
    assert not model.training
    torch.testing.assert_close(model.state_dict(), ckpt.model)
    assert ckpt.resume.counts.optimizer_steps == ckpt.history[-1]["steps"] > 0
    assert len(ckpt.resume.rng) == 1  # one process


# =========================================================================== 3. older checkpoints
def old_layout(version: str, tmp_path: Path) -> Path:
    "A last.pt as version 0.1 or 0.2 wrote it (both of checkpoint format 1), saved with torch.save."
    torch.manual_seed(0)
    src_vocab = Vocab.build([["Ein", "Mann", "sieht", "einen", "Ball", "."]] * 2)
    tgt_vocab = Vocab.build([["A", "man", "sees", "a", "ball", "."]] * 2)
    config = TrainConfig(model=replace(SMALL, norm_first=True), epochs=2, max_tokens=300)
    model = config.model.build(len(src_vocab), len(tgt_vocab))
    optimizer, scheduler = noam_optimizer(model, 16, warmup=10)
    stored = {
        "format": 1,
        "version": version,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "epoch": 2,
        "history": [{"epoch": e, "train_loss": 3.0 / e, "steps": 3 * e} for e in (1, 2)],
        "src_vocab": {"itos": src_vocab.itos},
        "tgt_vocab": {"itos": tgt_vocab.itos},
    }
    settings = {
        k: v
        for k, v in config.to_dict().items()
        if k not in ("src_lang", "tgt_lang", "vocab_size", "train_pairs")
    }
    if version == "0.1.0":  # one random state, the counts' first names, a model without d_k
        model_settings = {
            k: v for k, v in settings["model"].items() if k not in ("d_k", "positions")
        }
        stored.update(
            config={**settings, "model": model_settings},
            train_state={"step": 12, "accum_step": 6, "samples": 50, "tokens": 400},
            rng=rng_state(),
        )
    else:  # a run id, a list of random states; no languages, no data origin
        stored.update(
            config=settings,
            train_state={"batches": 12, "optimizer_steps": 6, "samples": 50, "tokens": 400},
            rng=[rng_state()],
            run_id="0" * 32,
        )
    path = tmp_path / version / "last.pt"
    path.parent.mkdir()
    torch.save(stored, path)
    return path


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0"])
def test_older_checkpoints_still_load(version: str, tmp_path: Path) -> None:
    path = old_layout(version, tmp_path)
    ckpt = load_checkpoint(path)
    assert (ckpt.epoch, [h["epoch"] for h in ckpt.history]) == (2, [1, 2])
    assert ckpt.resume.counts == TrainState(batches=12, optimizer_steps=6, samples=50, tokens=400)
    assert len(ckpt.resume.rng) == 1 and torch.is_tensor(ckpt.resume.rng[0]["torch"])
    assert ckpt.run_id == (None if version == "0.1.0" else "0" * 32)
    assert ckpt.data is None and ckpt.tokenizer is None
    config = ckpt.config  # what these versions did not store takes its default: words, de-en
    assert (config.src_lang, config.tgt_lang, config.vocab_size, config.train_pairs) == (
        "de",
        "en",
        None,
        None,
    )
    assert config.corpus == "multi30k"  # no corpus, no data origin: Multi30k
    assert config.model == replace(SMALL, norm_first=True) and config.max_tokens == 300
    assert ckpt.weights_only().resume is None
    translator = Translator.from_checkpoint(path)
    assert not translator.model.training
    stored = torch.load(path, weights_only=True)["model"]
    for name, value in translator.model.state_dict().items():
        assert torch.equal(value, stored[name]), name  # exact: read back, not computed
    [tokens] = translator.translate(["Ein Mann sieht einen Ball."])
    assert set(tokens) <= set(ckpt.tgt_vocab.itos) - {"<unk>"}
    assert translator.src_tokenizer.tokenize(["Ein Mann."]) == [["Ein", "Mann", "."]]


@pytest.mark.parametrize(
    "origin, corpus",
    [
        ({"multi30k": ["de", "en"]}, "multi30k"),
        ({"train": {"files": ["a.de", "a.en"]}, "val": {"files": ["b.de", "b.en"]}}, "files"),
        ({"pairs": "0" * 64}, "pairs"),
        (None, "multi30k"),
    ],
    ids=["multi30k", "files", "pairs", "no origin"],
)
def test_a_checkpoint_from_before_corpora_had_names_gets_its_data_origins(
    origin: dict | None, corpus: str, tmp_path: Path
) -> None:
    "Written before TrainConfig.corpus: the data origin tells your own data from Multi30k."
    stored = record().to_dict()
    stored["config"] = {k: v for k, v in stored["config"].items() if k != "corpus"}
    stored["data"] = origin
    torch.save(stored, tmp_path / "last.pt")
    assert load_checkpoint(tmp_path / "last.pt").config.corpus == corpus
    # one written since keeps its own, whatever its origin says
    named = {**stored, "config": {**stored["config"], "corpus": "multi30k"}}
    torch.save(named, tmp_path / "named.pt")
    assert load_checkpoint(tmp_path / "named.pt").config.corpus == "multi30k"
    torch.save({**named, "config": {**named["config"], "corpus": "Bad Name"}}, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="corpus must be a corpus name such as multi30k, got "):
        load_checkpoint(tmp_path / "bad.pt")


def test_train_state_from_dict_reads_new_and_version_0_1_names():
    state = TrainState(batches=13, optimizer_steps=6, samples=59, tokens=1234)
    assert train_state_from_dict(asdict(state)) == state
    old = {"step": 13, "accum_step": 6, "samples": 59, "tokens": 1234}  # version 0.1's names
    assert train_state_from_dict(old) == state
    assert train_state_from_dict({"step": 13, "optimizer_steps": 6}) == TrainState(
        batches=13, optimizer_steps=6
    )
    assert train_state_from_dict({}) == TrainState()
    with pytest.raises(
        ValueError, match=r"both the old and the new name of a count in \['batches', 'step'\]"
    ):
        train_state_from_dict({"step": 13, "batches": 13})
    with pytest.raises(TypeError, match="epochs"):
        train_state_from_dict({"epochs": 2})


# ======================================================================== 4. safety and consistency
class Payload:
    "Unpickling this calls Path.touch(marker): what an attacker's os.system would do, harmlessly."

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def test_a_planted_payload_is_refused_and_never_runs(tmp_path: Path) -> None:
    save_checkpoint(tmp_path / "good.pt", replace(record(), history=[{"epoch": 1}]))
    stored = torch.load(tmp_path / "good.pt", weights_only=True)
    marker = tmp_path / "payload-ran"
    stored["history"][0]["note"] = Payload(marker)  # hidden where nobody looks
    torch.save(stored, tmp_path / "planted.pt")
    with pytest.raises(
        ValueError, match=r"planted.pt asks to build the Python object .*refusing to load it"
    ):
        load_checkpoint(tmp_path / "planted.pt")
    with pytest.raises(ValueError, match="planted.pt asks to build the Python object"):
        Translator.from_checkpoint(tmp_path / "planted.pt")
    assert not marker.exists()
    torch.save({"model": stored["model"], "extra": Payload(marker)}, tmp_path / "weights.pt")
    # averaging loads safely too
    with pytest.raises(ValueError, match="weights.pt asks to build the Python object"):
        average_checkpoints([tmp_path / "weights.pt"])
    assert not marker.exists()


def test_temporary_files_are_unique(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = []
    real_replace = os.replace

    def recording_replace(src, dst):
        names.append(Path(src).name)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", recording_replace)
    save_checkpoint(tmp_path / "last.pt", record(epoch=1))
    save_checkpoint(tmp_path / "last.pt", record(epoch=2))
    assert len(set(names)) == 2, names  # two writers of last.pt never share a temporary file
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]
    assert load_checkpoint(tmp_path / "last.pt").epoch == 2


def test_checkpoints_get_the_permissions_of_any_new_file(tmp_path: Path) -> None:
    "Not mkstemp's owner-only 0600: a checkpoint is shared like any file (the umask decides)."
    umask = os.umask(0o022)
    try:
        save_checkpoint(tmp_path / "last.pt", record())
        (tmp_path / "plain").write_bytes(b"")
    finally:
        os.umask(umask)
    modes = [(tmp_path / name).stat().st_mode & 0o777 for name in ("last.pt", "plain")]
    assert modes == [0o644, 0o644]


def test_a_failed_checkpoint_write_leaves_the_last_good_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "last.pt"
    save_checkpoint(path, record(epoch=1))

    def broken_save(obj, f):
        f.write(b"half a checkpoint")
        raise OSError("No space left on device")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(path, record(epoch=2))
    monkeypatch.undo()
    assert load_checkpoint(path).epoch == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temporary file left behind


def test_files_that_are_not_checkpoints_get_clear_errors(tmp_path: Path) -> None:
    good = tmp_path / "good.pt"
    save_checkpoint(good, record())
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:1000])
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all")
    for path in (truncated, garbage):
        with pytest.raises(ValueError, match=f"^{path} is not a readable checkpoint"):
            load_checkpoint(path)
    future = tmp_path / "future.pt"
    torch.save({**torch.load(good, weights_only=True), "format": 99}, future)
    with pytest.raises(ValueError, match=r"checkpoint format 99; this version \(0.3.0\) reads"):
        load_checkpoint(future)
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(ValueError, match="checkpoint format 'list'"):
        load_checkpoint(tmp_path / "list.pt")
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "missing.pt")
    with pytest.raises(
        ValueError, match="^x.pt holds a list, not a checkpoint that `train` wrote$"
    ):
        RunCheckpoint.from_dict([1, 2], "x.pt")


def test_inconsistent_checkpoints_get_clear_errors(tmp_path: Path) -> None:
    stored = record().to_dict()
    model = stored["config"]["model"]

    def refused(changed: dict) -> str:
        torch.save(changed, tmp_path / "last.pt")
        with pytest.raises(ValueError) as error:
            load_checkpoint(tmp_path / "last.pt")
        assert "\n" not in str(error.value)
        return str(error.value)

    wider = {**stored, "config": {**stored["config"], "model": {**model, "d_model": 32}}}
    message = refused(wider)
    assert message.startswith(f"{tmp_path / 'last.pt'}: its weights do not fit its model ")
    assert re.search(r"\('[\w.]+': \(\d+(, \d+)*,?\), the configuration makes \(\d+", message)
    heads = {**stored, "config": {**stored["config"], "model": {**model, "heads": 8}}}
    assert refused(heads).startswith(
        f"{tmp_path / 'last.pt'} has a configuration or vocabulary this version cannot use ("
    )
    assert "'heads'" in refused(heads)
    no_vocab = {k: v for k, v in stored.items() if k not in ("tgt_vocab", "history")}
    assert refused(no_vocab) == (
        f"{tmp_path / 'last.pt'} has no tgt_vocab, history: it is not a checkpoint that "
        "`train` wrote"
    )
    bad_vocab = {**stored, "src_vocab": {"itos": ["a", "a"]}}
    assert "has a configuration or vocabulary this version cannot use" in refused(bad_vocab)
    missing_weight = {**stored, "model": dict(list(stored["model"].items())[1:])}
    assert "its weights do not fit its model configuration" in refused(missing_weight)
    assert "missing, the configuration makes" in refused(missing_weight)
    not_tensors = {**stored, "model": {"w": [1.0, 2.0]}}
    assert refused(not_tensors).endswith(": its weights are not a dictionary of tensors")
    bad_counts = {**stored, **ResumeState({}, {}, TrainState(), [{}]).to_dict()}
    bad_counts["train_state"] = {"step": 1, "batches": 1}
    assert "both the old and the new name of a count" in refused(bad_counts)
