"""The search that writes only trees (fast_decoding's `trees` strategy over trees' `TreeGrammar`),
on models rather than on random walks (those are in test_trees.py):

1. Random Transformers and attentional LSTMs, greedy and beam, write a tree over exactly each
   sentence's words, whatever the sentence (unknown words, one word, thirty).
2. A translation model's searches are untouched: the translator's tokens and scores are those of
   the unconstrained searches called directly.
3. CTranslate2, which cannot run it, refuses it by name.
(A trained parser and the command line: test_parsing_cli.py.)
"""

from __future__ import annotations

import random

import pytest
import torch

from annotated_transformer.checkpoint import load_checkpoint
from annotated_transformer.config import ChoiceError, preset
from annotated_transformer.data import Vocab
from annotated_transformer.engines import ExportedTranslator, export_model
from annotated_transformer.fast_decoding import GREEDY, Search, beam_search, greedy_search
from annotated_transformer.parsing import Parser
from annotated_transformer.recurrent import RecurrentConfig
from annotated_transformer.translator import Translator
from annotated_transformer.trees import XX, SpaceTokenizer

SPECIALS = ["<s>", "</s>", "<blank>", "<unk>"]
LABELS = ["S", "NP", "VP", "PP", "ADJP"]
TREES = Vocab([*SPECIALS, XX, *(f"{b}{label}" for label in LABELS for b in "()"), "(SBAR"])
WORDS = Vocab([*SPECIALS, *"the a cat dog saw chased near mat bird .".split()])


def random_parser(arch: str, seed: int) -> Parser:
    "An untrained parser: a random model of `arch` between WORDS and TREES."
    torch.manual_seed(seed)
    if arch == "transformer":
        model = preset("tiny").build(len(WORDS), len(TREES))
    else:
        model = RecurrentConfig(d_emb=32, d_hidden=32).build(len(WORDS), len(TREES))
    space = SpaceTokenizer()
    return Parser(Translator(model.eval(), WORDS, TREES, space, space))


def sentences(seed: int, n: int = 24) -> list[str]:
    "Sentences of 1 to 30 words, some unknown to the vocabulary."
    rng = random.Random(seed)
    known = WORDS.itos[len(SPECIALS) :]
    pool = [*known, "zebra", "quickly", "Pierre"]
    return [" ".join(rng.choice(pool) for _ in range(rng.randint(1, 30))) for _ in range(n)]


@pytest.mark.parametrize("arch", ["transformer", "lstm"])
@pytest.mark.parametrize("beam_size", [1, 4])
def test_random_models_write_only_trees_over_the_sentence_s_words(arch, beam_size) -> None:
    parser = random_parser(arch, seed=beam_size)
    given = sentences(seed=beam_size)
    search = Search(beam_size=beam_size, max_extra=40, strategy="trees")
    for parse, sentence in zip(parser.parse(given, search), given):
        words = sentence.split()
        assert parse.well_formed and parse.slots == len(words), sentence
        assert parse.tree.leaves() == words


def test_without_the_grammar_random_models_write_malformed_sequences() -> None:
    "The check above can fail: the same models, unconstrained, need repairs."
    parser = random_parser("transformer", seed=1)
    parses = parser.parse(sentences(seed=1), Search(max_extra=40))
    assert sum(p.well_formed for p in parses) < len(parses)


def test_the_room_a_tree_needs_is_checked_before_decoding() -> None:
    parser = random_parser("transformer", seed=0)
    with pytest.raises(ChoiceError, match="a tree over 3 words takes 6 tokens, and 5 are allowed"):
        parser.parse(["the cat saw"], Search(max_extra=1, strategy="trees"))


def test_a_translation_model_s_searches_are_untouched() -> None:
    "Greedy and beam search through the translator: the unconstrained searches' tokens and scores."
    torch.manual_seed(0)
    model = preset("tiny").build(len(WORDS), len(WORDS)).eval()
    space = SpaceTokenizer()
    translator = Translator(model, WORDS, WORDS, space, space)
    given = ["the cat saw a dog .", "a bird near the mat", "dog"]
    src_rows = [torch.tensor(WORDS.encode_sentence(s.split())) for s in given]
    src = torch.nn.utils.rnn.pad_sequence(src_rows, batch_first=True, padding_value=WORDS.pad)
    src_mask = (src != WORDS.pad).unsqueeze(-2)
    limits = [len(row) + GREEDY.max_extra for row in src_rows]
    ends = (WORDS.bos, WORDS.eos)
    greedy = greedy_search(model, src, src_mask, limits, *ends, banned=(WORDS.unk,))
    assert [[(WORDS.decode(h.tokens), h.score)] for h in greedy] == translator.nbest(given)
    beam = beam_search(model, src, src_mask, limits, *ends, beam_size=4, banned=(WORDS.unk,))
    found = translator.nbest(given, Search(beam_size=4, nbest=4))
    assert [[(WORDS.decode(h.tokens), h.score) for h in hyps] for hyps in beam] == found


def test_ctranslate2_refuses_the_tree_search_by_name(tmp_path, tiny_checkpoint) -> None:
    folder = export_model(load_checkpoint(tiny_checkpoint), tmp_path / "ct2")
    engine = ExportedTranslator.from_dir(folder, threads=1)
    with pytest.raises(ChoiceError, match="^CTranslate2 cannot run the trees strategy"):
        engine.translate(["Ein Hund."], Search(strategy="trees"))
