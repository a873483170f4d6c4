"""Learning and encoding speed of Part 4.1's teaching byte-pair encoding against sentencepiece, on
Multi30k.

Both get the same data and the same number of merges: the first `--pairs` Multi30k training pairs,
German and English together, words split at whitespace as the raw files have them. The teaching
`learn_bpe` counts every pair afresh after each merge, which would take tens of minutes on the whole
corpus (58,000 sentences, 8,000 merges), so both learn from that subset. Sentencepiece's
`vocab_size` is set so that its model holds exactly `--merges` merged pieces besides its characters,
its 256 byte pieces and the four special tokens (checked). subword-nmt, the reference implementation
(it updates only the pair counts a merge changes), is timed beside them.

Encoding: every sentence of the subset, its words segmented one by one with `apply_bpe` (no cache),
against `SubwordTokenizer.tokenize` on the raw sentences and subword-nmt's `BPE.segment` (which
caches each word within a run; a fresh `BPE` every run). Rounds alternate; the medians and their
ratios are printed.

    python benchmarks/bench_subwords.py    # Multi30k from $MULTI30K_DIR, else the download cache
"""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Callable

from common import compare
from subword_nmt.apply_bpe import BPE
from subword_nmt.learn_bpe import learn_bpe as reference_learn_bpe

from annotated_transformer.data import SPECIALS, load_multi30k
from annotated_transformer.subwords import (
    SPACE_MARK,
    SubwordTokenizer,
    apply_bpe,
    learn_bpe,
    merge_ranks,
    word_counts,
)


def subword_nmt_codes(texts: list[str], merges: int) -> str:
    "subword-nmt's codes file for `texts`, learned in memory (its progress bar silenced)."
    codes = io.StringIO()
    with contextlib.redirect_stderr(io.StringIO()):
        reference_learn_bpe(io.StringIO("\n".join(texts)), codes, merges, min_frequency=2)
    return codes.getvalue()


def sentencepiece_with_merges(texts: list[str], merges: int) -> Callable[[], SubwordTokenizer]:
    """A trainer of the sentencepiece model with exactly `merges` merged pieces:
    vocab_size = merges + characters + 256 + 4."""
    # ▁ is a character to sentencepiece
    characters = set("".join(texts).replace(" ", SPACE_MARK)) | {SPACE_MARK}
    # + byte pieces + <s>, </s>, <blank>, <unk>
    vocab_size = merges + len(characters) + 256 + len(SPECIALS)
    tokenizer = SubwordTokenizer.train(texts, vocab_size)
    p = tokenizer.processor
    merged = [
        i
        for i in range(p.get_piece_size())
        if not (p.is_byte(i) or p.is_unknown(i) or p.is_control(i)) and len(p.id_to_piece(i)) > 1
    ]
    if len(merged) != merges:
        raise SystemExit(
            f"sentencepiece's model has {len(merged)} merged pieces, not {merges}: "
            "the comparison would be unfair"
        )
    return lambda: SubwordTokenizer.train(texts, vocab_size)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--pairs", type=int, default=2000, help="Multi30k training pairs to learn from (both sides)"
    )
    parser.add_argument(
        "--merges", type=int, default=1000, help="merges each implementation learns"
    )
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per implementation")
    args = parser.parse_args()

    texts = [text for pair in load_multi30k("train")[: args.pairs] for text in pair]
    counts = word_counts(texts)
    print(
        f"{len(texts):,} sentences ({len(counts):,} distinct words), {args.merges:,} merges; "
        f"one thread of Python for the teaching version and subword-nmt"
    )

    train_sentencepiece = sentencepiece_with_merges(texts, args.merges)
    teaching_merges = learn_bpe(counts, args.merges)
    codes = subword_nmt_codes(texts, args.merges)
    if [tuple(line.split(" ")) for line in codes.splitlines()[1:]] != teaching_merges:
        raise SystemExit("the teaching version and subword-nmt learned different merges")

    def learn_sentencepiece() -> int:
        train_sentencepiece()
        return args.merges

    print("\n== learning (merges per second)")
    learned = compare(
        {
            "teaching learn_bpe": lambda: len(learn_bpe(counts, args.merges)),
            "subword-nmt learn_bpe": lambda: (
                len(subword_nmt_codes(texts, args.merges).splitlines()) - 1
            ),
            "sentencepiece": learn_sentencepiece,
        },
        args.rounds,
        "merges/s",
    )

    ranks, tokenizer = merge_ranks(teaching_merges), train_sentencepiece()

    def segment_subword_nmt() -> int:
        # a fresh one: its word cache must not carry over from the last round
        bpe = BPE(io.StringIO(codes))
        return len([bpe.segment(text) for text in texts])

    print("\n== encoding (sentences per second)")
    encoded = compare(
        {
            "teaching apply_bpe": lambda: len(
                [[apply_bpe(word, ranks) for word in text.split()] for text in texts]
            ),
            "subword-nmt BPE.segment": segment_subword_nmt,
            "sentencepiece": lambda: len(tokenizer.tokenize(texts)),
        },
        args.rounds,
        "sentences/s",
    )

    print("\n== summary")
    for what, rates, unit, work in (
        ("learning", learned, "s", args.merges),
        ("encoding", encoded, "s", len(texts)),
    ):
        teaching, reference, sentencepiece = rates.values()
        print(
            f"{what}: teaching {work / teaching:.3f} {unit}, "
            f"subword-nmt {work / reference:.3f} {unit}, "
            f"sentencepiece {work / sentencepiece:.3f} {unit}; "
            f"sentencepiece is {sentencepiece / teaching:,.0f}x the "
            f"teaching version and {sentencepiece / reference:,.0f}x subword-nmt"
        )


if __name__ == "__main__":
    main()
