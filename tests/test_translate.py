"""Tests for annotated_transformer.translation: text in, text out; and the package's layering.

1. `Translator` gives today's outputs on a fixed model (a seeded random model, fixed vocabularies):
   the tokens, scores and BLEU below were computed with version 0.2's `translate`,
   `translate_nbest` and `bleu` functions, which the Translator replaced.
2. Batches translate like single sentences; <unk> is banned unless allowed; empty and too long
   sentences are refused; `Search` and `nbest` refuse what they cannot do.
3. From a checkpoint: the model in eval mode, its tokenizers, averaged epochs.
4. Detokenizing and BLEU.
5. Each module imports only from the modules above it in the package docstring's list.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import annotated_transformer
from annotated_transformer.checkpoint import average_last, load_checkpoint
from annotated_transformer.data import SPECIALS, SpacyTokenizer, Vocab, load_tokenizers
from annotated_transformer.model import ModelConfig
from annotated_transformer.subwords import SubwordTokenizer
from annotated_transformer.translation import GREEDY, Search, Translator, bleu

SOURCES = [
    "Ein Mann sieht einen Ball.",
    "Ein Hund im Park.",
    "Ein Hund sieht einen Mann im Park.",
    "Eine Katze sieht einen Ball.",  # two words the model does not know
]
REFERENCES = [
    "A man sees a ball.",
    "A dog in the park.",
    "A dog sees a man in the park.",
    "A cat sees a ball.",
]


def fixed_translator() -> Translator:
    "A random model of seed 4 (two layers, d_model 32) whose end symbol is a little likelier."
    src_vocab = Vocab(
        [*SPECIALS, "Ein", "Mann", "Hund", "sieht", "einen", "Ball", "im", "Park", "."]
    )
    tgt_vocab = Vocab([*SPECIALS, "A", "man", "dog", "sees", "a", "ball", "in", "the", "park", "."])
    torch.manual_seed(4)
    model = ModelConfig(N=2, d_model=32, d_ff=64, h=4).build(len(src_vocab), len(tgt_vocab))
    with torch.no_grad():
        model.generator.proj.bias[tgt_vocab.eos] += 0.5
    return Translator(
        model.eval(), src_vocab, tgt_vocab, SpacyTokenizer("de"), SpacyTokenizer("en")
    )


@pytest.fixture(scope="module")
def translator() -> Translator:
    return fixed_translator()


# =========================================================================== 1. today's outputs
SHORT = Search(max_extra=4)  # outputs at most 4 tokens longer than their sources (with <s>, </s>)
GREEDY_TOKENS = [
    "park the park . . .",
    "the dog dog dog dog dog dog dog dog",
    "the sees dog dog dog the the",
    "park",
]
BEAM_TOKENS = ["park", "park dog", "the sees dog dog the the the", "park"]
NBEST = {  # beam 3, the 3 best of each sentence: (tokens, log-probability / length penalty)
    0.6: [
        [
            ("park", -3.05088),
            ("park the park . . .", -9.99748),
            ("park the park . . . .", -10.17019),
        ],
        [("park dog", -4.47995), ("park dog dog", -5.34934), ("park dog dog dog", -6.01673)],
        [
            ("the sees dog dog the the the", -10.82752),
            ("the sees dog dog dog the the", -10.84699),
            ("the sees dog dog the the", -10.98536),
        ],
        [("park", -3.42413), ("dog dog", -4.48799), ("dog dog dog", -5.20315)],
    ],
    1.0: [
        [("park", -2.86845), ("park the park . . .", -6.7531), ("park the park . . . .", -6.86976)],
        [("park dog", -3.99299), ("park dog dog", -4.54845), ("park dog dog dog", -4.9048)],
        [
            ("the sees dog dog the the the", -6.97719),
            ("the sees dog dog dog the the", -6.98974),
            ("the sees dog dog the the", -7.0789),
        ],
        [("park", -3.21938), ("dog dog", -4.00015), ("dog dog dog", -4.42415)],
    ],
}
GREEDY_SCORES = [-18.00826, -15.18099, -20.96921, -3.75594]  # log-probabilities
SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:"


def joined(translations: list[list[str]]) -> list[str]:
    return [" ".join(tokens) for tokens in translations]


def test_greedy_and_beam_search_translate_as_before(translator: Translator) -> None:
    assert joined(translator.translate(SOURCES, SHORT)) == GREEDY_TOKENS
    assert joined(translator.translate(SOURCES, replace(SHORT, beam_size=3))) == BEAM_TOKENS
    # the default limit: 50 tokens longer than the source (§6.1), each sentence its own
    assert [len(tokens) for tokens in translator.translate(SOURCES)] == [30, 49, 32, 1]
    assert translator.translate(SOURCES[1:2])[0][:3] == ["the", "dog", "dog"]


@pytest.mark.parametrize("alpha", [0.6, 1.0])
def test_nbest_gives_the_same_hypotheses_and_scores(translator: Translator, alpha: float) -> None:
    found = translator.nbest(SOURCES, replace(SHORT, beam_size=3, alpha=alpha), n=3)
    assert [[" ".join(tokens) for tokens, _ in best] for best in found] == [
        [tokens for tokens, _ in best] for best in NBEST[alpha]
    ]
    assert [[score for _, score in best] for best in found] == [
        pytest.approx([score for _, score in best], abs=1e-4) for best in NBEST[alpha]
    ]
    # fewer of them: the best ones
    two = translator.nbest(SOURCES, replace(SHORT, beam_size=3, alpha=alpha), n=2)
    assert [[tokens for tokens, _ in best] for best in two] == [
        [tokens for tokens, _ in best[:2]] for best in found
    ]


def test_greedy_nbest_is_the_translation_with_its_log_probability(translator: Translator) -> None:
    found = translator.nbest(SOURCES, SHORT)
    assert [len(best) for best in found] == [1, 1, 1, 1]
    assert joined([best[0][0] for best in found]) == GREEDY_TOKENS
    assert [best[0][1] for best in found] == pytest.approx(GREEDY_SCORES, abs=1e-4)


def test_allowing_unk_lets_it_in(translator: Translator) -> None:
    allowed = translator.translate(SOURCES, replace(SHORT, allow_unk=True))
    assert joined(allowed) == [
        "park <unk> park . . .",
        *GREEDY_TOKENS[1:3],
        "park " + "<unk> " * 9 + ".",
    ]
    assert joined(translator.translate(SOURCES, replace(SHORT, allow_unk=True, beam_size=3))) == (
        BEAM_TOKENS
    )


def test_detokenized_and_scored_as_before(translator: Translator) -> None:
    assert [translator.detokenize(t) for t in translator.translate(SOURCES, SHORT)] == [
        "park the park...",
        *GREEDY_TOKENS[1:],
    ]
    unk = translator.translate(SOURCES, replace(SHORT, allow_unk=True))
    assert translator.detokenize(unk[0]) == "park <unk> park..."
    assert translator.detokenize(unk[3]) == "park" + " <unk>" * 9 + "."
    for search, score in ((SHORT, 2.678102), (replace(SHORT, beam_size=3), 1.970681)):
        scores = translator.bleu(SOURCES, REFERENCES, search)
        assert scores.sacrebleu == pytest.approx(score, abs=1e-5)
        assert scores.tokenized_lowercase == pytest.approx(score, abs=1e-5)
        assert scores.signature.startswith(SIGNATURE)
        hypotheses = translator.translate(SOURCES, search)
        assert bleu(hypotheses, REFERENCES, translator.tgt_tokenizer) == scores


# ===================================================================== 2. batches, <unk>, bad input
@pytest.mark.parametrize("beam_size", [1, 3])
def test_translations_do_not_depend_on_the_batch(translator: Translator, beam_size: int) -> None:
    search = replace(SHORT, beam_size=beam_size)
    together = translator.nbest(SOURCES, search)
    one_by_one = translator.nbest(SOURCES, replace(search, batch_size=1))
    alone = [translator.nbest([s], search)[0] for s in SOURCES]
    for a, b, c in zip(together, one_by_one, alone):
        assert a[0][0] == b[0][0] == c[0][0]
        assert a[0][1] == pytest.approx(b[0][1], abs=1e-5) == c[0][1]
    reordered = translator.translate(SOURCES[::-1], search)  # sorted by length inside: same
    assert reordered[::-1] == translator.translate(SOURCES, search)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_unk_is_banned_unless_allowed(beam_size: int) -> None:
    translator = fixed_translator()
    with torch.no_grad():  # the model now wants <unk> everywhere
        translator.model.generator.proj.bias[translator.tgt_vocab.unk] += 100.0
    search = replace(SHORT, beam_size=beam_size)
    allowed = translator.translate(SOURCES, replace(search, allow_unk=True))
    assert all("<unk>" in out for out in allowed)
    banned = translator.translate(SOURCES, search)
    assert all(out and "<unk>" not in out for out in banned)


def test_empty_and_too_long_sentences_are_refused(translator: Translator) -> None:
    with pytest.raises(ValueError, match="^sentence 1 is empty: there is nothing to translate$"):
        translator.translate(["Ein Mann sieht einen Ball.", "   "])
    # max_len 5000: 50 of the positions for the output, 2 for <s> and </s>
    with pytest.raises(
        ValueError, match=r"^sentence 0 has 5000 tokens, too long for this model \(at most 4948\)$"
    ):
        translator.translate(["Mann " * 5000])
    room = replace(SHORT, max_extra=4995)  # the search's room for the output counts
    assert translator.translate(["Mann Mann Mann"], room)
    with pytest.raises(ValueError, match=r"sentence 0 has 4 tokens, .* \(at most 3\)$"):
        translator.translate(["Mann Mann Mann Mann"], room)
    with pytest.raises(ValueError, match="sentence 0 is empty"):
        translator.attention(" ")


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"beam_size": 0}, "beam_size must be a whole number at least 1, got 0"),
        ({"beam_size": True}, "beam_size must be a whole number at least 1, got True"),
        ({"max_extra": -1}, "max_extra must be a whole number at least 0, got -1"),
        ({"batch_size": 2.0}, "batch_size must be a whole number at least 1, got 2.0"),
        ({"alpha": -0.5}, "alpha must be a finite number at least 0, got -0.5"),
        ({"alpha": float("nan")}, "alpha must be a finite number at least 0, got nan"),
        ({"alpha": float("inf")}, "alpha must be a finite number at least 0, got inf"),
    ],
    ids=["beam-0", "beam-bool", "max-extra", "batch-float", "alpha-negative", "nan", "inf"],
)
def test_search_refuses_what_it_cannot_do(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        Search(**settings)


def test_nbest_asks_for_at_most_the_beam(translator: Translator) -> None:
    assert GREEDY == Search() and (GREEDY.beam_size, GREEDY.alpha, GREEDY.max_extra) == (1, 0.6, 50)
    for n, beam_size in ((2, 1), (4, 3), (0, 3)):
        with pytest.raises(ValueError, match=f"n={n} must be from 1 to beam_size={beam_size}"):
            translator.nbest(SOURCES, Search(beam_size=beam_size), n=n)


# =========================================================================== 3. from a checkpoint
def test_a_translator_from_a_checkpoint(tiny_checkpoint: Path) -> None:
    ckpt = load_checkpoint(tiny_checkpoint)
    translator = Translator.from_checkpoint(tiny_checkpoint)
    assert not translator.model.training
    assert next(translator.model.parameters()).device.type == "cpu"
    assert translator.src_vocab.itos == ckpt.src_vocab.itos
    assert translator.tgt_vocab.itos == ckpt.tgt_vocab.itos
    assert isinstance(translator.src_tokenizer, SpacyTokenizer)
    assert (translator.src_tokenizer.lang, translator.tgt_tokenizer.lang) == ("de", "en")
    for name, value in translator.model.state_dict().items():
        assert torch.equal(value, ckpt.model[name]), name
    from_record = Translator.from_checkpoint(ckpt, device="cpu")
    assert from_record.translate(SOURCES[:2]) == translator.translate(SOURCES[:2])
    # averaged epochs: the record average_last gives; one epoch averaged is that epoch
    averaged = Translator.from_checkpoint(average_last(tiny_checkpoint, 1))
    for name, value in averaged.model.state_dict().items():
        torch.testing.assert_close(value, ckpt.model[name])
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        Translator.from_checkpoint(tiny_checkpoint.parent / "missing.pt")


# ========================================================================= 4. detokenizing and BLEU
@pytest.mark.parametrize(
    "sentence",
    [
        "Two young, White males are outside near many bushes.",
        "A man's dog isn't running; it's sitting (quietly) by the door!",
        'She says "hello" to the children.',
    ],
)
def test_detokenize_inverts_the_english_tokenizer(translator: Translator, sentence: str) -> None:
    tokens = translator.tgt_tokenizer.tokenize([sentence])[0]
    assert translator.detokenize(tokens) == sentence


def test_bleu_scores() -> None:
    refs = ["A man rides a bike.", "Two dogs play in the snow."]
    _, tok_en = load_tokenizers()
    perfect = bleu(tok_en.tokenize(refs), refs, tok_en)
    assert perfect.sacrebleu == pytest.approx(100.0)
    assert perfect.tokenized_lowercase == pytest.approx(100.0)
    lowered = bleu([[t.lower() for t in s] for s in tok_en.tokenize(refs)], refs, tok_en)
    assert lowered.tokenized_lowercase == pytest.approx(100.0)  # case does not matter here...
    assert lowered.sacrebleu < 100.0  # ...but does for sacreBLEU
    assert "case:mixed" in perfect.signature and "tok:13a" in perfect.signature
    assert perfect.fields["score"] == pytest.approx(100.0) and perfect.fields["name"] == "BLEU"
    assert str(perfect).startswith("sacreBLEU 100.00 (nrefs:1|case:mixed")
    assert str(perfect).endswith("; tokenized lowercased BLEU 100.00")
    with pytest.raises(ValueError, match="1 hypotheses for 2 references"):
        bleu([["A"]], refs, tok_en)
    subwords = SubwordTokenizer.train([*refs, "Ein Mann fährt Fahrrad."] * 50, vocab_size=300)
    pieces = bleu(subwords.tokenize(refs), refs, subwords)  # pieces are not words
    assert pieces.sacrebleu == pytest.approx(100.0) and pieces.tokenized_lowercase is None
    assert "tokenized" not in str(pieces)


# =========================================================================== 5. the layering
def layering(doc: str | None = None) -> list[str]:
    "The modules in their layering order: the docstring's first list of `annotated_transformer.X`."
    names = []
    for line in (doc or annotated_transformer.__doc__).splitlines():
        found = re.match(r"- `annotated_transformer\.(\w+)`", line)
        if found:
            names.append(found.group(1))
        elif names:  # the list has ended (a later one, "Modules:", is in another order)
            break
    return names


def imported_modules(source: str) -> set[str]:
    "The package's modules a module's source imports: `from .x import` or `from package.x import`."
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.level == 1:
                imported.add(node.module.split(".")[0])
            elif node.module.startswith("annotated_transformer."):
                imported.add(node.module.split(".")[1])
        elif isinstance(node, ast.ImportFrom) and node.level == 1:  # from . import x
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("annotated_transformer."):
                    imported.add(alias.name.split(".")[1])
    return imported


def test_the_layering_lists_every_module_once() -> None:
    order = layering()
    package = Path(annotated_transformer.__file__).parent
    modules = {p.stem for p in package.glob("*.py")} - {"__init__", "_modidx"}
    assert sorted(order) == sorted(modules), "the docstring's list is not the package's modules"
    assert order[0] == "model" and order[-1] == "cli"


def test_no_module_imports_upward() -> None:
    "Each module imports only from the modules above it in the package docstring's list."
    order = layering()
    package = Path(annotated_transformer.__file__).parent
    for rank, name in enumerate(order):
        imported = imported_modules((package / f"{name}.py").read_text())
        above = imported & set(order[rank:])
        assert not above, f"{name} imports {sorted(above)}, which are not above it"


def test_the_layering_check_can_fail() -> None:
    "The order is the first list's; an import of a later module, written any way, is found."
    doc = (
        "Title.\n\n- `annotated_transformer.b` (B)\n- `annotated_transformer.a`: A\n\nModules:\n\n"
    )
    assert layering(doc + "- `annotated_transformer.a`: A\n- `annotated_transformer.b`: B") == [
        "b",
        "a",
    ]
    assert imported_modules("from .trainer import train") == {"trainer"}
    assert imported_modules("from annotated_transformer.cli import main") == {"cli"}
    assert imported_modules("import annotated_transformer.data as data") == {"data"}
    assert imported_modules("from . import runs\nimport torch") == {"runs"}
    assert imported_modules("from torch.nn import Module") == set()
