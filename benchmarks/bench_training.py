"""Training throughput on the CPU: our step, with and without the fused loss, against the earlier
notebook's step and against the peer a user would write with torch.nn.Transformer.

- ours: `train_epoch` with `Generator` + `LabelSmoothing` (closed form, no target distribution)
  and the fused attention kernel (`F.scaled_dot_product_attention`); losses read back every 50
  batches.
- ours, loss read every batch: the same, but the losses read back after every batch
  (`read_every=1`), as the loop did before; on a CPU there is no queue of work to wait for, so this
  should cost nothing here.
- ours, fused loss: the same with `FusedLabelSmoothing`: the loss and its gradients from the
  decoder's outputs, chunk by chunk, never the (tokens, V) float32 log-probabilities and their
  gradient at once.
- straightforward: the earlier notebook's step: the KL divergence to a materialized smoothed
  distribution (`smoothed_targets`) and every attention layer on the readable path (`attention()`,
  weights materialized).
- nn.Transformer: `torch.nn.Transformer` with the same sizes +
  `F.cross_entropy(label_smoothing=0.1)` (common.py's `TorchTransformer`).
Same sizes, batches and optimizer settings (ours and the straightforward step share initial weights;
the peer has its own); rounds alternate. Prints the median target tokens per second of each and the
ratios.

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
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
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
from torch import Tensor, nn

from annotated_transformer.batching import Batch
from annotated_transformer.losses import LabelSmoothing, LossFn, sequence_loss, smoothed_targets
from annotated_transformer.model import ModelConfig, MultiHeadedAttention
from annotated_transformer.pipeline import EpochOptions, FusedLabelSmoothing, train_epoch
from annotated_transformer.training import Updates, noam_optimizer


class MaterializedLabelSmoothing(nn.Module):
    "The straightforward loss: build the smoothed target distribution, then KL divergence to it."

    def __init__(self, size: int, padding_idx: int, smoothing: float):
        super().__init__()
        self.size, self.padding_idx, self.smoothing = size, padding_idx, smoothing

    def forward(self, x: Tensor, target: Tensor) -> Tensor:
        q = smoothed_targets(target, self.size, self.padding_idx, self.smoothing)  # (N, V)
        q = q.to(x.device)
        return F.kl_div(x, q, reduction="sum")


def use_readable_attention(model: nn.Module) -> None:
    "Route every attention layer of `model` through the readable `attention()` path."
    for module in model.modules():
        if isinstance(module, MultiHeadedAttention):
            module.forward = partial(MultiHeadedAttention.forward, module, need_weights=True)


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
    ours = cfg.build(args.vocab, args.vocab)
    every, fused, plain = copy.deepcopy(ours), copy.deepcopy(ours), copy.deepcopy(ours)
    use_readable_attention(plain)
    batches = [
        Batch(src, tgt, pad=PAD)
        for src, tgt in make_batches(args.steps, args.batch, args.max_len, args.vocab)
    ]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"N={cfg.N} d_model={cfg.d_model}, vocabulary {args.vocab}; "
        f"{args.steps} steps of {args.batch} sentences <= {args.max_len} tokens per round"
    )

    def trainer(model: nn.Module, loss_fn: LossFn, read_every: int = 50) -> Callable[[], int]:
        "One round: a training step on every batch; returns the target tokens trained on."
        optimizer, scheduler = noam_optimizer(model, cfg.d_model, warmup=4000)

        def run() -> int:
            updates = Updates(optimizer, scheduler)
            options = EpochOptions(progress=False, read_every=read_every)
            train_epoch(batches, model, loss_fn, updates, options=options)
            return sum(b.ntokens for b in batches)

        return run

    def readable(model: nn.Module, criterion: nn.Module) -> LossFn:
        "The loss of `criterion` on `model`'s log-probabilities."
        return sequence_loss(criterion, model.generator)

    variants = {
        "ours": lambda: trainer(ours, readable(ours, LabelSmoothing(args.vocab, PAD, 0.1))),
        "ours, loss read every batch": lambda: trainer(
            every, readable(every, LabelSmoothing(args.vocab, PAD, 0.1)), read_every=1
        ),
        "ours, fused loss": lambda: trainer(
            fused, sequence_loss(FusedLabelSmoothing(fused.generator, PAD, 0.1))
        ),
        "straightforward": lambda: trainer(
            plain, readable(plain, MaterializedLabelSmoothing(args.vocab, PAD, 0.1))
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
    for name, rate in rates.items():
        achieved = rate * flops / tokens
        print(f"{name:>32}: {achieved / 1e9:7.1f} GFLOP/s, {achieved / peak:4.0%} of peak")
    every_batch = rates["ours"] / rates["ours, loss read every batch"]
    print(
        f"ours / ours, loss read every batch: {every_batch:.2f}x; "
        f"ours, fused loss / ours: {rates['ours, fused loss'] / rates['ours']:.2f}x"
    )
    for name in ("ours", "ours, fused loss"):
        print(
            f"{name} / straightforward: {rates[name] / rates['straightforward']:.2f}x; "
            f"{name} / nn.Transformer: {rates[name] / rates['nn.Transformer']:.2f}x"
        )


if __name__ == "__main__":
    main()
