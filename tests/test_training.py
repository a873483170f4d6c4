"""Tests for annotated_transformer.training.

What is checked:
1. `Batch`: shapes, the tgt/tgt_y shift, the masks, the token count, `.to()`, `pad` as a required keyword, and clear errors.
2. `TokenBatchSampler`: a partition of the examples within the token budget, determinism per (seed, epoch),
   sorted batches without shuffling, sharding over processes, and clear errors.
3. `rate` and `noam_optimizer`: eq. (5)'s shape, Adam's settings, the schedule as seen by the optimizer, fused = unfused steps.
4. `LabelSmoothing` / `smoothed_targets`: the closed form against `F.kl_div`, gradients, -inf log-probabilities,
   padding, negative padding indices, clear errors on bad labels, and the difference from PyTorch's own `label_smoothing`.
5. `run_epoch` and `TrainState`: gradient accumulation, scheduler stepping, counts, old checkpoints' counts, evaluation, clipping and errors.
6. `greedy_decode`: batch = one sentence at a time, end symbols, early stop, errors.
7. `copy_task_batches`: shapes, values and determinism.

Everything runs on a CPU in a few seconds with tiny models, and needs no data or network.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import asdict

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from annotated_transformer.model import ModelConfig
from annotated_transformer.model import Generator
from annotated_transformer.training import (
    Batch,
    FusedLabelSmoothing,
    LabelSmoothing,
    TokenBatchSampler,
    TrainState,
    copy_task_batches,
    greedy_decode,
    noam_optimizer,
    rate,
    run_epoch,
    smoothed_targets,
)

V = 11  # vocabulary of the tiny models: 0 padding, 1 start, 2..10 content
PAD = 0
TINY = ModelConfig(N=1, d_model=16, d_ff=32, h=2, dropout=0.0)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def tiny_model(seed: int = 0):
    torch.manual_seed(seed)
    return TINY.build(V, V)


def params(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def assert_params_equal(a: list[torch.Tensor], b: list[torch.Tensor], atol: float = 0.0) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, atol=atol, rtol=0.0)


def max_param_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b))


def random_copy_data(batch_size: int, seq_len: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(2, V, (batch_size, seq_len), generator=g)
    data[:, 0] = 1
    return data


# =========================================================================== 1. Batch


def test_batch_shapes_shift_masks_and_ntokens():
    src = torch.tensor([[1, 5, 6, 7, 0], [1, 8, 0, 0, 0]])
    tgt = torch.tensor([[1, 3, 4, 5], [1, 9, 0, 0]])
    b = Batch(src, tgt, pad=0)
    assert b.src is src
    assert b.src_mask.shape == (2, 1, 5) and b.src_mask.dtype == torch.bool
    torch.testing.assert_close(
        b.src_mask,
        torch.tensor([[[True, True, True, True, False]], [[True, True, False, False, False]]]),
    )
    torch.testing.assert_close(b.tgt, tgt[:, :-1])
    torch.testing.assert_close(b.tgt_y, tgt[:, 1:])
    assert b.tgt.shape == b.tgt_y.shape == (2, 3)
    assert b.tgt_mask.shape == (2, 3, 3) and b.tgt_mask.dtype == torch.bool
    # built by hand: query i may see key j iff j <= i and tgt[j] is not padding
    expected = torch.zeros(2, 3, 3, dtype=torch.bool)
    for bi in range(2):
        for i in range(3):
            for j in range(3):
                expected[bi, i, j] = j <= i and b.tgt[bi, j].item() != 0
    torch.testing.assert_close(b.tgt_mask, expected)
    assert b.ntokens == 3 + 1  # non-padding labels: [3, 4, 5] and [9]
    assert isinstance(b.ntokens, int)


def test_batch_source_only_with_pad_a_required_keyword():
    src = torch.tensor([[1, 4, 2, 2]])
    b = Batch(src, pad=2)
    torch.testing.assert_close(b.src_mask, torch.tensor([[[True, True, False, False]]]))
    assert not hasattr(b, "tgt") and not hasattr(b, "ntokens")
    with pytest.raises(TypeError, match="keyword-only argument: 'pad'"):
        Batch(src)  # no default: the padding id belongs to the vocabulary
    with pytest.raises(TypeError, match="positional"):
        Batch(src, src, 2)  # keyword only


def test_batch_to_moves_every_tensor():
    src = torch.tensor([[1, 5, 6, 0], [1, 8, 0, 0]])
    tgt = torch.tensor([[1, 3, 4], [1, 9, 0]])
    b = Batch(src, tgt, pad=0)
    before = {name: v for name, v in vars(b).items() if isinstance(v, torch.Tensor)}
    assert set(before) == {"src", "src_mask", "tgt", "tgt_y", "tgt_mask"}
    out = b.to("meta")  # a device every machine has, and one a tensor cannot be on by accident
    assert out is b
    for name, v in before.items():
        moved = getattr(b, name)
        assert moved.device.type == "meta", name
        assert (moved.shape, moved.dtype) == (v.shape, v.dtype)
    assert b.ntokens == 3  # labels [3, 4] and [9, pad]: counted before the move, kept


def test_make_tgt_mask_hides_padding_and_the_future():
    tgt = torch.tensor([[1, 3, 0], [1, 0, 0]])
    mask = Batch.make_tgt_mask(tgt, pad=0)
    assert mask.shape == (2, 3, 3) and mask.dtype == torch.bool
    torch.testing.assert_close(
        mask[0], torch.tensor([[True, False, False], [True, True, False], [True, True, False]])
    )
    torch.testing.assert_close(mask[1], torch.tensor([[True, False, False]] * 3))


@pytest.mark.parametrize(
    "src",
    [
        torch.zeros(0, 5, dtype=torch.long),
        torch.zeros(3, 0, dtype=torch.long),
        torch.tensor([1, 2, 3]),
    ],
)
def test_batch_rejects_empty_or_non_2d_source(src):
    with pytest.raises(ValueError, match="empty batch"):
        Batch(src, None, pad=0)


def test_batch_rejects_all_padding_targets():
    src = torch.tensor([[1, 5], [1, 6]])
    tgt = torch.tensor([[1, 0, 0], [1, 0, 0]])
    with pytest.raises(ValueError, match="every target token .* is padding"):
        Batch(src, tgt, pad=0)


@pytest.mark.parametrize(
    "tgt",
    [
        torch.tensor([[1, 3, 4]]),
        torch.tensor([[1], [1]]),
        torch.tensor([1, 3, 4]),
        torch.tensor([[1, 3], [1, 4], [1, 5]]),
    ],
    ids=["batch-too-small", "length-1", "1d", "batch-too-large"],
)
def test_batch_rejects_mismatched_or_short_target(tgt):
    src = torch.tensor([[1, 5, 6], [1, 7, 8]])
    with pytest.raises(ValueError, match=r"tgt must be \(batch=2, length >= 2\)"):
        Batch(src, tgt, pad=0)


# =========================================================================== 2. TokenBatchSampler


def random_lengths(n: int = 300, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, 40, (n,), generator=g).tolist()


def batch_cost(batch: list[int], lengths: list[int]) -> int:
    return len(batch) * max(lengths[i] for i in batch)


@pytest.mark.parametrize("shuffle", [True, False])
def test_sampler_partitions_examples_within_budget(shuffle):
    lengths = random_lengths() + [150, 64, 65]  # one longer than the budget, one exactly at it
    max_tokens = 64
    s = TokenBatchSampler(lengths, max_tokens, shuffle=shuffle, seed=3)
    for epoch in range(3):
        s.set_epoch(epoch)
        batches = list(s)
        flat = [i for b in batches for i in b]
        assert sorted(flat) == list(range(len(lengths)))  # every index exactly once
        assert all(len(b) > 0 for b in batches)
        assert len(batches) == len(s)
        for b in batches:
            if batch_cost(b, lengths) > max_tokens:
                # only an example longer than the budget may exceed it, alone in its batch
                assert len(b) == 1 and lengths[b[0]] > max_tokens
        # the examples longer than the budget are alone
        for long in (len(lengths) - 3, len(lengths) - 1):
            (home,) = [b for b in batches if long in b]
            assert home == [long]
        # an example exactly at the budget fits, alone
        (home,) = [b for b in batches if len(lengths) - 2 in b]
        assert home == [len(lengths) - 2]


@pytest.mark.parametrize("shuffle", [True, False])
def test_sampler_examples_all_over_budget_are_alone(shuffle):
    lengths = [10, 20, 15, 12]  # even the shortest exceeds the budget
    s = TokenBatchSampler(lengths, 5, shuffle=shuffle)
    batches = list(s)
    assert len(batches) == len(s) == 4
    assert sorted(batches) == [[0], [1], [2], [3]]  # one example per batch, and no empty batch


def test_sampler_packs_greedily_without_shuffle():
    lengths = random_lengths()
    max_tokens = 64
    batches = list(TokenBatchSampler(lengths, max_tokens, shuffle=False))
    flat = [i for b in batches for i in b]
    # sorted by length, ties by index (a stable sort)
    assert flat == sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    # each batch is full: the next example would not have fitted
    for b, nxt in zip(batches, batches[1:]):
        longest = max(lengths[i] for i in b + [nxt[0]])
        assert (len(b) + 1) * longest > max_tokens
    # and a deterministic result with no dependence on the seed or epoch
    s = TokenBatchSampler(lengths, max_tokens, shuffle=False, seed=99)
    s.set_epoch(5)
    assert list(s) == batches


def test_sampler_is_deterministic_per_seed_and_epoch():
    lengths = random_lengths()
    a = TokenBatchSampler(lengths, 80, seed=1)
    b = TokenBatchSampler(lengths, 80, seed=1)
    for epoch in (0, 1, 7):
        a.set_epoch(epoch)
        b.set_epoch(epoch)
        assert list(a) == list(b)
        assert list(a) == list(a)  # iterating again gives the same epoch
    a.set_epoch(0)
    e0 = list(a)
    a.set_epoch(1)
    e1 = list(a)
    assert e0 != e1
    assert sorted(map(sorted, e0)) != sorted(
        map(sorted, e1)
    )  # new tie-breaks, not only a new batch order
    c = TokenBatchSampler(lengths, 80, seed=2)
    assert list(c) != e0  # epoch 0 of another seed


def test_sampler_shuffled_batches_hold_similar_lengths():
    lengths = random_lengths()
    shuffled = list(TokenBatchSampler(lengths, 80, seed=4))
    ordered = list(TokenBatchSampler(lengths, 80, shuffle=False))
    assert [b for b in shuffled] != ordered
    # the same batch sizes by length class: shuffling only reorders batches and breaks ties among equal lengths
    key = lambda bs: sorted(tuple(sorted(lengths[i] for i in b)) for b in bs)  # noqa: E731
    assert key(shuffled) == key(ordered)


@pytest.mark.parametrize("num_replicas", [2, 3])
def test_sampler_shards_over_processes(num_replicas):
    lengths = random_lengths(n=301, seed=5)
    max_tokens = 70
    full = TokenBatchSampler(lengths, max_tokens, seed=8)
    full.set_epoch(2)
    all_batches = list(full)
    usable = len(all_batches) - len(all_batches) % num_replicas
    shards = []
    for rank in range(num_replicas):
        s = TokenBatchSampler(lengths, max_tokens, seed=8, num_replicas=num_replicas, rank=rank)
        s.set_epoch(2)
        shard = list(s)
        assert len(shard) == len(s) == len(all_batches) // num_replicas
        shards.append(shard)
    assert len({len(sh) for sh in shards}) == 1  # equal counts per rank
    as_sets = [{tuple(b) for b in sh} for sh in shards]
    for i in range(num_replicas):
        for j in range(i + 1, num_replicas):
            assert not as_sets[i] & as_sets[j]  # disjoint batches
            assert not {x for b in shards[i] for x in b} & {
                x for b in shards[j] for x in b
            }  # disjoint examples
    union = set().union(*as_sets)
    assert union == {tuple(b) for b in all_batches[:usable]}
    assert sum(len(sh) for sh in shards) == usable


def test_sampler_sharding_drops_the_remainder():
    lengths = [4] * 10  # max_tokens 8 -> 5 batches of 2
    s0 = TokenBatchSampler(lengths, 8, shuffle=False, num_replicas=2, rank=0)
    s1 = TokenBatchSampler(lengths, 8, shuffle=False, num_replicas=2, rank=1)
    assert len(s0.all_batches()) == 5
    assert list(s0) == [[0, 1], [4, 5]]
    assert list(s1) == [[2, 3], [6, 7]]
    assert len(s0) == len(s1) == 2


@pytest.mark.parametrize("max_tokens", [0, -5])
def test_sampler_rejects_small_budget(max_tokens):
    with pytest.raises(ValueError, match=f"max_tokens must be at least 1, got {max_tokens}"):
        TokenBatchSampler([3, 4], max_tokens)


@pytest.mark.parametrize("rank,num_replicas", [(-1, 2), (2, 2), (0, 0), (5, 3)])
def test_sampler_rejects_bad_rank(rank, num_replicas):
    with pytest.raises(ValueError, match=r"rank must be in range\(num_replicas="):
        TokenBatchSampler([3, 4, 5, 6], 4, num_replicas=num_replicas, rank=rank)


def test_sampler_rejects_empty_lengths():
    with pytest.raises(ValueError, match="lengths is empty"):
        TokenBatchSampler([], 10)


def test_sampler_rejects_more_processes_than_batches():
    with pytest.raises(ValueError, match="only 1 batches for 2 processes"):
        TokenBatchSampler([5, 5, 5], 100, num_replicas=2, rank=1)
    TokenBatchSampler([5, 5, 5], 10, num_replicas=2, rank=1)  # 2 batches: fine


# =========================================================================== 3. rate and noam_optimizer


def test_rate_shape():
    assert rate(0, 512, 1.0, 4000) == rate(1, 512, 1.0, 4000)
    assert rate(100, 512, 2.0, 4000) == pytest.approx(2 * rate(100, 512, 1.0, 4000))
    values = [rate(s, 64, 1.0, 50) for s in range(1, 200)]
    peak = max(range(len(values)), key=values.__getitem__) + 1
    assert peak == 50  # linear warm-up, then inverse square root
    assert all(a < b for a, b in zip(values[:49], values[1:50]))
    assert all(a > b for a, b in zip(values[49:], values[50:]))


@pytest.mark.parametrize("warmup", [0, -3])
def test_rate_rejects_no_warmup(warmup):
    with pytest.raises(ValueError, match=f"warmup must be at least 1 step, got {warmup}"):
        rate(10, 512, 1.0, warmup)


def test_noam_optimizer_settings_and_schedule():
    model = tiny_model()
    opt, sched = noam_optimizer(model, model_size=16, factor=2.0, warmup=10)
    assert isinstance(opt, torch.optim.Adam)
    assert opt.defaults["betas"] == (0.9, 0.98)
    assert opt.defaults["eps"] == 1e-9
    held = [p for g in opt.param_groups for p in g["params"]]
    assert len(held) == len(list(model.parameters())) and {id(p) for p in held} == {
        id(p) for p in model.parameters()
    }  # each parameter once
    assert opt.param_groups[0]["lr"] == pytest.approx(rate(0, 16, 2.0, 10), rel=1e-12)
    for k in range(1, 30):
        opt.step()
        sched.step()
        assert sched.last_epoch == k
        assert opt.param_groups[0]["lr"] == pytest.approx(rate(k, 16, 2.0, 10), rel=1e-12)


def test_noam_optimizer_fused_only_on_gpus_and_same_steps():
    "On CPU parameters the default is Adam tensor by tensor; the fused kernel (GPUs' default) takes the same steps."
    assert noam_optimizer(tiny_model(), 16)[0].defaults["fused"] is False
    models = [tiny_model(), tiny_model()]  # the same weights (seed 0)
    opts = [
        noam_optimizer(m, 16, warmup=3, fused=fused)[0] for m, fused in zip(models, (False, True))
    ]
    for step in range(5):
        torch.manual_seed(step)
        grads = [torch.randn_like(p) for p in models[0].parameters()]
        for m, opt in zip(models, opts):
            for p, g in zip(m.parameters(), grads):
                p.grad = g.clone()
            opt.step()
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert not torch.equal(
        next(models[0].parameters()), next(tiny_model().parameters())
    )  # the steps moved the weights


def test_noam_optimizer_rejects_no_warmup():
    with pytest.raises(ValueError, match="warmup must be at least 1 step, got 0"):
        noam_optimizer(tiny_model(), 16, warmup=0)


# =========================================================================== 4. LabelSmoothing


def random_logits_and_labels(n: int, size: int, padding_idx: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, size, generator=g) * 3
    target = torch.randint(0, size, (n,), generator=g)
    target[target == padding_idx] = (padding_idx + 1) % size  # no accidental padding...
    target[::5] = padding_idx  # ...only these rows
    return logits, target


@pytest.mark.parametrize("size", [50, 1000])
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("padding_idx", [0, 7, -1], ids=["pad-first", "pad-middle", "pad-last"])
def test_label_smoothing_matches_kl_div_and_its_gradients(size, smoothing, padding_idx):
    padding_idx = padding_idx % size
    logits, target = random_logits_and_labels(
        64, size, padding_idx, seed=size + int(smoothing * 10) + padding_idx
    )
    crit = LabelSmoothing(size, padding_idx, smoothing)

    a = logits.clone().requires_grad_()
    loss = crit(F.log_softmax(a, dim=-1), target)
    loss.backward()

    b = logits.clone().requires_grad_()
    q = smoothed_targets(target, size, padding_idx, smoothing)
    ref = F.kl_div(F.log_softmax(b, dim=-1), q, reduction="sum")
    ref.backward()

    assert loss.dim() == 0
    torch.testing.assert_close(loss, ref, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("padding_idx", [0, 5])
def test_label_smoothing_finite_when_padding_has_zero_probability(smoothing, padding_idx):
    size = 20
    logits, target = random_logits_and_labels(32, size, padding_idx, seed=1)
    logits[:, padding_idx] = float("-inf")  # the model never predicts padding: log-prob -inf
    a = logits.clone().requires_grad_()
    logp = F.log_softmax(a, dim=-1)
    assert torch.isinf(logp[:, padding_idx]).all()
    loss = LabelSmoothing(size, padding_idx, smoothing)(logp, target)
    assert torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(a.grad).all()
    # the value: KL over the classes with q > 0 only (F.kl_div itself gives nan here: 0 * -inf)
    q = smoothed_targets(target, size, padding_idx, smoothing)
    lp = logp.detach()
    pos = q > 0
    ref = (q[pos] * (q[pos].log() - lp[pos])).sum()
    torch.testing.assert_close(loss.detach(), ref, rtol=1e-5, atol=1e-4)
    # and the gradient: that of the same sum, with the padding class left out
    b = logits.clone()
    b[:, padding_idx] = -1e30  # finite stand-in: softmax weight exactly 0 in float32
    b.requires_grad_()
    lpb = F.log_softmax(b, dim=-1)
    ((q * (torch.where(pos, q, 1.0).log() - lpb)) * pos).sum().backward()
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_label_smoothing_ignores_padding_rows(smoothing):
    size, pad = 30, 3
    logits, target = random_logits_and_labels(40, size, pad, seed=2)
    crit = LabelSmoothing(size, pad, smoothing)
    logp = F.log_softmax(logits, dim=-1)
    base = crit(logp, target)
    changed = logp.clone()
    rows = target == pad
    assert rows.any() and not rows.all()
    changed[rows] = F.log_softmax(torch.randn(int(rows.sum()), size) * 10, dim=-1)
    changed[rows, pad] = float("-inf")  # even -inf in a padding row's true column
    torch.testing.assert_close(crit(changed, target), base)
    torch.testing.assert_close(crit(logp[~rows], target[~rows]), base)
    # a batch of padding only: zero, and zero gradients
    x = logp[rows].clone().requires_grad_()
    only_pad = crit(x, target[rows])
    assert only_pad.item() == 0.0
    only_pad.backward()
    assert torch.equal(x.grad, torch.zeros_like(x))


@pytest.mark.parametrize("pad", [0, 9])
def test_label_smoothing_zero_is_cross_entropy(pad):
    size = 50
    logits, target = random_logits_and_labels(64, size, pad, seed=3)
    loss = LabelSmoothing(size, pad, 0.0)(F.log_softmax(logits, dim=-1), target)
    ref = F.cross_entropy(logits, target, ignore_index=pad, reduction="sum")
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-4)


def test_label_smoothing_differs_from_pytorch_label_smoothing():
    # Convention difference: PyTorch's `label_smoothing=eps` takes the cross-entropy H(q', p) to
    # q' = (1 - eps) * onehot + eps / V on EVERY class (the true class and the padding class included).
    # The paper's / this module's loss is the KL divergence KL(q || p) to q = 1 - eps on the true class,
    # eps / (V - 2) on each class that is neither true nor padding, and 0 on padding. KL and cross-entropy
    # differ by the entropy of q (a constant, no gradient), and the two q's differ too, so neither the
    # values nor the gradients are equal.
    size, pad, eps = 50, 0, 0.1
    logits, target = random_logits_and_labels(64, size, pad, seed=4)
    keep = target != pad
    a = logits.clone().requires_grad_()
    ours = LabelSmoothing(size, pad, eps)(F.log_softmax(a, dim=-1), target)
    ours.backward()
    b = logits.clone().requires_grad_()
    theirs = F.cross_entropy(b, target, ignore_index=pad, reduction="sum", label_smoothing=eps)
    theirs.backward()
    assert not torch.allclose(ours, theirs, rtol=1e-2)
    # gradient w.r.t. the logits is p - q: at the padding column ours is p_pad, PyTorch's p_pad - eps / V
    p = logits.softmax(-1)
    torch.testing.assert_close(a.grad[keep, pad], p[keep, pad], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(b.grad[keep, pad], p[keep, pad] - eps / size, rtol=1e-4, atol=1e-6)
    assert not torch.allclose(a.grad, b.grad, atol=1e-3)
    # ours is exactly the cross-entropy to our q minus q's entropy
    q = smoothed_targets(target, size, pad, eps)
    entropy = -(q[q > 0] * q[q > 0].log()).sum()
    ce_q = -(q * F.log_softmax(logits, dim=-1)).sum()
    torch.testing.assert_close(ours.detach(), ce_q - entropy, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.4])
def test_smoothed_targets_rows(smoothing):
    size, pad = 12, 4
    target = torch.tensor([0, 4, 11, 5, 4, 3])
    q = smoothed_targets(target, size, pad, smoothing)
    assert q.shape == (6, size)
    keep = target != pad
    torch.testing.assert_close(q.sum(-1), keep.float(), rtol=0, atol=1e-6)
    assert (q[:, pad] == 0).all()
    assert (q[~keep] == 0).all()
    rows = torch.arange(6)[keep]
    torch.testing.assert_close(q[rows, target[keep]], torch.full((len(rows),), 1 - smoothing))
    for r in rows.tolist():
        others = [c for c in range(size) if c not in (pad, target[r].item())]
        torch.testing.assert_close(q[r, others], torch.full((len(others),), smoothing / (size - 2)))


@pytest.mark.parametrize("smoothing", [-0.1, 1.0, 1.5])
def test_label_smoothing_rejects_bad_smoothing(smoothing):
    with pytest.raises(ValueError, match=r"smoothing must be in \[0, 1\)"):
        LabelSmoothing(10, 0, smoothing)


@pytest.mark.parametrize("size", [1, 2])
def test_label_smoothing_rejects_tiny_vocabulary(size):
    with pytest.raises(ValueError, match=f"at least 3 .*size={size}"):
        LabelSmoothing(size, 0, 0.1)


@pytest.mark.parametrize("shape", [(10,), (4, 9), (4, 11), (2, 3, 10)])
def test_label_smoothing_rejects_wrong_input_shape(shape):
    crit = LabelSmoothing(10, 0, 0.1)
    with pytest.raises(ValueError, match=r"expected log-probabilities of shape \(N, 10\)"):
        crit(torch.randn(*shape), torch.ones(shape[0], dtype=torch.long))


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_label_smoothing_negative_padding_idx_counts_from_the_end(smoothing):
    # before: -1 was compared with the labels as it was (so padding rows, labelled size - 1, counted) and
    # x[:, :-1] + x[:, 0:] read the last class twice
    size = 30
    logits, target = random_logits_and_labels(40, size, size - 1, seed=5)
    logp = F.log_softmax(logits, dim=-1)
    reference = F.kl_div(logp, smoothed_targets(target, size, size - 1, smoothing), reduction="sum")
    for padding_idx in (-1, size - 1):
        torch.testing.assert_close(
            LabelSmoothing(size, padding_idx, smoothing)(logp, target),
            reference,
            rtol=1e-5,
            atol=1e-4,
        )
    torch.testing.assert_close(
        smoothed_targets(target, size, -1, smoothing),
        smoothed_targets(target, size, size - 1, smoothing),
    )
    logits, target = random_logits_and_labels(40, size, 0, seed=6)
    logp = F.log_softmax(logits, dim=-1)
    torch.testing.assert_close(
        LabelSmoothing(size, -size, smoothing)(logp, target),
        LabelSmoothing(size, 0, smoothing)(logp, target),
    )


@pytest.mark.parametrize("padding_idx", [10, 11, -11, -100])
def test_label_smoothing_rejects_padding_idx_outside_vocabulary(padding_idx):
    message = rf"^padding_idx={padding_idx} is outside the vocabulary of size 10: it must be in \[-10, 10\)$"
    with pytest.raises(ValueError, match=message):
        LabelSmoothing(10, padding_idx, 0.1)
    with pytest.raises(ValueError, match=message):
        smoothed_targets(torch.tensor([1, 2]), 10, padding_idx, 0.1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bool, torch.uint8])
def test_label_smoothing_rejects_labels_that_are_not_integer_ids(dtype):
    crit = LabelSmoothing(10, 0, 0.1)
    logp = F.log_softmax(torch.randn(4, 10), dim=-1)
    target = torch.tensor([1, 0, 3, 9])
    with pytest.raises(
        TypeError,
        match=rf"^labels must be integer class ids \(int64 or int32\), got dtype {re.escape(str(dtype))}$",
    ):
        crit(logp, target.to(dtype))
    with pytest.raises(TypeError, match=re.escape(str(dtype))):
        smoothed_targets(target.to(dtype), 10, 0, 0.1)
    torch.testing.assert_close(
        crit(logp, target.int()), crit(logp, target)
    )  # int32 ids are ids too


@pytest.mark.parametrize("bad", [10, 57, -1])
def test_label_smoothing_rejects_labels_outside_vocabulary(bad):
    crit = LabelSmoothing(10, 0, 0.1)
    logp = F.log_softmax(torch.randn(4, 10), dim=-1)
    target = torch.tensor([1, 0, bad, 9])
    with pytest.raises(ValueError, match=rf"^label {bad} is outside the vocabulary of size 10$"):
        crit(logp, target)
    with pytest.raises(ValueError, match=rf"^label {bad} is outside the vocabulary of size 10$"):
        smoothed_targets(target, 10, 0, 0.1)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("shape", [(3,), (5,), (4, 1)])
def test_label_smoothing_rejects_a_label_count_unlike_the_rows(shape, smoothing):
    # before, with 3 labels for 4 rows and no smoothing, gather read the first 3 rows and the loss silently left one out
    crit = LabelSmoothing(10, 0, smoothing)
    with pytest.raises(
        ValueError,
        match=r"^expected one label per row of the log-probabilities, shape \(4,\), got "
        + re.escape(str(shape)),
    ):
        crit(F.log_softmax(torch.randn(4, 10), dim=-1), torch.ones(shape, dtype=torch.long))


# =========================================================================== 5. run_epoch


def crit():
    return LabelSmoothing(V, PAD, 0.1)


def padded_batches() -> list[Batch]:
    "Three batches of different sizes, with padding, so ntokens differs from B * T."
    out = []
    for i, (bsz, length) in enumerate([(3, 6), (2, 5), (4, 7)]):
        data = random_copy_data(bsz, length, seed=100 + i)
        data[0, length - 2 :] = PAD  # pad the end of the first row
        out.append(Batch(data, data.clone(), pad=PAD))
    return out


def test_gradient_accumulation_equals_one_big_batch():
    data = [random_copy_data(8, 6, seed=s) for s in (1, 2)]
    for d in data:
        d[6:, 2:] = (
            PAD  # padding in the second halves: every loss token weighs the same, whichever batch holds it
        )
    whole = [Batch(d, d.clone(), pad=PAD) for d in data]
    halves = [Batch(h, h.clone(), pad=PAD) for d in data for h in (d[:4], d[4:])]
    assert halves[0].ntokens != halves[1].ntokens

    a = tiny_model()
    b = copy.deepcopy(a)
    c = copy.deepcopy(a)
    start = params(a)
    opt_a = torch.optim.SGD(a.parameters(), lr=0.5)
    opt_b = torch.optim.SGD(b.parameters(), lr=0.5)
    opt_c = torch.optim.SGD(c.parameters(), lr=0.5)
    _, sa = run_epoch(whole, a, crit(), opt_a, accum_iter=1, progress=False)
    _, sb = run_epoch(halves, b, crit(), opt_b, accum_iter=2, progress=False)
    _, sc = run_epoch(halves, c, crit(), opt_c, accum_iter=1, progress=False)
    assert sa.optimizer_steps == sb.optimizer_steps == 2 and sb.batches == 4
    assert max_param_diff(start, params(a)) > 1e-3  # it did train
    assert_params_equal(params(a), params(b), atol=1e-6)
    assert (
        max_param_diff(params(a), params(c)) > 1e-4
    )  # four small steps are not the same: the check can tell


def test_scheduler_steps_once_per_optimizer_step_after_the_update():
    model = tiny_model()
    start = params(model)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    # lr 0.1 for the first optimizer step, then 0: a scheduler stepped before the update would give no update
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.1 if s == 0 else 0.0)
    batches = list(copy_task_batches(V, 4, 4, seq_len=5, rng=torch.Generator().manual_seed(0)))
    _, state = run_epoch(batches[:2], model, crit(), opt, sched, accum_iter=2, progress=False)
    assert state.optimizer_steps == 1 and state.batches == 2
    assert sched.last_epoch == 1
    assert opt.param_groups[0]["lr"] == 0.0
    after_one = params(model)
    assert max_param_diff(start, after_one) > 1e-4
    _, state = run_epoch(
        batches[2:], model, crit(), opt, sched, accum_iter=2, state=state, progress=False
    )
    assert state.optimizer_steps == 2 and sched.last_epoch == 2
    assert_params_equal(after_one, params(model))  # the second update ran at lr 0


def test_scheduler_with_noam_counts_optimizer_steps():
    model = tiny_model()
    opt, sched = noam_optimizer(model, 16, factor=1.0, warmup=3)
    batches = list(copy_task_batches(V, 2, 6, seq_len=4, rng=torch.Generator().manual_seed(1)))
    _, state = run_epoch(batches, model, crit(), opt, sched, accum_iter=3, progress=False)
    assert state.batches == 6 and state.optimizer_steps == 2
    assert sched.last_epoch == 2
    assert opt.param_groups[0]["lr"] == pytest.approx(rate(2, 16, 1.0, 3), rel=1e-12)


def test_incomplete_final_accumulation_is_a_step_over_its_own_tokens():
    batches = padded_batches()
    a = tiny_model()
    b = copy.deepcopy(a)
    opt_a = torch.optim.SGD(a.parameters(), lr=0.5)
    sched_a = torch.optim.lr_scheduler.LambdaLR(opt_a, lambda s: 1.0)
    _, state = run_epoch(batches, a, crit(), opt_a, sched_a, accum_iter=2, progress=False)
    assert state.batches == 3
    assert state.optimizer_steps == 2
    assert sched_a.last_epoch == 2
    assert all(
        p.grad is None for p in a.parameters()
    )  # the gradients were cleared after the last step
    # the last, lone batch is a step normalized by its own tokens: the same as one step on it with accum_iter=1
    opt_b = torch.optim.SGD(b.parameters(), lr=0.5)
    run_epoch(batches[:2], b, crit(), opt_b, accum_iter=2, progress=False)
    run_epoch(batches[2:], b, crit(), opt_b, accum_iter=1, progress=False)
    assert_params_equal(params(a), params(b), atol=1e-6)


def test_train_state_counts_and_continues():
    batches = padded_batches()
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _, state = run_epoch(batches, model, crit(), opt, progress=False)
    ntok = sum(b.ntokens for b in batches)
    assert ntok < sum(b.tgt_y.numel() for b in batches)  # padding was present
    assert state == TrainState(batches=3, optimizer_steps=3, samples=3 + 2 + 4, tokens=ntok)
    given = TrainState(batches=10, optimizer_steps=4, samples=50, tokens=1000)
    _, out = run_epoch(batches, model, crit(), opt, accum_iter=2, state=given, progress=False)
    assert out is given
    assert out == TrainState(batches=13, optimizer_steps=6, samples=59, tokens=1000 + ntok)


def test_train_state_from_dict_reads_new_and_version_0_1_names():
    state = TrainState(batches=13, optimizer_steps=6, samples=59, tokens=1234)
    assert TrainState.from_dict(asdict(state)) == state
    assert (
        TrainState.from_dict({"step": 13, "accum_step": 6, "samples": 59, "tokens": 1234}) == state
    )
    assert TrainState.from_dict({"step": 13, "optimizer_steps": 6}) == TrainState(
        batches=13, optimizer_steps=6
    )
    assert TrainState.from_dict({}) == TrainState()
    with pytest.raises(
        ValueError, match=r"both the old and the new name of a count in \['batches', 'step'\]"
    ):
        TrainState.from_dict({"step": 13, "batches": 13})
    with pytest.raises(TypeError, match="epochs"):
        TrainState.from_dict({"epochs": 2})


def test_evaluation_changes_nothing_and_returns_mean_loss():
    batches = padded_batches()
    model = tiny_model()
    model.train()
    start = params(model)
    criterion = crit()
    loss, state = run_epoch(batches, model, criterion, optimizer=None, progress=False)
    assert_params_equal(start, params(model))
    assert all(p.grad is None for p in model.parameters())
    assert not model.training
    assert state == TrainState()
    with torch.no_grad():
        total = 0.0
        for b in batches:
            logp = model.generator(model(b.src, b.tgt, b.src_mask, b.tgt_mask))
            total += criterion(logp.flatten(0, 1), b.tgt_y.flatten()).item()
    expected = total / sum(b.ntokens for b in batches)
    assert loss == pytest.approx(expected, rel=1e-6)
    # training reports the same kind of mean: the loss of each batch before its update
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    train_loss, _ = run_epoch(batches, model, criterion, opt, progress=False)
    assert train_loss == pytest.approx(expected, rel=1e-5)


class NaNAt(nn.Module):
    "A criterion that gives a NaN at the call number `at`."

    def __init__(self, inner: nn.Module, at: int):
        super().__init__()
        self.inner, self.at, self.calls = inner, at, 0

    def forward(self, x, target):
        loss = self.inner(x, target)
        self.calls += 1
        return loss * float("nan") if self.calls == self.at + 1 else loss


@pytest.mark.parametrize("at", [0, 2])
def test_nan_loss_raises_naming_the_step(at):
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = list(copy_task_batches(V, 2, 4, seq_len=4, rng=torch.Generator().manual_seed(2)))
    with pytest.raises(FloatingPointError, match=f"the loss is nan at batch {at} of the run "):
        run_epoch(batches, model, NaNAt(crit(), at), opt, progress=False)
    # evaluation stops too (it counts no steps, so the message cannot name the batch)
    with pytest.raises(FloatingPointError, match="the loss is nan"):
        run_epoch(batches, model, NaNAt(crit(), at), None, progress=False)


@pytest.mark.parametrize("read_every", [1, 2, 50])
@pytest.mark.parametrize("at", [0, 3])
def test_nan_loss_named_whenever_the_losses_are_read(at, read_every):
    "Losses stay on the device and are read every `read_every` batches; the NaN is still named by its batch."
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = list(copy_task_batches(V, 2, 5, seq_len=4, rng=torch.Generator().manual_seed(2)))
    with pytest.raises(
        FloatingPointError,
        match=f"the loss is nan at batch {at} of the run \\(batch {at} of this pass, after {at} optimizer steps\\)",
    ):
        run_epoch(batches, model, NaNAt(crit(), at), opt, progress=False, read_every=read_every)


@pytest.mark.parametrize("read_every", [1, 2, 7])
def test_read_every_does_not_change_the_mean_loss(read_every):
    batches = padded_batches()
    losses = [
        run_epoch(batches, tiny_model(), crit(), None, progress=False, read_every=r)[0]
        for r in (read_every, 50)
    ]
    assert losses[0] == pytest.approx(losses[1], rel=1e-12)


@pytest.mark.parametrize("read_every", [0, -2])
def test_bad_read_every_raises(read_every):
    with pytest.raises(ValueError, match=f"read_every must be at least 1, got {read_every}"):
        run_epoch(
            padded_batches(), tiny_model(), crit(), None, progress=False, read_every=read_every
        )


@pytest.mark.parametrize("accum_iter", [0, -1])
def test_bad_accum_iter_raises_before_any_change(accum_iter):
    model = tiny_model()
    start = params(model)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    consumed = []

    def batches():
        for b in copy_task_batches(V, 2, 2, seq_len=4, rng=torch.Generator().manual_seed(3)):
            consumed.append(b)
            yield b

    with pytest.raises(ValueError, match=f"accum_iter must be at least 1, got {accum_iter}"):
        run_epoch(batches(), model, crit(), opt, accum_iter=accum_iter, progress=False)
    assert consumed == []
    assert_params_equal(start, params(model))


def update_norm(before: list[torch.Tensor], after: list[torch.Tensor]) -> float:
    return math.sqrt(sum(((x - y) ** 2).sum().item() for x, y in zip(before, after)))


def test_max_grad_norm_clips_the_update():
    batch = next(copy_task_batches(V, 4, 1, seq_len=6, rng=torch.Generator().manual_seed(4)))
    free = tiny_model()
    clipped = copy.deepcopy(free)
    loose = copy.deepcopy(free)
    start = params(free)
    for model, max_norm in ((free, None), (clipped, 1e-3), (loose, 1e6)):
        run_epoch(
            [batch],
            model,
            crit(),
            torch.optim.SGD(model.parameters(), lr=1.0),
            max_grad_norm=max_norm,
            progress=False,
        )
    free_norm = update_norm(start, params(free))
    assert free_norm > 0.1
    # with SGD at lr 1, the update is the (clipped) gradient: its norm is max_grad_norm
    assert update_norm(start, params(clipped)) == pytest.approx(1e-3, rel=1e-2)
    # the direction is kept
    d_free = torch.cat([(a - b).flatten() for a, b in zip(params(free), start)])
    d_clip = torch.cat([(a - b).flatten() for a, b in zip(params(clipped), start)])
    assert F.cosine_similarity(d_free, d_clip, dim=0).item() > 0.999
    # a generous limit changes nothing
    assert_params_equal(params(loose), params(free), atol=1e-7)


@pytest.mark.parametrize("training", [True, False])
def test_empty_epoch_raises(training):
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1.0) if training else None
    with pytest.raises(ValueError, match="no batches"):
        run_epoch([], model, crit(), opt, progress=False)
    with pytest.raises(ValueError, match="no batches"):
        run_epoch(iter(()), model, crit(), opt, progress=False)


# =========================================================================== 6. greedy_decode


@pytest.fixture(scope="module")
def copy_model():
    "A tiny model trained briefly on the copy task (a couple of seconds on a CPU)."
    torch.manual_seed(0)
    model = TINY.build(V, V)
    opt, sched = noam_optimizer(model, 16, factor=1.0, warmup=50)
    batches = copy_task_batches(V, 32, 150, seq_len=8, rng=torch.Generator().manual_seed(0))
    run_epoch(batches, model, LabelSmoothing(V, PAD, 0.0), opt, sched, progress=False)
    model.eval()
    return model


def padded_sources():
    rows = [[1, 5, 3, 9, 2, 7, 4], [1, 8, 6, 2], [1, 4, 4, 10, 3]]
    src = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.long)
    for i, r in enumerate(rows):
        src[i, : len(r)] = torch.tensor(r)
    return rows, src


@pytest.mark.parametrize("trained", [False, True], ids=["random", "copy-trained"])
def test_greedy_decode_batch_equals_one_at_a_time(trained, request):
    model = request.getfixturevalue("copy_model") if trained else tiny_model(3).eval()
    rows, src = padded_sources()
    max_len = 9
    ys = greedy_decode(model, src, (src != PAD).unsqueeze(-2), max_len, start_symbol=1)
    assert ys.shape == (3, max_len) and ys.dtype == src.dtype
    assert (ys[:, 0] == 1).all()
    for i, r in enumerate(rows):
        one = torch.tensor([r])
        alone = greedy_decode(model, one, (one != PAD).unsqueeze(-2), max_len, start_symbol=1)
        torch.testing.assert_close(ys[i : i + 1], alone)
    if trained:  # the copy model has learned something: it copies more than chance (1 in 9) would
        hits = sum(int(ys[i, j] == r[j]) for i, r in enumerate(rows) for j in range(1, len(r)))
        assert hits >= 0.5 * sum(len(r) - 1 for r in rows)


def test_greedy_decode_with_end_symbol_matches_one_at_a_time(copy_model):
    rows, src = padded_sources()
    max_len = 9
    free = greedy_decode(copy_model, src, (src != PAD).unsqueeze(-2), max_len, start_symbol=1)
    end = free[1, 2].item()  # a token row 1 produces early
    ys = greedy_decode(
        copy_model,
        src,
        (src != PAD).unsqueeze(-2),
        max_len,
        start_symbol=1,
        end_symbol=end,
        pad=PAD,
    )
    assert ys.size(0) == 3 and ys.size(1) <= max_len
    for i, r in enumerate(rows):
        one = torch.tensor([r])
        alone = greedy_decode(
            copy_model,
            one,
            (one != PAD).unsqueeze(-2),
            max_len,
            start_symbol=1,
            end_symbol=end,
            pad=PAD,
        )
        n = alone.size(1)
        torch.testing.assert_close(ys[i, :n], alone[0])
        assert (ys[i, n:] == PAD).all()
        hits = (ys[i] == end).nonzero().flatten().tolist()
        if hits:  # everything after the first end symbol is padding, and before it the free decode
            first = hits[0]
            assert (ys[i, first + 1 :] == PAD).all()
            assert ys[i, : first + 1].tolist() == free[i, : first + 1].tolist()
            assert alone.size(1) == first + 1  # a lone row stops at its end symbol
        else:
            assert ys[i].tolist() == free[i, : ys.size(1)].tolist()
    assert (ys[1] == end).any()


class Scripted(nn.Module):
    "A stand-in model: row b emits script[b, t - 1] at step t (t tokens decoded so far). Counts decoder calls."

    def __init__(self, vocab: int = 8):
        super().__init__()
        self.vocab, self.decode_calls = vocab, 0

    def encode(self, src, src_mask):
        return src.float().unsqueeze(-1)  # (B, S, 1): the script

    def decode(self, memory, src_mask, tgt, tgt_mask):
        self.decode_calls += 1
        assert tgt_mask.shape[-2:] == (tgt.size(1), tgt.size(1))
        t = tgt.size(1)
        return memory[:, t - 1 : t].expand(-1, t, -1)  # (B, t, 1), last position = next token

    def generator(self, out):
        return F.one_hot(out.squeeze(-1).long(), self.vocab).float().log()


def scripted_src():
    # end symbol 4: row 0 ends at step 2, row 1 at step 3, row 2 at step 1
    return torch.tensor(
        [
            [5, 4, 3, 3, 3, 3, 3, 3, 3],
            [3, 6, 4, 3, 4, 3, 3, 3, 3],
            [4, 6, 6, 6, 6, 6, 6, 6, 6],
        ]
    )


def test_greedy_decode_stops_rows_at_end_symbol_and_ends_early():
    src = scripted_src()
    m = Scripted()
    ys = greedy_decode(
        m,
        src,
        torch.ones(3, 1, 9, dtype=torch.bool),
        max_len=10,
        start_symbol=1,
        end_symbol=4,
        pad=0,
    )
    torch.testing.assert_close(ys, torch.tensor([[1, 5, 4, 0], [1, 3, 6, 4], [1, 4, 0, 0]]))
    assert m.decode_calls == 3  # stopped once every row had ended, not after max_len - 1 steps


def test_greedy_decode_without_pad_fills_with_end_symbol():
    ys = greedy_decode(
        Scripted(),
        scripted_src(),
        torch.ones(3, 1, 9, dtype=torch.bool),
        max_len=10,
        start_symbol=1,
        end_symbol=4,
    )
    torch.testing.assert_close(ys, torch.tensor([[1, 5, 4, 4], [1, 3, 6, 4], [1, 4, 4, 4]]))


def test_greedy_decode_runs_to_max_len_without_end_symbol():
    m = Scripted()
    ys = greedy_decode(
        m, scripted_src(), torch.ones(3, 1, 9, dtype=torch.bool), max_len=6, start_symbol=1, pad=0
    )
    torch.testing.assert_close(
        ys, torch.cat([torch.ones(3, 1, dtype=torch.long), scripted_src()[:, :5]], dim=1)
    )
    assert m.decode_calls == 5


def test_greedy_decode_row_that_never_ends_reaches_max_len():
    src = scripted_src()
    src[1] = 3  # row 1 never emits the end symbol
    ys = greedy_decode(
        Scripted(),
        src,
        torch.ones(3, 1, 9, dtype=torch.bool),
        max_len=7,
        start_symbol=1,
        end_symbol=4,
        pad=0,
    )
    assert ys.shape == (3, 7)
    torch.testing.assert_close(ys[1], torch.tensor([1, 3, 3, 3, 3, 3, 3]))
    torch.testing.assert_close(ys[0], torch.tensor([1, 5, 4, 0, 0, 0, 0]))
    torch.testing.assert_close(ys[2], torch.tensor([1, 4, 0, 0, 0, 0, 0]))


def test_greedy_decode_max_len_one_is_the_start_symbol():
    m = Scripted()
    ys = greedy_decode(m, scripted_src(), None, max_len=1, start_symbol=2, end_symbol=4, pad=0)
    torch.testing.assert_close(ys, torch.full((3, 1), 2))
    assert m.decode_calls == 0


def test_greedy_decode_rejects_start_symbol_equal_to_pad():
    with pytest.raises(ValueError, match="start_symbol=0 is the padding id"):
        greedy_decode(Scripted(), scripted_src(), None, 5, start_symbol=0, pad=0)


@pytest.mark.parametrize("max_len", [0, -1])
def test_greedy_decode_rejects_max_len_below_one(max_len):
    with pytest.raises(ValueError, match=f"max_len must be at least 1, got {max_len}"):
        greedy_decode(Scripted(), scripted_src(), None, max_len, start_symbol=1)


# =========================================================================== 7. copy_task_batches


def test_copy_task_batches_shapes_and_values():
    vocab = 5
    batches = list(
        copy_task_batches(
            vocab, batch_size=64, n_batches=3, seq_len=10, rng=torch.Generator().manual_seed(0)
        )
    )
    assert len(batches) == 3
    for b in batches:
        assert isinstance(b, Batch)
        assert b.src.shape == (64, 10)
        assert b.tgt.shape == b.tgt_y.shape == (64, 9)
        assert b.tgt_mask.shape == (64, 9, 9) and b.src_mask.shape == (64, 1, 10)
        assert (b.src[:, 0] == 1).all()
        content = b.src[:, 1:]
        assert content.min() >= 2 and content.max() <= vocab - 1
        assert set(content.unique().tolist()) == set(range(2, vocab))  # every content id can occur
        # the target is the source: decoder input = src without its last token, labels = src without the start
        torch.testing.assert_close(b.tgt, b.src[:, :-1])
        torch.testing.assert_close(b.tgt_y, b.src[:, 1:])
        assert b.src_mask.all()  # no padding (id 0)
        assert b.ntokens == 64 * 9
    assert not torch.equal(batches[0].src, batches[1].src)


def test_copy_task_batches_are_deterministic_with_an_rng():
    a = [b.src for b in copy_task_batches(V, 8, 4, seq_len=6, rng=torch.Generator().manual_seed(7))]
    b = [b.src for b in copy_task_batches(V, 8, 4, seq_len=6, rng=torch.Generator().manual_seed(7))]
    c = [b.src for b in copy_task_batches(V, 8, 4, seq_len=6, rng=torch.Generator().manual_seed(8))]
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    assert any(not torch.equal(x, z) for x, z in zip(a, c))


def test_copy_task_batches_is_lazy_and_zero_batches_is_empty():
    assert list(copy_task_batches(V, 4, 0)) == []
    gen = copy_task_batches(V, 4, 2, seq_len=3)
    assert next(gen).src.shape == (4, 3)


# =========================================================================== FusedLabelSmoothing


def readable_and_fused(
    smoothing: float,
    padding_idx: int,
    chunk: int,
    vocab: int = 37,
    d: int = 8,
    n: int = 23,
    seed: int = 0,
):
    "The same generator, decoder outputs and labels, twice: for the readable path and for the fused one."
    torch.manual_seed(seed)
    gen = Generator(d, vocab)
    h = torch.randn(n, d)
    target = torch.randint(0, vocab, (n,))
    target[::4] = padding_idx % vocab  # some padded rows
    twin = copy.deepcopy(gen)
    return (gen, h.clone().requires_grad_(), target), (
        FusedLabelSmoothing(twin, padding_idx, smoothing, chunk=chunk),
        h.clone().requires_grad_(),
        target,
    )


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.4])
@pytest.mark.parametrize("padding_idx", [0, 9, -1], ids=["pad-first", "pad-middle", "pad-last"])
@pytest.mark.parametrize(
    "chunk", [37 * 5, 37 * 100, 1], ids=["uneven-chunks", "one-chunk", "row-by-row"]
)
def test_fused_label_smoothing_matches_generator_and_label_smoothing(smoothing, padding_idx, chunk):
    (gen, h, target), (fused, h2, _) = readable_and_fused(smoothing, padding_idx, chunk)
    readable = LabelSmoothing(37, padding_idx % 37, smoothing)(gen(h), target)
    loss = fused(h2, target)
    torch.testing.assert_close(loss, readable, rtol=1e-5, atol=1e-5)
    (2.5 * readable).backward()
    (2.5 * loss).backward()  # the backward pass scales the gradients by the incoming one
    torch.testing.assert_close(h2.grad, h.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        fused.generator.proj.weight.grad, gen.proj.weight.grad, rtol=1e-5, atol=1e-6
    )
    torch.testing.assert_close(
        fused.generator.proj.bias.grad, gen.proj.bias.grad, rtol=1e-5, atol=1e-6
    )


def test_fused_label_smoothing_builds_logits_one_chunk_at_a_time(monkeypatch):
    _, (fused, h, target) = readable_and_fused(0.1, 0, chunk=37 * 5)
    rows, linear = [], F.linear
    monkeypatch.setattr(
        F, "linear", lambda x, w, b=None: rows.append(x.shape[0]) or linear(x, w, b)
    )
    fused(h, target).backward()
    assert rows == [5, 5, 5, 5, 3]  # 23 rows, at most 5 x 37 logits at once


def test_fused_label_smoothing_gradients_reach_tied_weights():
    "With §3.4's sharing, the generator's weight is the embedding's: both paths give it the same gradient."
    cfg = ModelConfig(N=1, d_model=16, d_ff=32, h=2, dropout=0.0, share_embeddings=True)
    batch = next(copy_task_batches(V, 3, 1, seq_len=6, rng=torch.Generator().manual_seed(5)))
    grads = []
    for fused in (False, True):
        torch.manual_seed(0)
        model = cfg.build(V, V)
        assert model.generator.proj.weight is model.tgt_embed[0].lut.weight
        out = model(batch.src, batch.tgt, batch.src_mask, batch.tgt_mask).flatten(0, 1)
        if fused:
            loss = FusedLabelSmoothing(model.generator, PAD, 0.1, chunk=V * 4)(
                out, batch.tgt_y.flatten()
            )
        else:
            loss = crit()(model.generator(out), batch.tgt_y.flatten())
        loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_fused_label_smoothing_without_gradients_gives_the_loss_only():
    (gen, h, target), (fused, h2, _) = readable_and_fused(0.1, 0, chunk=37 * 3)
    with torch.no_grad():
        loss = fused(h2, target)
        expected = LabelSmoothing(37, 0, 0.1)(gen(h), target)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)


def test_fused_label_smoothing_under_bfloat16_autocast_is_close():
    "Mixed precision: the logits come from a bfloat16 product in both paths; the log-softmax is float32 in both."
    (gen, h, target), (fused, h2, _) = readable_and_fused(0.1, 0, chunk=37 * 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        readable = LabelSmoothing(37, 0, 0.1)(F.log_softmax(gen.proj(h).float(), -1), target)
        loss = fused(h2, target)
    torch.testing.assert_close(loss, readable, rtol=2e-2, atol=2e-2)
    readable.backward()
    loss.backward()
    torch.testing.assert_close(h2.grad, h.grad, rtol=5e-2, atol=5e-2)


def test_run_epoch_with_fused_loss_trains_like_the_readable_path():
    batches = padded_batches()
    readable, fused = tiny_model(), tiny_model()
    results = []
    for model, criterion in (
        (readable, crit()),
        (fused, FusedLabelSmoothing(fused.generator, PAD, 0.1, chunk=V * 3)),
    ):
        opt = torch.optim.SGD(
            model.parameters(), lr=0.5
        )  # not Adam: it would blow up rounding noise in zero gradients
        results.append(
            [run_epoch(batches, model, criterion, opt, progress=False)[0] for _ in range(3)]
        )
        results.append(run_epoch(batches, model, criterion, None, progress=False)[0])
    assert results[0] == pytest.approx(results[2], rel=1e-5)
    assert results[1] == pytest.approx(results[3], rel=1e-5)
    assert results[0][2] < results[0][0]  # it did train
    assert_params_equal(params(fused), params(readable), atol=1e-5)


@pytest.mark.parametrize("h_shape,t_shape", [((4, 3, 8), (12,)), ((6, 8), (5,)), ((6, 8), (6, 1))])
def test_fused_label_smoothing_rejects_bad_shapes(h_shape, t_shape):
    fused = FusedLabelSmoothing(Generator(8, 37), 0, 0.1)
    with pytest.raises(ValueError, match="expected decoder outputs \\(N, D\\) and N labels"):
        fused(torch.randn(h_shape), torch.zeros(t_shape, dtype=torch.long))


@pytest.mark.parametrize("chunk", [0, -5])
def test_fused_label_smoothing_rejects_a_bad_chunk(chunk):
    with pytest.raises(ValueError, match=f"chunk must be at least 1, got {chunk}"):
        FusedLabelSmoothing(Generator(8, 37), 0, 0.1, chunk=chunk)


def test_fused_label_smoothing_rejects_labels_out_of_range():
    fused = FusedLabelSmoothing(Generator(8, 37), 0, 0.1)
    with pytest.raises(ValueError, match="37"):
        fused(torch.randn(3, 8), torch.tensor([1, 37, 2]))
