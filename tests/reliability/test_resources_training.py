"""Training that runs out of range (issue 36): a diverging run stops in one line naming the epoch
and the loss before it, keeping the last good checkpoint; a perplexity past float's range is inf,
not an OverflowError; a resumed run's state that does not fit is one line naming last.pt; and
`--max-parameters` bounds the checkpoint a resume loads.

The module trains one tiny run, whose second epoch diverges (a loss made NaN after a few batches).
"""

from __future__ import annotations

import io
import math
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import torch
from clitools import train_argv

from annotated_transformer import pipeline
from annotated_transformer.checkpoint import load_checkpoint
from annotated_transformer.cli import main
from annotated_transformer.pipeline import Learner, perplexity, restore
from annotated_transformer.training import noam_optimizer


def nan_from_batch(at: int, in_epoch: int = 2):
    "A fit_epoch whose loss is NaN from the `at`-th training batch of epoch `in_epoch` on."
    real = pipeline.fit_epoch

    def fit_epoch(epoch, learner, *rest):
        if epoch + 1 == in_epoch:
            loss_fn, batches = learner.loss_fn, [0]

            def poisoned(out, labels):
                batches[0] += 1
                loss = loss_fn(out, labels)
                return loss * math.nan if batches[0] >= at else loss

            learner.loss_fn = poisoned
        return real(epoch, learner, *rest)

    return fit_epoch


@pytest.fixture(scope="module")
def diverged(synthetic_corpus: Path, tmp_path_factory: pytest.TempPathFactory):
    "A run whose second epoch diverges at its third batch: its folder, status, stdout and stderr."
    out = tmp_path_factory.mktemp("runs") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "fit_epoch", nan_from_batch(3))
        with redirect_stdout(io.StringIO()) as out_text, redirect_stderr(io.StringIO()) as err_text:
            status = main(train_argv(out, synthetic_corpus, "--epochs", "2"))
    return out, status, out_text.getvalue(), err_text.getvalue()


# --------------------------------------------------------------------------- a diverging run
def test_a_diverging_run_stops_in_one_line_naming_the_epoch(diverged):
    out, status, _, err = diverged
    assert status == 1
    assert err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err, err
    assert "FloatingPointError" not in err
    assert "the run diverged in epoch 2: the loss is nan at batch" in err
    assert "after a mean loss of" in err and "per token" in err  # the last finite loss
    assert "last.pt keeps epoch 1 (training loss" in err


def test_a_diverging_run_keeps_the_last_good_checkpoint(diverged):
    out, *_ = diverged
    last = load_checkpoint(out / "last.pt")
    assert last.epoch == 1 and all(math.isfinite(e["train_loss"]) for e in last.history)
    assert sorted(p.name for p in out.glob("*.pt")) == ["epoch1.pt", "last.pt"]
    assert list(out.glob(".*.tmp")) == []


def test_a_run_that_diverges_at_once_says_nothing_was_written(
    synthetic_corpus, tmp_path, capsys, monkeypatch
):
    "Epoch 1 diverges at its first batch: no checkpoint, and the folder it made is gone."
    monkeypatch.setattr(pipeline, "fit_epoch", nan_from_batch(1, in_epoch=1))
    out = tmp_path / "run"
    out.mkdir()
    shutil.copy(Path(__file__), out / "notes.py")  # a file of the user's: kept
    assert main(train_argv(out, synthetic_corpus, "--epochs", "1")) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err, err
    assert "diverged in epoch 1: the loss is nan at batch 0 of the run" in err
    assert "its first batch" in err and "no checkpoint was written" in err
    assert sorted(p.name for p in out.iterdir()) == ["notes.py"]  # no .lock left either


@pytest.mark.parametrize(
    "nll, ppl", [(0.0, 1.0), (1000.0, math.inf), (math.inf, math.inf)], ids=["0", "1000", "inf"]
)
def test_perplexity_past_floats_range_is_inf(nll, ppl):
    assert perplexity(nll) == ppl  # exact: exp(0) is 1, and past float's range is inf


def test_perplexity_of_nan_is_nan():
    assert math.isnan(perplexity(math.nan))


# ------------------------------------------------------------- a resumed run's state
def learner_of(ckpt) -> Learner:
    "A learner for the checkpoint's model, as the trainer builds it (no loss needed here)."
    model = ckpt.build_model().train()
    optimizer, scheduler = noam_optimizer(model, ckpt.config.model.d_model, warmup=20)
    return Learner(model, None, optimizer, scheduler, None)


def broken_moments(ckpt) -> None:
    "Adam's first moment of one parameter reshaped: it loads, and would fail at the first step."
    state = next(iter(ckpt.resume.optimizer["state"].values()))
    state["exp_avg"] = state["exp_avg"].reshape(-1)[:1].clone()


def broken_optimizer(ckpt) -> None:
    ckpt.resume.optimizer = {"state": {}}


def broken_schedule(ckpt) -> None:
    ckpt.resume.scheduler = {"lr_lambdas": ["x"] * 7}


def broken_rng(ckpt) -> None:
    ckpt.resume.rng = [{"torch": torch.zeros(3), "python": "x"}]


def weights_only(ckpt) -> None:
    ckpt.resume = None


BROKEN = [  # (what is broken, what the error says)
    (broken_moments, "holds an optimizer exp_avg of (1,) for a parameter of"),
    (broken_optimizer, "holds an optimizer state this run cannot load"),
    (broken_schedule, "holds a schedule this run cannot load"),
    (broken_rng, "holds a random state this run cannot load"),
    (weights_only, "holds weights only (an epoch file?)"),
]


@pytest.mark.parametrize("damage, said", BROKEN, ids=[f.__name__ for f, _ in BROKEN])
def test_a_resumed_state_that_does_not_fit_is_one_line_naming_last_pt(diverged, damage, said):
    out, *_ = diverged
    ckpt = load_checkpoint(out / "last.pt")
    damage(ckpt)
    with pytest.raises(ValueError) as error:
        restore(learner_of(ckpt), ckpt, print, out / "last.pt")
    message = str(error.value)
    assert message.startswith(f"{out / 'last.pt'} holds ") and said in message
    assert "\n" not in message


def test_resume_bounds_the_checkpoint_by_max_parameters(diverged, synthetic_corpus, capsys):
    out, *_ = diverged
    argv = train_argv(out, synthetic_corpus, "--epochs", "3", "--resume", "--max-parameters", "10")
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err, err
    assert str(out / "last.pt") in err and "--max-parameters" in err
    assert load_checkpoint(out / "last.pt").epoch == 1


def test_a_file_size_limit_is_one_line_naming_the_checkpoint(synthetic_corpus: Path, tmp_path):
    """Round four: under `ulimit -f`, train ended in an internal error from torch.save ('unexpected
    pos ...') after its first epoch; it names last.pt and the limit, before training (the size of a
    checkpoint is known from the model)."""
    from clitools import cli

    limit = 300_000  # bytes: the run's small files fit, a checkpoint does not
    done = cli(*train_argv(tmp_path / "run", synthetic_corpus), size_limit=limit)
    assert done.returncode == 1, done.stderr
    [line] = [line for line in done.stderr.splitlines() if "error:" in line]  # warnings aside
    assert (
        f"file too large for {tmp_path / 'run' / 'last.pt'} (a size limit of {limit:,} bytes, "
        in line
    )
    assert "epoch 1" not in done.stdout  # refused before training
    run = tmp_path / "run"  # a new run that saved nothing leaves no lock and no marker behind
    assert not run.exists() or not {".lock", "annotated-transformer-run.json"} & {
        p.name for p in run.iterdir()
    }, sorted(p.name for p in run.iterdir())
