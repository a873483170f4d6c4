"""Exporting to CTranslate2 (annotated_transformer.engines) and serving the export: `export`, and
`translate` and `evaluate` through the exported folder or with --engine ctranslate2.

What is checked (beyond nbs/22_engines.ipynb, whose checks compare the specification's
log-probabilities with ours on random models of every kind, and translate with a tiny model):
1. Exactness on trained tiny models: pre-norm and post-norm, separate (words) and tied (subwords)
   embeddings, sinusoidal and learned positions, narrow keys (d_k < d_v). Float32 greedy search
   gives our translations, with our scores when <unk> is allowed; beam search's best is ours.
   With <unk> banned the tokens are ours and the scores are the renormalized ones (never lower).
2. int8: a smaller model.bin, and translations mostly ours.
3. The folder: what it holds, a README whose two Python snippets run, a write that fails leaving
   nothing behind (and the model it was to replace intact), --overwrite replacing only an export.
4. The command: export, then translate (standard input, --nbest, --output) and evaluate --json
   through the folder, and evaluate --engine ctranslate2 from the checkpoint, give what the
   checkpoint gives.
5. Refusals, in one line, before anything is written: a recurrent checkpoint, an existing --out,
   a folder that is not an export, a missing checkpoint, --attention, --engine pytorch and
   --average-last with an exported folder, and CTranslate2 not installed.
6. The library behind the command: `ExportedTranslator` is a `Translating` (blank sentences get
   nothing, in their place, as ours do); `load_translator` loads a checkpoint, an average of its
   epochs or an exported folder with the engine asked for, and refuses the rest with a
   `ChoiceError` (a usage error) before anything is loaded; `evaluate` reports the engine.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("ctranslate2")

from clitools import TINY_RUN, cli, environment, own_file_args, refused
from synthetic import synthetic_pairs

from annotated_transformer import engines
from annotated_transformer.checkpoint import RunCheckpoint, load_checkpoint, save_checkpoint
from annotated_transformer.cli import main
from annotated_transformer.config import ChoiceError, TrainConfig
from annotated_transformer.engines import (
    ENGINES,
    ExportedTranslator,
    NotExportable,
    check_loading,
    engine_of,
    export_model,
    is_exported,
    load_translator,
)
from annotated_transformer.fast_decoding import Search, Translating
from annotated_transformer.model import count_parameters, subsequent_mask
from annotated_transformer.recurrent import RecurrentConfig
from annotated_transformer.translator import Translator, evaluate

WORDS = [de for de, _ in synthetic_pairs()]
OWN_FILES = ("train_src", "train_tgt")  # own_corpus's files the tied subword runs learned
# unlike the runs' default: the paper's post-norm, learned positions, narrow keys (d_k < d_v)
POST_NORM = {
    "N": 2,
    "d_model": 64,
    "d_ff": 256,
    "h": 4,
    "norm_first": False,
    "positions": "learned",
    "d_k": 8,
}


def train_with(tmp: Path, settings: dict, data: list[str]) -> Path:
    "One epoch of a tiny model with these settings (a config file's), by the command; its last.pt."
    config = tmp / "config.json"
    config.write_text(json.dumps(settings))
    out = tmp / "run"
    argv = ["train", "--out", str(out), "--config", str(config), "--epochs", "1", *data]
    assert main([*argv, *[a for a in TINY_RUN if a not in ("--model", "tiny")]]) == 0
    return out / "last.pt"


@pytest.fixture(scope="module")
def post_norm(synthetic_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    "Post-norm, separate vocabularies of words, learned positions, narrow keys."
    data = ["--data-dir", str(synthetic_corpus)]
    return train_with(tmp_path_factory.mktemp("post"), {"model": POST_NORM}, data)


@pytest.fixture(scope="module")
def post_norm_tied(own_corpus: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    "Post-norm, one subword vocabulary and tied embeddings, sinusoidal positions."
    model = {**POST_NORM, "positions": "sinusoidal", "d_k": None, "share_embeddings": True}
    settings = {"model": model, "vocab_size": 400}
    return train_with(tmp_path_factory.mktemp("post-tied"), settings, own_file_args(own_corpus))


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, own_corpus: dict) -> dict:
    "kind -> (its checkpoint, trained when first asked for; sentence pairs of its languages)."
    own = [
        (src, tgt)
        for src, tgt in zip(*(own_corpus[f].read_text().splitlines() for f in OWN_FILES))
        if src.strip() and tgt.strip()
    ][:60]
    fixture = lambda name: lambda: request.getfixturevalue(name)
    return {
        "pre-norm, words": (fixture("tiny_checkpoint"), synthetic_pairs()),
        "pre-norm, tied subwords": (lambda: request.getfixturevalue("own_run") / "last.pt", own),
        "post-norm, words, learned positions, d_k 8": (fixture("post_norm"), synthetic_pairs()),
        "post-norm, tied subwords": (fixture("post_norm_tied"), own),
    }


@pytest.fixture(scope="module")
def translators(runs: dict):
    "kind -> (ours, exported, sentence pairs), each built once per module."
    cache = {}

    def get(kind: str) -> tuple[Translator, ExportedTranslator, list[tuple[str, str]]]:
        if kind not in cache:
            checkpoint, pairs = runs[kind]
            ckpt = load_checkpoint(checkpoint())
            ours, exported = (
                Translator.from_checkpoint(ckpt),
                ExportedTranslator.from_checkpoint(ckpt),
            )
            cache[kind] = ours, exported, pairs
        return cache[kind]

    return get


KINDS = [
    "pre-norm, words",
    "pre-norm, tied subwords",
    "post-norm, words, learned positions, d_k 8",
    "post-norm, tied subwords",
]


def teacher_forced(translator: Translator, src: list[str], tgt: list[str]) -> list[float]:
    "Our model's log p(each target token, then </s>) given the source and the tokens before."
    model, src_vocab, tgt_vocab = translator.model, translator.src_vocab, translator.tgt_vocab
    source = torch.tensor([src_vocab.encode_sentence(src)])  # (1, S)
    target = torch.tensor([tgt_vocab.encode_sentence(tgt)])  # (1, T + 1): <s> ... </s>
    mask = torch.ones(1, 1, source.size(1), dtype=torch.bool)
    T = target.size(1) - 1
    with torch.no_grad():
        out = model.decode(model.encode(source, mask), mask, target[:, :-1], subsequent_mask(T))
        return model.generator(out)[0].gather(-1, target[0, 1:, None]).squeeze(-1).tolist()


# ============================================================================= 1. exactness
@pytest.mark.parametrize("kind", KINDS)
def test_the_engine_computes_our_log_probabilities(kind: str, translators) -> None:
    "Every target token's log-probability, teacher-forced on the reference translations."
    ours, exported, pairs = translators(kind)
    sources = ours.src_tokenizer.tokenize([src for src, _ in pairs])
    targets = ours.tgt_tokenizer.tokenize([tgt for _, tgt in pairs])
    found = exported.model.engine.score_batch(sources, targets, max_input_length=0)
    for src, tgt, theirs in zip(sources, targets, found):
        assert np.allclose(teacher_forced(ours, src, tgt), theirs.log_probs, atol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_search_is_ours(kind: str, translators) -> None:
    ours, exported, pairs = translators(kind)
    sentences = [src for src, _ in pairs]
    a = ours.nbest(sentences, Search(allow_unk=True))
    b = exported.nbest(sentences, Search(allow_unk=True))
    assert len({tuple(x[0][0]) for x in a}) > 1, "one translation for all: nothing to compare"
    assert [x[0][0] for x in a] == [y[0][0] for y in b]
    assert max(abs(x[0][1] - y[0][1]) for x, y in zip(a, b)) < 1e-4
    assert ours.translate(sentences) == exported.translate(sentences)  # <unk> banned


@pytest.mark.parametrize("kind", KINDS)
def test_beam_search_s_best_is_ours(kind: str, translators) -> None:
    ours, exported, pairs = translators(kind)
    sentences = [src for src, _ in pairs]
    search = Search(beam_size=4, allow_unk=True, nbest=4)
    a, b = ours.nbest(sentences, search), exported.nbest(sentences, search)
    assert [x[0][0] for x in a] == [y[0][0] for y in b]
    assert max(abs(x[0][1] - y[0][1]) for x, y in zip(a, b)) < 1e-4
    # the rest of the 4 best may differ only where hypotheses reach the length limit (the chapter)
    same = sum([h[0] for h in x] == [h[0] for h in y] for x, y in zip(a, b))
    assert same >= 0.9 * len(a)


def test_with_unk_banned_the_scores_are_renormalized(translators) -> None:
    "CTranslate2 masks <unk> before the softmax: the same tokens, log-probabilities never lower."
    ours, exported, pairs = translators("pre-norm, words")
    sentences = [src for src, _ in pairs]
    a, b = ours.nbest(sentences), exported.nbest(sentences)
    assert [x[0][0] for x in a] == [y[0][0] for y in b]
    gaps = [y[0][1] - x[0][1] for x, y in zip(a, b)]
    assert min(gaps) > -1e-4 and max(gaps) > 1e-3


def test_int8_is_smaller_and_mostly_ours(tiny_checkpoint: Path, tmp_path: Path) -> None:
    ckpt = load_checkpoint(tiny_checkpoint)
    f32, int8 = (export_model(ckpt, tmp_path / q, q) for q in ("float32", "int8"))
    assert (int8 / "model.bin").stat().st_size < 0.8 * (f32 / "model.bin").stat().st_size
    exported = ExportedTranslator.from_dir(int8)
    assert exported.model.quantization == "int8"
    ours = Translator.from_checkpoint(ckpt).translate(WORDS)
    assert sum(x == y for x, y in zip(ours, exported.translate(WORDS))) >= 0.8 * len(WORDS)


# ============================================================================== 2. the folder
def python_blocks(readme: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", readme, flags=re.S)


@pytest.mark.parametrize("kind", ["pre-norm, words", "pre-norm, tied subwords"])
def test_the_folder_and_its_readme_s_snippets(kind: str, runs: dict, tmp_path: Path) -> None:
    checkpoint, pairs = runs[kind]
    ckpt = load_checkpoint(checkpoint())
    folder = export_model(ckpt, tmp_path / "model")
    names = {p.name for p in folder.iterdir()}
    subwords = ckpt.tokenizer is not None
    vocabularies = (
        {"shared_vocabulary.json"}
        if subwords
        else {"source_vocabulary.json", "target_vocabulary.json"}
    )
    extra = {"subwords.model"} if subwords else set()
    assert names == {"model.bin", "config.json", "annotated_transformer.json", "README.md"} | (
        vocabularies | extra
    )
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temporary folder left
    ours, theirs = python_blocks((folder / "README.md").read_text())
    for snippet in (ours, theirs):
        done = subprocess.run(
            [sys.executable, "-c", snippet.replace("A sentence to translate.", pairs[0][0])],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=environment(),
            timeout=300,
        )
        assert done.returncode == 0 and done.stdout.strip(), done.stderr


def test_a_failed_export_leaves_nothing_and_the_old_model_intact(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = load_checkpoint(tiny_checkpoint)
    folder = export_model(ckpt, tmp_path / "model")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    def broken(*args):
        raise OSError("No space left on device")

    monkeypatch.setattr(engines, "readme", broken)
    for out, overwrite in ((tmp_path / "new", False), (folder, True)):
        with pytest.raises(OSError, match="No space left"):
            export_model(ckpt, out, "int8", overwrite=overwrite)
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_overwrite_replaces_an_export_and_nothing_else(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    ckpt = load_checkpoint(tiny_checkpoint)
    folder = export_model(ckpt, tmp_path / "model")
    with pytest.raises(ChoiceError, match="exists: choose another folder"):
        export_model(ckpt, folder, "int8")
    export_model(ckpt, folder, "int8", overwrite=True)
    assert json.loads((folder / "annotated_transformer.json").read_text())["quantization"] == "int8"
    data = tmp_path / "data"
    data.mkdir()
    (data / "notes.txt").write_text("mine")
    with pytest.raises(ChoiceError, match="not a model folder written by export"):
        export_model(ckpt, data, overwrite=True)
    assert (data / "notes.txt").read_text() == "mine"


# ============================================================================= 3. the command
@pytest.fixture(scope="module")
def exported(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    "The tiny checkpoint exported through the command, float32."
    out = tmp_path_factory.mktemp("exported") / "tiny-ct2"
    assert main(["export", "--checkpoint", str(tiny_checkpoint), "--out", str(out)]) == 0
    assert is_exported(out)
    return out


def run(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    "main(argv): its status and standard output."
    capsys.readouterr()
    status = main(argv)
    return status, capsys.readouterr().out


def test_translate_through_the_folder_is_the_checkpoint_s(
    exported: Path, tiny_checkpoint: Path, capsys, monkeypatch
) -> None:
    lines = "\n".join([WORDS[0], "", *WORDS[1:6]]) + "\n"
    outputs = {}
    for checkpoint in (tiny_checkpoint, exported):
        monkeypatch.setattr(sys, "stdin", io.StringIO(lines))  # read as it is by the command
        args = ["translate", "--checkpoint", str(checkpoint), "--buffer-size", "2"]
        outputs[checkpoint] = run(args, capsys)
    assert outputs[exported] == outputs[tiny_checkpoint]
    status, text = outputs[exported]
    assert status == 0 and text.splitlines()[1] == "" and len(text.splitlines()) == 7


def test_nbest_through_the_folder_is_the_checkpoint_s(
    exported: Path, tiny_checkpoint: Path, capsys
) -> None:
    found = {}
    for checkpoint in (tiny_checkpoint, exported):
        args = ["translate", "--checkpoint", str(checkpoint), "--beam", "3", "--nbest", "2"]
        status, text = run([*args, "--allow-unk", *WORDS[:5]], capsys)
        assert status == 0
        found[checkpoint] = [line.split("\t") for line in text.splitlines()]
    assert len(found[exported]) == 10
    for (i, score, text), (j, their_score, their_text) in zip(
        found[tiny_checkpoint], found[exported]
    ):
        assert (i, text) == (j, their_text) and abs(float(score) - float(their_score)) < 2e-4


def test_output_and_evaluate_json_through_the_folder(
    exported: Path, tiny_checkpoint: Path, synthetic_corpus: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "out.txt"
    assert main(["translate", "--checkpoint", str(exported), "--output", str(out), *WORDS[:3]]) == 0
    assert len(out.read_text().splitlines()) == 3

    def evaluate(checkpoint: Path, *flags: str) -> dict:
        args = ["evaluate", "--checkpoint", str(checkpoint), "--data-dir", str(synthetic_corpus)]
        status, text = run([*args, "--json", "--quiet", *flags], capsys)
        assert status == 0
        return json.loads(text)

    pytorch = evaluate(tiny_checkpoint)
    assert pytorch["engine"] == "pytorch"
    for result in (evaluate(exported), evaluate(tiny_checkpoint, "--engine", "ctranslate2")):
        assert result["engine"] == "ctranslate2"
        # exact: sacreBLEU of the same tokens (the engines agree on them), rounded alike
        assert (result["score"], result["sentences"]) == (pytorch["score"], pytorch["sentences"])
        assert result["parameters"] == pytorch["parameters"]
    model = load_checkpoint(tiny_checkpoint).build_model()
    assert pytorch["parameters"] == count_parameters(model)


def test_the_command_in_a_process_of_its_own(exported: Path) -> None:
    "End to end, as a user runs it: standard input through a pipe, the exported folder."
    done = cli("translate", "--checkpoint", str(exported), stdin=f"{WORDS[0]}\n{WORDS[1]}\n")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 2 and done.stderr == ""


# ============================================================================== 4. refusals
@pytest.fixture(scope="module")
def recurrent(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    "A checkpoint of an (untrained) LSTM model with the tiny run's vocabularies."
    ckpt = load_checkpoint(tiny_checkpoint)
    config = TrainConfig(model=RecurrentConfig(d_emb=16, d_hidden=16))
    model = config.model.build(len(ckpt.src_vocab), len(ckpt.tgt_vocab))
    path = tmp_path_factory.mktemp("lstm") / "last.pt"
    save_checkpoint(
        path, RunCheckpoint(config, model.state_dict(), ckpt.src_vocab, ckpt.tgt_vocab, 1, [])
    )
    return path


def test_a_recurrent_checkpoint_is_refused_before_anything_is_written(
    recurrent: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "lstm-ct2"
    line = refused(["export", "--checkpoint", str(recurrent), "--out", str(out)], 2, capsys)
    assert "a lstm model cannot be exported: CTranslate2 runs the Transformer only" in line
    assert list(tmp_path.iterdir()) == []
    argv = ["translate", "--checkpoint", str(recurrent), "--engine", "ctranslate2", "Ein Mann."]
    assert "a lstm model cannot be exported" in refused(argv, 2, capsys)


def test_an_existing_out_is_never_replaced_without_overwrite(
    exported: Path, tiny_checkpoint: Path, tmp_path: Path, capsys
) -> None:
    before = (exported / "model.bin").stat().st_mtime_ns
    argv = ["export", "--checkpoint", str(tiny_checkpoint), "--out", str(exported)]
    assert "exists: choose another folder, or --overwrite" in refused(argv, 2, capsys)
    assert (exported / "model.bin").stat().st_mtime_ns == before
    mine = tmp_path / "mine"
    mine.mkdir()
    argv = ["export", "--checkpoint", str(tiny_checkpoint), "--out", str(mine), "--overwrite"]
    assert "not a model folder written by export" in refused(argv, 2, capsys)


def test_a_missing_checkpoint_is_refused_and_nothing_written(tmp_path: Path, capsys) -> None:
    argv = ["export", "--checkpoint", str(tmp_path / "nothing.pt"), "--out", str(tmp_path / "x")]
    assert "no checkpoint at" in refused(argv, 1, capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--attention", "maps.png"], "--attention draws the PyTorch model's attention"),
        (["--engine", "pytorch"], "is a model exported to CTranslate2"),
        (["--average-last", "2"], "--average-last averages a run's checkpoints"),
    ],
)
def test_what_the_exported_folder_cannot_do_is_a_usage_error(
    exported: Path, flags: list[str], message: str, capsys
) -> None:
    argv = ["translate", "--checkpoint", str(exported), *flags, "Ein Mann."]
    assert message in refused(argv, 2, capsys)


def test_without_ctranslate2_the_error_says_what_to_install(
    tiny_checkpoint: Path, exported: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import ctranslate2 now fails
    install = "pip install 'annotated-transformer[export]'"
    argv = ["export", "--checkpoint", str(tiny_checkpoint), "--out", str(tmp_path / "x")]
    assert install in refused(argv, 1, capsys)
    assert list(tmp_path.iterdir()) == []
    argv = ["translate", "--checkpoint", str(exported), "Ein Mann."]
    assert install in refused(argv, 1, capsys)


# ================================================================ 6. the library behind the command
def test_the_exported_translator_is_translating_with_nothing_of_ours(
    exported: Path, tiny_checkpoint: Path
) -> None:
    theirs, ours = (
        ExportedTranslator.from_dir(exported),
        Translator.from_checkpoint(tiny_checkpoint),
    )
    assert isinstance(theirs, Translating) and Translating in ExportedTranslator.__mro__
    assert Translator not in ExportedTranslator.__mro__  # nothing borrowed from the PyTorch one
    for name in ("translate", "detokenize", "bleu"):  # the Protocol's own, written once
        assert getattr(ExportedTranslator, name) is getattr(Translating, name)
    assert (theirs.engine, ours.engine) == ("ctranslate2", "pytorch")
    assert theirs.parameters == ours.parameters == count_parameters(ours.model)
    assert theirs.config == ours.config
    lines = [WORDS[0], "", "  ", WORDS[1]]
    search = Search(beam_size=3, nbest=2, allow_unk=True)
    found = theirs.nbest(lines, search)
    assert [len(best) for best in found] == [2, 0, 0, 2]  # blank: nothing, in its place
    assert [[t for t, _ in best] for best in found] == [
        [t for t, _ in best] for best in ours.nbest(lines, search)
    ]
    assert theirs.translate(lines) == ours.translate(lines)


def test_load_translator_loads_each_kind_with_the_engine_asked_for(
    exported: Path, tiny_checkpoint: Path
) -> None:
    assert ENGINES == ("pytorch", "ctranslate2")
    assert [engine_of(tiny_checkpoint), engine_of(exported)] == ["pytorch", "ctranslate2"]
    assert engine_of(tiny_checkpoint, "ctranslate2") == "ctranslate2"
    loaded = {
        "checkpoint": load_translator(tiny_checkpoint),
        "str path": load_translator(str(tiny_checkpoint), device="cpu"),
        "checkpoint, ctranslate2": load_translator(tiny_checkpoint, engine="ctranslate2"),
        "folder": load_translator(exported),
        "folder, ctranslate2": load_translator(exported, engine="ctranslate2"),
        "average of 1": load_translator(tiny_checkpoint, average_last=1),
    }
    kinds = {name: type(t) for name, t in loaded.items()}
    assert kinds == {
        "checkpoint": Translator,
        "str path": Translator,
        "checkpoint, ctranslate2": ExportedTranslator,
        "folder": ExportedTranslator,
        "folder, ctranslate2": ExportedTranslator,
        "average of 1": Translator,
    }
    expected = loaded["checkpoint"].translate(WORDS)
    for name in ("str path", "checkpoint, ctranslate2", "folder", "average of 1"):
        assert loaded[name].translate(WORDS) == expected, name
    last = load_checkpoint(tiny_checkpoint).model  # one epoch averaged: that epoch
    for name, value in loaded["average of 1"].model.state_dict().items():
        torch.testing.assert_close(value, last[name])


@pytest.mark.parametrize(
    "where, asked, message",
    [
        ("folder", {"engine": "pytorch"}, "is a model exported to CTranslate2: leave out --engine"),
        ("folder", {"average_last": 2}, "--average-last averages a run's checkpoints; "),
        ("plain folder", {}, "is a folder, not a checkpoint (nor a model folder export wrote)"),
        ("checkpoint", {"engine": "onnx"}, "engine 'onnx': choose one of pytorch, ctranslate2"),
    ],
    ids=["folder-pytorch", "folder-average", "plain-folder", "unknown-engine"],
)
def test_what_cannot_be_loaded_is_a_choice_error_before_anything_loads(
    where: str,
    asked: dict,
    message: str,
    exported: Path,
    tiny_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = {"folder": exported, "plain folder": tmp_path, "checkpoint": tiny_checkpoint}[where]
    monkeypatch.setattr(engines, "load_checkpoint", None)  # loading anything would fail
    monkeypatch.setattr(ExportedTranslator, "from_dir", None)
    for call in (check_loading, load_translator):
        with pytest.raises(ChoiceError, match=re.escape(message)):
            call(path, **asked)


def test_failures_to_load_are_not_usage_errors(
    recurrent: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(FileNotFoundError, match="no checkpoint at") as missing:
        load_translator(tmp_path / "missing.pt")
    assert not isinstance(missing.value, ChoiceError)
    with pytest.raises(ValueError, match="there are not 5 epochs to average") as too_many:
        load_translator(recurrent, average_last=5)
    assert not isinstance(too_many.value, ChoiceError)
    # a recurrent model for CTranslate2: the engine cannot represent it, a usage error
    with pytest.raises(NotExportable, match="a lstm model cannot be exported") as lstm:
        load_translator(recurrent, engine="ctranslate2")
    assert isinstance(lstm.value, ChoiceError)
    assert isinstance(load_translator(recurrent), Translator)  # PyTorch translates it
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import ctranslate2 now fails
    with pytest.raises(ValueError, match="pip install 'annotated-transformer.export.'") as absent:
        check_loading(recurrent, engine="ctranslate2")
    assert not isinstance(absent.value, ChoiceError)


def test_evaluate_reports_the_engine_that_translated(exported: Path, tiny_checkpoint: Path) -> None:
    references = [f"reference {i}" for i in range(len(WORDS))]
    ours = evaluate(load_translator(tiny_checkpoint), WORDS, references)
    theirs = evaluate(load_translator(exported), WORDS, references)
    assert (ours.settings["engine"], theirs.settings["engine"]) == ("pytorch", "ctranslate2")
    # exact: tokens, and sacreBLEU's scores of them
    assert theirs.hypotheses == ours.hypotheses and theirs.scores == ours.scores
    assert theirs.settings["parameters"] == ours.settings["parameters"]
    assert theirs.settings["arch"] == ours.settings["arch"] == "transformer"
    assert str(theirs).startswith(f"test ({len(WORDS)} sentences, greedy, CTranslate2): ")
