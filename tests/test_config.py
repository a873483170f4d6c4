"""Tests for annotated_transformer.config: a run's settings in one place.

1. The named sizes: `preset` (the paper's post-norm) and `run_model` (pre-norm, as runs train).
2. `TrainConfig`: every field refused by type and range in one line that names field and value,
   from Python, from a --config file (JSON and TOML) through `read_config_file` and the command.
3. A config file sets up a run, flags override it; it does not go with --resume.
4. `resolve_config`, `choose_model` and `check_resume`: defaults, your own files (subwords of
   DEFAULT_VOCAB_SIZE, tied), sizes and architectures, contradicting choices, a resumed run's
   configuration; `RuntimeOptions` and `Choices` refuse what they cannot use.
5. Model sizes are bounded: a checkpoint whose configuration asks for N=10**6, d_ff=10**12 or
   max_len=10**10 is refused with a one-line error before anything is built.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch
from clitools import refused

from annotated_transformer.checkpoint import RunCheckpoint, load_checkpoint, save_checkpoint
from annotated_transformer.cli import main
from annotated_transformer.config import (
    DEFAULT_VOCAB_SIZE,
    PRESETS,
    ChoiceError,
    Choices,
    RuntimeOptions,
    TrainConfig,
    arch_of,
    check_resume,
    choose_model,
    model_config,
    preset,
    read_config_file,
    resolve_config,
    run_model,
)
from annotated_transformer.data import SPECIALS, Vocab
from annotated_transformer.model import MAX_SIZES, ModelConfig
from annotated_transformer.recurrent import RecurrentConfig


# =========================================================================== 1. the named sizes
def test_the_named_sizes() -> None:
    assert list(PRESETS) == ["base", "big", "multi30k", "small", "tiny"]
    assert preset("base") == ModelConfig()  # Table 3's base model
    big = preset("big")
    assert (big.N, big.d_model, big.d_ff, big.h, big.dropout) == (6, 1024, 4096, 16, 0.3)
    sizes = {name: (c.N, c.d_model, c.d_ff, c.h) for name, c in PRESETS.items()}
    assert sizes["multi30k"] == (3, 256, 1024, 8) and sizes["small"] == (2, 128, 512, 4)
    assert sizes["tiny"] == (2, 64, 256, 4)
    for name in PRESETS:
        assert not preset(name).norm_first  # the paper's post-norm
        assert run_model(name) == replace(preset(name), norm_first=True)  # runs: pre-norm
    assert run_model() == run_model("multi30k") == TrainConfig().model  # a run's default
    with pytest.raises(TypeError):
        PRESETS["tiny"] = ModelConfig()  # read-only: a size cannot be changed by accident


def test_an_unknown_size_is_refused_naming_the_sizes() -> None:
    message = "unknown model size 'huge'; choose one of base, big, multi30k, small, tiny"
    for make in (preset, run_model):
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            make("huge")


def test_model_config_and_arch_of_read_what_a_checkpoint_stores() -> None:
    for config in (run_model("tiny"), RecurrentConfig(arch="lexical", enc_layers=2)):
        assert model_config(asdict(config)) == config
    assert model_config({**asdict(preset("tiny")), "arch": "transformer"}) == preset("tiny")
    configs = (preset("tiny"), RecurrentConfig(), RecurrentConfig(arch="lexical"))
    assert [arch_of(c) for c in configs] == ["transformer", "lstm", "lexical"]
    with pytest.raises(TypeError, match="a model configuration is a table of settings"):
        model_config(["N", 2])


# =========================================================================== 2. every field checked
BAD_FIELDS = [  # (field, value, the message's middle: what the field must be)
    ("epochs", 0, "at least 1 and at most 100,000"),
    ("epochs", 2.5, "a whole number"),
    ("epochs", True, "a whole number"),
    ("epochs", "3", "a whole number"),
    ("epochs", 100_001, "at least 1 and at most 100,000"),
    ("max_tokens", 0, "at least 1 and at most 10,000,000"),
    ("max_tokens", 10**8, "at least 1 and at most 10,000,000"),
    ("accum_iter", 0, "at least 1 and at most 100,000"),
    ("factor", 0, "above 0 and at most 1,000"),
    ("factor", -1.0, "above 0 and at most 1,000"),
    ("factor", math.nan, "a finite number"),
    ("factor", "1", "a finite number"),
    ("warmup", 0, "at least 1 and at most 100,000,000"),
    ("warmup", 1.5, "a whole number"),
    ("smoothing", 1.0, "from 0 to below 1"),
    ("smoothing", -0.1, "from 0 to below 1"),
    ("smoothing", math.inf, "a finite number"),
    ("max_grad_norm", 0, "above 0"),
    ("max_grad_norm", math.inf, "a finite number"),
    ("seed", -5, "at least 0 and at most 4,294,967,295"),
    ("seed", 2**32, "at least 0 and at most 4,294,967,295"),
    ("vocab_size", 100, "at least 261 and at most 1,000,000"),
    ("vocab_size", 8000.0, "a whole number"),
    ("train_pairs", 0, "at least 1"),
    ("subset_seed", -1, "at least 0"),
    ("src_lang", "German", "a language code such as de, en or fr"),
    ("tgt_lang", 5, "a language code such as de, en or fr"),
    ("tgt_lang", "", "a language code such as de, en or fr"),
]
IDS = [f"{name}={value!r}" for name, value, _ in BAD_FIELDS]


@pytest.mark.parametrize("name, value, must", BAD_FIELDS, ids=IDS)
def test_every_bad_value_is_refused_in_one_line_naming_field_and_value(
    name: str, value: object, must: str
) -> None:
    with pytest.raises(ValueError) as error:
        TrainConfig(**{name: value})
    message = str(error.value)
    assert "\n" not in message
    assert re.fullmatch(
        rf"{name} must be {re.escape(must)}.*, got {name}={re.escape(repr(value))}", message
    )
    with pytest.raises(ValueError, match=re.escape(message)):  # a stored configuration too
        TrainConfig.from_dict({**TrainConfig().to_dict(), name: value})


def test_the_messages_of_the_documentation() -> None:
    for settings, message in (
        ({"epochs": 2.5}, "epochs must be a whole number, got epochs=2.5"),
        ({"seed": -5}, "seed must be at least 0 and at most 4,294,967,295, got seed=-5"),
        ({"warmup": 0}, "warmup must be at least 1 and at most 100,000,000, got warmup=0"),
    ):
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            TrainConfig(**settings)


def test_a_subset_seed_needs_a_subset() -> None:
    with pytest.raises(
        ValueError, match="^subset_seed chooses train_pairs' subset: set train_pairs"
    ):
        TrainConfig(subset_seed=3)
    assert TrainConfig(train_pairs=10, subset_seed=3).subset_seed == 3


def test_train_config_validation() -> None:
    "The optional fields take None; the model must be a model configuration; tied needs subwords."
    config = TrainConfig(max_grad_norm=None, vocab_size=None, train_pairs=None)
    assert (config.max_grad_norm, config.vocab_size, config.train_pairs) == (None, None, None)
    for name in ("epochs", "max_tokens", "accum_iter", "factor", "warmup", "smoothing", "seed"):
        with pytest.raises(ValueError, match=f"^{name} must be .*, got {name}=None$"):
            TrainConfig(**{name: None})
    with pytest.raises(
        TypeError, match="model must be a ModelConfig or RecurrentConfig, got 'tiny'"
    ):
        TrainConfig(model="tiny")
    tied = replace(run_model("tiny"), share_embeddings=True)
    with pytest.raises(ValueError, match="share_embeddings needs one vocabulary .*set vocab_size"):
        TrainConfig(model=tied)
    assert TrainConfig(model=tied, vocab_size=400).model.share_embeddings
    config = TrainConfig(model=RecurrentConfig(arch="lexical"), epochs=3, seed=7, train_pairs=10)
    assert TrainConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown training setting 'learning_rate'"):
        TrainConfig.from_dict({**config.to_dict(), "learning_rate": 3})
    with pytest.raises(ValueError, match="a training configuration is a table with a model"):
        TrainConfig.from_dict({"epochs": 3})


CONFIG_FILE_CASES = [  # (JSON, TOML, the error's end): each field once, and the model's sizes
    ('{"epochs": 2.5}', "epochs = 2.5", "epochs must be a whole number, got epochs=2.5"),
    ('{"max_tokens": 0}', "max_tokens = 0", "max_tokens must be at least 1 and at most "),
    ('{"accum_iter": -1}', "accum_iter = -1", "got accum_iter=-1"),
    ('{"factor": NaN}', "factor = nan", "factor must be a finite number, got factor=nan"),
    ('{"warmup": 0}', "warmup = 0", "warmup must be at least 1 and at most 100,000,000, got "),
    ('{"smoothing": 1.0}', "smoothing = 1.0", "smoothing must be from 0 to below 1, got "),
    ('{"max_grad_norm": -1}', "max_grad_norm = -1", "max_grad_norm must be above 0, got "),
    ('{"seed": -5}', "seed = -5", "seed must be at least 0 and at most 4,294,967,295, got seed=-5"),
    ('{"vocab_size": 100}', "vocab_size = 100", "got vocab_size=100"),
    ('{"train_pairs": 0}', "train_pairs = 0", "train_pairs must be at least 1, got train_pairs=0"),
    ('{"src_lang": "German"}', 'src_lang = "German"', "got src_lang='German'"),
    ('{"tgt_lang": 5}', "tgt_lang = 5", "tgt_lang must be a language code such as de, en or fr"),
    ('{"model": {"N": 0}}', "[model]\nN = 0", "N must be from 1 to 48, got N=0"),
    ('{"model": {"d_ff": 1e12}}', "[model]\nd_ff = 1e12", "d_ff must be an integer, got "),
    ('{"model": {"max_len": 10000000000}}', "[model]\nmax_len = 10000000000", "got max_len="),
    ('{"model": {"dropout": 1.5}}', "[model]\ndropout = 1.5", "dropout must be in [0, 1)"),
    ('{"model": {"arch": "gru"}}', '[model]\narch = "gru"', "unknown recurrent architecture"),
    ('{"model": 3}', "model = 3", "model must be a table of settings, got 3"),
    ('{"learning_rate": 3}', "learning_rate = 3", "unknown training setting 'learning_rate'"),
    ("[1, 2]", "= 1", ""),  # not a table; not TOML
]
CASE_IDS = [json_text for json_text, _, _ in CONFIG_FILE_CASES]
FORMATS = pytest.mark.parametrize("suffix", [".json", ".toml"])


@FORMATS
@pytest.mark.parametrize("as_json, as_toml, message", CONFIG_FILE_CASES, ids=CASE_IDS)
def test_a_bad_config_file_is_refused_in_one_line_naming_it(
    suffix: str, as_json: str, as_toml: str, message: str, tmp_path: Path, capsys
) -> None:
    path = tmp_path / f"config{suffix}"
    path.write_text(as_json if suffix == ".json" else as_toml)
    with pytest.raises(ValueError) as error:  # from Python
        read_config_file(path)
    assert str(error.value).startswith(f"{path}: ") and message in str(error.value)
    assert "\n" not in str(error.value)
    out = tmp_path / "run"
    line = refused(["train", "--out", str(out), "--config", str(path), "--quiet"], 1, capsys)
    assert line.startswith(f"annotated-transformer train: error: --config {path}: ")
    assert message in line
    assert not out.exists()  # refused before the run folder is made


def test_a_config_file_that_is_not_there_is_a_usage_error(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "missing.toml"
    line = refused(["train", "--out", str(tmp_path / "run"), "--config", str(missing)], 2, capsys)
    assert line.endswith(f"--config {missing}: no such file")
    with pytest.raises(FileNotFoundError, match=f"{missing}: no such file"):
        read_config_file(missing)
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}: not a file"):
        read_config_file(tmp_path)


# =================================================================== 3. a config file sets up a run
@FORMATS
def test_a_config_file_sets_up_the_run_and_flags_override_it(
    suffix: str, synthetic_corpus: Path, tmp_path: Path
) -> None:
    text = {
        ".json": '{"epochs": 1, "warmup": 30, "seed": 3, '
        '"model": {"N": 1, "d_model": 32, "d_ff": 64, "h": 2}}',
        ".toml": "epochs = 1\nwarmup = 30\nseed = 3\n"
        "[model]\nN = 1\nd_model = 32\nd_ff = 64\nh = 2\n",
    }[suffix]
    config = tmp_path / f"config{suffix}"
    config.write_text(text)
    from_file = read_config_file(config)
    assert (from_file.epochs, from_file.warmup, from_file.seed) == (1, 30, 3)
    assert from_file.model == ModelConfig(N=1, d_model=32, d_ff=64, h=2, norm_first=True)
    out = tmp_path / "run"
    args = ["--out", str(out), "--data-dir", str(synthetic_corpus), "--config", str(config)]
    flags = ["--seed", "5", "--train-pairs", "100", "--subset-seed", "7", "--max-tokens", "400"]
    assert main(["train", *args, *flags, "--quiet"]) == 0
    stored = load_checkpoint(out / "last.pt").config
    # the flags beat the file; the rest: the file's, then the defaults (a run's pre-norm)
    assert stored == replace(from_file, seed=5, train_pairs=100, subset_seed=7, max_tokens=400)
    assert stored.model.dropout == 0.1 and stored.model.norm_first


def test_config_and_resume_do_not_go_together(tmp_path: Path, capsys) -> None:
    config = tmp_path / "config.json"
    config.write_text("{}")
    argv = ["train", "--out", str(tmp_path), "--resume", "--config", str(config)]
    line = refused(argv, 2, capsys)
    assert line.endswith(
        "--config sets up a new run; a resumed run keeps the configuration in its checkpoint"
    )
    with pytest.raises(ValueError, match="a resumed run keeps its own configuration"):
        resolve_config(config_file=config, stored=TrainConfig())


# ==================================================================== 4. resolving a run's settings
def test_the_defaults_and_your_own_files() -> None:
    assert resolve_config() == TrainConfig()
    assert TrainConfig().vocab_size is None and not TrainConfig().model.share_embeddings  # words
    own = resolve_config(own_files=True)  # subwords: one vocabulary, tied weights
    assert own == replace(
        TrainConfig(),
        vocab_size=DEFAULT_VOCAB_SIZE,
        model=replace(run_model(), share_embeddings=True),
    )
    assert DEFAULT_VOCAB_SIZE == 8000
    assert resolve_config(Choices(vocab_size=400), own_files=True).vocab_size == 400
    multi30k_subwords = resolve_config(Choices(vocab_size=400))
    assert multi30k_subwords.vocab_size == 400 and multi30k_subwords.model.share_embeddings


def test_choices_make_the_model() -> None:
    tiny = resolve_config(Choices(size="tiny", dropout=0.0, train={"epochs": 3, "seed": 9}))
    assert tiny.model == replace(run_model("tiny"), dropout=0.0)
    assert (tiny.epochs, tiny.seed) == (3, 9)
    lstm = resolve_config(Choices(arch="lstm", enc_layers=2, dec_layers=3))
    assert lstm.model == RecurrentConfig(arch="lstm", enc_layers=2, dec_layers=3)
    shared = resolve_config(Choices(arch="lexical"), own_files=True)
    assert shared.model == RecurrentConfig(arch="lexical", share_embeddings=True)
    start = RecurrentConfig(arch="lstm", d_hidden=64)  # a file's model is kept, not the default
    assert choose_model(start, Choices(dropout=0.3), by_default=False, shared=False) == replace(
        start, dropout=0.3
    )
    assert choose_model(start, Choices(), by_default=True, shared=False) == RecurrentConfig()
    with pytest.raises(ChoiceError, match="--enc-layers and --dec-layers size a recurrent model"):
        resolve_config(Choices(enc_layers=2))
    with pytest.raises(ChoiceError, match="--model chooses a Transformer's size: .*--arch lstm"):
        resolve_config(Choices(arch="lstm", size="tiny"))
    with pytest.raises(ValueError, match="^unknown training settings: learning_rate, model$"):
        Choices(train={"learning_rate": 3, "model": None})


def test_a_resumed_run_keeps_its_configuration_but_its_epochs() -> None:
    stored = resolve_config(Choices(size="tiny", train={"epochs": 2}))
    assert resolve_config(Choices(train={"epochs": 5}), stored=stored) == replace(stored, epochs=5)
    assert check_resume(stored, replace(stored, epochs=9)) == replace(stored, epochs=9)
    # your own files: a resumed run does not change to subwords
    assert resolve_config(own_files=True, stored=stored) == stored
    with pytest.raises(ValueError) as error:
        resolve_config(Choices(size="small", train={"seed": 4}), stored=stored, source="X.pt")
    assert str(error.value) == (
        "--resume with another configuration than X.pt was trained with: seed=4 (the run has 0), "
        "model.d_model=128 (the run has 64), model.d_ff=512 (the run has 256)"
    )
    with pytest.raises(ValueError, match="^--resume: X.pt holds a transformer model, not a lstm"):
        resolve_config(Choices(arch="lstm"), stored=stored, source="X.pt")
    with pytest.raises(ValueError, match="^--resume: the run holds a transformer model, not a"):
        check_resume(stored, replace(stored, model=RecurrentConfig()))


def test_runtime_options_refuse_what_they_cannot_use() -> None:
    assert RuntimeOptions() == RuntimeOptions(None, "fp32", False, False, False, True, 5)
    with pytest.raises(ValueError, match="^precision must be one of fp32, bf16, fp16, got 'fp8'$"):
        RuntimeOptions(precision="fp8")
    for keep in (0, True, 2.0):
        with pytest.raises(ValueError, match="keep_epochs must be a whole number at least 1"):
            RuntimeOptions(keep_epochs=keep)


# ================================================================= 5. bounded sizes in a checkpoint
@pytest.fixture
def stored(tmp_path: Path) -> dict:
    "A small run's checkpoint as `torch.save` stores it, to change."
    vocab = Vocab([*SPECIALS, "a", "b", "c"])
    config = TrainConfig(model=run_model("tiny"), epochs=1)
    torch.manual_seed(0)
    weights = config.model.build(len(vocab), len(vocab)).state_dict()
    save_checkpoint(tmp_path / "good.pt", RunCheckpoint(config, weights, vocab, vocab, 1, []))
    return torch.load(tmp_path / "good.pt", weights_only=True)


@pytest.fixture
def nothing_built(monkeypatch: pytest.MonkeyPatch) -> None:
    "Fail the test if a model is built: the sizes must be refused first."

    def built(*args, **kwargs):
        raise AssertionError("a model was built before its sizes were checked")

    monkeypatch.setattr("annotated_transformer.model.make_model", built)
    monkeypatch.setattr("annotated_transformer.recurrent.RecurrentEncoderDecoder", built)


@pytest.mark.parametrize(
    "sizes, message",
    [
        ({"N": 10**6}, "N must be from 1 to 48, got N=1000000"),
        ({"d_ff": 10**12}, "d_ff must be from 1 to 32,768, got d_ff=1000000000000"),
        ({"max_len": 10**10}, "max_len must be from 1 to 32,768, got max_len=10000000000"),
        ({"d_model": 2**20, "h": 4}, "d_model must be from 1 to 8,192, got d_model=1048576"),
        ({"arch": "lstm", "enc_layers": 10**6}, "enc_layers must be from 1 to 16, got "),
    ],
    ids=["N", "d_ff", "max_len", "d_model", "enc_layers"],
)
def test_a_checkpoint_asking_for_a_huge_model_is_refused_before_anything_is_built(
    sizes: dict, message: str, stored: dict, tmp_path: Path, capsys, nothing_built
) -> None:
    model = stored["config"]["model"]
    if sizes.get("arch") == "lstm":
        model = asdict(RecurrentConfig())
    crafted = tmp_path / "crafted.pt"
    torch.save({**stored, "config": {**stored["config"], "model": {**model, **sizes}}}, crafted)
    with pytest.raises(ValueError) as error:
        load_checkpoint(crafted)
    text = str(error.value)
    assert text.startswith(f"{crafted} has a configuration or vocabulary this version cannot use (")
    assert message in text and text.endswith(")") and "\n" not in text
    line = refused(["translate", "--checkpoint", str(crafted), "Ein Satz."], 1, capsys)
    assert message in line


def test_the_largest_sizes_are_the_bounds(nothing_built) -> None:
    "Sizes up to MAX_SIZES are accepted when made (and refused one above)."
    for name in ("N", "d_ff", "max_len"):
        ModelConfig(**{name: MAX_SIZES[name]})
        with pytest.raises(ValueError, match=f"^{name} must be from 1 to "):
            ModelConfig(**{name: MAX_SIZES[name] + 1})
