"""Shared pieces of the benchmarks: synthetic batches and side-by-side timing."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch import Tensor

PAD = 0


def make_batches(n: int, batch: int, max_len: int, vocab: int, seed: int = 0) -> list[tuple[Tensor, Tensor]]:
    "n pairs of (src, tgt) id batches (B, max_len), lengths uniform in [max_len/2, max_len], right-padded with PAD."
    g = torch.Generator().manual_seed(seed)

    def padded() -> Tensor:
        lengths = torch.randint(max_len // 2, max_len + 1, (batch,), generator=g)
        ids = torch.randint(1, vocab, (batch, max_len), generator=g)
        return ids.masked_fill(torch.arange(max_len) >= lengths.unsqueeze(1), PAD)  # (B, L)

    return [(padded(), padded()) for _ in range(n)]


def compare(runs: dict[str, Callable[[], int]], rounds: int, label: str) -> dict[str, float]:
    """Time each run (a callable returning the tokens it processed) `rounds` times, alternating the
    order every round so that neither always goes first; print and return the median tokens per second."""
    for run in runs.values():  # warm-up: allocator, kernels, optimizer state
        run()
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(rounds):
        for name in list(runs) if r % 2 == 0 else list(reversed(runs)):
            start = time.perf_counter()
            tokens = runs[name]()
            rates[name].append(tokens / (time.perf_counter() - start))
        print(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {v[-1]:,.0f}" for n, v in rates.items()), flush=True)
    medians = {name: statistics.median(v) for name, v in rates.items()}
    for name, rate in medians.items():
        print(f"{name:>32}: {rate:10,.0f} {label} (median of {rounds} rounds)")
    return medians
