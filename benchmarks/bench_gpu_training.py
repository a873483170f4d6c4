"""Training throughput and model-FLOPs utilization of the paper's base model on one GPU: float32,
bfloat16, bfloat16 + compile, the fused loss, and the peer a user would write with
torch.nn.Transformer.

The model is `config.preset("base")` (N=6, d_model=512, d_ff=2048, h=8) with one shared vocabulary
of 37,000 tokens and tied embeddings, as in §3.4 and §5.1. The batches are synthetic but shaped like
WMT's: sentence lengths drawn around 25 tokens with a long tail (up to 128), targets about as long
as their sources, cut by `data.TokenBatchSampler` into batches of about `--max-tokens` padded
tokens (25,000 by default, the paper's batch); the timed steps are full batches (the one short batch
at the end of the length order is left out, as it is one in thousands on WMT). Each setting trains
its own copy of the model with `training.train_epoch` (Adam with the Noam schedule, label smoothing
0.1), and they are timed in alternating rounds (see common.py). One extra setting, bfloat16 with
Adam updating tensor by tensor (`fused=False`), shows what the fused Adam that the trainer
picks on GPUs saves; "fused loss" settings use `losses.FusedLabelSmoothing`. The peer is common.py's
`TorchTransformer`: `torch.nn.Transformer` with the same sizes and tied embeddings,
`F.cross_entropy(label_smoothing=0.1)`, the same fused Adam and schedule, gradients clipped the same
way; the ratio of our fastest setting to the peer's fastest is printed.

Printed: target tokens per second, and MFU = 6 x parameters x target tokens per second / the GPU's
peak bfloat16 rate (`distributed.bf16_peak_tflops`, or `--peak-tflops`). The same peak divides every
setting, float32 included, so the float32 figure says how much of the bfloat16 hardware it leaves
unused.

    python benchmarks/bench_gpu_training.py
    python benchmarks/bench_gpu_training.py --profile bf16    # where a step spends its GPU time
    python benchmarks/bench_gpu_training.py --profile "bf16, fused loss"
    python benchmarks/bench_gpu_training.py --device cpu --preset tiny --vocab 1000 \\
        --max-tokens 2000 --peak-tflops 1 --rounds 1 --skip-compile
"""

from __future__ import annotations

import argparse
import copy
import random
from dataclasses import replace

import torch
from common import PAD, compare, profile_round, torch_transformer_steps

from annotated_transformer.batching import Batch
from annotated_transformer.config import preset
from annotated_transformer.data import TokenBatchSampler
from annotated_transformer.distributed import (
    PRECISIONS,
    bf16_peak_tflops,
    model_flops_utilization,
    wrap_for_training,
)
from annotated_transformer.losses import LabelSmoothing, sequence_loss
from annotated_transformer.model import count_parameters
from annotated_transformer.pipeline import EpochOptions, FusedLabelSmoothing, train_epoch
from annotated_transformer.training import Updates, noam_optimizer


def wmt_like_batches(n_sentences: int, max_tokens: int, vocab: int, seed: int = 0) -> list[Batch]:
    """Length-bucketed batches of random ids with WMT-like sentence lengths (a log-normal around 25
    tokens)."""
    rng = random.Random(seed)
    src_len = [min(128, max(3, round(rng.lognormvariate(3.2, 0.5)))) for _ in range(n_sentences)]
    tgt_len = [min(128, max(3, round(s * rng.uniform(0.8, 1.25)))) for s in src_len]
    g = torch.Generator().manual_seed(seed)

    def padded(lengths: list[int]) -> torch.Tensor:
        ids = torch.randint(1, vocab, (len(lengths), max(lengths)), generator=g)
        return ids.masked_fill(
            torch.arange(ids.size(1)) >= torch.tensor(lengths).unsqueeze(1), PAD
        )  # (B, L)

    sampler = TokenBatchSampler(
        [max(s, t) for s, t in zip(src_len, tgt_len)], max_tokens, seed=seed
    )
    return [
        Batch(padded([src_len[i] for i in rows]), padded([tgt_len[i] for i in rows]), pad=PAD)
        for rows in sampler
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument(
        "--preset", default="base", help="model size, post-norm (base, big, multi30k, small, tiny)"
    )
    parser.add_argument(
        "--vocab", type=int, default=37000, help="shared vocabulary size (§5.1: about 37,000)"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=25000, help="padded tokens per batch (§5.1: about 25,000)"
    )
    parser.add_argument("--steps", type=int, default=10, help="training steps per timed round")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per setting")
    parser.add_argument(
        "--profile",
        metavar="SETTING",
        help="instead of timing, profile one round of this setting and print the operations by "
        "GPU time",
    )
    parser.add_argument(
        "--peak-tflops",
        type=float,
        help="the device's peak bfloat16 TFLOP/s (default: looked up by GPU name)",
    )
    parser.add_argument(
        "--skip-compile",
        action="store_true",
        help="leave out the compiled settings (tools/gpu_runs.sh --dry-run, on a CPU)",
    )
    args = parser.parse_args()

    device = torch.device(args.device)
    peak = args.peak_tflops or bf16_peak_tflops(torch.cuda.get_device_name(device))
    torch.manual_seed(0)
    base = (
        replace(preset(args.preset), share_embeddings=True).build(args.vocab, args.vocab).to(device)
    )
    n_params = count_parameters(base)
    # about 4 batches per timed step
    batches = wmt_like_batches(4 * args.steps * args.max_tokens // 25, args.max_tokens, args.vocab)
    full = [
        b
        for b in batches
        if b.src.size(0) * max(b.src.size(1), b.tgt.size(1) + 1) >= 0.9 * args.max_tokens
    ]
    steps = [b.to(device) for b in full[: args.steps]]
    tokens_per_round = sum(b.ntokens for b in steps)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    print(
        f"{args.preset} model, {n_params / 1e6:.1f}M parameters, on {name} "
        f"(peak {peak:g} bf16 TFLOP/s); "
        f"{args.steps} steps of {tokens_per_round / args.steps:,.0f} target tokens a round"
    )
    real = sum(int((b.src != PAD).sum()) + b.ntokens for b in steps)
    positions = sum(b.src.numel() + b.tgt_y.numel() for b in steps)
    print(
        f"padding: {1 - real / positions:.1%} of the {positions:,} source and target positions "
        "a round are padding"
    )

    def setting(
        precision: str, compile: bool, fused_adam: bool | None = None, fused_loss: bool = False
    ):
        model = copy.deepcopy(base)
        optimizer, scheduler = noam_optimizer(
            model, model.src_embed[0].d_model, 1.0, 4000, fused=fused_adam is not False
        )
        # as train wraps it, alone
        trained = wrap_for_training(model, device, world=1, compile=compile)
        loss_fn = (
            sequence_loss(FusedLabelSmoothing(model.generator, PAD, 0.1))
            if fused_loss
            else sequence_loss(LabelSmoothing(args.vocab, PAD, 0.1), model.generator)
        )

        def run() -> int:
            updates = Updates(optimizer, scheduler, max_grad_norm=1.0)
            options = EpochOptions(progress=False, autocast_dtype=PRECISIONS[precision])
            train_epoch(steps, trained, loss_fn, updates, options=options)
            # train_epoch reads the losses back after its last step:
            # the GPU has finished when it returns
            return tokens_per_round

        return run

    cfg = preset(args.preset)
    settings = {
        "fp32": lambda: setting("fp32", False),
        "bf16, Adam tensor by tensor": lambda: setting("bf16", False, fused_adam=False),
        "bf16": lambda: setting("bf16", False),
        "bf16, fused loss": lambda: setting("bf16", False, fused_loss=True),
        "bf16 + torch.compile": lambda: setting("bf16", True),
        "bf16 + compile, fused loss": lambda: setting("bf16", True, fused_loss=True),
        "nn.Transformer, bf16": lambda: torch_transformer_steps(
            cfg, args.vocab, steps, True, 1.0, torch.bfloat16
        ),
        "nn.Transformer, bf16 + compile": lambda: torch_transformer_steps(
            cfg, args.vocab, steps, True, 1.0, torch.bfloat16, compile=True
        ),
    }
    if args.skip_compile:
        settings = {label: make for label, make in settings.items() if "compile" not in label}
    if args.profile:
        if args.profile not in settings:
            parser.error(f"--profile: choose one of {', '.join(map(repr, settings))}")
        profile_round(settings[args.profile](), device)
        return
    rates = compare(
        {label: make() for label, make in settings.items()}, args.rounds, "target tokens/s"
    )
    for label, rate in rates.items():
        print(f"{label:>32}: MFU {model_flops_utilization(n_params, rate, peak):6.1%}")
    ours = max(
        (rate, label) for label, rate in rates.items() if not label.startswith("nn.Transformer")
    )
    peer = max((rate, label) for label, rate in rates.items() if label.startswith("nn.Transformer"))
    print(f"ours ({ours[1]}) / peer ({peer[1]}): {ours[0] / peer[0]:.2f}x")


if __name__ == "__main__":
    main()
