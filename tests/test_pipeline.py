"""Tests for annotated_transformer.pipeline (training in Python, step by step) and .runs (run
folders).

1. `train` in Python: what it returns, writes and logs; a resume that ends where an uninterrupted
   run ends; a resume with another configuration or other data refused; the epochs kept.
2. The data: `load_pairs` of the corpus given or named, your own files checked up front,
   `training_subset` (--train-pairs), `check_same_data`, `new_tokenizers` and
   `build_vocabularies` (words or subwords),
   `check_lengths` and `prepare_data` (sentences too long refused before training).
3. Your own data without a configuration: subwords of DEFAULT_VOCAB_SIZE with tied weights.
4. The steps of an epoch: `run_config`, `build_learner` (readable or fused loss, the scaler),
   `validate` (the random state untouched), `epoch_checkpoint`, `tensorboard_writer`.
5. The run folder: `claim_run_folder`, `save_epoch` (keep_epochs), `write_history`.
6. The change plan "a new data set", carried out: a corpus registered in `data.CORPORA` and
   trained by its name; `train` sets up the runtime itself and resolves the precision by the one
   default; `resolve_run_config` of the command line's choices.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import string
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from synthetic import made_up_pairs, synthetic_pairs, write_lines

import annotated_transformer.pipeline as pipeline
from annotated_transformer.checkpoint import ResumeState, RunCheckpoint, load_checkpoint, rng_state
from annotated_transformer.config import (
    DEFAULT_VOCAB_SIZE,
    ChoiceError,
    Choices,
    RuntimeOptions,
    TrainConfig,
    resolve_config,
    run_model,
)
from annotated_transformer.data import (
    CORPORA,
    Corpus,
    InMemory,
    Multi30k,
    ParallelFiles,
    SpacyTokenizer,
    Vocab,
    encode_pairs,
    open_corpus,
)
from annotated_transformer.distributed import DistributedSetup
from annotated_transformer.losses import LabelSmoothing
from annotated_transformer.model import ModelConfig
from annotated_transformer.pipeline import (
    VAL_EXTRA,
    RunSetup,
    build_learner,
    build_vocabularies,
    check_lengths,
    check_same_data,
    epoch_checkpoint,
    load_pairs,
    new_tokenizers,
    prepare_data,
    resolve_run_config,
    run_config,
    run_corpus,
    tensorboard_writer,
    train,
    training_subset,
    validate,
)
from annotated_transformer.runs import (
    claim_run_folder,
    existing_run,
    save_epoch,
    write_history,
    write_marker,
)
from annotated_transformer.subwords import SubwordTokenizer
from annotated_transformer.training import TrainState, noam_optimizer

SMALL = TrainConfig(
    model=ModelConfig(N=1, d_model=16, d_ff=32, h=2, norm_first=True),
    epochs=1,
    max_tokens=300,
    warmup=10,
)
QUIET = RuntimeOptions(progress=False)
ALONE = DistributedSetup(0, 0, 1, torch.device("cpu"), None)  # one process, on the CPU


def nothing(message: str) -> None:
    "A log that keeps nothing."


@pytest.fixture(scope="module")
def pairs() -> dict[str, list[tuple[str, str]]]:
    "The synthetic pairs: 160 to train on, 16 to validate with."
    every = synthetic_pairs()
    return {"train": every[:160], "val": every[160:176]}


# =========================================================================== 1. train in Python
def test_train_returns_writes_and_logs_the_run(pairs: dict, tmp_path: Path) -> None:
    logged = []
    ckpt = train(
        tmp_path,
        replace(SMALL, epochs=2),
        corpus=InMemory(**pairs),
        options=QUIET,
        log=logged.append,
    )
    assert isinstance(ckpt, RunCheckpoint) and ckpt.epoch == 2
    assert existing_run(tmp_path) == ["epoch1.pt", "epoch2.pt", "history.json", "last.pt"]
    last = load_checkpoint(tmp_path / "last.pt")
    assert (last.config, last.epoch, last.history, last.run_id) == (
        ckpt.config,
        2,
        ckpt.history,
        ckpt.run_id,
    )
    assert len(ckpt.run_id) == 32 and ckpt.resume.counts == last.resume.counts
    for name, value in ckpt.model.items():
        assert torch.equal(value, last.model[name]), name  # exact: saved and read back
    contents = json.dumps(pairs, sort_keys=True).encode()
    assert ckpt.data == {"pairs": hashlib.sha256(contents).hexdigest()}
    assert json.loads((tmp_path / "history.json").read_text()) == ckpt.history
    assert logged[0].startswith("160 training pairs; vocabularies ")
    assert logged[0].endswith("M parameters on cpu")
    assert [line.split(":")[0] for line in logged[1:]] == ["epoch 1", "epoch 2"]
    assert "val perplexity" in logged[2] and "val sacreBLEU" in logged[2]


def test_resume_reaches_the_uninterrupted_result(pairs: dict, tmp_path: Path) -> None:
    "Two epochs, then a resume for the third, end with the weights of three epochs in one go."
    config = replace(SMALL, epochs=3)
    whole = train(tmp_path / "a", config, corpus=InMemory(**pairs), options=QUIET, log=nothing)
    train(
        tmp_path / "b",
        replace(config, epochs=2),
        corpus=InMemory(**pairs),
        options=QUIET,
        log=nothing,
    )
    logged = []
    resumed = train(
        tmp_path / "b",
        config,
        corpus=InMemory(**pairs),
        resume=True,
        options=QUIET,
        log=logged.append,
    )
    assert logged[0] == f"resuming from {tmp_path / 'b' / 'last.pt'} after epoch 2 " + (
        f"({resumed.history[1]['steps']} optimizer steps)"
    )
    for name, tensor in whole.model.items():
        torch.testing.assert_close(resumed.model[name], tensor, atol=1e-6, rtol=1e-6, msg=name)
    assert [h["epoch"] for h in resumed.history] == [1, 2, 3]
    assert resumed.resume.counts == whole.resume.counts
    # no configuration given: the run's own, the epochs it has (none left to train)
    again = train(tmp_path / "b", corpus=InMemory(**pairs), resume=True, options=QUIET, log=nothing)
    assert again.epoch == 3 and again.config == replace(config, corpus="pairs")
    assert load_checkpoint(tmp_path / "b" / "last.pt").epoch == 3


def test_resume_with_another_config_or_other_data_is_refused(pairs: dict, tmp_path: Path) -> None:
    train(tmp_path, SMALL, corpus=InMemory(**pairs), options=QUIET, log=nothing)
    wider = replace(SMALL, model=replace(SMALL.model, d_model=32), epochs=2)
    with pytest.raises(ValueError, match=r"^--resume with another configuration than .*last.pt"):
        train(tmp_path, wider, corpus=InMemory(**pairs), resume=True, options=QUIET, log=nothing)
    other = {**pairs, "train": pairs["train"][1:]}
    with pytest.raises(ValueError, match="^--resume with other data than .*last.pt was trained on"):
        train(
            tmp_path,
            replace(SMALL, epochs=2),
            corpus=InMemory(**other),
            resume=True,
            options=QUIET,
            log=nothing,
        )
    assert load_checkpoint(tmp_path / "last.pt").epoch == 1  # nothing trained
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):  # nothing to resume
        train(
            tmp_path / "new",
            SMALL,
            corpus=InMemory(**pairs),
            resume=True,
            options=QUIET,
            log=nothing,
        )


def test_only_the_last_epoch_checkpoints_are_kept(pairs: dict, tmp_path: Path) -> None:
    options = replace(QUIET, keep_epochs=2)
    train(
        tmp_path, replace(SMALL, epochs=3), corpus=InMemory(**pairs), options=options, log=nothing
    )
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == ["epoch2.pt", "epoch3.pt", "last.pt"]
    weights = load_checkpoint(tmp_path / "epoch3.pt")
    assert weights.resume is None and weights.epoch == 3
    model = weights.build_model()  # enough to translate and to average
    torch.testing.assert_close(model.state_dict(), load_checkpoint(tmp_path / "last.pt").model)


# =========================================================================== 2. the data
def test_load_pairs_reads_the_corpus_given_or_named(pairs: dict, tmp_path: Path, data_dir: Path):
    assert load_pairs(SMALL, InMemory(**pairs), nothing) == pairs
    multi30k = run_corpus(SMALL, None)  # the configuration names it: Multi30k, de and en
    assert multi30k == Multi30k() and multi30k.origin() == {"multi30k": ["de", "en"]}
    assert load_pairs(SMALL, Multi30k(data_dir), nothing) == pairs  # the synthetic files
    src = write_lines(tmp_path / "a.src", ["eins", "", "drei"])
    tgt = write_lines(tmp_path / "a.tgt", ["one", "two", "three"])
    logged, files = [], ParallelFiles(train=(src, tgt), val=(src, tgt))
    assert load_pairs(SMALL, files, logged.append)["train"] == [("eins", "one"), ("drei", "three")]
    assert files.origin()["train"] == {
        "files": [str(src), str(tgt)],
        "sha256": [hashlib.sha256(p.read_bytes()).hexdigest() for p in (src, tgt)],
    }
    assert logged[0] == (
        f"train: skipped 1 pairs with an empty line on one side or both ({src}, {tgt})"
    )
    empty = write_lines(tmp_path / "empty", ["", " "])
    write_lines(tgt, ["x", "y"])
    with pytest.raises(ValueError, match=re.escape(f"{empty} and {tgt} hold no sentence pairs")):
        load_pairs(SMALL, ParallelFiles(train=(empty, tgt), val=(src, tgt)), nothing)


def test_your_own_files_are_all_checked_before_anything_is_read(tmp_path: Path) -> None:
    src = write_lines(tmp_path / "a.src", ["eins"])
    gone = tmp_path / "gone.tgt"
    with pytest.raises(ChoiceError, match=f"^{re.escape(str(gone))} \\(val target\\): no such"):
        ParallelFiles(train=(src, src), val=(src, gone))
    with pytest.raises(ChoiceError, match="\\(train source\\) is a folder, not a file$"):
        ParallelFiles(train=(tmp_path, src), val=(src, src))
    with pytest.raises(ValueError, match="^unknown corpus 'files': choose one of multi30k"):
        run_corpus(replace(SMALL, corpus="files"), None)  # your own files are given, not named


def test_a_training_subset_is_drawn_by_the_seed_in_the_original_order(pairs: dict) -> None:
    train_pairs = pairs["train"]
    subset = training_subset(train_pairs, 50, seed=3)
    assert len(subset) == len(set(subset)) == 50 and set(subset) <= set(train_pairs)
    assert subset == sorted(subset, key=train_pairs.index)  # in their original order
    assert training_subset(train_pairs, 50, seed=3) == subset
    assert training_subset(train_pairs, 50, seed=4) != subset
    assert training_subset(train_pairs, 160, seed=3) == train_pairs
    with pytest.raises(ValueError, match="^train_pairs=161 is more than the 160 training pairs$"):
        training_subset(train_pairs, 161, seed=3)
    config = replace(SMALL, train_pairs=50, seed=3)
    loaded = load_pairs(config, InMemory(**pairs), nothing)
    assert loaded == {"train": subset, "val": pairs["val"]}  # validation: all of it
    # subset_seed draws the subset instead: runs of other seeds train on the same pairs
    for seed in (0, 1):
        shared = replace(SMALL, train_pairs=50, seed=seed, subset_seed=3)
        assert load_pairs(shared, InMemory(**pairs), nothing)["train"] == subset


def test_a_run_on_a_subset_trains_and_resumes_on_that_subset(pairs: dict, tmp_path: Path) -> None:
    logged = []
    config = replace(SMALL, train_pairs=40)
    train(tmp_path, config, corpus=InMemory(**pairs), options=QUIET, log=logged.append)
    assert logged[0].startswith("40 training pairs;")
    logged.clear()
    more = replace(config, epochs=2)
    resumed = train(
        tmp_path, more, corpus=InMemory(**pairs), resume=True, options=QUIET, log=logged.append
    )
    assert resumed.epoch == 2 and resumed.config.train_pairs == 40
    assert logged[0].startswith("resuming from") and logged[1].startswith("40 training pairs;")
    with pytest.raises(ValueError, match="another configuration .*train_pairs=41"):
        other = replace(config, train_pairs=41)
        train(tmp_path, other, corpus=InMemory(**pairs), resume=True, options=QUIET, log=nothing)


def test_check_same_data_names_what_differs(tmp_path: Path) -> None:
    files = {"train": {"files": ["a", "b"], "sha256": ["1", "2"]}, "val": "pairs"}
    check_same_data(files, json.loads(json.dumps(files)), tmp_path / "last.pt")
    renamed = {**files, "train": {"files": ["c", "d"], "sha256": ["1", "2"]}}
    check_same_data(files, renamed, tmp_path / "last.pt")  # the contents count, not the names
    changed = {**files, "train": {"files": ["a", "e"], "sha256": ["1", "3"]}}
    with pytest.raises(ValueError) as error:
        check_same_data(files, changed, tmp_path / "last.pt")
    assert str(error.value) == (
        f"--resume with other data than {tmp_path / 'last.pt'} was trained on "
        "(train: a and b; val: pairs), now train: a and e; val: pairs: resume with the same "
        "data, or train a new run"
    )
    with pytest.raises(ValueError, match="other data"):
        check_same_data({"multi30k": ["de", "en"]}, {"multi30k": ["de", "fr"]}, tmp_path)
    named_only = {"train": {"files": ["a", "b"]}, "val": "pairs"}  # a run of 0.2: no hashes
    check_same_data(named_only, files, tmp_path / "last.pt")  # compared by its files' names
    with pytest.raises(ValueError, match="other data"):
        check_same_data(named_only, renamed, tmp_path / "last.pt")


def test_words_or_subwords(pairs: dict) -> None:
    words = new_tokenizers(SMALL, pairs["train"])
    assert [type(t) for t in words] == [SpacyTokenizer, SpacyTokenizer]
    assert [t.lang for t in words] == ["de", "en"]
    tokens = [words[side].tokenize([p[side] for p in pairs["train"]]) for side in (0, 1)]
    src_vocab, tgt_vocab = build_vocabularies(SMALL, words, tokens)
    assert src_vocab.itos == Vocab.build(tokens[0]).itos  # words seen twice
    assert "Mann" in src_vocab.stoi and "man" in tgt_vocab.stoi
    config = replace(SMALL, vocab_size=300)
    subwords = new_tokenizers(config, pairs["train"])
    assert subwords[0] is subwords[1] and isinstance(subwords[0], SubwordTokenizer)
    pieces = subwords[0].tokenize(["Ein Mann.", "A man."])
    assert pieces[0] != ["Ein", "Mann", "."]  # pieces of both languages, not words
    assert [subwords[1].detokenize(p) for p in pieces] == ["Ein Mann.", "A man."]
    src_vocab, tgt_vocab = build_vocabularies(config, subwords, tokens)
    assert src_vocab is tgt_vocab and len(src_vocab) == 300


def test_sentences_too_long_are_refused_before_training(pairs: dict, tmp_path: Path) -> None:
    too_long = ("Ein Mann " * 10 + "sieht einen Ball.", "A man sees a ball.")
    pairs = {**pairs, "val": [*pairs["val"], too_long]}
    config = replace(SMALL, model=replace(SMALL.model, max_len=60))
    logged = []
    message = (
        f"^validation pair {len(pairs['val'])} \\('Ein Mann .*'\\) needs 76 positions \\(24 source "
    )
    with pytest.raises(
        ValueError, match=message + "tokens \\+ 50 for its translation\\), .*max_len=60$"
    ):
        train(tmp_path / "run", config, corpus=InMemory(**pairs), options=QUIET, log=logged.append)
    assert not logged and not list((tmp_path / "run").glob("*.pt"))  # before the first epoch
    vocab = Vocab.build([["a"] * 30], min_freq=1)
    data = encode_pairs([["a"] * 3, ["a"] * 30], [["a"], ["a"] * 2], vocab, vocab)
    check_lengths(data, "training", 32)  # 30 words with <s> and </s>: fits
    with pytest.raises(
        ValueError, match=r"^training pair 2 needs 32 positions \(30 source tokens\)"
    ):
        check_lengths(data, "training", 31)
    check_lengths(data, "validation", 32 + VAL_EXTRA, extra=VAL_EXTRA)


def test_prepare_data_of_a_resumed_run_keeps_its_tokenizers_and_vocabularies(pairs: dict) -> None:
    config = replace(SMALL, vocab_size=300, model=replace(SMALL.model, share_embeddings=True))
    new = prepare_data(config, pairs, {"pairs": "x"}, None, progress=False)
    assert (len(new.train), len(new.val), new.val_pairs) == (160, 16, pairs["val"])
    model = config.model.build(len(new.src_vocab), len(new.tgt_vocab))
    ckpt = RunCheckpoint(
        config, model.state_dict(), new.src_vocab, new.tgt_vocab, 1, [], tokenizer=new.tokenizers[0]
    )
    other = {"train": pairs["train"][:20], "val": pairs["val"]}  # would learn another model
    again = prepare_data(config, other, {"pairs": "y"}, ckpt, progress=False)
    assert again.tokenizers == (ckpt.tokenizer, ckpt.tokenizer) and again.src_vocab is new.src_vocab
    assert [t.tolist() for t in again.train.src] == [t.tolist() for t in new.train.src[:20]]


# =============================================================== 3. your own data, no configuration
def long_word_files(folder: Path) -> dict[str, tuple[Path, Path]]:
    "Parallel files of 400 distinct random words of 40 letters: enough for 8,000 subword pieces."
    rng = random.Random(0)
    letters = string.ascii_lowercase
    words = ["".join(rng.choice(letters) for _ in range(40)) for _ in range(400)]
    lines = [" ".join(words[i : i + 10]) for i in range(0, len(words), 10)]
    src, tgt = lines[:20], lines[20:]
    return {
        "train": (write_lines(folder / "train.xa", src), write_lines(folder / "train.xb", tgt)),
        "val": (
            write_lines(folder / "val.xa", [src[0].split()[0]]),
            write_lines(folder / "val.xb", [tgt[0].split()[0]]),
        ),
    }


def test_your_own_files_without_a_configuration_train_tied_subwords(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    "train(out, files=...): subwords of DEFAULT_VOCAB_SIZE, one vocabulary, tied weights."
    resolved = []
    real = pipeline.resolve_config

    def one_epoch(*args, **kwargs) -> TrainConfig:
        # the configuration train resolves, trained for one epoch instead of its twenty: the test
        # is about what the configuration is, not about how long it trains
        resolved.append(real(*args, **kwargs))
        return replace(resolved[-1], epochs=1)

    monkeypatch.setattr(pipeline, "resolve_config", one_epoch)
    files = long_word_files(tmp_path)
    ckpt = train(tmp_path / "run", corpus=ParallelFiles(**files), options=QUIET, log=nothing)
    assert resolved == [resolve_config(own_files=True)] and resolved[0].epochs == 20
    assert ckpt.config == replace(resolved[0], epochs=1, corpus="files")
    assert ckpt.config.vocab_size == DEFAULT_VOCAB_SIZE == 8000
    assert ckpt.config.model == replace(run_model(), share_embeddings=True)
    assert len(ckpt.src_vocab) == 8000 and ckpt.src_vocab.itos == ckpt.tgt_vocab.itos
    assert ckpt.tokenizer is not None and len(ckpt.tokenizer.pieces()) == 8000 - 4
    model = load_checkpoint(tmp_path / "run" / "last.pt").build_model()
    assert (
        model.src_embed[0].lut.weight
        is model.tgt_embed[0].lut.weight
        is model.generator.proj.weight
    )
    assert ckpt.data["train"]["files"] == [str(p) for p in files["train"]]


# ========================================================================= 4. the steps of an epoch
def test_run_config(pairs: dict, tmp_path: Path) -> None:
    own = InMemory(**pairs)
    assert run_config(None, None, None, "x") == TrainConfig()  # Multi30k: words
    own_policy = replace(resolve_config(own_files=True), corpus="pairs")  # files, pairs: subwords
    assert run_config(None, None, own, "x") == own_policy
    assert run_config(SMALL, None, None, "x") is SMALL  # a configuration given is kept
    assert run_config(SMALL, None, own, "x") == replace(SMALL, corpus="pairs")  # named by the data
    ckpt = train(tmp_path, SMALL, corpus=InMemory(**pairs), options=QUIET, log=nothing)
    assert run_config(None, ckpt, None, "x") == replace(SMALL, corpus="pairs")  # the run's own
    more = replace(SMALL, epochs=4)
    assert run_config(more, ckpt, own, "x") == replace(more, corpus="pairs")
    with pytest.raises(ValueError, match="^--resume with another configuration than x was "):
        run_config(replace(SMALL, seed=1), ckpt, own, "x")


@pytest.fixture(scope="module")
def run_data(pairs: dict):
    return prepare_data(SMALL, pairs, {"pairs": "x"}, None, progress=False)


def test_build_learner_readable_or_fused_loss_and_the_scaler(run_data) -> None:
    from annotated_transformer.batching import collate

    cpu = torch.device("cpu")
    torch.manual_seed(0)
    readable = build_learner(SMALL, run_data, QUIET, cpu)
    torch.manual_seed(0)
    fused = build_learner(SMALL, run_data, replace(QUIET, fused_loss=True), cpu)
    assert readable.scaler is None and readable.state.optimizer_steps == 0 and not fused.history
    batch = collate([run_data.train[i] for i in range(4)], run_data.tgt_vocab.pad)
    out = readable.model(batch.src, batch.tgt, batch.src_mask, batch.tgt_mask)  # (B, T, D)
    loss = readable.loss_fn(out, batch.tgt_y)
    torch.testing.assert_close(fused.loss_fn(out, batch.tgt_y), loss)
    logp = readable.model.generator(out).flatten(0, 1)
    smoothing = LabelSmoothing(len(run_data.tgt_vocab), run_data.tgt_vocab.pad, SMALL.smoothing)
    torch.testing.assert_close(loss, smoothing(logp, batch.tgt_y.flatten()))  # the config's
    assert readable.optimizer.param_groups[0]["lr"] > 0  # the schedule's first step
    fp16 = build_learner(SMALL, run_data, replace(QUIET, precision="fp16"), cpu)
    # exact: the scale starts at the same Python division
    assert fp16.scaler is not None and fp16.scaler.get_scale() == 2.0**16 / SMALL.max_tokens


def test_validate_leaves_the_random_state_untouched(run_data) -> None:
    from annotated_transformer.data import make_loader

    learner = build_learner(SMALL, run_data, QUIET, torch.device("cpu"))
    loader = make_loader(run_data.val, run_data.tgt_vocab.pad, 300, shuffle=False)
    torch.manual_seed(5)
    before = torch.get_rng_state()
    loss, ppl, bleu = validate(learner, run_data, loader, torch.device("cpu"), progress=False)
    assert torch.equal(torch.get_rng_state(), before)  # exact: a random state
    assert math.isfinite(loss) and ppl > 1 and 0 <= bleu <= 100
    assert ppl != pytest.approx(math.exp(loss), rel=1e-2)  # of the true words: not smoothed
    # exact: the same computation again, on the same machine
    assert validate(learner, run_data, loader, torch.device("cpu"), False) == (loss, ppl, bleu)


def test_epoch_checkpoint_holds_the_run_as_it_stands(run_data) -> None:
    training = build_learner(SMALL, run_data, QUIET, torch.device("cpu"))
    training.history.append({"epoch": 1})
    setup = RunSetup(SMALL, QUIET, ALONE, nothing, run_id="id")
    ckpt = epoch_checkpoint(setup, run_data, training, [{"torch": torch.get_rng_state()}])
    assert (ckpt.epoch, ckpt.history, ckpt.run_id, ckpt.data) == (
        1,
        [{"epoch": 1}],
        "id",
        {"pairs": "x"},
    )
    assert ckpt.history is not training.history  # a copy: later epochs do not change it
    assert ckpt.tokenizer is None and ckpt.resume.counts == training.state
    assert ckpt.resume.counts is not training.state
    assert ckpt.model.keys() == training.model.state_dict().keys()


def test_tensorboard_needs_its_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # not installed
    with pytest.raises(ValueError, match="^--tensorboard needs the tensorboard package: pip inst"):
        tensorboard_writer(tmp_path)
    assert not (tmp_path / "tensorboard").exists()


# =========================================================================== 5. the run folder
def test_claim_run_folder(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="--resume continues .* --overwrite replaces it"):
        with claim_run_folder(out, resume=True, overwrite=True):
            pass
    with claim_run_folder(out, resume=False, overwrite=False):
        assert (out / ".writer").read_text().startswith("pid ")
        with pytest.raises(ValueError, match=f"^{out} is in use by another training run \\(pid "):
            with claim_run_folder(out, resume=False, overwrite=False):
                pass
        (out / "last.pt").write_bytes(b"")
        (out / "epoch1.pt").write_bytes(b"")
        write_marker(out, ["epoch1.pt", "last.pt"])  # a run's files are those its marker lists
    assert not (out / ".writer").exists()
    with pytest.raises(ValueError, match=r"already holds a training run \(epoch1.pt, last.pt\)"):
        with claim_run_folder(out, resume=False, overwrite=False):
            pass
    with claim_run_folder(out, resume=False, overwrite=True) as folder:
        assert existing_run(out) == ["epoch1.pt", "last.pt"]  # kept until the new run saves
        assert folder.replaced == ["epoch1.pt", "last.pt"]
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="^cannot use .*file/run as the output folder"):
        with claim_run_folder(tmp_path / "file" / "run", resume=False, overwrite=False):
            pass


def test_save_epoch_keeps_the_last_epochs(tmp_path: Path) -> None:
    vocab = Vocab(["<s>", "</s>", "<blank>", "<unk>", "a"])
    model = SMALL.model.build(len(vocab), len(vocab))
    optimizer, schedule = noam_optimizer(model, SMALL.model.d_model)
    weights, states = model.state_dict(), (optimizer.state_dict(), schedule.state_dict())
    for epoch in range(1, 5):
        history = [{"epoch": e} for e in range(1, epoch + 1)]
        resume = ResumeState(*states, TrainState(), [rng_state()])
        ckpt = RunCheckpoint(SMALL, weights, vocab, vocab, epoch, history, "id", resume=resume)
        save_epoch(tmp_path, ckpt, keep_epochs=2)
    assert existing_run(tmp_path) == ["epoch3.pt", "epoch4.pt", "history.json", "last.pt"]
    assert load_checkpoint(tmp_path / "epoch4.pt").resume is None  # weights only
    assert load_checkpoint(tmp_path / "last.pt").resume is not None
    assert json.loads((tmp_path / "history.json").read_text()) == history
    write_history(tmp_path, [{"epoch": 9}])
    assert json.loads((tmp_path / "history.json").read_text()) == [{"epoch": 9}]
    assert not list(tmp_path.glob(".*"))  # no temporary file left


# ============================================ 6. a new data set, the runtime, the CLI's choices
@dataclass(frozen=True)
class Reversals:
    "A made-up data set: sentences of made-up words and the same words reversed, in reverse order."

    data_dir: str | Path | None = None  # where it would keep files (it makes its pairs instead)
    langs: tuple[str, str] = ("de", "en")  # it has one pair of languages: these are ignored
    name: ClassVar[str] = "reversals"
    test_splits: ClassVar[tuple[str, ...]] = ("test",)
    subwords: ClassVar[bool] = True

    def pairs(self, split: str, log=print) -> list[tuple[str, str]]:
        "The pairs of 'train', 'val' or 'test', the same every time."
        n, seed = {"train": (120, 0), "val": (12, 1), "test": (12, 2)}[split]
        return [
            (src, " ".join(word[::-1] for word in reversed(src.split())))
            for src, _ in made_up_pairs(n, seed)
        ]

    def origin(self) -> dict:
        return {"reversals": 1}


def test_a_new_data_set_touches_only_data_and_trains_by_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The change plan "a new data set", carried out: a corpus registered in data.CORPORA (its
    chapter would do it) is chosen by the configuration's `corpus` field alone; the trainer, the
    configuration and the command line are not touched."""
    monkeypatch.setitem(CORPORA, Reversals.name, Reversals)
    config = replace(SMALL, corpus="reversals", vocab_size=300, epochs=2)
    assert isinstance(open_corpus("reversals"), Corpus)
    logged = []
    ckpt = train(tmp_path, replace(config, epochs=1), options=QUIET, log=logged.append)
    assert logged[0].startswith("120 training pairs;")
    assert (ckpt.config.corpus, ckpt.data) == ("reversals", {"reversals": 1})
    resumed = train(tmp_path, config, resume=True, options=QUIET, log=nothing)  # by its name
    assert resumed.epoch == 2 and resumed.config == config
    # evaluation finds the checkpoint's corpus and its default split the same way
    corpus = open_corpus(resumed.config.corpus)
    assert corpus.pairs(corpus.test_splits[0]) == Reversals().pairs("test")
    monkeypatch.delitem(CORPORA, Reversals.name)
    with pytest.raises(ValueError, match="^unknown corpus 'reversals': choose one of multi30k"):
        train(tmp_path, replace(config, epochs=3), resume=True, options=QUIET, log=nothing)


def test_train_sets_up_the_runtime_and_resolves_the_precision(
    pairs: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train joins (and leaves) the process group itself, and precision=None is the documented
    default (bf16 where the device supports it), as on the command line."""
    import annotated_transformer.distributed as distributed

    calls = []
    monkeypatch.setattr(distributed, "default_precision", lambda device: "bf16")
    monkeypatch.setattr(pipeline, "cleanup_distributed", lambda: calls.append("cleanup"))
    logged = []
    options = replace(QUIET, precision=None)
    ckpt = train(
        tmp_path / "a", SMALL, corpus=InMemory(**pairs), options=options, log=logged.append
    )
    assert logged[0].endswith("M parameters on cpu, bf16") and calls == ["cleanup"]
    assert math.isfinite(ckpt.history[0]["train_loss"])
    with pytest.raises(ValueError, match="unknown corpus"):  # failing, it leaves the group too
        train(tmp_path / "b", replace(SMALL, corpus="none"), options=QUIET, log=nothing)
    assert calls == ["cleanup", "cleanup"]


def test_resolve_run_config_of_the_command_lines_choices(pairs: dict, tmp_path: Path) -> None:
    own = InMemory(**pairs)
    assert resolve_run_config(tmp_path, Choices(train={"seed": 3})) == TrainConfig(seed=3)
    assert resolve_run_config(tmp_path, corpus=own).vocab_size == DEFAULT_VOCAB_SIZE
    with pytest.raises(ChoiceError, match="^src_lang and tgt_lang choose the languages of a named"):
        resolve_run_config(tmp_path, Choices(train={"tgt_lang": "fr"}), corpus=own)
    ckpt = train(tmp_path, SMALL, corpus=own, options=QUIET, log=nothing)
    more = Choices(train={"epochs": 2})
    assert resolve_run_config(tmp_path, more, resume=True) == replace(ckpt.config, epochs=2)
    with pytest.raises(ValueError, match="another configuration .* seed=5"):
        resolve_run_config(tmp_path, Choices(train={"seed": 5}), resume=True)
