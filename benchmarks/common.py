"""Shared pieces of the benchmarks: synthetic batches, side-by-side timing, the peer a user would
write with torch.nn.Transformer, and the yardstick of a training step: the FLOPs it does and the
machine's measured matrix-multiply peak."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.profiler import ProfilerActivity, profile

from annotated_transformer.batching import Batch
from annotated_transformer.model import ModelConfig, PositionalEncoding
from annotated_transformer.training import noam_optimizer

PAD = 0


def make_batches(
    n: int, batch: int, max_len: int, vocab: int, seed: int = 0
) -> list[tuple[Tensor, Tensor]]:
    """n pairs of (src, tgt) id batches (B, max_len), lengths uniform in [max_len/2, max_len],
    right-padded with PAD."""
    g = torch.Generator().manual_seed(seed)

    def padded() -> Tensor:
        lengths = torch.randint(max_len // 2, max_len + 1, (batch,), generator=g)
        ids = torch.randint(1, vocab, (batch, max_len), generator=g)
        return ids.masked_fill(torch.arange(max_len) >= lengths.unsqueeze(1), PAD)  # (B, L)

    return [(padded(), padded()) for _ in range(n)]


def compare(runs: dict[str, Callable[[], int]], rounds: int, label: str) -> dict[str, float]:
    """Time each run (a callable returning the tokens it processed) `rounds` times, alternating the
    order every round so that neither always goes first; print and return the median tokens per
    second."""
    for run in runs.values():  # warm-up: allocator, kernels, optimizer state
        run()
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(rounds):
        for name in list(runs) if r % 2 == 0 else list(reversed(runs)):
            start = time.perf_counter()
            tokens = runs[name]()
            rates[name].append(tokens / (time.perf_counter() - start))
        print(
            f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {v[-1]:,.0f}" for n, v in rates.items()),
            flush=True,
        )
    medians = {name: statistics.median(v) for name, v in rates.items()}
    for name, rate in medians.items():
        print(f"{name:>32}: {rate:10,.0f} {label} (median of {rounds} rounds)")
    return medians


class TorchTransformer(nn.Module):
    """The paper's model as a user would assemble it from PyTorch's own modules: `nn.Transformer`
    with the same sizes, one embedding table per language (or one shared, tied to the output layer)
    scaled by sqrt(d_model), and our sinusoidal `PositionalEncoding`. PyTorch's masks are the
    opposite of ours: True means "masked out"."""

    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int, tied: bool = False):
        super().__init__()
        self.d_model = cfg.d_model
        self.src_embed = nn.Embedding(src_vocab, cfg.d_model)
        self.tgt_embed = self.src_embed if tied else nn.Embedding(tgt_vocab, cfg.d_model)
        self.pos = PositionalEncoding(cfg.d_model, cfg.dropout, cfg.max_len)
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
        self.out = nn.Linear(cfg.d_model, tgt_vocab)
        if tied:
            self.out.weight = self.src_embed.weight

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        "Logits (B, T, V) for source ids (B, S) and shifted target ids (B, T)."
        causal = nn.Transformer.generate_square_subsequent_mask(
            tgt.size(1), device=tgt.device, dtype=torch.bool
        )  # True above the diagonal
        h = self.transformer(
            self.pos(self.src_embed(src) * self.d_model**0.5),
            self.pos(self.tgt_embed(tgt) * self.d_model**0.5),
            tgt_mask=causal,
            tgt_is_causal=True,  # said, so that PyTorch need not check the mask (a host sync)
            src_key_padding_mask=src == PAD,
            tgt_key_padding_mask=tgt == PAD,
            memory_key_padding_mask=src == PAD,
        )  # (B, T, D)
        return self.out(h)


def torch_transformer_steps(
    cfg: ModelConfig,
    vocab: int,
    batches: list[Batch],
    tied: bool = False,
    max_grad_norm: float | None = None,
    autocast_dtype: torch.dtype | None = None,
    compile: bool = False,
) -> Callable[[], int]:
    """A round of training steps of the peer, one per batch: F.cross_entropy with
    label_smoothing=0.1 (PyTorch's convention spreads the smoothing over all V classes, padding
    included; ours over V - 2), the same Adam and schedule, no host synchronisation. Returns a
    callable that runs the round and returns its target tokens."""
    device = batches[0].src.device
    model = TorchTransformer(cfg, vocab, vocab, tied).to(device)
    optimizer, scheduler = noam_optimizer(model, cfg.d_model, 1.0, 4000)
    forward = torch.compile(model) if compile else model

    def run() -> int:
        model.train()
        for b in batches:
            with torch.autocast(
                device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None
            ):
                logits = forward(b.src, b.tgt)  # (B, T, V)
                loss = F.cross_entropy(
                    logits.flatten(0, 1),
                    b.tgt_y.flatten(),
                    ignore_index=PAD,
                    label_smoothing=0.1,
                    reduction="sum",
                )
            (loss / b.ntokens).backward()
            if max_grad_norm is not None:
                nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        loss.item()  # wait for the device, as train_epoch does at its last batch
        return sum(b.ntokens for b in batches)

    return run


FLOP_FORMULA = """\
FLOPs of a training step, counted from the sizes (matrix products only, 2 per multiply-add):
  forward = 2 B x [ S N (2 d dqk + 2 d^2 + 2 d d_ff)      encoder: attention, feed-forward
                  + T N (2 d dqk + 2 d^2 + 2 d d_ff)      decoder self-attention, feed-forward
                  + T N (d dqk + d^2) + S N (d dqk + d^2)  source attention: q, o | k, v
                  + T d V ]                                output projection
          + 2 B N (S^2 + T^2 + T S) (dqk + d)              attention: q k^T, weights x v
  step = 3 x forward (backward: 2 products for each product of the forward pass)
B sentences, S and T their padded source and decoder-input lengths (padding counted, as the
kernels compute it; the causal mask's hidden half too), d = d_model, dqk = h d_k (= d unless d_k
is set), V the output vocabulary; embeddings, norms, softmax and Adam not counted."""


def forward_flops(cfg: ModelConfig, vocab: int, batch: int, src_len: int, tgt_len: int) -> int:
    """FLOPs of the matrix products of one forward pass (`FLOP_FORMULA`) over `batch` sentences
    padded to `src_len` source and `tgt_len` target positions (the decoder's input), output
    vocabulary `vocab`."""
    d, d_ff, N = cfg.d_model, cfg.d_ff, cfg.N
    dqk = cfg.h * cfg.d_k if cfg.d_k is not None else d
    S, T = batch * src_len, batch * tgt_len  # the positions the encoder and the decoder run over
    attention = 2 * dqk * d + 2 * d * d  # q, k: d x dqk; v, o: d x d, per position
    ffn = 2 * d * d_ff
    weights = S * N * (attention + ffn)  # encoder
    weights += T * N * (attention + ffn)  # decoder: self-attention and feed-forward
    weights += T * N * (dqk * d + d * d) + S * N * (dqk * d + d * d)  # source attention
    weights += T * d * vocab  # output projection
    lengths = src_len**2 + tgt_len**2 + tgt_len * src_len  # encoder, decoder, source attention
    scores = 2 * batch * N * lengths * (dqk + d)  # q k^T and the weighted sum of v
    return 2 * weights + scores


def training_flops(cfg: ModelConfig, vocab: int, batches: list[Batch]) -> int:
    "FLOPs of a training step on every batch of `batches`: 3 x `forward_flops` of each."
    return sum(
        3 * forward_flops(cfg, vocab, b.src.size(0), b.src.size(1), b.tgt.size(1)) for b in batches
    )


def matmul_rate(m: int, k: int, n: int, repeats: int = 5, seconds: float = 0.05) -> float:
    """The best rate, in FLOP/s, of `torch.mm` of float32 (m, k) x (k, n) matrices on the CPU with
    PyTorch's current thread count: `repeats` timings of as many products as take about `seconds`,
    after a warm-up."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    out = torch.empty(m, n)
    torch.mm(a, b, out=out)  # warm-up
    start = time.perf_counter()
    torch.mm(a, b, out=out)  # a first guess at the time of one
    calls = max(1, round(seconds / max(time.perf_counter() - start, 1e-7)))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            torch.mm(a, b, out=out)
        best = min(best, (time.perf_counter() - start) / calls)
    return 2 * m * k * n / best


def matmul_peak(
    shapes: list[tuple[int, int, int]], repeats: int = 5
) -> tuple[float, dict[tuple[int, int, int], float]]:
    """This machine's matrix-multiply peak in FLOP/s: the best of `matmul_rate` over `shapes`
    ((m, k, n) each); also the rate of each shape."""
    rates = {shape: matmul_rate(*shape, repeats=repeats) for shape in shapes}
    return max(rates.values()), rates


def profile_round(run, device: torch.device) -> None:
    "Print the operations of one round (after a warm-up round) that take the most time on `device`."
    run()
    on_gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        run()
    key = "self_cuda_time_total" if on_gpu else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=30, max_name_column_width=60))
