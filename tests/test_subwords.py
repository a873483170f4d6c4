"""Tests for annotated_transformer.subwords.

What is checked:
1. The teaching byte-pair encoding against subword-nmt, the reference implementation: the same
   merges in the same order on made-up corpora (random words over small alphabets, which make many
   ties, repeated letters and early stops; synthetic German-English sentences), for several
   `min_frequency`; the same segmentation of every word of the corpus and of unseen words, once our
   "</w>" pieces are written in its "@@" notation.
2. `SubwordTokenizer`: the exact text back from its pieces for odd text (Unicode, characters never
   seen in training, extra spaces, tabs, line breaks, a literal ▁, "t-shirt"), never <unk>, the same
   model for the same texts, its `pieces()`, a `state_dict` that `torch.load(weights_only=True)`
   reads, damaged or foreign states refused, and `vocab_size` too large or too small and empty input
   refused with the bounds that hold.
3. `shared_vocab`: the special tokens first, then every piece, nothing unknown, no special token
   learned as a piece.

Everything is made here: no ../shared folder, no network.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import random
import re

import pytest
import torch
from subword_nmt.apply_bpe import BPE
from subword_nmt.learn_bpe import learn_bpe as reference_learn_bpe
from synthetic import sampled_pairs

from annotated_transformer.data import SPECIALS
from annotated_transformer.subwords import (
    LITERAL_MARK,
    SubwordTokenizer,
    apply_bpe,
    learn_bpe,
    merge_ranks,
    shared_vocab,
    train_bpe_model,
    with_separator,
    word_counts,
)
from annotated_transformer.translation import Tokenizer


# ============================================================= the teaching BPE against subword-nmt
def reference_merges(
    sentences: list[str], num_merges: int, min_frequency: int = 2
) -> tuple[list[tuple[str, str]], str]:
    "subword-nmt's merges for `sentences`, and the codes file they came from."
    out = io.StringIO()
    with contextlib.redirect_stderr(io.StringIO()):  # progress bar, "no pair has frequency >= ..."
        reference_learn_bpe(
            io.StringIO("\n".join(sentences)), out, num_merges, min_frequency=min_frequency
        )
    version, *lines = out.getvalue().splitlines()
    assert version == "#version: 0.2"
    return [tuple(line.split(" ")) for line in lines], out.getvalue()


def random_sentences(seed: int, alphabet: str, n: int = 300) -> list[str]:
    "n sentences of 1-10 random words of 1-8 letters from `alphabet`."
    rng = random.Random(seed)
    return [
        " ".join(
            "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
            for _ in range(rng.randint(1, 10))
        )
        for _ in range(n)
    ]


def synthetic_sentences() -> list[str]:
    """Both sides of 300 synthetic German-English pairs, tokenized as subword-nmt expects (the final
    period apart)."""
    return [side.replace(".", " .") for pair in sampled_pairs(300) for side in pair]


CORPORA = {
    f"random {alphabet} {seed}": random_sentences(seed, alphabet)
    for seed, alphabet in enumerate(["ab", "abc", "abcdefgh"])
}
CORPORA["synthetic German-English"] = synthetic_sentences()


@pytest.mark.parametrize("min_frequency", [1, 2, 5])
@pytest.mark.parametrize("corpus", CORPORA)
def test_merges_are_those_of_subword_nmt(corpus: str, min_frequency: int) -> None:
    sentences = CORPORA[corpus]
    ours = learn_bpe(word_counts(sentences), 400, min_frequency=min_frequency)
    theirs, _ = reference_merges(sentences, 400, min_frequency=min_frequency)
    assert len(ours) > 30
    assert ours == theirs


def test_a_tie_goes_to_the_greatest_pair_as_in_subword_nmt() -> None:
    sentences = ["ab cd ab cd"]  # ("a", "b</w>") and ("c", "d</w>") both occur twice
    assert (
        learn_bpe(word_counts(sentences), 1)
        == reference_merges(sentences, 1)[0]
        == [("c", "d</w>")]
    )


def test_learning_stops_when_no_pair_is_frequent_enough() -> None:
    counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
    assert len(learn_bpe(counts, 1000)) == 13  # every pair left occurs once
    assert learn_bpe(counts, 1000, min_frequency=7) == [("s", "t</w>"), ("e", "st</w>"), ("l", "o")]
    assert learn_bpe(counts, 0) == []
    assert learn_bpe({}, 10) == []


@pytest.mark.parametrize("corpus", CORPORA)
def test_segmentation_is_that_of_subword_nmt(corpus: str) -> None:
    sentences = CORPORA[corpus]
    merges, codes = reference_merges(sentences, 300)
    reference, ranks = BPE(io.StringIO(codes)), merge_ranks(merges)
    rng = random.Random(1)
    unseen = [
        "".join(rng.choice("abcdefghxyz") for _ in range(rng.randint(1, 12))) for _ in range(200)
    ]
    words = [*word_counts(sentences), *unseen, "Mannschaft", "Basketballspieler", "x"]
    for word in words:
        ours = apply_bpe(word, ranks)
        assert "".join(ours) == word + "</w>"
        assert with_separator(ours) == reference.segment_tokens([word]), word


def test_a_merge_listed_twice_keeps_its_first_rank() -> None:
    assert merge_ranks([("a", "b"), ("c", "d"), ("a", "b")]) == {("a", "b"): 0, ("c", "d"): 1}


def test_apply_bpe_merges_by_rank_not_by_position() -> None:
    ranks = merge_ranks(
        [("b", "c</w>"), ("a", "b")]
    )  # "bc</w>" was learned first: it wins over the earlier "ab"
    assert apply_bpe("abc", ranks) == ["a", "bc</w>"]
    assert apply_bpe("ab", ranks) == ["a", "b</w>"]  # ("a", "b") is not ("a", "b</w>")


# =========================================================================== SubwordTokenizer
@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [side for pair in sampled_pairs(700) for side in pair]


@pytest.fixture(scope="module")
def tokenizer(texts: list[str]) -> SubwordTokenizer:
    return SubwordTokenizer.train(texts, vocab_size=400)


ODD_TEXTS = [
    "A man in a t-shirt.",
    "Ein Mann fährt Fahrrad.",
    "  two  spaces  and  more   ",
    " leading",
    "trailing ",
    "tab\tand\nnew line\r\n",
    "café naïve Ærø ß ẞ",  # letters never seen in training
    "日本語のテキスト 中文 한국어 العربية עברית",
    "emoji 😀👍🏽 and ✓ ☃",
    "ﬁne ligature, full-width ２, circled ①",  # NFKC would rewrite these
    "a ▁ literal mark▁ and ▁▁ two",
    "▁",
    "▁start and end▁",
    "<s> </s> <blank> <unk>",
    "\x00 control \x07 characters \u200b zero width",
    "",
    " ",
]


@pytest.mark.parametrize("text", ODD_TEXTS)
def test_the_text_comes_back_exactly(tokenizer: SubwordTokenizer, text: str) -> None:
    pieces = tokenizer.tokenize([text])[0]
    assert tokenizer.detokenize(pieces) == text


def test_tokenize_takes_many_texts_and_keeps_their_order(tokenizer: SubwordTokenizer) -> None:
    one_by_one = [tokenizer.tokenize([text])[0] for text in ODD_TEXTS]
    assert tokenizer.tokenize(ODD_TEXTS) == one_by_one
    assert tokenizer.tokenize(ODD_TEXTS, progress=True) == one_by_one  # a Tokenizer's signature
    assert tokenizer.tokenize([]) == []
    assert isinstance(tokenizer, Tokenizer)  # data's interface: a run's tokenizer either way


def test_nothing_is_unknown_unseen_characters_become_bytes(tokenizer: SubwordTokenizer) -> None:
    known = set(tokenizer.pieces())
    for pieces in tokenizer.tokenize(ODD_TEXTS):
        assert set(pieces) <= known
    assert tokenizer.tokenize(["😀"])[0][-4:] == ["<0xF0>", "<0x9F>", "<0x98>", "<0x80>"]
    assert (
        tokenizer.processor.unk_id()
        not in tokenizer.processor.encode(ODD_TEXTS[6:10], out_type=int)[0]
    )


def test_a_literal_mark_is_kept_apart_from_spaces(tokenizer: SubwordTokenizer) -> None:
    with_mark, with_space = tokenizer.tokenize(["a▁b", "a b"])
    assert with_mark == [*with_space[:1], *LITERAL_MARK, *with_space[1:]]
    assert tokenizer.detokenize(with_mark) == "a▁b" and tokenizer.detokenize(with_space) == "a b"


def test_words_of_the_training_text_are_pieces_that_start_with_the_space_mark(
    tokenizer: SubwordTokenizer,
) -> None:
    assert tokenizer.tokenize(["Ein Mann"])[0] == ["▁Ein", "▁Mann"]


def test_pieces_lists_every_piece_but_the_special_tokens(tokenizer: SubwordTokenizer) -> None:
    pieces = tokenizer.pieces()
    assert len(pieces) == len(set(pieces)) == 396  # vocab_size less <s>, </s>, <blank> and <unk>
    assert not set(SPECIALS) & set(pieces)
    assert pieces[:3] == [
        "<0x00>",
        "<0x01>",
        "<0x02>",
    ]  # the byte pieces come right after the special tokens
    assert (
        len(shared_vocab(tokenizer)) == 400 and shared_vocab(tokenizer).itos[4:] == pieces
    )  # Vocab's ids are the model's


def test_training_is_deterministic(texts: list[str], tokenizer: SubwordTokenizer) -> None:
    assert SubwordTokenizer.train(texts, vocab_size=400).model == tokenizer.model
    assert train_bpe_model(texts, vocab_size=400) == tokenizer.model  # the serialized model
    assert SubwordTokenizer.train(texts[::-1], vocab_size=400).pieces() == tokenizer.pieces()
    assert SubwordTokenizer.train(texts, vocab_size=401).model != tokenizer.model


def test_vocab_size_bounds_are_those_the_error_states(texts: list[str]) -> None:
    with pytest.raises(
        ValueError,
        match=r"^vocab_size=100000 is too large for these texts: they support at most \d+$",
    ) as large:
        SubwordTokenizer.train(texts, vocab_size=100_000)
    most = int(re.search(r"at most (\d+)", str(large.value))[1])
    assert len(SubwordTokenizer.train(texts, vocab_size=most).pieces()) == most - len(SPECIALS)
    with pytest.raises(ValueError, match=f"vocab_size={most + 1} is too large"):
        SubwordTokenizer.train(texts, vocab_size=most + 1)

    with pytest.raises(
        ValueError, match=r"^vocab_size=10 is too small for these texts: .* need at least \d+$"
    ) as small:
        SubwordTokenizer.train(texts, vocab_size=10)
    least = int(re.search(r"at least (\d+)", str(small.value))[1])
    assert least == len(SPECIALS) + 256 + len(
        set("".join(texts).replace(" ", "▁")) | {"▁"}
    )  # specials, bytes, characters
    SubwordTokenizer.train(texts, vocab_size=least)
    with pytest.raises(ValueError, match=f"vocab_size={least - 1} is too small"):
        SubwordTokenizer.train(texts, vocab_size=least - 1)


@pytest.mark.parametrize("empty", [[], [""], ["", "\n"]])
def test_empty_input_is_refused(empty: list[str]) -> None:
    with pytest.raises(ValueError, match="no text to train a subword model on"):
        SubwordTokenizer.train(empty, vocab_size=300)


def test_one_text_instead_of_a_list_is_refused(
    texts: list[str], tokenizer: SubwordTokenizer
) -> None:
    with pytest.raises(TypeError, match="not one text"):
        tokenizer.tokenize("Ein Hund.")
    with pytest.raises(TypeError, match="not one text"):
        SubwordTokenizer.train(" ".join(texts), vocab_size=400)


def test_training_is_quiet(texts: list[str], capfd: pytest.CaptureFixture) -> None:
    SubwordTokenizer.train(texts, vocab_size=350)
    assert capfd.readouterr() == (
        "",
        "",
    )  # sentencepiece's C++ log would go straight to file descriptor 2


# =========================================================================== state_dict
def test_state_dict_loads_with_the_restricted_unpickler(
    tokenizer: SubwordTokenizer, tmp_path
) -> None:
    state = tokenizer.state_dict()
    assert state == {
        "type": "sentencepiece",
        "model": tokenizer.model,
        "sha256": hashlib.sha256(tokenizer.model).hexdigest(),
    }
    torch.save({"tokenizer": state}, tmp_path / "ckpt.pt")
    loaded = SubwordTokenizer.from_state_dict(
        torch.load(tmp_path / "ckpt.pt", weights_only=True)["tokenizer"]
    )
    assert loaded.model == tokenizer.model
    assert loaded.tokenize(ODD_TEXTS) == tokenizer.tokenize(ODD_TEXTS)


def test_a_damaged_or_foreign_state_is_refused_naming_its_source(
    tokenizer: SubwordTokenizer,
) -> None:
    state = tokenizer.state_dict()
    damaged = bytearray(state["model"])
    damaged[len(damaged) // 2] ^= 0x01
    with pytest.raises(
        ValueError, match="^runs/x/last.pt: its sentencepiece model does not match its SHA-256"
    ):
        SubwordTokenizer.from_state_dict({**state, "model": bytes(damaged)}, "runs/x/last.pt")
    with pytest.raises(ValueError, match="does not match its SHA-256"):
        SubwordTokenizer.from_state_dict({**state, "sha256": "0" * 64}, "runs/x/last.pt")
    with pytest.raises(ValueError, match="^the checkpoint has no sentencepiece model"):
        SubwordTokenizer.from_state_dict({k: v for k, v in state.items() if k != "model"})
    with pytest.raises(ValueError, match="^a.pt has a subword model of unknown type 'bpe-codes'"):
        SubwordTokenizer.from_state_dict({**state, "type": "bpe-codes"}, "a.pt")
    with pytest.raises(ValueError, match="unknown type 'list'"):
        SubwordTokenizer.from_state_dict([], "a.pt")
    with pytest.raises(
        ValueError, match=r"not a sentencepiece model \(damaged, or empty: 0 bytes\)"
    ):
        SubwordTokenizer(b"")
    garbage = b"not a sentencepiece model"
    with pytest.raises(
        ValueError, match=r"model: not a sentencepiece model \(damaged, or empty: 25 "
    ):
        SubwordTokenizer.from_state_dict(
            {
                "type": "sentencepiece",
                "model": garbage,
                "sha256": hashlib.sha256(garbage).hexdigest(),
            }
        )


# =========================================================================== shared_vocab
def test_shared_vocab_starts_with_the_specials_and_covers_every_piece(
    tokenizer: SubwordTokenizer,
) -> None:
    vocab = shared_vocab(tokenizer)
    assert tuple(vocab.itos[: len(SPECIALS)]) == SPECIALS
    assert vocab.itos[len(SPECIALS) :] == tokenizer.pieces()
    for pieces in tokenizer.tokenize(ODD_TEXTS):
        assert vocab.unk not in vocab.encode(pieces)
        assert tokenizer.detokenize(
            vocab.decode(vocab.encode_sentence(pieces))
        ) == tokenizer.detokenize(pieces)


def test_no_special_token_is_learned_as_a_piece() -> None:
    texts = ["<s> a <unk> b </s> <blank> <s><s></s>"] * 100 + [
        "a dog runs",
        "the cat <s> sleeps",
    ] * 50
    tokenizer = SubwordTokenizer.train(texts, vocab_size=300)
    assert not set(SPECIALS) & set(tokenizer.pieces())
    vocab = shared_vocab(tokenizer)
    ids = vocab.encode(tokenizer.tokenize(texts[:1])[0])
    assert not {vocab.bos, vocab.eos, vocab.pad, vocab.unk} & set(ids)
