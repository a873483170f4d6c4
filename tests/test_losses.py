"""Tests for annotated_transformer.losses: label smoothing (Section 5.4).

What is checked:
1. `LabelSmoothing` / `smoothed_targets`: the closed form against `F.kl_div`, gradients, -inf
   log-probabilities, padding, negative padding indices, clear errors on bad labels, and the
   difference from PyTorch's own `label_smoothing`.
2. `FusedLabelSmoothing`: the readable path's loss and gradients from the decoder's outputs, chunk
   by chunk, tied weights, no gradients, bfloat16, through train_epoch, and clear errors.
3. `sequence_loss`: the loss function the training loops call, over every target position.

Everything runs on a CPU in a few seconds with tiny models, and needs no data or network.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch
import torch.nn.functional as F
from synthetic import TINY_VOCAB as V
from synthetic import assert_params_equal, params, tiny_model

from annotated_transformer.batching import Batch, copy_task_batches
from annotated_transformer.losses import LabelSmoothing, sequence_loss, smoothed_targets
from annotated_transformer.model import Generator, ModelConfig
from annotated_transformer.pipeline import EpochOptions, FusedLabelSmoothing, train_epoch
from annotated_transformer.training import Updates

PAD = 0


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def crit() -> LabelSmoothing:
    return LabelSmoothing(V, PAD, 0.1)


def padded_batches() -> list[Batch]:
    "Three batches of different sizes, with padding, so ntokens differs from B * T."
    out = []
    for i, (bsz, length) in enumerate([(3, 6), (2, 5), (4, 7)]):
        g = torch.Generator().manual_seed(100 + i)
        data = torch.randint(2, V, (bsz, length), generator=g)
        data[:, 0] = 1
        data[0, length - 2 :] = PAD  # pad the end of the first row
        out.append(Batch(data, data.clone(), pad=PAD))
    return out


# =========================================================================== 1. LabelSmoothing


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
    assert only_pad.item() == 0.0  # exact: every row is padding, set to 0 before the sum
    only_pad.backward()
    assert torch.equal(x.grad, torch.zeros_like(x))  # exact: no gradient through the mask


@pytest.mark.parametrize("pad", [0, 9])
def test_label_smoothing_zero_is_cross_entropy(pad):
    size = 50
    logits, target = random_logits_and_labels(64, size, pad, seed=3)
    loss = LabelSmoothing(size, pad, 0.0)(F.log_softmax(logits, dim=-1), target)
    ref = F.cross_entropy(logits, target, ignore_index=pad, reduction="sum")
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-4)


def test_label_smoothing_differs_from_pytorch_label_smoothing():
    # Convention difference: PyTorch's `label_smoothing=eps` takes the cross-entropy H(q', p) to q'
    # = (1 - eps) * onehot + eps / V on EVERY class (the true class and the padding class included).
    # The paper's / this module's loss is the KL divergence KL(q || p) to q = 1 - eps on the true
    # class, eps / (V - 2) on each class that is neither true nor padding, and 0 on padding. KL and
    # cross-entropy differ by the entropy of q (a constant, no gradient), and the two q's differ
    # too, so neither the values nor the gradients are equal.
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
    # gradient w.r.t. the logits is p - q: at the padding column ours is p_pad, PyTorch's p_pad -
    # eps / V
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
    assert (q[:, pad] == 0).all()  # exact: set to 0
    assert (q[~keep] == 0).all()  # exact: set to 0
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
    with pytest.raises(ValueError, match=f"at least 3, got size={size}"):
        LabelSmoothing(size, 0, 0.1)


@pytest.mark.parametrize("shape", [(10,), (4, 9), (4, 11), (2, 3, 10)])
def test_label_smoothing_rejects_wrong_input_shape(shape):
    crit = LabelSmoothing(10, 0, 0.1)
    with pytest.raises(ValueError, match=r"expected log-probabilities \(N, 10\) and N labels"):
        crit(torch.randn(*shape), torch.ones(shape[0], dtype=torch.long))


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_label_smoothing_negative_padding_idx_counts_from_the_end(smoothing):
    # before: -1 was compared with the labels as it was (so padding rows, labelled size - 1,
    # counted) and x[:, :-1] + x[:, 0:] read the last class twice
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
    message = rf"^padding_idx={padding_idx} is outside \[-10, 10\), the vocabulary$"
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
        match=rf"^labels must be integer class ids \(int64 or int32\), "
        rf"got {re.escape(str(dtype))}$",
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
    # before, with 3 labels for 4 rows and no smoothing, gather read the first 3 rows and the loss
    # silently left one out
    crit = LabelSmoothing(10, 0, smoothing)
    with pytest.raises(
        ValueError,
        match=r"^expected log-probabilities \(N, 10\) and N labels, got \(4, 10\) and "
        + re.escape(str(shape)),
    ):
        crit(F.log_softmax(torch.randn(4, 10), dim=-1), torch.ones(shape, dtype=torch.long))


# =========================================================================== 2. FusedLabelSmoothing


def readable_and_fused(
    smoothing: float,
    padding_idx: int,
    chunk: int,
    vocab: int = 37,
    d: int = 8,
    n: int = 23,
    seed: int = 0,
):
    """The same generator, decoder outputs and labels, twice: for the readable path and for the
    fused one."""
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
    """With §3.4's sharing, the generator's weight is the embedding's: both paths give it the same
    gradient."""
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
    """Mixed precision: the logits come from a bfloat16 product in both paths; the log-softmax is
    float32 in both."""
    (gen, h, target), (fused, h2, _) = readable_and_fused(0.1, 0, chunk=37 * 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        readable = LabelSmoothing(37, 0, 0.1)(F.log_softmax(gen.proj(h).float(), -1), target)
        loss = fused(h2, target)
    torch.testing.assert_close(loss, readable, rtol=2e-2, atol=2e-2)
    readable.backward()
    loss.backward()
    torch.testing.assert_close(h2.grad, h.grad, rtol=5e-2, atol=5e-2)


def test_train_epoch_with_fused_loss_trains_like_the_readable_path():
    batches = padded_batches()
    readable, fused = tiny_model(), tiny_model()
    results = []
    for model, loss_fn in (
        (readable, sequence_loss(crit(), readable.generator)),
        (fused, sequence_loss(FusedLabelSmoothing(fused.generator, PAD, 0.1, chunk=V * 3))),
    ):
        # not Adam: it would blow up rounding noise in zero gradients
        updates, quiet = (
            Updates(torch.optim.SGD(model.parameters(), lr=0.5)),
            EpochOptions(progress=False),
        )
        results.append(
            [train_epoch(batches, model, loss_fn, updates, options=quiet)[0] for _ in range(3)]
        )
        results.append(train_epoch(batches, model, loss_fn, options=quiet)[0])
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


# =========================================================================== 3. sequence_loss
def test_sequence_loss_applies_the_generator_then_the_criterion_to_every_position():
    model = tiny_model().eval()
    batch = padded_batches()[2]
    out = model(batch.src, batch.tgt, batch.src_mask, batch.tgt_mask)  # (B, T, D)
    loss = sequence_loss(crit(), model.generator)(out, batch.tgt_y)
    logp = model.generator(out)  # (B, T, V)
    by_row = sum(crit()(logp[b], batch.tgt_y[b]) for b in range(batch.src.size(0)))
    torch.testing.assert_close(loss, by_row)  # summed over the batch's tokens
    fused = sequence_loss(FusedLabelSmoothing(model.generator, PAD, 0.1))  # no generator: inside
    torch.testing.assert_close(fused(out, batch.tgt_y), loss, rtol=1e-5, atol=1e-5)
    seen = []
    sequence_loss(lambda x, t: seen.append((x.shape, t.shape)) or x.sum())(out, batch.tgt_y)
    assert seen == [((out.size(0) * out.size(1), 16), (out.size(0) * out.size(1),))]
    with pytest.raises(ValueError, match="and N labels"):
        sequence_loss(crit(), model.generator)(out, batch.tgt_y[:, :-1])
