"""Training throughput on the CPU: our step as the trainer runs it, with and without the fused loss
and the CPU's faster dropout mask and Adam, against the peer a user would write with
torch.nn.Transformer.

- ours: `train_epoch` with `Generator` + `LabelSmoothing` (closed form, no target distribution),
  the fused attention kernel (`F.scaled_dot_product_attention`), and the trainer's CPU defaults
  (Part 6): `pack_dropout`'s mask, one 64-bit random draw for two positions, and Adam's fused
  update (`fused=True`).
- ours, fused loss: the same with `FusedLabelSmoothing`: the loss and its gradients from the
  decoder's outputs, chunk by chunk, never the (tokens, V) float32 log-probabilities and their
  gradient at once.
- ours, fused loss, torch's mask: `nn.Dropout`'s Bernoulli draw per position (and SDPA's own
  dropout on the attention weights), Adam still fused.
- ours, fused loss, torch's mask and Adam: the step as it was before the CPU defaults: also
  `torch.optim.Adam`'s foreach update.
- nn.Transformer: `torch.nn.Transformer` with the same sizes +
  `F.cross_entropy(label_smoothing=0.1)` (common.py's `TorchTransformer`).
Same sizes, batches and optimizer settings (our variants share initial weights; the peer has its
own); rounds alternate. Prints the median target tokens per second of each, its share of the
machine's peak and its ratio to the peer, side by side.

Against the machine's limit: before timing, this machine's float32 matrix-multiply peak is measured
with the benchmark's thread count (common.py's `matmul_peak`: the best rate of `torch.mm` over
square matrices of 512 to 2048 and the shapes of the model's own products at this batch, each the
best of `--peak-repeats` timings). A setting's achieved FLOP/s is the FLOPs of a round over its
median round time. The FLOPs are counted from the model's sizes and the batches' padded shapes by
common.py's `FLOP_FORMULA`, printed once: 6 per weight of a matrix product and position it runs
over (2 forward, 4 backward), the encoder's weights over the source positions, the decoder's and
the output projection's over the target positions (the source attention's keys and values over
the source's), plus the attention scores and their weighted sums, 3 x 2 x 2 x length^2 x d_model
a sentence and layer; padded positions are counted, as the kernels compute them. Every setting
does the same products on the same batches, so the count is the same for each, and the ratios of
FLOP/s are those of tokens/s.

    python benchmarks/bench_training.py
    python benchmarks/bench_training.py --profile ours    # where one round's CPU time goes
    python benchmarks/bench_training.py --profile "ours, fused loss"
    python benchmarks/bench_training.py --profile "ours, fused loss, torch's mask and Adam"
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable

import torch
from common import (
    FLOP_FORMULA,
    PAD,
    compare,
    make_batches,
    matmul_peak,
    profile_round,
    torch_transformer_steps,
    training_flops,
)

from annotated_transformer.batching import Batch
from annotated_transformer.losses import LabelSmoothing, sequence_loss
from annotated_transformer.distributed import pack_dropout
from annotated_transformer.model import ModelConfig
from annotated_transformer.pipeline import EpochOptions, FusedLabelSmoothing, train_epoch
from annotated_transformer.training import Updates, noam_optimizer


def measure_peak(cfg: ModelConfig, vocab: int, batches: list[Batch], repeats: int) -> float:
    """Print and return this machine's float32 matmul peak in FLOP/s: square products, and the
    model's own at the first batch's target positions (B x T, as every batch here)."""
    d, d_ff = cfg.d_model, cfg.d_ff
    tokens = batches[0].tgt.numel()  # (B, T) positions
    model_shapes = [
        (tokens, d, d),  # attention projections
        (tokens, d, d_ff),  # feed-forward, in
        (tokens, d_ff, d),  # feed-forward, out
        (d_ff, tokens, d),  # a weight's gradient
        (tokens, d, vocab),  # output projection
    ]
    shapes = [(n, n, n) for n in (512, 1024, 2048)] + model_shapes
    peak, rates = matmul_peak(shapes, repeats)
    print(
        f"float32 matmul, {torch.get_num_threads()} threads (torch.mm, best of {repeats}), "
        "GFLOP/s of (m, k) x (k, n):"
    )
    for line in range(0, len(shapes), 4):
        print(
            "  "
            + "; ".join(f"{m}x{k}x{n} {rates[m, k, n] / 1e9:.1f}" for m, k, n in shapes[line:][:4])
        )
    print(f"this machine's matmul peak: {peak / 1e9:.1f} GFLOP/s")
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=32, help="sentences per batch")
    parser.add_argument("--max-len", type=int, default=30, help="longest sentence, in tokens")
    parser.add_argument("--steps", type=int, default=5, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per variant")
    parser.add_argument(
        "--profile", metavar="VARIANT", help="instead of timing, profile one round of this variant"
    )
    parser.add_argument(
        "--peak-repeats",
        type=int,
        default=5,
        help="timings of each matrix product shape for the matmul peak (the best is kept)",
    )
    args = parser.parse_args()

    cfg = ModelConfig(N=3, d_model=256, d_ff=1024, h=8)  # Multi30k-sized
    torch.manual_seed(0)
    initial = cfg.build(args.vocab, args.vocab)
    batches = [
        Batch(src, tgt, pad=PAD)
        for src, tgt in make_batches(args.steps, args.batch, args.max_len, args.vocab)
    ]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"N={cfg.N} d_model={cfg.d_model}, vocabulary {args.vocab}; "
        f"{args.steps} steps of {args.batch} sentences <= {args.max_len} tokens per round"
    )

    def trainer(
        fused_loss: bool, packed: bool = True, fused_adam: bool = True
    ) -> Callable[[], int]:
        "One round: a training step on every batch; returns the target tokens trained on."
        model = copy.deepcopy(initial)
        if packed:
            pack_dropout(model)
        if fused_loss:
            loss_fn = sequence_loss(FusedLabelSmoothing(model.generator, PAD, 0.1))
        else:
            loss_fn = sequence_loss(LabelSmoothing(args.vocab, PAD, 0.1), model.generator)
        optimizer, scheduler = noam_optimizer(model, cfg.d_model, warmup=4000, fused=fused_adam)

        def run() -> int:
            updates = Updates(optimizer, scheduler)
            train_epoch(batches, model, loss_fn, updates, options=EpochOptions(progress=False))
            return sum(b.ntokens for b in batches)

        return run

    variants = {
        "ours": lambda: trainer(fused_loss=False),
        "ours, fused loss": lambda: trainer(fused_loss=True),
        "ours, fused loss, torch's mask": lambda: trainer(fused_loss=True, packed=False),
        "ours, fused loss, torch's mask and Adam": lambda: trainer(
            fused_loss=True, packed=False, fused_adam=False
        ),
        "nn.Transformer": lambda: torch_transformer_steps(cfg, args.vocab, batches),
    }
    if args.profile:
        if args.profile not in variants:
            parser.error(f"--profile: choose one of {', '.join(map(repr, variants))}")
        profile_round(variants[args.profile](), torch.device("cpu"))
        return
    peak = measure_peak(cfg, args.vocab, batches, args.peak_repeats)
    flops = training_flops(cfg, args.vocab, batches)
    tokens = sum(b.ntokens for b in batches)
    print(FLOP_FORMULA)
    print(
        f"{flops / 1e9:.1f} GFLOP a round ({flops / args.steps / 1e9:.2f} a step), "
        f"{flops / tokens / 1e6:.1f} MFLOP per target token"
    )
    rates = compare(
        {name: make() for name, make in variants.items()}, args.rounds, "target tokens/s"
    )
    peer = rates["nn.Transformer"]
    print(f"{'':>40}  {'tokens/s':>9}  {'GFLOP/s':>8}  {'of peak':>7}  {'x peer':>6}")
    for name, rate in rates.items():
        achieved = rate * flops / tokens
        print(
            f"{name:>40}  {rate:9,.0f}  {achieved / 1e9:8.1f}  {achieved / peak:7.0%}  "
            f"{rate / peer:5.2f}x"
        )


if __name__ == "__main__":
    main()
