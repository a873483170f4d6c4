"""Tests for data-parallel training (annotated_transformer.distributed, and the lines of train_epoch
and train it relies on).

Part 6 (nbs/16_distributed.ipynb) shows with real two-process runs that two processes train what one
process accumulating both their batches trains, and that a killed two-process run resumes to the
uninterrupted weights. These tests check what the chapter does not show. Multi-process runs:
`torchrun --standalone` starts two CPU processes with the gloo backend, training a tiny model
through the console command on the synthetic pairs of conftest.py.
1. The gradients are all-reduced only on the batch that ends an optimizer step (a DDP communication
   hook counts them).
2. A killed single-process run leaves a loadable last checkpoint, and resuming from it ends where an
   uninterrupted run ends.
3. Bad input: more processes than batches, a truncated checkpoint to resume from (a failed
   checkpoint write: tests/test_checkpoint.py).
4. Mixed precision and torch.compile train on the CPU too; `default_precision` picks bfloat16 only
   on GPUs with it.
"""

from __future__ import annotations

import copy
import math
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

import annotated_transformer
from annotated_transformer import cli, pipeline
from annotated_transformer._chapters import largest_difference, run_cli, start_python
from annotated_transformer.batching import Batch
from annotated_transformer.checkpoint import load_checkpoint, save_checkpoint
from annotated_transformer.config import RuntimeOptions, TrainConfig
from annotated_transformer.data import InMemory, load_multi30k
from annotated_transformer.distributed import default_precision, start_runtime, unwrap
from annotated_transformer.losses import LabelSmoothing, sequence_loss
from annotated_transformer.model import ModelConfig
from annotated_transformer.pipeline import EpochOptions, train, train_epoch
from annotated_transformer.training import Updates

TINY = ["--model", "tiny", "--dropout", "0", "--warmup", "20", "--quiet"]
QUIET = RuntimeOptions(progress=False)


# ======================================================================= 1. the gradient all-reduce
def _count_gradient_all_reduces(
    rank: int, world: int, init_file: str, accum_iter: int, out: str
) -> None:
    """One of `world` processes: train 6 batches with `accum_iter`, counting DDP's gradient
    all-reduces (one bucket each)."""
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world
    )
    torch.manual_seed(0)
    model = DistributedDataParallel(
        ModelConfig(N=1, d_model=16, d_ff=32, h=2, dropout=0.0).build(20, 20), bucket_cap_mb=1000
    )
    calls = []

    def counting_hook(process_group, bucket):
        calls.append(bucket.index())
        return default_hooks.allreduce_hook(process_group, bucket)

    model.register_comm_hook(None, counting_hook)
    g = torch.Generator().manual_seed(rank)
    batches = []
    for _ in range(6):
        data = torch.randint(3, 20, (4, 8), generator=g)
        data[:, 0] = 1
        batches.append(Batch(data, data, pad=0))
    train_epoch(
        batches,
        model,
        sequence_loss(LabelSmoothing(20, 0, 0.1), unwrap(model).generator),
        Updates(torch.optim.SGD(model.parameters(), lr=0.1), accum_iter=accum_iter),
        # train_epoch is told that it runs in a group: it does not look
        options=EpochOptions(progress=False, world=world),
    )
    Path(out, f"rank{rank}").write_text(str(len(calls)))
    torch.distributed.destroy_process_group()


@pytest.mark.parametrize("accum_iter", [1, 3])
def test_gradients_are_all_reduced_only_on_the_batch_that_ends_a_step(
    accum_iter: int, tmp_path: Path
) -> None:
    torch.multiprocessing.spawn(
        _count_gradient_all_reduces,
        args=(2, str(tmp_path / "store"), accum_iter, str(tmp_path)),
        nprocs=2,
    )
    assert [int((tmp_path / f"rank{r}").read_text()) for r in range(2)] == [6 // accum_iter] * 2


# =========================================================================== 2. failures
def test_a_killed_run_keeps_its_checkpoint_and_resumes_to_the_same_weights(
    data_dir: Path, tmp_path: Path
) -> None:
    args = ["train", "--max-tokens", "400", "--epochs", "8", "--data-dir", str(data_dir), *TINY]
    killed = start_python(
        "-m", "annotated_transformer.cli", *args, "--out", str(tmp_path / "killed")
    )
    deadline = time.time() + 120
    while not (tmp_path / "killed" / "last.pt").exists():
        assert killed.poll() is None and time.time() < deadline, (
            "the run ended before its first checkpoint"
        )
        time.sleep(0.02)
    killed.kill()
    killed.communicate(timeout=60)
    survivor = load_checkpoint(tmp_path / "killed" / "last.pt")  # intact: it loads
    assert 1 <= survivor.epoch < 8
    resumed = run_cli(*args, "--out", str(tmp_path / "killed"), "--resume", timeout=300)
    whole = run_cli(*args, "--out", str(tmp_path / "whole"), timeout=300)
    assert resumed.returncode == 0 and whole.returncode == 0, (
        resumed.stderr[-3000:] + whole.stderr[-3000:]
    )
    assert (
        f"resuming from {tmp_path / 'killed' / 'last.pt'} after epoch {survivor.epoch}"
        in resumed.stdout
    )
    assert (
        largest_difference(tmp_path / "killed" / "last.pt", tmp_path / "whole" / "last.pt") < 1e-6
    )


# =========================================================================== 3. bad input
def test_more_processes_than_batches_is_a_clear_error(data_dir: Path, tmp_path: Path) -> None:
    done = run_cli(
        "train",
        "--out",
        str(tmp_path / "run"),
        "--data-dir",
        str(data_dir),
        "--max-tokens",
        "100000",
        *TINY,
        nproc=2,
        log_dir=tmp_path / "logs",
        timeout=300,
    )
    assert done.returncode != 0
    # every process finds it; torchrun stops the others once the first has said it
    said = r"annotated-transformer train \(rank [01]\): error: only 1 batches for 2 processes"
    assert re.search(said, done.stderr), done.stderr
    assert (
        str(Path(annotated_transformer.__file__).parent) not in done.stderr
    )  # no traceback through our code: a one-line error
    assert not (tmp_path / "run" / "last.pt").exists()


def test_resuming_from_a_truncated_checkpoint_is_a_clear_error_and_changes_nothing(
    data_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    assert (
        run_cli(
            "train",
            "--out",
            str(out),
            "--data-dir",
            str(data_dir),
            "--epochs",
            "1",
            *TINY,
            timeout=300,
        ).returncode
        == 0
    )
    (out / "last.pt").write_bytes((out / "last.pt").read_bytes()[:5000])
    before = (out / "last.pt").read_bytes()
    done = run_cli(
        "train",
        "--out",
        str(out),
        "--data-dir",
        str(data_dir),
        "--epochs",
        "2",
        "--resume",
        *TINY,
        nproc=2,
        log_dir=tmp_path / "logs",
        timeout=300,
    )
    assert done.returncode != 0
    assert "is not a readable checkpoint" in done.stderr
    assert (out / "last.pt").read_bytes() == before


# ============================================================== 4. precision and compile on the CPU
def test_bfloat16_trains_close_to_float32(data_dir: Path, tmp_path: Path) -> None:
    pairs = InMemory(*(load_multi30k(split, data_dir) for split in ("train", "val")))
    config = TrainConfig(
        model=ModelConfig(N=1, d_model=32, d_ff=64, h=2, dropout=0.0),
        epochs=2,
        max_tokens=400,
        warmup=10,
        # half the default learning rate: at the full one this tiny model's second epoch depends
        # on the rounding of single steps (a last-bit change moves its loss by 2%)
        factor=0.5,
    )
    quiet = dict(corpus=pairs, log=lambda _: None)
    fp32 = train(tmp_path / "fp32", config, options=QUIET, **quiet).history
    bf16 = train(tmp_path / "bf16", config, options=replace(QUIET, precision="bf16"), **quiet)
    bf16 = bf16.history
    for a, b in zip(fp32, bf16):
        assert (
            b["train_loss"] == pytest.approx(a["train_loss"], rel=0.02)
            and b["train_loss"] != a["train_loss"]
        )


def test_float16_trains_with_a_gradient_scaler_that_is_saved(
    data_dir: Path, tmp_path: Path
) -> None:
    pairs = InMemory(*(load_multi30k(split, data_dir) for split in ("train", "val")))
    config = TrainConfig(
        model=ModelConfig(N=1, d_model=32, d_ff=64, h=2, dropout=0.0),
        epochs=3,
        max_tokens=400,
        warmup=10,
    )
    quiet = dict(corpus=pairs, options=replace(QUIET, precision="fp16"), log=lambda _: None)
    first = train(tmp_path / "run", replace(config, epochs=2), **quiet)
    losses = [h["train_loss"] for h in first.history]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    # started max_tokens times below 2^16: no overflow, no skipped step
    assert first.resume.scaler["scale"] == pytest.approx(2.0**16 / 400)
    # the scaler's state comes back on --resume: a scale lowered in the checkpoint is the one
    # training continues with
    ckpt = load_checkpoint(tmp_path / "run" / "last.pt")
    lowered = replace(ckpt.resume, scaler={**ckpt.resume.scaler, "scale": 0.5})
    save_checkpoint(tmp_path / "run" / "last.pt", replace(ckpt, resume=lowered))
    resumed = train(tmp_path / "run", config, resume=True, **quiet)
    assert resumed.resume.scaler["scale"] == 0.5  # exact: the scale saved above, read back
    # fp32 has no scaler to save
    plain = train(
        tmp_path / "fp32",
        replace(config, epochs=1),
        corpus=pairs,
        options=QUIET,
        log=lambda _: None,
    )
    assert plain.resume.scaler is None


def test_compile_trains_the_same_model(data_dir: Path, tmp_path: Path) -> None:
    # one SGD step through train_epoch: the compiled model computes the same gradients (Adam would
    # magnify rounding)
    torch.manual_seed(0)
    eager = ModelConfig(N=1, d_model=32, d_ff=64, h=2, dropout=0.0).build(20, 20)
    compiled_copy = copy.deepcopy(eager)
    data = torch.randint(3, 20, (16, 10))
    data[:, 0], data[8:, 7:] = 1, 0
    for model in (eager, torch.compile(compiled_copy)):
        train_epoch(
            [Batch(data, data, pad=0)],
            model,
            sequence_loss(LabelSmoothing(20, 0, 0.1), unwrap(model).generator),
            Updates(torch.optim.SGD(model.parameters(), lr=1.0)),
            options=EpochOptions(progress=False),
        )
    assert largest_difference(eager.state_dict(), compiled_copy.state_dict()) < 1e-5
    # and train(compile=True) runs end to end, saving the plain model's parameter names
    pairs = InMemory(*(load_multi30k(split, data_dir) for split in ("train", "val")))
    config = TrainConfig(
        model=ModelConfig(N=1, d_model=32, d_ff=64, h=2, dropout=0.0),
        epochs=1,
        max_tokens=400,
        warmup=10,
    )
    quiet = dict(corpus=pairs, log=lambda _: None)
    plain = train(tmp_path / "eager", config, options=QUIET, **quiet)
    compiled = train(tmp_path / "compiled", config, options=replace(QUIET, compile=True), **quiet)
    assert compiled.model.keys() == plain.model.keys()
    assert compiled.history[0]["train_loss"] == pytest.approx(
        plain.history[0]["train_loss"], rel=1e-3
    )


def test_default_precision_is_bfloat16_only_on_gpus_that_support_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpu, cpu = torch.device("cuda"), torch.device("cpu")  # a device object needs no GPU
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert (default_precision(gpu), default_precision(cpu)) == ("bf16", "fp32")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    assert default_precision(gpu) == "fp32"


def test_precision_and_backend_left_to_the_machine_are_resolved_when_a_run_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    "None, the one default of Python and the command line: fp32 on a CPU, bf16 on a bf16 GPU."
    assert (RuntimeOptions().precision, RuntimeOptions().backend) == (None, None)
    setup, options = start_runtime(RuntimeOptions(device="cpu"))
    assert (setup.world_size, options.device, options.precision, options.backend) == (
        1,
        "cpu",
        "fp32",
        None,
    )
    assert start_runtime(RuntimeOptions(device="cpu", precision="fp16"))[1].precision == "fp16"
    # a GPU that supports bfloat16 (alone, no process group: nothing touches the GPU)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert start_runtime(RuntimeOptions(device="cuda"))[1].precision == "bf16"
    assert start_runtime(RuntimeOptions(device="cuda", precision="fp32"))[1].precision == "fp32"
    options = RuntimeOptions(device="cpu", compile=True, keep_epochs=2)
    resolved = start_runtime(options)[1]
    assert (resolved.compile, resolved.keep_epochs) == (True, 2)  # the rest as given


def test_a_run_alone_keeps_the_gpu_it_was_given(monkeypatch: pytest.MonkeyPatch) -> None:
    "--device cuda:1 without torchrun trains on GPU 1, not on the first GPU."
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    setup, options = start_runtime(RuntimeOptions(device="cuda:1"))
    assert (str(setup.device), options.device) == ("cuda:1", "cuda:1")


def test_the_command_line_leaves_the_precision_to_the_run_as_python_does(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    "The one default: the command line passes precision=None, as RuntimeOptions() does."
    given = []

    def recorded(out_dir, config=None, **kwargs):
        given.append(kwargs["options"])

    monkeypatch.setattr(pipeline, "train", recorded)
    monkeypatch.setattr(cli, "train", recorded, raising=False)
    assert cli.main(["train", "--out", str(tmp_path / "run"), "--data-dir", str(data_dir)]) == 0
    assert given[0].precision == RuntimeOptions().precision is None
    cli.main(["train", "--out", str(tmp_path / "run"), "--data-dir", str(data_dir), *BF16])
    assert given[1].precision == "bf16"


BF16 = ["--precision", "bf16"]
