"""Training-step throughput of our model against `torch.nn.Transformer`, side by side, on the CPU.

Both models have the same sizes, embeddings, positional encoding and generator; only the encoder and
decoder stacks differ (ours vs PyTorch's). The final LayerNorm that `nn.Transformer` always adds to
each stack is removed in post-norm mode so both compute the same function. One step is forward,
NLL loss over non-padding targets, backward and an Adam update. Rounds alternate between the two
models, in alternating order, so machine noise hits both alike; the script prints the median target
tokens per second of each and their ratio.

    python benchmarks/bench_model.py                 # a Multi30k-sized model
    python benchmarks/bench_model.py --norm-first    # the same, pre-norm
    python benchmarks/bench_model.py --preset base   # the paper's base sizes (slower)
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch
import torch.nn.functional as F
from common import PAD, compare, make_batches
from torch import Tensor, nn

from annotated_transformer.config import PRESETS, preset
from annotated_transformer.model import (
    Embeddings,
    Generator,
    ModelConfig,
    PositionalEncoding,
    subsequent_mask,
)


class TorchTransformer(nn.Module):
    "Our embeddings and generator around `torch.nn.Transformer`, the reference for the benchmark."

    def __init__(self, src_vocab: int, tgt_vocab: int, cfg: ModelConfig):
        super().__init__()
        self.src_embed = nn.Sequential(
            Embeddings(cfg.d_model, src_vocab), PositionalEncoding(cfg.d_model, cfg.dropout)
        )
        self.tgt_embed = nn.Sequential(
            Embeddings(cfg.d_model, tgt_vocab), PositionalEncoding(cfg.d_model, cfg.dropout)
        )
        self.transformer = nn.Transformer(
            cfg.d_model,
            cfg.h,
            cfg.N,
            cfg.N,
            cfg.d_ff,
            cfg.dropout,
            batch_first=True,
            norm_first=cfg.norm_first,
        )
        if not cfg.norm_first:  # post-norm: the last layer already ends with a LayerNorm, as ours
            self.transformer.encoder.norm = self.transformer.decoder.norm = None
        self.generator = Generator(cfg.d_model, tgt_vocab)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        "Decoder output (B, T, D); masks built the PyTorch way (True = masked out)."
        causal = ~subsequent_mask(tgt.size(1))[0]  # (T, T)
        return self.transformer(
            self.src_embed(src),
            self.tgt_embed(tgt),
            tgt_mask=causal,
            src_key_padding_mask=src == PAD,
            tgt_key_padding_mask=tgt == PAD,
            memory_key_padding_mask=src == PAD,
            tgt_is_causal=True,
        )


def ours_forward(model: nn.Module, src: Tensor, tgt: Tensor) -> Tensor:
    "Decoder output (B, T, D) of our model, masks built our way (True = may attend)."
    src_mask = (src != PAD).unsqueeze(-2)  # (B, 1, S)
    tgt_mask = (tgt != PAD).unsqueeze(-2) & subsequent_mask(tgt.size(1))  # (B, T, T)
    return model(src, tgt, src_mask, tgt_mask)


def train_steps(model: nn.Module, forward, optimizer: torch.optim.Optimizer, batches) -> int:
    "One training step on each batch; returns the number of target tokens."
    tokens = 0
    for src, tgt in batches:
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
        logp = model.generator(forward(model, src, tgt_in))  # (B, T, V)
        n = int((tgt_out != PAD).sum())
        loss = (
            F.nll_loss(logp.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD, reduction="sum") / n
        )
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tokens += n
    return tokens


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="multi30k", choices=list(PRESETS), help="model sizes")
    parser.add_argument(
        "--norm-first", action="store_true", help="pre-norm instead of the paper's post-norm"
    )
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=32, help="sentences per batch")
    parser.add_argument("--max-len", type=int, default=30, help="longest sentence, in tokens")
    parser.add_argument("--steps", type=int, default=5, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per model")
    args = parser.parse_args()

    cfg = replace(preset(args.preset), norm_first=args.norm_first)
    torch.manual_seed(0)
    ours = cfg.build(args.vocab, args.vocab).train()
    theirs = TorchTransformer(args.vocab, args.vocab, cfg).train()
    n_ours, n_theirs = (sum(p.numel() for p in m.parameters()) for m in (ours, theirs))
    assert n_ours == n_theirs, (
        f"the two models must have the same size, got {n_ours} and {n_theirs}"
    )
    adam = lambda m: torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    opt_ours, opt_theirs = adam(ours), adam(theirs)
    batches = make_batches(args.steps, args.batch, args.max_len, args.vocab)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"N={cfg.N} d_model={cfg.d_model} d_ff={cfg.d_ff} "
        f"h={cfg.h} norm_first={cfg.norm_first}; {n_ours / 1e6:.1f}M parameters; "
        f"{args.steps} steps of {args.batch} sentences <= {args.max_len} tokens per round"
    )
    medians = compare(
        {
            "ours": lambda: train_steps(ours, ours_forward, opt_ours, batches),
            "torch.nn.Transformer": lambda: train_steps(
                theirs, lambda m, s, t: m(s, t), opt_theirs, batches
            ),
        },
        args.rounds,
        "target tokens/s",
    )
    ratio = medians["ours"] / medians["torch.nn.Transformer"]
    print(f"ratio ours / torch.nn.Transformer: {ratio:.2f}x")


if __name__ == "__main__":
    main()
