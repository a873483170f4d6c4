"""Training throughput of our training step against the same step written the straightforward way.

Ours: `run_epoch` with `LabelSmoothing` (closed form, no target distribution built) and the fused
attention kernel (`F.scaled_dot_product_attention`). Straightforward: the same `run_epoch`, but the loss
is the KL divergence to a materialized smoothed distribution (`smoothed_targets`, as the earlier
notebook computed it) and every attention layer takes the readable path (`attention()`, weights
materialized). Same model weights, batches and optimizer settings; rounds alternate. Prints the median
target tokens per second of each and the ratio.

    python benchmarks/bench_training.py
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.model import ModelConfig, MultiHeadedAttention
from annotated_transformer.training import Batch, LabelSmoothing, noam_optimizer, run_epoch, smoothed_targets
from common import PAD, compare, make_batches


class MaterializedLabelSmoothing(nn.Module):
    "The straightforward loss: build the smoothed target distribution, then KL divergence to it."

    def __init__(self, size: int, padding_idx: int, smoothing: float):
        super().__init__()
        self.size, self.padding_idx, self.smoothing = size, padding_idx, smoothing

    def forward(self, x: Tensor, target: Tensor) -> Tensor:
        q = smoothed_targets(target, self.size, self.padding_idx, self.smoothing).to(x.device)  # (N, V)
        return F.kl_div(x, q, reduction="sum")


def use_readable_attention(model: nn.Module) -> None:
    "Route every attention layer of `model` through the readable `attention()` path."
    for module in model.modules():
        if isinstance(module, MultiHeadedAttention):
            module.forward = partial(MultiHeadedAttention.forward, module, need_weights=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=32, help="sentences per batch")
    parser.add_argument("--max-len", type=int, default=30, help="longest sentence, in tokens")
    parser.add_argument("--steps", type=int, default=5, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per variant")
    args = parser.parse_args()

    cfg = ModelConfig(N=3, d_model=256, d_ff=1024, h=8)  # Multi30k-sized
    torch.manual_seed(0)
    ours = cfg.build(args.vocab, args.vocab)
    plain = copy.deepcopy(ours)
    use_readable_attention(plain)
    batches = [Batch(src, tgt, pad=PAD) for src, tgt in make_batches(args.steps, args.batch, args.max_len, args.vocab)]
    variants = {
        "ours (closed form, fused attention)": (ours, LabelSmoothing(args.vocab, PAD, 0.1)),
        "straightforward (KL, readable)": (plain, MaterializedLabelSmoothing(args.vocab, PAD, 0.1)),
    }
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; N={cfg.N} d_model={cfg.d_model}, vocabulary "
        f"{args.vocab}; {args.steps} steps of {args.batch} sentences <= {args.max_len} tokens per round"
    )

    def trainer(model: nn.Module, criterion: nn.Module) -> Callable[[], int]:
        "One round: a training step on every batch; returns the target tokens trained on."
        optimizer, scheduler = noam_optimizer(model, cfg.d_model, warmup=4000)

        def run() -> int:
            run_epoch(batches, model, criterion, optimizer, scheduler, progress=False)
            return sum(b.ntokens for b in batches)

        return run

    medians = compare({name: trainer(*pair) for name, pair in variants.items()}, args.rounds, "target tokens/s")
    ours_rate, plain_rate = medians.values()
    print(f"ratio ours / straightforward: {ours_rate / plain_rate:.2f}x")


if __name__ == "__main__":
    main()
