"""Tests for annotated_transformer.training: the training loop and the schedule (Sections 5.2, 5.3).

What is checked:
1. `rate` and `noam_optimizer`: eq. (5)'s shape, Adam's settings, the schedule as the optimizer
   sees it, fused = unfused steps.
2. `run_epoch` (chapter 3's readable loop) and `train_epoch` (the trainer's, at scale), each
   checked the same way: gradient accumulation, scheduler stepping, counts, evaluation, clipping,
   and errors; `train_epoch` alone: NaN losses named by batch, `read_every`; and the two agree on
   the same inputs (mean loss, every step's gradients, the weights after an epoch). Their loss
   function is `losses.sequence_loss` of a criterion (tests/test_losses.py).

The data-parallel lines of train_epoch (`world`) are tested in tests/test_distributed.py. Old
checkpoints' counts (`train_state_from_dict`) are tested in tests/test_checkpoint.py. Everything
runs on a CPU in a few seconds with tiny models, and needs no data or network.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from synthetic import TINY_VOCAB as V
from synthetic import assert_params_equal, params, tiny_model
from torch import nn

from annotated_transformer.batching import Batch, copy_task_batches
from annotated_transformer.losses import LabelSmoothing, LossFn, sequence_loss
from annotated_transformer.model import ModelConfig
from annotated_transformer.pipeline import EpochOptions, train_epoch
from annotated_transformer.training import TrainState, Updates, noam_optimizer, rate, run_epoch

PAD = 0


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def max_param_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b))


def random_copy_data(batch_size: int, seq_len: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(2, V, (batch_size, seq_len), generator=g)
    data[:, 0] = 1
    return data


# ======================================================================= 1. rate and noam_optimizer


def test_rate_shape():
    assert rate(0, 512, 1.0, 4000) == rate(1, 512, 1.0, 4000)  # exact: step 0 is taken as 1
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
    assert opt.defaults["betas"] == (0.9, 0.98)  # exact: settings, copied
    assert opt.defaults["eps"] == 1e-9  # exact: a setting, copied
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


def test_noam_optimizer_passes_adams_settings_and_fused_takes_the_same_steps():
    """Other Adam settings reach Adam (the trainer asks for the fused kernel on GPUs); the fused
    kernel takes the same steps as Adam tensor by tensor."""
    assert noam_optimizer(tiny_model(), 16, fused=False)[0].defaults["fused"] is False
    models = [tiny_model(), tiny_model()]  # the same weights (seed 0)
    opts = [
        noam_optimizer(m, 16, warmup=3, fused=fused)[0] for m, fused in zip(models, (False, True))
    ]
    assert opts[1].defaults["fused"] is True
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


# =================================================== 2. run_epoch and train_epoch, and TrainState


QUIET = EpochOptions(progress=False)


def quiet_train_epoch(*args, **kwargs):
    "train_epoch without its progress bar."
    return train_epoch(*args, options=QUIET, **kwargs)


# the tests that hold for both loops
EPOCHS = pytest.mark.parametrize(
    "epoch", [run_epoch, quiet_train_epoch], ids=["run_epoch", "train_epoch"]
)


def crit() -> LabelSmoothing:
    return LabelSmoothing(V, PAD, 0.1)


def loss_of(model: nn.Module, criterion: nn.Module | None = None) -> LossFn:
    "The loss function run_epoch calls: label smoothing of the model's log-probabilities."
    return sequence_loss(criterion or crit(), model.generator)


def padded_batches() -> list[Batch]:
    "Three batches of different sizes, with padding, so ntokens differs from B * T."
    out = []
    for i, (bsz, length) in enumerate([(3, 6), (2, 5), (4, 7)]):
        data = random_copy_data(bsz, length, seed=100 + i)
        data[0, length - 2 :] = PAD  # pad the end of the first row
        out.append(Batch(data, data.clone(), pad=PAD))
    return out


@EPOCHS
def test_gradient_accumulation_equals_one_big_batch(epoch):
    data = [random_copy_data(8, 6, seed=s) for s in (1, 2)]
    for d in data:
        # padding in the second halves: every loss token weighs the same, whichever batch holds it
        d[6:, 2:] = PAD
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
    _, sa = epoch(whole, a, loss_of(a), Updates(opt_a, accum_iter=1))
    _, sb = epoch(halves, b, loss_of(b), Updates(opt_b, accum_iter=2))
    _, sc = epoch(halves, c, loss_of(c), Updates(opt_c, accum_iter=1))
    assert sa.optimizer_steps == sb.optimizer_steps == 2 and sb.batches == 4
    assert max_param_diff(start, params(a)) > 1e-3  # it did train
    assert_params_equal(params(a), params(b), atol=1e-6)
    assert (
        max_param_diff(params(a), params(c)) > 1e-4
    )  # four small steps are not the same: the check can tell


@EPOCHS
def test_scheduler_steps_once_per_optimizer_step_after_the_update(epoch):
    model = tiny_model()
    start = params(model)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    # lr 0.1 for the first optimizer step, then 0: a scheduler stepped before the update would give
    # no update
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.1 if s == 0 else 0.0)
    batches = list(copy_task_batches(V, 4, 4, seq_len=5, rng=torch.Generator().manual_seed(0)))
    _, state = epoch(batches[:2], model, loss_of(model), Updates(opt, sched, accum_iter=2))
    assert state.optimizer_steps == 1 and state.batches == 2
    assert sched.last_epoch == 1
    assert opt.param_groups[0]["lr"] == 0.0  # exact: the rate times the factor 0.0
    after_one = params(model)
    assert max_param_diff(start, after_one) > 1e-4
    _, state = epoch(batches[2:], model, loss_of(model), Updates(opt, sched, 2), state=state)
    assert state.optimizer_steps == 2 and sched.last_epoch == 2
    assert_params_equal(after_one, params(model))  # the second update ran at lr 0


@EPOCHS
def test_scheduler_with_noam_counts_optimizer_steps(epoch):
    model = tiny_model()
    opt, sched = noam_optimizer(model, 16, factor=1.0, warmup=3)
    batches = list(copy_task_batches(V, 2, 6, seq_len=4, rng=torch.Generator().manual_seed(1)))
    _, state = epoch(batches, model, loss_of(model), Updates(opt, sched, accum_iter=3))
    assert state.batches == 6 and state.optimizer_steps == 2
    assert sched.last_epoch == 2
    assert opt.param_groups[0]["lr"] == pytest.approx(rate(2, 16, 1.0, 3), rel=1e-12)


@EPOCHS
def test_incomplete_final_accumulation_is_a_step_over_its_own_tokens(epoch):
    batches = padded_batches()
    a = tiny_model()
    b = copy.deepcopy(a)
    opt_a = torch.optim.SGD(a.parameters(), lr=0.5)
    sched_a = torch.optim.lr_scheduler.LambdaLR(opt_a, lambda s: 1.0)
    _, state = epoch(batches, a, loss_of(a), Updates(opt_a, sched_a, accum_iter=2))
    assert state.batches == 3
    assert state.optimizer_steps == 2
    assert sched_a.last_epoch == 2
    assert all(
        p.grad is None for p in a.parameters()
    )  # the gradients were cleared after the last step
    # the last, lone batch is a step normalized by its own tokens: the same as one step on it with
    # accum_iter=1
    opt_b = torch.optim.SGD(b.parameters(), lr=0.5)
    epoch(batches[:2], b, loss_of(b), Updates(opt_b, accum_iter=2))
    epoch(batches[2:], b, loss_of(b), Updates(opt_b, accum_iter=1))
    assert_params_equal(params(a), params(b), atol=1e-6)


@EPOCHS
def test_train_state_counts_and_continues(epoch):
    batches = padded_batches()
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _, state = epoch(batches, model, loss_of(model), Updates(opt))
    ntok = sum(b.ntokens for b in batches)
    assert ntok < sum(b.tgt_y.numel() for b in batches)  # padding was present
    assert state == TrainState(batches=3, optimizer_steps=3, samples=3 + 2 + 4, tokens=ntok)
    given = TrainState(batches=10, optimizer_steps=4, samples=50, tokens=1000)
    _, out = epoch(batches, model, loss_of(model), Updates(opt, accum_iter=2), state=given)
    assert out is given
    assert out == TrainState(batches=13, optimizer_steps=6, samples=59, tokens=1000 + ntok)


@EPOCHS
def test_evaluation_changes_nothing_and_returns_mean_loss(epoch):
    batches = padded_batches()
    model = tiny_model()
    model.train()
    start = params(model)
    criterion = crit()
    loss, state = epoch(batches, model, loss_of(model, criterion), updates=None)
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
    train_loss, _ = epoch(batches, model, loss_of(model, criterion), Updates(opt))
    assert train_loss == pytest.approx(expected, rel=1e-5)


class NaNAt:
    "A loss function that gives a NaN at the call number `at`."

    def __init__(self, inner: LossFn, at: int):
        self.inner, self.at, self.calls = inner, at, 0

    def __call__(self, out, labels):
        loss = self.inner(out, labels)
        self.calls += 1
        return loss * float("nan") if self.calls == self.at + 1 else loss


@pytest.mark.parametrize("at", [0, 2])
def test_nan_loss_raises_naming_the_step(at):
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = list(copy_task_batches(V, 2, 4, seq_len=4, rng=torch.Generator().manual_seed(2)))
    with pytest.raises(FloatingPointError, match=f"the loss is nan at batch {at} of the run "):
        train_epoch(batches, model, NaNAt(loss_of(model), at), Updates(opt), options=QUIET)
    # evaluation stops too (it counts no steps, so the message cannot name the batch)
    with pytest.raises(FloatingPointError, match="the loss is nan"):
        train_epoch(batches, model, NaNAt(loss_of(model), at), None, options=QUIET)


@pytest.mark.parametrize("read_every", [1, 2, 50])
@pytest.mark.parametrize("at", [0, 3])
def test_nan_loss_named_whenever_the_losses_are_read(at, read_every):
    """Losses stay on the device and are read every `read_every` batches; the NaN is still named by
    its batch."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = list(copy_task_batches(V, 2, 5, seq_len=4, rng=torch.Generator().manual_seed(2)))
    with pytest.raises(
        FloatingPointError,
        match=f"the loss is nan at batch {at} of the run "
        f"\\(batch {at} of this pass, after {at} optimizer steps\\)",
    ):
        options = EpochOptions(read_every=read_every, progress=False)
        train_epoch(batches, model, NaNAt(loss_of(model), at), Updates(opt), options=options)


@pytest.mark.parametrize("read_every", [1, 2, 7])
def test_read_every_does_not_change_the_mean_loss(read_every):
    batches, model = padded_batches(), tiny_model()
    losses = [
        train_epoch(
            batches, model, loss_of(model), options=EpochOptions(read_every=r, progress=False)
        )[0]
        for r in (read_every, 50)
    ]
    # the same float32 losses, summed in float64 in other groups: ~1e-16 apart
    assert losses[0] == pytest.approx(losses[1], rel=1e-12)


@pytest.mark.parametrize("read_every", [0, -2])
def test_bad_read_every_raises(read_every):
    model = tiny_model()
    loss = loss_of(model)
    with pytest.raises(ValueError, match=f"read_every must be at least 1, got {read_every}"):
        train_epoch(padded_batches(), model, loss, options=EpochOptions(read_every=read_every))


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
        run_epoch(batches(), model, loss_of(model), Updates(opt, accum_iter=accum_iter))
    assert consumed == []
    assert_params_equal(start, params(model))


def update_norm(before: list[torch.Tensor], after: list[torch.Tensor]) -> float:
    return math.sqrt(sum(((x - y) ** 2).sum().item() for x, y in zip(before, after)))


@EPOCHS
def test_max_grad_norm_clips_the_update(epoch):
    batch = next(copy_task_batches(V, 4, 1, seq_len=6, rng=torch.Generator().manual_seed(4)))
    free = tiny_model()
    clipped = copy.deepcopy(free)
    loose = copy.deepcopy(free)
    start = params(free)
    for model, max_norm in ((free, None), (clipped, 1e-3), (loose, 1e6)):
        epoch(
            [batch],
            model,
            loss_of(model),
            Updates(torch.optim.SGD(model.parameters(), lr=1.0), max_grad_norm=max_norm),
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
@EPOCHS
def test_empty_epoch_raises(training, epoch):
    model = tiny_model()
    updates = Updates(torch.optim.SGD(model.parameters(), lr=1.0)) if training else None
    with pytest.raises(ValueError, match="no batches"):
        epoch([], model, loss_of(model), updates)
    with pytest.raises(ValueError, match="no batches"):
        epoch(iter(()), model, loss_of(model), updates)


def test_train_state_counts_a_batch():
    batch = padded_batches()[0]
    state = TrainState(batches=1, optimizer_steps=1, samples=2, tokens=3)
    state.count(batch)
    assert state == TrainState(2, 1, 2 + 3, 3 + batch.ntokens)


@EPOCHS
def test_the_loss_function_sees_the_decoder_outputs_and_the_labels(epoch):
    "run_epoch calls its loss function with the decoder's outputs (B, T, D) and the labels (B, T)."
    model, seen = tiny_model(), []

    def recording(out, labels):
        seen.append((tuple(out.shape), labels))
        return loss_of(model)(out, labels)

    batches = padded_batches()
    epoch(batches, model, recording, None)
    assert [shape for shape, _ in seen] == [(*b.tgt.shape, 16) for b in batches]
    assert all(labels is b.tgt_y for (_, labels), b in zip(seen, batches))


# ================================================= 3. the readable loop and the one at scale agree


class RecordingSGD(torch.optim.SGD):
    "SGD that keeps a copy of the gradients of every step it takes."

    def __init__(self, params, lr: float):
        super().__init__(params, lr=lr)
        self.seen: list[list[torch.Tensor]] = []

    def step(self, closure=None):
        self.seen.append([p.grad.clone() for g in self.param_groups for p in g["params"]])
        return super().step(closure)


def five_batches() -> list[Batch]:
    "Five batches of different sizes, with padding: steps of 2, 2 and 1 batches at accum_iter=2."
    out = []
    for i in range(5):
        data = random_copy_data(3 + i % 2, 5 + i, seed=200 + i)
        data[0, -2:] = PAD
        out.append(Batch(data, data.clone(), pad=PAD))
    return out


def one_epoch(loop, model: nn.Module, accum_iter: int, max_grad_norm: float | None):
    "Train an epoch with `loop` from the same random state: the mean loss and the optimizer."
    opt = RecordingSGD(model.parameters(), lr=0.5)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    torch.manual_seed(7)  # the same dropout masks for both loops
    updates = Updates(opt, sched, accum_iter, max_grad_norm)
    loss, state = loop(five_batches(), model, loss_of(model), updates)
    return loss, state, opt


@pytest.mark.parametrize("max_grad_norm", [None, 0.05])
def test_run_epoch_and_train_epoch_agree(max_grad_norm):
    """The readable loop of chapter 3 and the trainer's loop at scale, on the same inputs: the same
    mean loss, the same gradients at every optimizer step, the same weights after the epoch."""
    torch.manual_seed(0)
    readable = ModelConfig(N=1, d_model=16, d_ff=32, h=2, dropout=0.1).build(V, V)
    at_scale, other = copy.deepcopy(readable), copy.deepcopy(readable)
    loss_a, state_a, opt_a = one_epoch(run_epoch, readable, 2, max_grad_norm)
    loss_b, state_b, opt_b = one_epoch(quiet_train_epoch, at_scale, 2, max_grad_norm)
    assert state_a == state_b and state_a.optimizer_steps == 3
    # both loops make the same float operations in the same order (optimizer_step for both);
    # only the sums of the float32 losses, in float64, may differ: ~1e-16 relative
    assert loss_a == pytest.approx(loss_b, rel=1e-9)
    assert len(opt_a.seen) == len(opt_b.seen) == 3
    for step_a, step_b in zip(opt_a.seen, opt_b.seen):
        assert_params_equal(step_a, step_b, atol=1e-9)
    assert_params_equal(params(readable), params(at_scale), atol=1e-9)
    # the comparison can tell: another accumulation takes other steps
    _, _, opt_c = one_epoch(quiet_train_epoch, other, 1, max_grad_norm)
    assert max_param_diff(opt_a.seen[0], opt_c.seen[0]) > 1e-4
    assert max_param_diff(params(readable), params(other)) > 1e-4
    # and evaluation gives the same mean loss
    evaluated = [
        loop(five_batches(), m, loss_of(m))
        for loop, m in ((run_epoch, readable), (quiet_train_epoch, at_scale))
    ]
    assert evaluated[0][0] == pytest.approx(evaluated[1][0], rel=1e-9)
