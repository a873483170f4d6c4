"""To and from the Hugging Face ecosystem (annotated_transformer.hub): `export --format
transformers` and `load_pretrained` / `--checkpoint hf:NAME_OR_DIR`, all offline.

What is checked (beyond nbs/21_hub.ipynb, whose checks compare random models of every kind,
the tokenizer on hard texts, one trained export and one OPUS-MT-shaped folder):
1. Export, on models trained here: post-norm tied (Marian), post-norm with separate embeddings
   (Marian) and pre-norm tied (Pegasus), all with subwords. The folder loads with transformers'
   Auto classes; its tokenizer gives our ids; teacher-forced log-probabilities are ours within 1e-4;
   `generate` finds our tokens, greedy and beam 4 (length penalty off on both sides). The model
   card names the run and its scores, and its Python snippet runs.
2. The folder as a folder: the files written and listed, --overwrite replacing only them, a user's
   file kept, given without hf: refused with the way to give it.
3. Refusals in one line, before anything is written: words, learned positions, narrow keys,
   pre-norm with separate embeddings, a recurrent model, --quantization int8, transformers missing.
4. Import: a folder shaped like Helsinki-NLP/opus-mt-de-en (its vocabulary, swish, the padding token
   as the decoder's start) and our own exports, read into our model: our greedy and beam tokens are
   `generate`'s, our attention maps are `output_attentions`'; the departures are switchable.
5. The command line: `translate --checkpoint hf:DIR` as the checkpoint translates, in a process of
   its own; `evaluate` with --src/--ref; refusals (--average-last, --engine ctranslate2, no --src,
   an empty name, a model over --max-parameters, a folder of another architecture, a missing one).
"""

from __future__ import annotations

import builtins
import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from clitools import cli, environment, own_file_args, refused
from synthetic import write_lines
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    BartConfig,
    BartForConditionalGeneration,
)

from annotated_transformer import hub
from annotated_transformer._chapters import opus_like_folder, sampled_pairs
from annotated_transformer.checkpoint import RunCheckpoint, load_checkpoint, save_checkpoint
from annotated_transformer.cli import main
from annotated_transformer.engines import export_format
from annotated_transformer.fast_decoding import Search
from annotated_transformer.hub import load_pretrained
from annotated_transformer.model import PositionwiseFeedForward, subsequent_mask
from annotated_transformer.recurrent import RecurrentConfig
from annotated_transformer.translator import Translator

GREEDY, BEAM = Search(), Search(beam_size=4, alpha=0.0)  # the length penalty off: see the chapter
# generate's settings for our searches, by beam size
GENERATE = {1: dict(num_beams=1), 4: dict(num_beams=4, length_penalty=0.0, early_stopping=True)}
SMALL = {"N": 2, "d_model": 64, "d_ff": 256, "h": 4}


@pytest.fixture(scope="module")
def copy_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Made-up German sentences to copy, as your own files: a task a small model learns in seconds,
    so that its outputs depend on the source and end at different steps."""
    folder, pairs = tmp_path_factory.mktemp("copy"), sampled_pairs(400, seed=11)
    files = {}
    for name, part in (("train", pairs[:360]), ("valid", pairs[360:380])):
        for side in ("src", "tgt"):
            files[f"{name}_{side}"] = write_lines(folder / f"{name}.{side}", [de for de, _ in part])
    return files


def train_with(tmp: Path, model: dict, corpus: dict) -> Path:
    "Ten epochs of a small subword model with these model settings, by the command; its last.pt."
    config = tmp / "config.json"
    config.write_text(json.dumps({"model": {**SMALL, **model}, "vocab_size": 400}))
    out = tmp / "run"
    argv = ["train", "--out", str(out), "--config", str(config), *own_file_args(corpus)]
    flags = ["--max-tokens", "200", "--warmup", "100", "--epochs", "10", "--quiet"]
    assert main([*argv, *flags]) == 0
    return out / "last.pt"


KINDS = {  # kind: (its model settings, the transformers class it becomes)
    "post-norm, tied": ({"norm_first": False, "share_embeddings": True}, "MarianMTModel"),
    "post-norm, separate": ({"norm_first": False}, "MarianMTModel"),
    "pre-norm, tied": (
        {"norm_first": True, "share_embeddings": True},
        "PegasusForConditionalGeneration",
    ),
}


@pytest.fixture(scope="module")
def runs(copy_corpus: dict, tmp_path_factory: pytest.TempPathFactory):
    "kind -> its checkpoint, trained when first asked for."
    cache = {}

    def get(kind: str) -> Path:
        if kind not in cache:
            cache[kind] = train_with(tmp_path_factory.mktemp("run"), KINDS[kind][0], copy_corpus)
        return cache[kind]

    return get


@pytest.fixture(scope="module")
def exports(runs, tmp_path_factory: pytest.TempPathFactory):
    "kind -> (its checkpoint, its folder written by `export --format transformers`)."
    cache = {}

    def get(kind: str) -> tuple[Path, Path]:
        if kind not in cache:
            out = tmp_path_factory.mktemp("hf") / "model"
            assert main(export_argv(runs(kind), out)) == 0
            cache[kind] = runs(kind), out
        return cache[kind]

    return get


@pytest.fixture(scope="module")
def sentences() -> list[tuple[str, str]]:
    "Sentences the copying models did not see, each with itself as the reference."
    return [(de, de) for de, _ in sampled_pairs(400, seed=11)[380:]]


def export_argv(checkpoint: Path, out: Path) -> list[str]:
    "The command that exports `checkpoint` to `out` for transformers."
    return [
        "export",
        "--checkpoint",
        str(checkpoint),
        "--out",
        str(out),
        "--format",
        "transformers",
    ]


def generated(model, tokenizer, sentence: str, search: Search, **settings) -> list[int]:
    "`generate`'s ids for one sentence, with our length limit, without the start token."
    ids = tokenizer([sentence], return_tensors="pt")["input_ids"]  # (1, S)
    limit = ids.size(1) + search.max_extra  # ours: the start symbol included
    return model.generate(ids, max_length=limit, **GENERATE[search.beam_size], **settings)[
        0, 1:
    ].tolist()


# ============================================================================= 1. export
@pytest.mark.parametrize("kind", KINDS)
def test_the_folder_loads_with_auto_classes_and_its_tokenizer_gives_our_ids(
    kind: str, exports, sentences
) -> None:
    checkpoint, folder = exports(kind)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder)
    assert type(model).__name__ == KINDS[kind][1]
    tokenizer, ours = AutoTokenizer.from_pretrained(folder), Translator.from_checkpoint(checkpoint)
    for src, tgt in sentences:
        for text, side in ((src, ours.src_tokenizer), (tgt, ours.tgt_tokenizer)):
            assert tokenizer(text)["input_ids"] == ours.src_vocab.encode_sentence(
                side.tokenize([text])[0]
            )


@pytest.mark.parametrize("kind", KINDS)
def test_teacher_forced_log_probabilities_are_ours(kind: str, exports, sentences) -> None:
    checkpoint, folder = exports(kind)
    theirs, tokenizer = (
        AutoModelForSeq2SeqLM.from_pretrained(folder).eval(),
        AutoTokenizer.from_pretrained(folder),
    )
    model = Translator.from_checkpoint(checkpoint).model.eval()
    worst = 0.0
    with torch.no_grad():
        for src, tgt in sentences:
            x = tokenizer([src], return_tensors="pt")["input_ids"]  # (1, S)
            y = tokenizer([tgt], return_tensors="pt")["input_ids"]  # (1, T + 1): <s> ... </s>
            mask, T = torch.ones(1, 1, x.size(1), dtype=torch.bool), y.size(1) - 1
            ours = model.generator(model(x, y[:, :-1], mask, subsequent_mask(T)))
            logits = theirs(input_ids=x, decoder_input_ids=y[:, :-1]).logits
            worst = max(worst, (logits.log_softmax(-1) - ours).abs().max().item())
    assert 0 < worst < 1e-4


@pytest.mark.parametrize("kind", KINDS)
def test_generate_finds_our_tokens(kind: str, exports, sentences) -> None:
    "Greedy and beam 4; <unk> banned by our searches and by the folder's generation settings."
    checkpoint, folder = exports(kind)
    theirs = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    tokenizer, ours = AutoTokenizer.from_pretrained(folder), Translator.from_checkpoint(checkpoint)
    sources = [src for src, _ in sentences]
    found = {search: ours.translate(sources, search) for search in (GREEDY, BEAM)}
    assert len({tuple(t) for t in found[GREEDY]}) > 1, "one translation for all: nothing to compare"
    assert len({len(t) for t in found[GREEDY]}) > 1  # sentences that end at different steps
    for search, translations in found.items():
        for sentence, tokens in zip(sources, translations):
            ids = generated(theirs, tokenizer, sentence, search)
            assert ours.tgt_vocab.decode(ids) == tokens


def test_the_model_card_names_the_run_and_its_snippet_runs(exports, tmp_path: Path) -> None:
    checkpoint, folder = exports("post-norm, tied")
    ckpt, card = load_checkpoint(checkpoint), (folder / "README.md").read_text()
    last = ckpt.history[-1]
    assert card.startswith("---\nlanguage: [de, en]\n")  # the run's languages (its defaults)
    for fact in (
        ckpt.run_id,
        f"epoch\n{ckpt.epoch} ",
        f"loss {last['val_loss']:.3f}",
        "MarianMTModel",
    ):
        assert fact in card, fact
    assert f"perplexity {last['val_ppl']:.2f}" in card and "your own files (" in card
    assert 'model.push_to_hub("your-name/model")' in card
    (snippet,) = re.findall(r"```python\n(.*?)```", card, flags=re.S)
    sentence = sampled_pairs(1, seed=2)[0][0]
    done = subprocess.run(
        [sys.executable, "-c", snippet.replace("A sentence to translate.", sentence)],
        cwd=folder.parent,
        capture_output=True,
        text=True,
        env=environment(),
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.startswith("["), done.stderr


# ============================================================================= 2. the folder
def test_the_files_are_listed_and_overwrite_replaces_only_them(
    runs, tmp_path: Path, capsys
) -> None:
    checkpoint, out = runs("post-norm, tied"), tmp_path / "model"
    argv = export_argv(checkpoint, out)
    assert main(argv) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(json.loads((out / "annotated_transformer.json").read_text())["files"])
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md"} <= set(names)
    assert not any(n.endswith((".bin", ".pt", ".pkl")) for n in names)  # no pickle
    assert export_format(out) == "transformers" and [p.name for p in tmp_path.iterdir()] == [
        "model"
    ]
    capsys.readouterr()
    assert "exists: choose another folder" in refused(argv, 2, capsys)
    before = (out / "model.safetensors").stat().st_mtime_ns
    assert main([*argv, "--overwrite"]) == 0
    assert (out / "model.safetensors").stat().st_mtime_ns != before
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert "holds files export did not write (notes.txt)" in refused(
        [*argv, "--overwrite"], 2, capsys
    )
    assert (out / "notes.txt").read_text() == "mine"
    line = refused(["translate", "--checkpoint", str(out), "ein Mann"], 2, capsys)
    assert f"give it as hf:{out}" in line


# ============================================================================= 3. refusals
def with_model(ckpt: RunCheckpoint, model, path: Path) -> Path:
    "The checkpoint's run with another model (fresh weights of its shape), saved at `path`."
    weights = model.build(len(ckpt.src_vocab), len(ckpt.tgt_vocab)).state_dict()
    config = replace(ckpt.config, model=model)
    record = RunCheckpoint(config, weights, ckpt.src_vocab, ckpt.tgt_vocab, 1, [])
    save_checkpoint(path, replace(record, run_id=ckpt.run_id, tokenizer=ckpt.tokenizer))
    return path


@pytest.mark.parametrize(
    "model, message",
    [
        ({"positions": "learned"}, "its positions are learned"),
        ({"d_k": 8}, "its keys are d_k=8 wide"),
        ({"norm_first": True, "share_embeddings": False}, "it is pre-norm with separate"),
    ],
)
def test_what_transformers_has_no_home_for_is_refused(
    model: dict, message: str, runs, tmp_path: Path, capsys
) -> None:
    ckpt = load_checkpoint(runs("post-norm, separate"))
    checkpoint = with_model(ckpt, replace(ckpt.config.model, **model), tmp_path / "last.pt")
    out = tmp_path / "out"
    argv = export_argv(checkpoint, out)
    line = refused(argv, 2, capsys)
    assert f"--format transformers cannot export this model: {message}" in line
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_words_recurrent_and_int8_are_refused(
    tiny_checkpoint: Path, tmp_path: Path, capsys
) -> None:
    hf = ["--out", str(tmp_path / "x"), "--format", "transformers"]
    argv = ["export", "--checkpoint", str(tiny_checkpoint), *hf]
    assert "its words are spaCy's rules" in refused(argv, 2, capsys)
    assert "--quantization is CTranslate2's" in refused(
        [*argv, "--quantization", "int8"], 2, capsys
    )
    lstm = RecurrentConfig(d_emb=8, d_hidden=8)
    path = with_model(load_checkpoint(tiny_checkpoint), lstm, tmp_path / "lstm.pt")
    assert "it is a recurrent model" in refused(
        ["export", "--checkpoint", str(path), *hf], 2, capsys
    )
    assert [p.name for p in tmp_path.iterdir()] == ["lstm.pt"]


def test_without_transformers_the_error_says_what_to_install(
    runs, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = builtins.__import__

    def no_transformers(name, *args, **kwargs):
        if name == "transformers" or name.startswith("transformers."):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_transformers)
    line = refused(export_argv(runs("post-norm, tied"), tmp_path / "x"), 1, capsys)
    assert "pip install 'annotated-transformer[hub]'" in line
    line = refused(["translate", "--checkpoint", f"hf:{tmp_path}", "ein Mann"], 1, capsys)
    assert "pip install 'annotated-transformer[hub]'" in line
    assert list(tmp_path.iterdir()) == []


# ============================================================================= 4. import
@pytest.fixture(scope="module")
def opus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    "A folder shaped like Helsinki-NLP/opus-mt-de-en: random weights, 2 layers of width 64."
    return opus_like_folder(
        tmp_path_factory.mktemp("opus") / "opus-mt-de-en", sampled_pairs(300, seed=3)
    )


def test_an_opus_mt_shaped_folder_reads_with_the_departures(opus: Path) -> None:
    ours = load_pretrained(str(opus))
    config = AutoModelForSeq2SeqLM.from_pretrained(opus).config
    assert (config.vocab_size, config.activation_function) == (58_101, "swish")
    layer = ours.model.decoder.layers[0]
    assert isinstance(layer.feed_forward, hub.SwishFeedForward)
    assert ours.tgt_vocab.bos == ours.tgt_vocab.pad == config.decoder_start_token_id == 58_100
    assert ours.tgt_vocab.never == (58_100,) and ours.tgt_vocab.eos == 0
    start = ours.model.tgt_embed[0].lut.weight[58_100]
    assert torch.equal(start, torch.zeros_like(start))  # exact: Marian's zero start vector, copied
    relu = load_pretrained(str(opus), activation="relu")
    assert type(relu.model.decoder.layers[0].feed_forward) is PositionwiseFeedForward
    sentences = [de for de, _ in sampled_pairs(10, seed=7)]
    assert relu.translate(sentences) != ours.translate(sentences)  # the departure matters


@pytest.mark.parametrize("search", [GREEDY, BEAM], ids=["greedy", "beam 4"])
@pytest.mark.parametrize("source", ["opus-mt-shaped", "our export"])
def test_our_searches_on_an_imported_model_find_generate_s_tokens(
    source: str, search: Search, opus: Path, exports
) -> None:
    folder = opus if source == "opus-mt-shaped" else exports("pre-norm, tied")[1]
    ours = load_pretrained(str(folder))
    theirs, tokenizer = (
        AutoModelForSeq2SeqLM.from_pretrained(folder).eval(),
        AutoTokenizer.from_pretrained(folder),
    )
    sentences = [de for de, _ in sampled_pairs(12, seed=5)]
    search = search if source == "our export" else replace(search, allow_unk=True)
    found = ours.translate(sentences, search)
    for sentence, tokens in zip(sentences, found):  # OPUS-MT forces </s> at the limit: not ours
        ids = generated(theirs, tokenizer, sentence, search, forced_eos_token_id=None)
        assert ours.tgt_vocab.decode(ids) == tokens


@pytest.mark.parametrize("source", ["opus-mt-shaped", "our export"])
def test_our_attention_maps_are_output_attentions(source: str, opus: Path, exports) -> None:
    folder = opus if source == "opus-mt-shaped" else exports("post-norm, separate")[1]
    ours = load_pretrained(str(folder))
    theirs = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    maps = ours.attention(sampled_pairs(1, seed=9)[0][0])
    src = torch.tensor([ours.src_vocab.encode(maps.src_tokens)])
    tgt = torch.tensor([ours.tgt_vocab.encode(maps.tgt_tokens)])
    out = theirs(input_ids=src, decoder_input_ids=tgt, output_attentions=True)
    found = dict(encoder=out.encoder_attentions, decoder_self=out.decoder_attentions)
    found["decoder_src"] = out.cross_attentions
    for kind, weights in found.items():
        assert torch.allclose(maps.weights[kind], torch.cat(weights), atol=1e-5), kind


def test_our_export_read_back_translates_as_the_checkpoint(exports, sentences) -> None:
    checkpoint, folder = exports("post-norm, separate")
    ours, back = Translator.from_checkpoint(checkpoint), load_pretrained(str(folder))
    sources = [src for src, _ in sentences]
    for search in (Search(), Search(beam_size=4)):  # the paper's length penalty too: both ours
        assert back.translate(sources, search) == ours.translate(sources, search)


# ============================================================================= 5. the command
def test_translate_and_evaluate_with_hf_as_the_checkpoint(
    exports, sentences, tmp_path: Path
) -> None:
    checkpoint, folder = exports("pre-norm, tied")
    text = "".join(src + "\n" for src, _ in sentences[:5])
    ours = cli("translate", "--checkpoint", str(checkpoint), stdin=text)
    theirs = cli("translate", "--checkpoint", f"hf:{folder}", stdin=text)
    assert ours.returncode == theirs.returncode == 0, theirs.stderr
    assert theirs.stdout == ours.stdout and len(theirs.stdout.splitlines()) == 5
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text(text)
    ref.write_text("".join(tgt + "\n" for _, tgt in sentences[:5]))
    scores = []
    for model in (str(checkpoint), f"hf:{folder}"):
        done = cli(
            "evaluate", "--checkpoint", model, "--src", str(src), "--ref", str(ref), "--json"
        )
        assert done.returncode == 0, done.stderr
        scores.append(json.loads(done.stdout)["score"])
    assert scores[0] == scores[1]  # exact: sacreBLEU of the same lines (above)


@pytest.fixture(scope="module")
def bart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    "A tiny BART saved by transformers: a model of another architecture."
    out = tmp_path_factory.mktemp("bart") / "bart"
    sizes = dict(
        d_model=16, encoder_layers=1, decoder_layers=1, encoder_ffn_dim=32, decoder_ffn_dim=32
    )
    BartForConditionalGeneration(
        BartConfig(vocab_size=50, encoder_attention_heads=2, decoder_attention_heads=2, **sizes)
    ).save_pretrained(out)
    return out


def test_what_cannot_be_loaded_is_refused_in_one_line(
    opus: Path, bart: Path, tmp_path: Path, capsys
) -> None:
    hf = f"hf:{opus}"
    usage = [
        (
            ["translate", "--checkpoint", hf, "--average-last", "2", "x"],
            "--average-last averages a run's",
        ),
        (
            ["translate", "--checkpoint", hf, "--engine", "ctranslate2", "x"],
            "runs in our PyTorch model",
        ),
        (["translate", "--checkpoint", "hf:", "x"], "hf: needs a model after it"),
        (["evaluate", "--checkpoint", hf], "has no corpus of its own: give --src and --ref"),
        (["export", "--checkpoint", hf, "--out", str(tmp_path / "x")], "is a model to load"),
    ]
    for argv, message in usage:
        assert message in refused(argv, 2, capsys), argv
    failures = [
        (
            ["translate", "--checkpoint", hf, "--max-parameters", "1000", "x"],
            "parameters, over the 1,000 allowed",
        ),
        (
            ["translate", "--checkpoint", f"hf:{bart}", "x"],
            "cannot use its config.json (it is a bart model",
        ),
        (
            ["translate", "--checkpoint", f"hf:{tmp_path / 'missing'}", "x"],
            f"hf:{tmp_path / 'missing'}: cannot load its config.json",
        ),
    ]
    for argv, message in failures:
        assert message in refused(argv, 1, capsys), argv
    assert list(tmp_path.iterdir()) == []


def test_the_card_names_training_files_safely_and_every_file_is_readable(exports) -> None:
    """Round four: the card copied training file names raw (absolute paths, line breaks, `---`,
    HTML), and model.safetensors was written 0600 beside files of 0644."""
    from dataclasses import replace as changed

    from annotated_transformer.checkpoint import load_checkpoint
    from annotated_transformer.hub import model_card

    last, folder = exports("post-norm, tied")
    card = (folder / "README.md").read_text()
    assert "your own files (`train.src`, `train.tgt`)" in card
    ckpt = load_checkpoint(last)
    files = ["/home/someone/private/train.de", "evil\n---\n<script>alert(1)</script>.en"]
    data = {**ckpt.data, "train": {**ckpt.data["train"], "files": files}}
    card = model_card(changed(ckpt, data=data), "m")
    assert "/home/someone" not in card and "<script>" not in card
    assert card.count("\n---\n") == 1 and card.startswith("---\n")  # the front matter, whole
    modes = {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}
    assert len(set(modes.values())) == 1, modes  # model.safetensors as readable as the rest
