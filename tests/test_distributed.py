"""Tests for data-parallel training (annotated_transformer.distributed, and the lines of run_epoch and train it relies on).

Real multi-process runs: `torchrun --standalone` starts two CPU processes with the gloo backend, training a tiny
model through the console command on the synthetic pairs of conftest.py. What is checked:
1. Two processes end with the same weights as one process that accumulates both processes' batches, and the
   gradients are all-reduced only on the batch that ends an optimizer step (a DDP communication hook counts them).
2. Killing one of two processes mid-run: the job exits non-zero within seconds, names the failed rank, leaves a
   loadable last checkpoint, and resuming from it ends where an uninterrupted run ends. The same for one process.
3. Bad input: more processes than batches, a truncated checkpoint to resume from, a failed checkpoint write, an
   unknown precision, NCCL without GPUs.
4. Mixed precision and torch.compile train on the CPU too.
"""

from __future__ import annotations

import copy
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from annotated_transformer.data import load_multi30k, load_tokenizers, tokenize_all
from annotated_transformer.distributed import DistributedSetup, default_precision, setup_distributed
from annotated_transformer.model import ModelConfig
from annotated_transformer.training import Batch, LabelSmoothing, TokenBatchSampler, run_epoch
from annotated_transformer.translate import TrainConfig, load_checkpoint, save_checkpoint, train

TINY = ["--model", "tiny", "--dropout", "0", "--warmup", "20", "--quiet"]


def command(nproc: int, *args: str) -> list[str]:
    "`annotated-transformer ARGS`, alone or in `nproc` processes under torchrun."
    torchrun = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] if nproc > 1 else []
    return [sys.executable, *torchrun, "-m", "annotated_transformer.cli", *args]


def run(nproc: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(command(nproc, *args), capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


def weights(path: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path)["model"]


def largest_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def even_max_tokens(data_dir: Path) -> int:
    "A token budget that cuts the training split into an even number of batches: two processes then leave none out."
    tok_de, tok_en = load_tokenizers()
    pairs = load_multi30k("train", data_dir)
    de, en = tokenize_all([d for d, _ in pairs], tok_de, progress=False), tokenize_all([e for _, e in pairs], tok_en, progress=False)
    lengths = [max(len(s), len(t)) + 2 for s, t in zip(de, en)]
    return next(m for m in range(300, 1000, 10) if len(TokenBatchSampler(lengths, m).all_batches()) % 2 == 0)


def start_and_kill(args: list[str], nproc: int, checkpoint: Path, victim: str) -> tuple[subprocess.CompletedProcess, float]:
    "Start a run, kill one of its processes (the launcher's child with RANK=victim, or the run itself) once `checkpoint` exists."
    launcher = subprocess.Popen(command(nproc, *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 120
    while not checkpoint.exists():
        assert launcher.poll() is None and time.time() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.02)
    os.kill(rank_pid(launcher.pid, victim) if nproc > 1 else launcher.pid, signal.SIGKILL)
    killed = time.time()
    output, _ = launcher.communicate(timeout=60)
    return subprocess.CompletedProcess(launcher.args, launcher.returncode, output), time.time() - killed


def rank_pid(launcher: int, rank: str) -> int:
    "The pid of torchrun's child process with RANK=rank (Linux /proc)."
    for pid in Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split():
        if f"RANK={rank}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            return int(pid)
    raise AssertionError(f"no process with RANK={rank} under {launcher}")


# =========================================================================== 1. the same model
def test_two_processes_train_what_one_process_trains_on_both_batches(data_dir: Path, tmp_path: Path) -> None:
    budget = ["--max-tokens", str(even_max_tokens(data_dir)), "--epochs", "2", "--data-dir", str(data_dir), *TINY]
    two = run(2, "train", "--out", str(tmp_path / "two"), *budget)
    one = run(1, "train", "--out", str(tmp_path / "one"), "--accum-iter", "2", *budget)
    alone = run(1, "train", "--out", str(tmp_path / "alone"), *budget)  # one batch a step: a different model
    for done in (two, one, alone):
        assert done.returncode == 0, done.stderr[-3000:]
    assert largest_difference(weights(tmp_path / "two" / "last.pt"), weights(tmp_path / "one" / "last.pt")) < 1e-5
    assert largest_difference(weights(tmp_path / "two" / "last.pt"), weights(tmp_path / "alone" / "last.pt")) > 1e-3
    steps = {load_checkpoint(tmp_path / run_ / "last.pt")["train_state"]["accum_step"] for run_ in ("two", "one")}
    assert len(steps) == 1
    # only rank 0 reports: one line per epoch, not two
    assert sum(line.startswith("epoch ") for line in two.stdout.splitlines()) == 2


def _count_gradient_all_reduces(rank: int, world: int, init_file: str, accum_iter: int, out: str) -> None:
    "One of `world` processes: train 6 batches with `accum_iter`, counting DDP's gradient all-reduces (one bucket each)."
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DistributedDataParallel(ModelConfig(N=1, d_model=16, d_ff=32, h=2, dropout=0.0).build(20, 20), bucket_cap_mb=1000)
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
    run_epoch(batches, model, LabelSmoothing(20, 0, 0.1), torch.optim.SGD(model.parameters(), lr=0.1), accum_iter=accum_iter, progress=False)
    Path(out, f"rank{rank}").write_text(str(len(calls)))
    torch.distributed.destroy_process_group()


@pytest.mark.parametrize("accum_iter", [1, 3])
def test_gradients_are_all_reduced_only_on_the_batch_that_ends_a_step(accum_iter: int, tmp_path: Path) -> None:
    torch.multiprocessing.spawn(_count_gradient_all_reduces, args=(2, str(tmp_path / "store"), accum_iter, str(tmp_path)), nprocs=2)
    assert [int((tmp_path / f"rank{r}").read_text()) for r in range(2)] == [6 // accum_iter] * 2


# =========================================================================== 2. failures
@pytest.mark.parametrize("nproc", [2, 1])
def test_a_killed_run_fails_fast_keeps_its_checkpoint_and_resumes_to_the_same_weights(nproc: int, data_dir: Path, tmp_path: Path) -> None:
    args = ["train", "--max-tokens", str(even_max_tokens(data_dir)), "--epochs", "8", "--data-dir", str(data_dir), *TINY]
    killed, seconds = start_and_kill([*args, "--out", str(tmp_path / "killed")], nproc, tmp_path / "killed" / "last.pt", victim="1")
    assert killed.returncode != 0
    assert seconds < 30, f"the job took {seconds:.0f} s to notice"
    if nproc > 1:
        report = killed.stdout[killed.stdout.index("Root Cause"):]
        assert "rank      : 1" in report and "SIGKILL" in report
    survivor = load_checkpoint(tmp_path / "killed" / "last.pt")  # intact: it loads
    assert 1 <= survivor["epoch"] < 8
    resumed = run(nproc, *args, "--out", str(tmp_path / "killed"), "--resume")
    whole = run(nproc, *args, "--out", str(tmp_path / "whole"))
    assert resumed.returncode == 0 and whole.returncode == 0, resumed.stderr[-3000:] + whole.stderr[-3000:]
    assert f"resuming from {tmp_path / 'killed' / 'last.pt'} after epoch {survivor['epoch']}" in resumed.stdout
    assert largest_difference(weights(tmp_path / "killed" / "last.pt"), weights(tmp_path / "whole" / "last.pt")) < 1e-6


# =========================================================================== 3. bad input
def test_more_processes_than_batches_is_a_clear_error(data_dir: Path, tmp_path: Path) -> None:
    done = run(2, "train", "--out", str(tmp_path / "run"), "--data-dir", str(data_dir), "--max-tokens", "100000", *TINY)
    assert done.returncode != 0
    assert "annotated-transformer train (rank 0): error: only 1 batches for 2 processes" in done.stderr
    assert 'annotated_transformer/translate.py", line' not in done.stderr  # no traceback from our code: a one-line error
    assert not (tmp_path / "run" / "last.pt").exists()


def test_resuming_from_a_truncated_checkpoint_is_a_clear_error_and_changes_nothing(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert run(1, "train", "--out", str(out), "--data-dir", str(data_dir), "--epochs", "1", *TINY).returncode == 0
    (out / "last.pt").write_bytes((out / "last.pt").read_bytes()[:5000])
    before = (out / "last.pt").read_bytes()
    done = run(2, "train", "--out", str(out), "--data-dir", str(data_dir), "--epochs", "2", "--resume", *TINY)
    assert done.returncode != 0
    assert "is not a readable checkpoint" in done.stderr
    assert (out / "last.pt").read_bytes() == before


def test_resuming_with_another_model_is_refused(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert run(1, "train", "--out", str(out), "--data-dir", str(data_dir), "--epochs", "1", *TINY).returncode == 0
    done = run(1, "train", "--out", str(out), "--data-dir", str(data_dir), "--epochs", "2", "--resume", "--dropout", "0.3", "--quiet")
    assert done.returncode == 2 and "different configuration" in done.stderr


def test_a_failed_checkpoint_write_leaves_the_last_good_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "last.pt"
    save_checkpoint(path, epoch=1, model={"w": torch.ones(3)})

    def broken_save(obj, f):
        f.write(b"half a checkpoint")
        raise OSError("No space left on device")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(path, epoch=2, model={"w": torch.zeros(3)})
    monkeypatch.undo()
    assert load_checkpoint(path)["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temporary file left behind


def test_setup_without_torchrun_is_a_single_process_and_nccl_needs_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert setup_distributed(device="cpu") == DistributedSetup(0, 0, 1, torch.device("cpu"), None)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(ValueError, match="the nccl backend needs GPUs"):
        setup_distributed("nccl", "cpu")
    assert default_precision(torch.device("cpu")) == "fp32"


def test_unknown_precision_is_refused(data_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="precision must be one of fp32, bf16, fp16, got 'fp8'"):
        train(tmp_path, TrainConfig(), data_dir=data_dir, precision="fp8")


# =========================================================================== 4. precision and compile on the CPU
def test_bfloat16_trains_close_to_float32(data_dir: Path, tmp_path: Path) -> None:
    pairs = {split: load_multi30k(split, data_dir) for split in ("train", "val")}
    config = TrainConfig(model=ModelConfig(N=1, d_model=32, d_ff=64, h=2, dropout=0.0), epochs=2, max_tokens=400, warmup=10)
    quiet = dict(pairs=pairs, progress=False, log=lambda _: None)
    fp32 = train(tmp_path / "fp32", config, **quiet)["history"]
    bf16 = train(tmp_path / "bf16", config, precision="bf16", **quiet)["history"]
    for a, b in zip(fp32, bf16):
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=0.02) and b["train_loss"] != a["train_loss"]


def test_float16_trains_with_a_gradient_scaler_that_is_saved(data_dir: Path, tmp_path: Path) -> None:
    pairs = {split: load_multi30k(split, data_dir) for split in ("train", "val")}
    config = TrainConfig(model=ModelConfig(N=1, d_model=32, d_ff=64, h=2, dropout=0.0), epochs=3, max_tokens=400, warmup=10)
    quiet = dict(pairs=pairs, progress=False, log=lambda _: None)
    first = train(tmp_path / "run", replace(config, epochs=2), precision="fp16", **quiet)
    losses = [h["train_loss"] for h in first["history"]]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    assert first["scaler"]["scale"] == pytest.approx(2.0**16 / 400)  # started max_tokens times below 2^16: no overflow, no skipped step
    # the scaler's state comes back on --resume: a scale lowered in the checkpoint is the one training continues with
    ckpt = load_checkpoint(tmp_path / "run" / "last.pt")
    save_checkpoint(tmp_path / "run" / "last.pt", **{**ckpt, "scaler": {**ckpt["scaler"], "scale": 0.5}})
    resumed = train(tmp_path / "run", config, precision="fp16", resume=True, **quiet)
    assert resumed["scaler"]["scale"] == 0.5


def test_compile_trains_the_same_model(data_dir: Path, tmp_path: Path) -> None:
    # one SGD step through run_epoch: the compiled model computes the same gradients (Adam would magnify rounding)
    torch.manual_seed(0)
    eager = ModelConfig(N=1, d_model=32, d_ff=64, h=2, dropout=0.0).build(20, 20)
    compiled_copy = copy.deepcopy(eager)
    data = torch.randint(3, 20, (16, 10))
    data[:, 0], data[8:, 7:] = 1, 0
    for model in (eager, torch.compile(compiled_copy)):
        run_epoch([Batch(data, data, pad=0)], model, LabelSmoothing(20, 0, 0.1), torch.optim.SGD(model.parameters(), lr=1.0), progress=False)
    assert largest_difference(eager.state_dict(), compiled_copy.state_dict()) < 1e-5
    # and train(compile=True) runs end to end, saving the plain model's parameter names
    pairs = {split: load_multi30k(split, data_dir) for split in ("train", "val")}
    config = TrainConfig(model=ModelConfig(N=1, d_model=32, d_ff=64, h=2, dropout=0.0), epochs=1, max_tokens=400, warmup=10)
    quiet = dict(pairs=pairs, progress=False, log=lambda _: None)
    plain = train(tmp_path / "eager", config, **quiet)
    compiled = train(tmp_path / "compiled", config, compile=True, **quiet)
    assert compiled["model"].keys() == plain["model"].keys()
    assert compiled["history"][0]["train_loss"] == pytest.approx(plain["history"][0]["train_loss"], rel=1e-3)
