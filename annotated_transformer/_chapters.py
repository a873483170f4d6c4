"""What the notebooks share to run their chapters: the repository root, the model they decode, synthetic data, and the console command run in subprocesses.

Hand-written (not exported from a notebook) and private: the library does not need it; Parts 5.3, 6 and 7
and the tests do.
"""

from __future__ import annotations

import gzip
import itertools
import os
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from filelock import FileLock
from torch import Tensor

from annotated_transformer.checkpoint import load_checkpoint
from annotated_transformer.data import split_files
from annotated_transformer.model import ModelConfig
from annotated_transformer.trainer import TrainConfig, train

ROOT = Path(__file__).resolve().parent.parent  # the repository root (the notebooks run from nbs/)
FULL_RUN_ENV = "MULTI30K_RUN"  # names the folder of a full run for the notebooks to decode
CPU_CONFIG = (
    TrainConfig(  # the notebooks' model when no full run is given: about 5 minutes on 2 CPU cores
        model=replace(ModelConfig.preset("small"), norm_first=True),
        epochs=3,
        max_tokens=2048,
        warmup=300,
    )
)


def chapter_run(root: Path = ROOT) -> tuple[Path, bool]:
    "The run the notebooks decode, and whether it is a full run: $MULTI30K_RUN, else root/runs/multi30k-cpu (trained first if unfinished)."
    if os.environ.get(FULL_RUN_ENV):
        return Path(os.environ[FULL_RUN_ENV]), True
    run_dir = Path(root) / "runs" / "multi30k-cpu"
    run_dir.mkdir(parents=True, exist_ok=True)
    # another notebook training it: wait, then find it finished (train's own lock, .lock, refuses instead of waiting)
    with FileLock(run_dir / ".chapter.lock"):
        last = run_dir / "last.pt"
        if not (last.is_file() and load_checkpoint(last)["epoch"] >= CPU_CONFIG.epochs):
            train(
                run_dir,
                CPU_CONFIG,
                resume=last.is_file(),
                overwrite=not last.is_file(),
                progress=False,
            )
    return run_dir, False


SUBJECTS = [
    ("Ein Mann", "A man"),
    ("Eine Frau", "A woman"),
    ("Ein Kind", "A child"),
    ("Ein Hund", "A dog"),
]
VERBS = [("sieht", "sees"), ("hat", "has"), ("mag", "likes")]
OBJECTS = [
    ("einen Ball", "a ball"),
    ("ein Auto", "a car"),
    ("einen Baum", "a tree"),
    ("ein Haus", "a house"),
]
PLACES = [
    ("", ""),
    (" im Park", " in the park"),
    (" am Strand", " on the beach"),
    (" im Schnee", " in the snow"),
]


def synthetic_pairs() -> list[tuple[str, str]]:
    "192 distinct, consistent German-English sentence pairs, in a fixed shuffled order."
    pairs = [
        (f"{s_de} {v_de} {o_de}{p_de}.", f"{s_en} {v_en} {o_en}{p_en}.")
        for (s_de, s_en), (v_de, v_en), (o_de, o_en), (p_de, p_en) in itertools.product(
            SUBJECTS, VERBS, OBJECTS, PLACES
        )
    ]
    random.Random(0).shuffle(pairs)
    return pairs


def write_split(folder: Path, split: str, pairs: list[tuple[str, str]]) -> tuple[Path, Path]:
    "Write `pairs` as the Multi30k-named gzipped German and English files of `split` in `folder`; return their paths."
    paths = tuple(Path(folder) / name for name in split_files(split))
    for path, side in zip(paths, (0, 1)):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write("".join(p[side] + "\n" for p in pairs))
    return paths


def start_python(
    *args: str,
    nproc: int = 1,  # with more than 1, torchrun starts that many processes on this machine
    log_dir: Path
    | None = None,  # torchrun's log folder; None leaves it a folder of its own in /tmp
) -> subprocess.Popen:
    "Start `python ARGS`, alone or under torchrun, one thread a process (they share the CPU cores); its output piped."
    torchrun = (
        ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
        if nproc > 1
        else []
    )
    logs = ["--log-dir", str(log_dir)] if nproc > 1 and log_dir is not None else []
    return subprocess.Popen(
        [sys.executable, *torchrun, *logs, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def run_cli(
    *args: str, nproc: int = 1, log_dir: Path | None = None, timeout: float = 600.0
) -> subprocess.CompletedProcess:
    "Run `annotated-transformer ARGS` to the end, alone or in `nproc` processes (see `start_python`); its output captured."
    process = start_python("-m", "annotated_transformer.cli", *args, nproc=nproc, log_dir=log_dir)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def largest_difference(a: dict[str, Tensor] | Path, b: dict[str, Tensor] | Path) -> float:
    "The largest absolute difference between two models' weights: state dicts, or checkpoint files holding them."
    a, b = (load_checkpoint(x)["model"] if isinstance(x, Path) else x for x in (a, b))
    if a.keys() != b.keys():
        raise ValueError(f"the two models have different weights: {sorted(a.keys() ^ b.keys())}")
    return max((a[k] - b[k]).abs().max().item() for k in a)
