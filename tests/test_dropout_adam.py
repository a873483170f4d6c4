"""Tests for the CPU's faster training step (annotated_transformer.distributed, Part 6): the packed
dropout mask keeps the paper's distribution, and the fused Adam the results of torch.optim.Adam.

1. `keep_mask`: the keep rate is 1 - p; the two positions of one 64-bit draw, neighbours of two
   draws, and one position in two successive masks are kept together as independence predicts;
   any shape, odd sizes too. Each check allows five standard deviations, and the seed is fixed.
2. `PackedDropout` behaves as `nn.Dropout`: the scale, the gradient, p = 0, p = 1, evaluation, the
   input's dtype; `pack_dropout` changes every dropout layer of a model and nothing else, and the
   attention weights' dropout then uses the packed mask as well (not the fused kernel's own).
3. Adam: `fused=True` ends within float32 rounding of `torch.optim.Adam`'s foreach and single-tensor
   updates after 30 Noam-scheduled steps of a model's weights, given the same gradients.
4. The trainer: the mask is packed on CPUs and PyTorch's on GPUs unless told; `build_learner`
   packs the mask and fuses Adam as the runtime options say, and a resumed run keeps its own choice
   of Adam, not the one saved in the checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from test_pipeline import QUIET, SMALL, pairs, run_data  # noqa: F401 (fixtures)
from torch import nn

from annotated_transformer.batching import Batch
from annotated_transformer.checkpoint import ResumeState
from annotated_transformer.config import RuntimeOptions
from annotated_transformer.distributed import PackedDropout, keep_mask, pack_dropout, start_runtime
from annotated_transformer.model import ModelConfig
from annotated_transformer.pipeline import build_learner, restore
from annotated_transformer.training import TrainState, noam_optimizer

CPU = torch.device("cpu")


def sigma(q: float, n: int) -> float:
    "The standard deviation of a frequency of probability q over n independent trials."
    return math.sqrt(q * (1 - q) / n)


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_the_mask_keeps_each_position_with_probability_one_minus_p(p: float) -> None:
    torch.manual_seed(1)
    n = (1 << 21) + 1  # odd: the last draw's second half is not used
    kept = keep_mask((n,), p, CPU)
    assert kept.dtype == torch.bool and kept.shape == (n,)
    assert abs(kept.float().mean().item() - (1 - p)) < 5 * sigma(1 - p, n)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_positions_and_steps_are_independent(p: float) -> None:
    torch.manual_seed(2)
    n = 1 << 21
    first, second = keep_mask((n,), p, CPU).float(), keep_mask((n,), p, CPU).float()
    together = (1 - p) ** 2
    pairs = {
        "the two halves of one draw": (first[0::2], first[1::2]),
        "neighbours of two draws": (first[1:-1:2], first[2::2]),
        "positions far apart": (first[: n // 2], first[n // 2 :]),
        "one position, two steps": (first, second),
    }
    for name, (a, b) in pairs.items():
        rate = (a * b).mean().item()
        assert abs(rate - together) < 5 * sigma(together, len(a)), (name, rate, together)
    # and dropped together as often as independence predicts
    dropped = ((1 - first[0::2]) * (1 - first[1::2])).mean().item()
    assert abs(dropped - p**2) < 5 * sigma(p**2, n // 2)


def test_the_mask_has_any_shape_and_follows_the_generator() -> None:
    torch.manual_seed(3)
    a = keep_mask((3, 5, 7), 0.2, CPU)
    torch.manual_seed(3)
    assert a.shape == (3, 5, 7) and torch.equal(a, keep_mask((3, 5, 7), 0.2, CPU))  # exact: bools
    assert keep_mask((0,), 0.2, CPU).shape == (0,)
    assert keep_mask((4,), 0.0, CPU).all()  # threshold -2^31: every value passes


def test_packed_dropout_scales_and_backpropagates_as_nn_dropout() -> None:
    torch.manual_seed(4)
    p = 0.25
    x = torch.randn(64, 33, requires_grad=True)
    out = PackedDropout(p)(x)
    kept = out != 0
    assert 0.6 < kept.float().mean().item() < 0.9
    torch.testing.assert_close(out[kept], x[kept] / (1 - p))
    out.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() / (1 - p))


def test_packed_dropout_edges_and_dtypes() -> None:
    x = torch.randn(100)
    assert PackedDropout(0.0)(x) is x
    assert PackedDropout(0.5).eval()(x) is x
    assert not PackedDropout(1.0)(x).any()
    half = torch.ones(100, dtype=torch.bfloat16)
    assert PackedDropout(0.5)(half).dtype == torch.bfloat16


def test_pack_dropout_changes_every_dropout_layer_and_keeps_its_rate_and_mode() -> None:
    model = ModelConfig(N=2, d_model=32, d_ff=64, h=2, dropout=0.2).build(20, 20).eval()
    before = {name: type(m) for name, m in model.named_modules()}
    names = {name for name, kind in before.items() if kind is nn.Dropout}
    assert len(names) == 2 * 4 + 2 * 6 + 2  # per layer: sub-layers, feed-forward, attention
    pack_dropout(model)
    after = dict(model.named_modules())
    assert {name for name, m in after.items() if isinstance(m, PackedDropout)} == names
    assert all(after[name].p == 0.2 and not after[name].training for name in names)  # exact: copied
    assert all(type(after[n]) is kind for n, kind in before.items() if n not in names)


def test_a_packed_model_never_uses_the_fused_kernels_own_dropout(monkeypatch) -> None:
    "With a packed mask, attention's weights take the readable path: SDPA gets no dropout_p."
    real, calls = F.scaled_dot_product_attention, []

    def spy(*args, **kwargs):
        calls.append(kwargs.get("dropout_p", 0.0))
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    torch.manual_seed(5)
    model = pack_dropout(ModelConfig(N=1, d_model=32, d_ff=64, h=2).build(20, 20))
    data = torch.randint(1, 20, (4, 9))
    batch = Batch(data, data, pad=0)
    model(batch.src, batch.tgt, batch.src_mask, batch.tgt_mask).sum().backward()
    assert calls == []  # training: every attention on the readable path
    model.eval()
    model(batch.src, batch.tgt, batch.src_mask, batch.tgt_mask)
    assert calls and set(calls) == {0.0}  # exact: evaluation passes no dropout to the kernel


def adam_weights(steps: int = 30, **adam: object) -> list[torch.Tensor]:
    """A model's weights after `steps` Noam-scheduled Adam steps, each on the same seeded random
    gradients: the optimizers compared, not the rounding of a backward pass. (From a real loss,
    the keys' biases would not do: their gradient is zero in exact arithmetic, a constant added to
    each query's scores, so any rounding difference becomes a full step of either Adam.)"""
    torch.manual_seed(6)
    model = ModelConfig(N=1, d_model=32, d_ff=64, h=2, dropout=0.0).build(30, 30)
    optimizer, schedule = noam_optimizer(model, 32, warmup=10, **adam)
    for step in range(steps):
        for i, w in enumerate(model.parameters()):
            w.grad = torch.randn(w.shape) * 10.0 ** -(i % 4)  # gradients of four scales
        if step == 1:
            next(model.parameters()).grad.zero_()  # and once none at all
        optimizer.step()
        schedule.step()
    return [w.detach().clone() for w in model.parameters()]


def test_fused_adam_ends_within_rounding_of_torch_optim_adam() -> None:
    fused, start = adam_weights(fused=True), adam_weights(steps=0)
    assert min((a - b).abs().max().item() for a, b in zip(fused, start)) > 1e-3  # all moved
    for other in (adam_weights(), adam_weights(foreach=False)):
        for a, b in zip(fused, other):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_the_mask_is_packed_on_cpus_and_pytorchs_on_gpus_unless_told(monkeypatch) -> None:
    assert start_runtime(RuntimeOptions(device="cpu"))[1].dropout_mask == "packed"
    told = RuntimeOptions(device="cpu", dropout_mask="torch", adam="foreach")
    resolved = start_runtime(told)[1]
    assert (resolved.dropout_mask, resolved.adam) == ("torch", "foreach")
    # a GPU, alone (no process group: nothing touches it)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert start_runtime(RuntimeOptions(device="cuda"))[1].dropout_mask == "torch"


def test_build_learner_packs_the_mask_and_fuses_adam_as_told(run_data) -> None:  # noqa: F811
    def dropouts(learner) -> set[type]:
        return {type(m) for m in learner.model.modules() if isinstance(m, nn.Dropout)}

    packed = build_learner(SMALL, run_data, replace(QUIET, dropout_mask="packed"), CPU)
    plain = build_learner(SMALL, run_data, replace(QUIET, dropout_mask="torch"), CPU)
    foreach = build_learner(SMALL, run_data, replace(QUIET, adam="foreach"), CPU)
    assert dropouts(packed) == {PackedDropout} and dropouts(plain) == {nn.Dropout}
    assert packed.optimizer.param_groups[0]["fused"] is True
    assert not foreach.optimizer.param_groups[0]["fused"]


def test_a_resumed_run_keeps_its_own_choice_of_adam(run_data) -> None:  # noqa: F811
    saved = build_learner(SMALL, run_data, replace(QUIET, adam="foreach"), CPU)
    resume = ResumeState(
        saved.optimizer.state_dict(), saved.scheduler.state_dict(), TrainState(), rng=[]
    )
    ckpt = SimpleNamespace(resume=resume, model=saved.model.state_dict(), history=[])
    learner = build_learner(SMALL, run_data, QUIET, CPU)  # adam="fused", the default
    restore(learner, ckpt, log=lambda line: None)
    assert learner.optimizer.param_groups[0]["fused"] is True
