"""Training throughput and model-FLOPs utilization of the paper's base model on one GPU: float32, bfloat16, bfloat16 + compile.

The model is `ModelConfig.preset("base")` (N=6, d_model=512, d_ff=2048, h=8) with one shared vocabulary of
37,000 tokens and tied embeddings, as in §3.4 and §5.1. The batches are synthetic but shaped like WMT's:
sentence lengths drawn around 25 tokens with a long tail (up to 128), targets about as long as their sources,
cut by Part 2's `TokenBatchSampler` into batches of about `--max-tokens` padded tokens (25,000 by default,
the paper's batch); the timed steps are full batches (the one short batch at the end of the length order is
left out, as it is one in thousands on WMT). Each setting trains its own copy of the model with Part 2's
`run_epoch` (Adam with the Noam schedule, label smoothing 0.1), and they are timed in alternating rounds (see
common.py). One extra setting, bfloat16 with Adam updating tensor by tensor (`fused=False`), shows what the
fused Adam that `noam_optimizer` picks on GPUs saves.

Printed: target tokens per second, and MFU = 6 x parameters x target tokens per second / the GPU's peak
bfloat16 rate (`distributed.bf16_peak_tflops`, or `--peak-tflops`). The same peak divides every
setting, float32 included, so the float32 figure says how much of the bfloat16 hardware it leaves unused.

    python benchmarks/bench_gpu_training.py
    python benchmarks/bench_gpu_training.py --profile   # where bfloat16's step spends its GPU time
    python benchmarks/bench_gpu_training.py --device cpu --preset tiny --vocab 1000 --max-tokens 2000 --peak-tflops 1 --rounds 1
"""

from __future__ import annotations

import argparse
import copy
import random
from dataclasses import replace

import torch
from torch.profiler import ProfilerActivity, profile

from annotated_transformer.distributed import PRECISIONS, bf16_peak_tflops, model_flops_utilization, wrap_for_training
from annotated_transformer.model import ModelConfig, count_parameters
from annotated_transformer.training import Batch, LabelSmoothing, TokenBatchSampler, noam_optimizer, run_epoch
from common import PAD, compare


def wmt_like_batches(n_sentences: int, max_tokens: int, vocab: int, seed: int = 0) -> list[Batch]:
    "Length-bucketed batches of random ids with WMT-like sentence lengths (a log-normal around 25 tokens)."
    rng = random.Random(seed)
    src_len = [min(128, max(3, round(rng.lognormvariate(3.2, 0.5)))) for _ in range(n_sentences)]
    tgt_len = [min(128, max(3, round(s * rng.uniform(0.8, 1.25)))) for s in src_len]
    g = torch.Generator().manual_seed(seed)

    def padded(lengths: list[int]) -> torch.Tensor:
        ids = torch.randint(1, vocab, (len(lengths), max(lengths)), generator=g)
        return ids.masked_fill(torch.arange(ids.size(1)) >= torch.tensor(lengths).unsqueeze(1), PAD)  # (B, L)

    sampler = TokenBatchSampler([max(s, t) for s, t in zip(src_len, tgt_len)], max_tokens, seed=seed)
    return [Batch(padded([src_len[i] for i in rows]), padded([tgt_len[i] for i in rows]), pad=PAD) for rows in sampler]


def profile_round(run, device: torch.device) -> None:
    "Print the operations of one round (after a warm-up round) that take the most time on `device`."
    run()
    on_gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        run()
    key = "self_cuda_time_total" if on_gpu else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=30, max_name_column_width=60))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--preset", default="base", help="model preset (base, big, tiny)")
    parser.add_argument("--vocab", type=int, default=37000, help="shared vocabulary size (§5.1: about 37,000)")
    parser.add_argument("--max-tokens", type=int, default=25000, help="padded tokens per batch (§5.1: about 25,000)")
    parser.add_argument("--steps", type=int, default=10, help="training steps per timed round")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per setting")
    parser.add_argument("--profile", action="store_true", help="instead of timing, profile one round of bf16 and print the operations by GPU time")
    parser.add_argument("--peak-tflops", type=float, help="the device's peak bfloat16 TFLOP/s (default: looked up by GPU name)")
    args = parser.parse_args()

    device = torch.device(args.device)
    peak = args.peak_tflops or bf16_peak_tflops(torch.cuda.get_device_name(device))
    torch.manual_seed(0)
    base = replace(ModelConfig.preset(args.preset), share_embeddings=True).build(args.vocab, args.vocab).to(device)
    n_params = count_parameters(base)
    batches = wmt_like_batches(4 * args.steps * args.max_tokens // 25, args.max_tokens, args.vocab)  # about 4 batches per timed step
    full = [b for b in batches if b.src.size(0) * max(b.src.size(1), b.tgt.size(1) + 1) >= 0.9 * args.max_tokens]
    steps = [b.to(device) for b in full[: args.steps]]
    tokens_per_round = sum(b.ntokens for b in steps)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    print(f"{args.preset} model, {n_params / 1e6:.1f}M parameters, on {name} (peak {peak:g} bf16 TFLOP/s); "
          f"{args.steps} steps of {tokens_per_round / args.steps:,.0f} target tokens a round")

    def setting(precision: str, compile: bool, fused_adam: bool | None = None):
        model = copy.deepcopy(base)
        optimizer, scheduler = noam_optimizer(model, model.src_embed[0].d_model, 1.0, 4000, fused=fused_adam)
        trained = wrap_for_training(model, device, world=1, compile=compile)  # as train wraps it, alone
        criterion = LabelSmoothing(args.vocab, PAD, 0.1)

        def run() -> int:
            run_epoch(steps, trained, criterion, optimizer, scheduler, max_grad_norm=1.0, progress=False,
                      autocast_dtype=PRECISIONS[precision])
            return tokens_per_round  # run_epoch reads every loss with .item(): the GPU has finished when it returns

        return run

    if args.profile:
        profile_round(setting("bf16", False), device)
        return
    rates = compare({"fp32": setting("fp32", False), "bf16, Adam tensor by tensor": setting("bf16", False, fused_adam=False),
                     "bf16": setting("bf16", False), "bf16 + torch.compile": setting("bf16", True)},
                    args.rounds, "target tokens/s")
    for label, rate in rates.items():
        print(f"{label:>32}: MFU {model_flops_utilization(n_params, rate, peak):6.1%}")


if __name__ == "__main__":
    main()
