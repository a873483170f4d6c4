"""Tests for annotated_transformer.translation: text in, text out.

1. `Translator` gives today's outputs on a fixed model (a seeded random model, fixed vocabularies):
   the tokens, scores and BLEU below were computed with version 0.2's `translate`,
   `translate_nbest` and `bleu` functions, which the Translator replaced.
2. Batches translate like single sentences; <unk> is banned unless allowed; blank sentences get
   no translation (in line with the others) and too long ones are refused; `Search` refuses what it
   cannot do, each setting by its declared rules.
3. From a checkpoint: the model in eval mode, its tokenizers, its run's settings, averaged epochs.
4. Detokenizing and BLEU.
5. `Translating`: what any translator offers, `Translator` included; `evaluate` and its report.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from annotated_transformer.checkpoint import average_last, load_checkpoint
from annotated_transformer.config import ChoiceError, check_setting
from annotated_transformer.data import SPECIALS, SpacyTokenizer, Vocab, load_tokenizers
from annotated_transformer.fast_decoding import GREEDY, Search, Translating
from annotated_transformer.model import ModelConfig, count_parameters
from annotated_transformer.subwords import SubwordTokenizer
from annotated_transformer.translation import bleu
from annotated_transformer.translator import (
    Evaluation,
    SentenceError,
    Translator,
    evaluate,
    source_tokens,
)

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
    found = translator.nbest(SOURCES, replace(SHORT, beam_size=3, alpha=alpha, nbest=3))
    assert [[" ".join(tokens) for tokens, _ in best] for best in found] == [
        [tokens for tokens, _ in best] for best in NBEST[alpha]
    ]
    assert [[score for _, score in best] for best in found] == [
        pytest.approx([score for _, score in best], abs=1e-4) for best in NBEST[alpha]
    ]
    # fewer of them: the best ones
    two = translator.nbest(SOURCES, replace(SHORT, beam_size=3, alpha=alpha, nbest=2))
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
        assert bleu(hypotheses, REFERENCES, translator.tgt_tokenizer) == scores  # exact: again


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


def test_blank_sentences_get_no_translation_in_their_place(translator: Translator) -> None:
    lines = ["", SOURCES[0], "   ", SOURCES[1], "\t"]
    search = replace(SHORT, beam_size=3, nbest=2)
    alone = translator.nbest(SOURCES[:2], search)
    assert translator.nbest(lines, search) == [[], alone[0], [], alone[1], []]
    best = translator.translate(SOURCES[:2], SHORT)
    assert translator.translate(lines, SHORT) == [[], best[0], [], best[1], []]
    assert translator.nbest(["  ", ""]) == [[], []] and translator.translate([]) == []


def test_too_long_sentences_are_refused_by_their_place(translator: Translator) -> None:
    # max_len 5000: 50 of the positions for the output, 2 for <s> and </s>
    with pytest.raises(
        ValueError, match=r"^sentence 0 has 5000 tokens, too long for this model \(at most 4948\)$"
    ):
        translator.translate(["Mann " * 5000])
    room = replace(SHORT, max_extra=4995)  # the search's room for the output counts
    assert translator.translate(["Mann Mann Mann"], room)
    with pytest.raises(ValueError, match=r"sentence 0 has 4 tokens, .* \(at most 3\)$"):
        translator.translate(["Mann Mann Mann Mann"], room)
    with pytest.raises(SentenceError, match=r"^sentence 2 has 5000 tokens"):  # blanks counted
        translator.translate(["Mann", " ", "Mann " * 5000])
    with pytest.raises(ValueError, match="^sentence 0 is empty: there is nothing to translate$"):
        translator.attention(" ")  # a drawing needs a sentence


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"beam_size": 0}, "beam_size must be at least 1 and at most 1,000, got beam_size=0"),
        ({"beam_size": True}, "beam_size must be a whole number, got beam_size=True"),
        ({"max_extra": -1}, "max_extra must be at least 0, got max_extra=-1"),
        ({"batch_size": 2.0}, "batch_size must be a whole number, got batch_size=2.0"),
        ({"batch_size": 0}, "batch_size must be at least 1, got batch_size=0"),
        ({"nbest": 0}, "nbest must be at least 1, got nbest=0"),
        ({"alpha": -0.5}, "alpha must be at least 0, got alpha=-0.5"),
        ({"alpha": float("nan")}, "alpha must be a finite number, got alpha=nan"),
        ({"alpha": float("inf")}, "alpha must be a finite number, got alpha=inf"),
        ({"allow_unk": 1}, "allow_unk must be true or false, got allow_unk=1"),
    ],
    ids=[
        "beam-0",
        "beam-bool",
        "max-extra",
        "batch-float",
        "batch-0",
        "nbest-0",
        "alpha-negative",
        "nan",
        "inf",
        "unk-int",
    ],
)
def test_search_refuses_what_it_cannot_do(settings: dict, message: str) -> None:
    with pytest.raises(ChoiceError, match=f"^{re.escape(message)}$"):
        Search(**settings)


@pytest.mark.parametrize("nbest, beam_size", [(2, 1), (4, 3)])
def test_nbest_is_at_most_the_beam_a_usage_error(nbest: int, beam_size: int) -> None:
    message = (
        f"nbest={nbest} needs beam_size={nbest} or more: a beam of {beam_size} ends with at "
        f"most {beam_size} translations"
    )
    with pytest.raises(ChoiceError, match=f"^{re.escape(message)}$"):
        Search(beam_size=beam_size, nbest=nbest)
    assert Search(beam_size=nbest, nbest=nbest).nbest == nbest  # as many as the beam: fine


def test_search_s_defaults_and_flags_are_declared_once() -> None:
    "What the command line builds its flags from: defaults, help, flag names; the paper's alpha."
    assert GREEDY == Search()
    # exact: the settings
    assert (GREEDY.beam_size, GREEDY.alpha, GREEDY.nbest, GREEDY.max_extra) == (1, 0.6, 1, 50)
    assert (GREEDY.allow_unk, GREEDY.batch_size, GREEDY.compile) == (False, 128, False)
    assert GREEDY.strategy is None  # the strategy by beam size: greedy search for a beam of 1
    meta = {f.name: f.metadata for f in dataclasses.fields(Search)}
    flagged = {name for name, m in meta.items() if m["help"]}
    flags = {"beam_size", "alpha", "nbest", "allow_unk", "batch_size", "compile", "strategy"}
    assert flagged == flags  # max_extra: none
    assert meta["beam_size"]["flag"] == "--beam" and meta["nbest"]["metavar"] == "K"
    assert meta["strategy"]["metavar"] == "NAME"
    assert "0.6" not in meta["alpha"]["help"]  # the number is the default's, in one place
    assert check_setting(Search, "alpha", 1.0) == 1.0  # exact: the value given, given back
    with pytest.raises(ChoiceError, match="beam_size must be at least 1"):
        check_setting(Search, "beam_size", 0)


def test_the_search_s_nbest_is_how_many_come_back(translator: Translator) -> None:
    for beam_size, nbest in ((1, 1), (3, 1), (3, 2), (3, 3)):
        found = translator.nbest(SOURCES, replace(SHORT, beam_size=beam_size, nbest=nbest))
        assert [len(best) for best in found] == [nbest] * len(SOURCES)


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
    assert translator.config == ckpt.config and translator.engine == "pytorch"
    assert translator.parameters == count_parameters(translator.model)
    for name, value in translator.model.state_dict().items():
        assert torch.equal(value, ckpt.model[name]), name  # exact: loaded, not computed
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


# ========================================================== 5. Translating, evaluate and its report
def test_the_translator_is_translating_and_gets_its_methods_from_it(translator: Translator) -> None:
    assert isinstance(translator, Translating) and Translating in Translator.__mro__
    assert Translator.translate is Translating.translate  # written once, in the Protocol
    assert Translator.detokenize is Translating.detokenize and Translator.bleu is Translating.bleu
    assert not isinstance(object(), Translating)


class Reversed(Translating):
    "A translator whose one translation of a sentence is its words reversed: only `nbest` written."

    tgt_tokenizer, config, parameters = SpacyTokenizer("en"), None, 0

    def nbest(self, sentences, search=GREEDY, progress=False):
        return [[(s.split()[::-1], -1.0)] if s.strip() else [] for s in sentences]


def test_a_new_translator_writes_nbest_and_gets_the_rest() -> None:
    echo = Reversed()
    assert isinstance(echo, Translating) and echo.engine == "pytorch"  # the Protocol's default
    assert echo.translate(["b a", " "]) == [["a", "b"], []]
    assert echo.detokenize(["A", "dog", "."]) == "A dog."
    assert echo.bleu([". ball a sees man A"], ["A man sees a ball."]).sacrebleu == pytest.approx(
        100
    )


def test_evaluate_aligns_blank_lines_and_reports_its_settings(translator: Translator) -> None:
    sources, references = [SOURCES[0], "", SOURCES[1]], [REFERENCES[0], "", REFERENCES[1]]
    search = replace(SHORT, beam_size=3)
    result = evaluate(translator, sources, references, search, name="toy")
    assert isinstance(result, Evaluation)
    best = translator.translate(SOURCES[:2], search)
    assert result.hypotheses == [best[0], [], best[1]]
    # exact: the same tokens scored again
    assert result.scores == bleu(result.hypotheses, references, translator.tgt_tokenizer)
    assert result.settings == {
        "data": "toy",
        "sentences": 3,
        "checkpoint": None,
        "arch": None,  # a translator built by hand knows no run
        "parameters": count_parameters(translator.model),
        "engine": "pytorch",
        "beam": 3,
        "alpha": 0.6,  # exact: the settings, copied
        "average_last": None,
        "allow_unk": False,
    }
    assert str(result) == f"toy (3 sentences, beam 3, alpha 0.6): {result.scores}"
    report = result.to_dict()
    assert list(report)[: len(result.scores.fields)] == list(result.scores.fields)
    assert report["tokenized_lowercase"] == result.scores.tokenized_lowercase
    assert json.loads(json.dumps(report)) == report  # the command line prints it as JSON
    loaded = replace(result, settings={**result.settings, "allow_unk": True}).loaded_from(
        Path("runs/x/last.pt"), 5
    )
    assert (loaded.settings["checkpoint"], loaded.settings["average_last"]) == ("runs/x/last.pt", 5)
    assert str(loaded).startswith(
        "toy (3 sentences, beam 3, alpha 0.6, average of the last 5 epochs, <unk> allowed): "
    )
    assert result.settings["checkpoint"] is None  # loaded_from made a new record
    assert str(evaluate(translator, SOURCES[:1], REFERENCES[:1], SHORT)).startswith(
        "test (1 sentences, greedy): sacreBLEU"
    )


def test_evaluate_reads_files_and_refuses_a_different_number_of_lines(
    translator: Translator, tmp_path: Path
) -> None:
    src, ref = tmp_path / "test.de", tmp_path / "test.en"
    src.write_text(f"{SOURCES[0]}\n\n{SOURCES[1]}\n", encoding="utf-8")
    ref.write_text(f"{REFERENCES[0]}\n\n{REFERENCES[1]}\n", encoding="utf-8")
    from_files = evaluate(translator, src, ref, SHORT)
    from_lists = evaluate(
        translator, [SOURCES[0], "", SOURCES[1]], [REFERENCES[0], "", REFERENCES[1]], SHORT
    )
    assert from_files.settings["data"] == "test.de" and from_files.settings["sentences"] == 3
    # exact: the same sentences translated and scored the same way
    assert from_files.hypotheses == from_lists.hypotheses and from_files.scores == from_lists.scores
    ref.write_text(f"{REFERENCES[0]}\n", encoding="utf-8")
    message = f"{src} has 3 lines but {ref} has 1: the references must translate the sources line"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        evaluate(translator, src, ref, SHORT)
    with pytest.raises(ValueError, match="^the sources has 2 lines but the references has 1: "):
        evaluate(translator, SOURCES[:2], REFERENCES[:1], SHORT)


def test_evaluate_names_a_sentence_it_cannot_translate_by_its_line(translator: Translator) -> None:
    sources = [SOURCES[0], "", "Mann " * 5000]
    with pytest.raises(ValueError, match=r"^toy, line 3: has 5000 tokens, too long for this model"):
        evaluate(translator, sources, ["a", "", "b"], name="toy")


def test_evaluate_knows_the_run_of_a_translator_from_a_checkpoint(tiny_checkpoint: Path) -> None:
    translator = Translator.from_checkpoint(tiny_checkpoint)
    result = evaluate(translator, SOURCES[:2], REFERENCES[:2])
    assert result.settings["arch"] == "transformer"
    assert result.settings["parameters"] == count_parameters(translator.model)


def test_source_tokens_skip_blank_sentences_and_refuse_long_ones() -> None:
    tokenizer = SpacyTokenizer("de")
    found = source_tokens(tokenizer, ["Ein Mann.", "", " ", "Ein Hund im Park."], 60, 50)
    assert found == {0: ["Ein", "Mann", "."], 3: ["Ein", "Hund", "im", "Park", "."]}
    assert source_tokens(tokenizer, ["Ein Hund im Park."], 60, 53) == {
        0: ["Ein", "Hund", "im", "Park", "."]
    }
    with pytest.raises(
        SentenceError, match=r"^sentence 3 has 5 tokens, .* \(at most 4\)$"
    ) as error:
        source_tokens(tokenizer, ["Ein Mann.", "", " ", "Ein Hund im Park."], 60, 54)
    assert (error.value.index, error.value.reason.split()[:3]) == (3, ["has", "5", "tokens,"])
