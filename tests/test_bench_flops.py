"""The yardstick of benchmarks/bench_training.py: the FLOPs of a training step counted from the
model's sizes (common.py's `FLOP_FORMULA`) against a count by hand and against PyTorch's own count
of a real step, ours and the nn.Transformer peer's; and the measured matmul peak."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from annotated_transformer.batching import Batch
from annotated_transformer.model import ModelConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from common import (  # noqa: E402
    PAD,
    TorchTransformer,
    forward_flops,
    matmul_peak,
    matmul_rate,
    training_flops,
)


def test_forward_flops_match_a_count_by_hand() -> None:
    # N=1, d_model=4, d_ff=8, h=2, vocabulary 10; one sentence: 2 source, 3 decoder positions
    cfg = ModelConfig(N=1, d_model=4, d_ff=8, h=2)
    d, d_ff, V, S, T = 4, 8, 10, 2, 3
    products = {  # (m, k, n) of every matrix product of the forward pass
        "encoder: q, k, v, o": [(S, d, d)] * 4,
        "encoder: q k^T, weights x v": [(S, d, S), (S, S, d)],
        "encoder: feed-forward": [(S, d, d_ff), (S, d_ff, d)],
        "decoder self-attention: q, k, v, o": [(T, d, d)] * 4,
        "decoder self-attention: q k^T, weights x v": [(T, d, T), (T, T, d)],
        "source attention: q, o; k, v on the memory": [(T, d, d)] * 2 + [(S, d, d)] * 2,
        "source attention: q k^T, weights x v": [(T, d, S), (T, S, d)],
        "decoder: feed-forward": [(T, d, d_ff), (T, d_ff, d)],
        "output projection": [(T, d, V)],
    }
    by_hand = sum(2 * m * k * n for group in products.values() for m, k, n in group)
    assert by_hand == 2144
    assert forward_flops(cfg, V, 1, S, T) == by_hand
    batch = Batch(torch.tensor([[3, 4]]), torch.tensor([[1, 5, 6, 7]]), pad=PAD)
    assert training_flops(cfg, V, [batch, batch]) == 2 * 3 * by_hand


def padded_batch(vocab: int) -> Batch:
    "Three sentences, padded: sources of 5, 7, 3 tokens (S = 7); targets of 4, 6, 10 (T = 9)."
    g = torch.Generator().manual_seed(0)

    def ids(lengths: list[int]) -> torch.Tensor:
        x = torch.randint(2, vocab, (len(lengths), max(lengths)), generator=g)
        return x.masked_fill(torch.arange(x.size(1)) >= torch.tensor(lengths)[:, None], PAD)

    return Batch(ids([5, 7, 3]), ids([4, 6, 10]), pad=PAD)


def counted(step) -> int:
    "FLOPs PyTorch counts in `step()` (attention on its plain path, so that its products count)."
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()


@pytest.mark.parametrize("d_k", [None, 6])
def test_the_formula_is_what_a_training_step_computes(d_k: int | None) -> None:
    cfg = ModelConfig(N=2, d_model=16, d_ff=40, h=4, d_k=d_k)
    vocab, batch = 23, padded_batch(23)
    torch.manual_seed(0)
    model = cfg.build(vocab, vocab)

    def ours() -> None:
        out = model.generator(model(batch.src, batch.tgt, batch.src_mask, batch.tgt_mask))
        out.sum().backward()

    assert counted(ours) == training_flops(cfg, vocab, [batch])
    if d_k is None:  # the peer has no d_k: same sizes, the same count

        def peer() -> None:
            logits = TorchTransformer(cfg, vocab, vocab)(batch.src, batch.tgt)
            F.cross_entropy(logits.flatten(0, 1), batch.tgt_y.flatten()).backward()

        assert counted(peer) == training_flops(cfg, vocab, [batch])


def test_matmul_peak_is_the_best_measured_rate() -> None:
    rate = matmul_rate(16, 32, 8, repeats=2, seconds=0.001)
    assert math.isfinite(rate) and rate > 1e6  # even a slow machine does a MFLOP/s
    shapes = [(8, 8, 8), (32, 16, 24)]
    peak, rates = matmul_peak(shapes, repeats=2)
    assert set(rates) == set(shapes) and all(r > 0 for r in rates.values())
    assert peak == max(rates.values())
