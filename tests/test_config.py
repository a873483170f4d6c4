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

import ast
import math
import re
import typing
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import pytest
import torch
from clitools import refused

from annotated_transformer import config, fast_decoding
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
    check_setting,
    check_settings,
    choose_model,
    model_config,
    preset,
    read_config_file,
    resolve_config,
    run_model,
    setting,
    setting_like,
)
from annotated_transformer.data import SPECIALS, Vocab
from annotated_transformer.model import MAX_SIZES, ModelConfig
from annotated_transformer.recurrent import RecurrentConfig


# =========================================================================== 1. the named sizes
def test_the_named_sizes() -> None:
    assert list(PRESETS) == ["base", "big", "multi30k", "small", "tiny"]
    assert preset("base") == ModelConfig()  # Table 3's base model
    big = preset("big")
    # exact: the preset's settings
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
    ("smoothing", 1.0, "at least 0 and below 1"),
    ("smoothing", -0.1, "at least 0 and below 1"),
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
    ("corpus", "My Files", "a corpus name such as multi30k"),
    ("corpus", None, "a corpus name such as multi30k"),
    ("skip_long", "yes", "true or false"),
]
IDS = [f"{name}={value!r}" for name, value, _ in BAD_FIELDS]


@pytest.mark.parametrize("name, value, must", BAD_FIELDS, ids=IDS)
def test_every_bad_value_is_refused_in_one_line_naming_field_and_value(
    name: str, value: object, must: str
) -> None:
    with pytest.raises(ChoiceError) as error:
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
        ChoiceError, match="^subset_seed chooses train_pairs' subset: set train_pairs"
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
        ChoiceError, match="model must be a ModelConfig or RecurrentConfig, got 'tiny'"
    ):
        TrainConfig(model="tiny")
    tied = replace(run_model("tiny"), share_embeddings=True)
    with pytest.raises(ChoiceError, match="share_embeddings needs one vocabulary .*set vocab_size"):
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
    ('{"smoothing": 1.0}', "smoothing = 1.0", "smoothing must be at least 0 and below 1, got "),
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
    assert stored.model.dropout == 0.1 and stored.model.norm_first  # exact: a setting, copied


def test_config_and_resume_do_not_go_together(tmp_path: Path, capsys) -> None:
    config = tmp_path / "config.json"
    config.write_text("{}")
    argv = ["train", "--out", str(tmp_path), "--resume", "--config", str(config)]
    line = refused(argv, 2, capsys)
    assert line.endswith(
        "--config sets up a new run; a resumed run keeps the configuration in its checkpoint"
    )
    with pytest.raises(
        ChoiceError, match="a resumed run keeps the configuration in its checkpoint"
    ):
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
    assert RuntimeOptions() == RuntimeOptions(
        device=None, precision=None, backend=None, compile=False, fused_loss=False,
        dropout_mask=None, adam="fused", tensorboard=False, progress=True, keep_epochs=5,
    )  # fmt: skip
    with pytest.raises(
        ChoiceError, match="^precision must be one of fp32, bf16, fp16, got precision='fp8'$"
    ):
        RuntimeOptions(precision="fp8")
    with pytest.raises(ChoiceError, match="^backend must be one of nccl, gloo, got backend='mpi'$"):
        RuntimeOptions(backend="mpi")
    for keep, must in ((0, "at least 1"), (True, "a whole number"), (2.0, "a whole number")):
        with pytest.raises(ChoiceError, match=f"^keep_epochs must be {must}, got keep_epochs="):
            RuntimeOptions(keep_epochs=keep)
    with pytest.raises(ChoiceError, match="^progress must be true or false, got progress=None$"):
        RuntimeOptions(progress=None)


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


# ===================================================== 6. settings: one home for defaults and rules
@dataclass(frozen=True)
class Rules:
    "One setting for each rule a setting can have."

    whole: int = setting(5, "a whole number", low=1, high=10)
    rate: float = setting(0.5, "a number", above=0, below=1)
    maybe: int | None = setting(None, "a whole number or nothing", low=0)
    name: str = setting("de", "a code", pattern=r"[a-z]{2}", expected="a two-letter code")
    word: str = setting("fast", "a choice", choices=("fast", "slow"))
    switch: bool = setting(False, "on or off")
    unflagged: int = setting(3, None, low=3)  # checked, but no flag
    odd: int = setting(1, "an odd number", check=lambda n: _odd(n))
    plain: int = 7  # not a setting: not checked

    def __post_init__(self):
        check_settings(self)


def _odd(n: int) -> None:
    "A rule of its own: odd numbers only."
    if n % 2 == 0:
        raise ChoiceError(f"odd must be odd, got odd={n}")


def test_setting_puts_the_default_help_and_rules_in_the_field() -> None:
    by_name = {f.name: f for f in fields(Rules)}
    assert by_name["whole"].default == 5
    assert dict(by_name["whole"].metadata) == dict(
        help="a whole number", low=1, high=10, above=None, below=None, choices=None,
        pattern=None, expected=None, flag=None, metavar=None, check=None,
    )  # fmt: skip
    assert by_name["unflagged"].metadata["help"] is None
    assert setting(1, "x", flag="--why", metavar="N").metadata["flag"] == "--why"
    with pytest.raises(TypeError):
        by_name["whole"].metadata["low"] = 0  # read-only


BROKEN_RULES = [  # (field, value, the message)
    ("whole", 2.5, "whole must be a whole number, got whole=2.5"),
    ("whole", True, "whole must be a whole number, got whole=True"),
    ("whole", None, "whole must be a whole number, got whole=None"),
    ("whole", 0, "whole must be at least 1 and at most 10, got whole=0"),
    ("whole", 11, "whole must be at least 1 and at most 10, got whole=11"),
    ("rate", 0, "rate must be above 0 and below 1, got rate=0"),
    ("rate", 1.0, "rate must be above 0 and below 1, got rate=1.0"),
    ("rate", math.nan, "rate must be a finite number, got rate=nan"),
    ("rate", -math.inf, "rate must be a finite number, got rate=-inf"),
    ("rate", "0.5", "rate must be a finite number, got rate='0.5'"),
    ("maybe", -1, "maybe must be at least 0, got maybe=-1"),
    ("name", "DE", "name must be a two-letter code, got name='DE'"),
    ("name", 12, "name must be a two-letter code, got name=12"),
    ("word", "slower", "word must be one of fast, slow, got word='slower'"),
    ("switch", 0, "switch must be true or false, got switch=0"),
    ("unflagged", 2, "unflagged must be at least 3, got unflagged=2"),
    ("odd", 2, "odd must be odd, got odd=2"),
    ("odd", 2.0, "odd must be a whole number, got odd=2.0"),  # the type first
]


@pytest.mark.parametrize("name, value, message", BROKEN_RULES, ids=[m for *_, m in BROKEN_RULES])
def test_each_rule_of_a_setting_can_fail(name: str, value: object, message: str) -> None:
    with pytest.raises(ChoiceError, match=f"^{re.escape(message)}$"):
        check_setting(Rules, name, value)
    with pytest.raises(ChoiceError, match=f"^{re.escape(message)}$"):  # and when made
        Rules(**{name: value})


def test_good_values_pass_unchanged_and_plain_fields_are_not_checked() -> None:
    for name, value in [
        ("whole", 10),
        ("rate", 1e-9),
        ("maybe", None),
        ("rate", 0.75),
        ("word", "slow"),
    ]:
        assert check_setting(Rules, name, value) is value
    assert Rules(plain="anything").plain == "anything"
    assert issubclass(ChoiceError, ValueError)  # callers catching ValueError still do


RECORDS = [TrainConfig, RuntimeOptions, Choices]
KINDS = {int, float, str, bool}


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_every_setting_has_a_simple_type_and_a_good_default(record: type) -> None:
    "What the command line needs to build a flag: a type it can convert, a default that passes."
    settings = [f for f in fields(record) if "help" in f.metadata]
    assert settings
    for f in settings:
        hint = typing.get_type_hints(record)[f.name]
        assert set(typing.get_args(hint) or (hint,)) - {type(None)} <= KINDS, f.name
        assert check_setting(record, f.name, f.default) == f.default


def test_the_training_settings_and_their_flags() -> None:
    "The fields the command line has a flag for: every one that changes training."
    flagged = [f.name for f in fields(TrainConfig) if f.metadata.get("help")]
    assert flagged == [
        "corpus", "epochs", "max_tokens", "accum_iter", "factor", "warmup", "smoothing",
        "max_grad_norm", "seed", "src_lang", "tgt_lang", "train_pairs", "subset_seed", "skip_long",
    ]  # fmt: skip
    model_flags = {f.metadata["flag"] or f.name for f in fields(Choices) if "help" in f.metadata}
    assert model_flags == {"--model", "arch", "enc_layers", "dec_layers", "dropout", "vocab_size"}
    runtime = {f.name: f for f in fields(RuntimeOptions)}
    assert runtime["progress"].metadata["flag"] == "--quiet"  # the flag turns it off
    assert (runtime["dropout_mask"].default, runtime["adam"].default) == (None, "fused")


def test_the_model_choices_are_checked() -> None:
    for choices, message in [
        (
            dict(size="huge"),
            "size must be one of base, big, multi30k, small, tiny, got size='huge'",
        ),
        (dict(arch="gru"), "arch must be one of transformer, lstm, lexical, got arch='gru'"),
        (dict(enc_layers=0), "enc_layers must be at least 1, got enc_layers=0"),
        (dict(dec_layers=1.5), "dec_layers must be a whole number, got dec_layers=1.5"),
        (dict(dropout=1), "dropout must be at least 0 and below 1, got dropout=1"),
        (dict(vocab_size=260), "vocab_size must be at least 261 and at most 1,000,000, got "),
    ]:
        with pytest.raises(ChoiceError, match=f"^{re.escape(message)}"):
            Choices(**choices)
    assert Choices(vocab_size=None, dropout=0.0).dropout == 0.0  # exact: the value given


def test_setting_like_copies_the_rules_not_the_default_or_help() -> None:
    like = setting_like(TrainConfig, "vocab_size", "the vocabulary")
    vocab = next(f for f in fields(TrainConfig) if f.name == "vocab_size")
    assert like.default is None and like.metadata["help"] == "the vocabulary"
    assert {k: v for k, v in like.metadata.items() if k != "help"} == {
        k: v for k, v in vocab.metadata.items() if k != "help"
    }


# the defaults a value like 0, 1 or False may well share with a building block of Part I
TRIVIAL = (None, True, False, 0, 1, 0.0, 1.0, "")


def _records() -> list[type]:
    "The records whose fields are settings: configuration's, and the search's where declared so."
    search = (
        [fast_decoding.Search]
        if any("help" in f.metadata for f in fields(fast_decoding.Search))
        else []
    )
    return RECORDS + search


def _copies(path: Path, defaults: dict[str, object]) -> list[str]:
    "Where a module writes a setting's default again: parameter defaults, keywords, flag defaults."
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        pairs = []  # (name, literal node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            positional = a.posonlyargs + a.args
            pairs += zip(
                [x.arg for x in positional[len(positional) - len(a.defaults) :]], a.defaults
            )
            pairs += [(x.arg, d) for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
        elif isinstance(node, ast.ClassDef):
            pairs += [
                (s.target.id, s.value) for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.value
            ]  # fmt: skip
        elif isinstance(node, ast.Call):
            pairs += [(k.arg, k.value) for k in node.keywords if k.arg]
            flag = node.args[0] if node.args and isinstance(node.args[0], ast.Constant) else None
            if flag is not None and str(flag.value).startswith("--"):
                name = str(flag.value)[2:].replace("-", "_")
                pairs += [(name, k.value) for k in node.keywords if k.arg == "default"]
        for name, value in pairs:
            if (
                name in defaults
                and isinstance(value, ast.Constant)
                and type(value.value) is type(defaults[name])
                and value.value == defaults[name]
            ):
                found.append(f"{path.name}:{value.lineno} {name}={value.value!r}")
    return found


def test_each_default_is_written_in_one_place() -> None:
    "A setting's default literal is written in its field, and nowhere else in the package."
    defaults = {}
    for record in _records():
        for f in fields(record):
            if "help" in f.metadata and f.default not in TRIVIAL:
                assert f.name not in defaults, f"{f.name}: a setting of two records"
                defaults[f.name] = f.default
    assert {"epochs", "max_tokens", "warmup", "src_lang", "keep_epochs"} <= set(defaults)
    package = Path(config.__file__).parent
    modules = [p for p in sorted(package.glob("*.py")) if p.name != "_modidx.py"]
    assert [copy for p in modules for copy in _copies(p, defaults)] == []


def test_the_copy_finder_finds_copies(tmp_path: Path) -> None:
    "The test above can fail: a parameter, a field, a keyword and a flag's default are found."
    module = tmp_path / "copies.py"
    module.write_text(
        "def f(x, epochs=20, *, warmup=1000): ...\n"
        "class C:\n    max_tokens: int = 4096\n"
        "g(src_lang='de', seed=20)\n"
        "parser.add_argument('--keep-epochs', default=5)\n"
    )
    defaults = dict(epochs=20, warmup=1000, max_tokens=4096, src_lang="de", keep_epochs=5)
    found = _copies(module, defaults)
    assert [c.split(" ")[1] for c in found] == [
        "epochs=20", "warmup=1000", "max_tokens=4096", "src_lang='de'", "keep_epochs=5",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "name, message",
    [
        ("gpu", "'gpu' is not a device: use cpu, cuda, cuda:N or mps"),
        ("meta", "'meta' is not a device this command runs on: use cpu, cuda, cuda:N or mps"),
        ("cuda:7", "cuda:7 is not available: this machine has 2 cuda device(s), cuda:0 to cuda:1"),
    ],
)
def test_a_device_this_machine_lacks_is_refused(
    name: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ChoiceError, match=f"^{re.escape(message)}$"):
        RuntimeOptions(device=name)
    assert RuntimeOptions(device="cuda:1").device == "cuda:1"


def test_no_gpu_no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ChoiceError, match="^cuda is not available: this machine has no cuda"):
        check_setting(RuntimeOptions, "device", "cuda")
    assert check_setting(RuntimeOptions, "device", "cpu") == "cpu"
