"""Decoding speed on the CPU: the earlier notebook's way against the cached, batched searches of
the fast decoding chapter (nbs/17_fast_decoding.ipynb).

Four ways to translate the same German sentences (test2016 by default), one after the other in one
run:

(a)  one sentence at a time, re-running the decoder over the whole prefix at every step up to the
     length limit, as the earlier notebook's `greedy_decode` does (the decoding chapter's readable
     `greedy_decode` without an end symbol);
(a') the same, but stopping at the end symbol (`greedy_decode` with one): a stronger
     baseline, reported beside (a);
(b)  batched greedy search with the key/value cache (`greedy_search`);
(c)  batched beam search, beam 4, alpha 0.6, with the cache (`beam_search`).

Sentences are sorted by length and decoded in batches of `--batch`, each with its own limit of
input length + 50 tokens (§6.1). With `--checkpoint` the trained model decodes; without one a
random-weight model of the Multi30k size does (it rarely produces the end symbol, so every output
runs to its limit: a worst case). The script prints sentences per second and the ratios the
decoding chapter asks for: (b) at least 20x faster than (a), (c) at most 4x the time of (b); and
(b) against (a').

    python benchmarks/bench_decoding.py --checkpoint runs/multi30k/last.pt
    python benchmarks/bench_decoding.py --limit 200          # random weights, 200 sentences
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from annotated_transformer.checkpoint import load_checkpoint
from annotated_transformer.config import TrainConfig
from annotated_transformer.data import Vocab, load_multi30k, load_tokenizers
from annotated_transformer.decoding import greedy_decode
from annotated_transformer.fast_decoding import beam_search, greedy_search


def load_model(args: argparse.Namespace):
    """The checkpoint's model and vocabularies, or a random Multi30k-sized model with vocabularies
    from the data."""
    if args.checkpoint:
        ckpt = load_checkpoint(args.checkpoint)
        return ckpt.build_model(), ckpt.src_vocab, ckpt.tgt_vocab
    tok_de, tok_en = load_tokenizers()
    train = load_multi30k("train", args.data_dir)
    src_vocab = Vocab.build(tok_de.tokenize([de for de, _ in train]))
    tgt_vocab = Vocab.build(tok_en.tokenize([en for _, en in train]))
    torch.manual_seed(0)
    return TrainConfig().model.build(len(src_vocab), len(tgt_vocab)).eval(), src_vocab, tgt_vocab


def batches(ids: list[torch.Tensor], size: int, pad: int):
    "Sentences sorted by length, in padded batches (B, S) with their masks (B, 1, S) and limits."
    ids = sorted(ids, key=len)
    for start in range(0, len(ids), size):
        chunk = ids[start : start + size]
        src = nn.utils.rnn.pad_sequence(chunk, batch_first=True, padding_value=pad)
        yield src, (src != pad).unsqueeze(-2), [len(i) + 50 for i in chunk]


def timed(label: str, run) -> tuple[float, list]:
    start = time.perf_counter()
    outputs = run()
    seconds = time.perf_counter() - start
    print(f"{label}: {seconds:8.1f} s", flush=True)
    return seconds, outputs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--checkpoint", help="a trained checkpoint (default: random weights, Multi30k sizes)"
    )
    p.add_argument("--data-dir", help="Multi30k folder (default: $MULTI30K_DIR, else download)")
    p.add_argument("--split", default="test2016")
    p.add_argument("--limit", type=int, help="only the first N sentences")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, src_vocab, tgt_vocab = load_model(args)
    sentences = [de for de, _ in load_multi30k(args.split, args.data_dir)][: args.limit]
    tok_de = load_tokenizers()[0]
    ids = [torch.tensor(src_vocab.encode_sentence(t)) for t in tok_de.tokenize(sentences)]
    bos, eos, pad = tgt_vocab.bos, tgt_vocab.eos, tgt_vocab.pad
    n = len(ids)
    weights = "checkpoint " + args.checkpoint if args.checkpoint else "random weights"
    print(
        f"{n} sentences of {args.split}; {weights}; "
        f"{torch.get_num_threads()} threads; batches of {args.batch}"
    )

    def one_at_a_time(end_symbol: int | None):
        out = []
        for i in sorted(ids, key=len):
            src = i.unsqueeze(0)
            ys = greedy_decode(
                model, src, (src != pad).unsqueeze(-2), len(i) + 50, bos, end_symbol
            )[0, 1:].tolist()
            out.append(ys[: ys.index(eos) + 1] if eos in ys else ys)
        return out

    def greedy_batched():
        return [
            t
            for src, mask, limits in batches(ids, args.batch, pad)
            for t, _ in greedy_search(model, src, mask, limits, bos, eos)
        ]

    def beam_batched():
        return [
            hyps[0].tokens
            for src, mask, limits in batches(ids, args.batch, pad)
            for hyps in beam_search(model, src, mask, limits, bos, eos, 4, 0.6)
        ]

    with torch.no_grad():
        greedy_batched()  # warm-up
        a, out_a = timed(
            "(a)  one at a time, whole prefix, to the limit ", lambda: one_at_a_time(None)
        )
        a2, out_a2 = timed(
            "(a') one at a time, whole prefix, stops at end ", lambda: one_at_a_time(eos)
        )
        b, out_b = timed("(b)  batched greedy, cached                    ", greedy_batched)
        c, out_c = timed("(c)  batched beam 4, cached                    ", beam_batched)
    for label, out in (("(a) ", out_a), ("(a')", out_a2)):
        same = sum(x == y for x, y in zip(out, out_b))
        print(
            f"{label} and (b) agree on {same}/{n} outputs "
            "(floating-point ties aside, they compute the same search)"
        )
    print(
        f"mean output length: greedy {sum(map(len, out_b)) / n:.1f} tokens, "
        f"beam {sum(map(len, out_c)) / n:.1f}"
    )
    for label, seconds in (("(a) ", a), ("(a')", a2), ("(b) ", b), ("(c) ", c)):
        print(f"{label} {n / seconds:10.1f} sentences/s")
    print(f"speed-up of (b) over (a):  {a / b:.1f}x (target: at least 20x)")
    print(f"speed-up of (b) over (a'): {a2 / b:.1f}x (the stronger baseline; no target)")
    print(f"time of (c) / time of (b): {c / b:.2f} (target: at most 4)")


if __name__ == "__main__":
    main()
