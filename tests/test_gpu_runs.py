"""tools/gpu_runs.sh, the one command for every figure that needs a GPU, checked by its dry run:
the same steps at tiny sizes on the CPU, on the synthetic corpus. What is checked: every step writes
its results (the machine, the training benchmark with MFU and the peer's ratio, the four Multi30k
runs with their logs, histories and test2016 scores greedy and with beam 4 over an average, the
Table 3 rows); a second call skips the rows already done; without a GPU the real run refuses to
start, and an unknown argument is refused, each in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "gpu_runs.sh"


def run(args: list[str], data_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MULTI30K_DIR": str(data_dir)}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=1200
    )


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    "The dry run, once for the module: (its results folder, the corpus it read)."
    from conftest import SYNTHETIC_DIFFERS, write_synthetic_corpus

    corpus = write_synthetic_corpus(tmp_path_factory.mktemp("multi30k"))
    out = tmp_path_factory.mktemp("gpu") / "results"
    with pytest.MonkeyPatch.context() as patch:  # the corpus differs from Multi30k on purpose
        patch.setenv("PYTHONWARNINGS", SYNTHETIC_DIFFERS)
        done = run(["--dry-run", str(out)], corpus)
    assert done.returncode == 0, done.stderr[-2000:]
    return out, corpus


def test_every_step_writes_its_results(dry_run: tuple[Path, Path]) -> None:
    out, _ = dry_run
    assert "no GPU (dry run)" in (out / "machine.txt").read_text()
    bench = (out / "bench_gpu_training.txt").read_text()
    assert "MFU" in bench and "/ peer (nn.Transformer" in bench
    for text in ("words", "subwords"):
        for mode in ("eager", "fast"):
            name = f"multi30k-{text}-{mode}"
            assert "epoch 2:" in (out / f"{name}-train.txt").read_text()
            assert len(json.loads((out / f"{name}-history.json").read_text())) == 2
            greedy = json.loads((out / f"{name}-test2016-greedy.json").read_text())
            beam = json.loads((out / f"{name}-test2016-beam4-avg2.json").read_text())
            assert (greedy["beam"], beam["beam"], beam["average_last"]) == (1, 4, 2)
            assert greedy["data"] == "test2016" and 0 <= beam["score"] <= 100
    subwords = json.loads((out / "multi30k-subwords-fast-test2016-greedy.json").read_text())
    words = json.loads((out / "multi30k-words-fast-test2016-greedy.json").read_text())
    assert subwords["parameters"] != words["parameters"]  # one shared vocabulary against two
    for row in ("base", "E"):
        assert json.loads((out / "table3" / f"{row}-val-beam4.json").read_text())["beam"] == 4
        assert (out / "table3" / f"{row}-history.json").is_file()


def test_a_second_call_skips_the_rows_already_done(dry_run: tuple[Path, Path]) -> None:
    out, corpus = dry_run
    env = {
        **os.environ,
        "ROWS": "base",
        "EPOCHS": "1",
        "RUNS_DIR": str(out / "runs" / "table3"),
        "RESULTS_DIR": str(out / "table3"),
    }
    again = subprocess.run(
        ["bash", str(ROOT / "tools" / "table3_runs.sh")],
        capture_output=True,
        text=True,
        env={**env, "MULTI30K_DIR": str(corpus)},
        timeout=600,
    )
    assert again.returncode == 0 and "== row base: done" in again.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "no GPU here; use --dry-run DIR"),
        (["--fast"], "unknown argument '--fast'"),
        (["--dry-run"], "--dry-run needs a folder"),
    ],
)
def test_it_refuses_what_it_cannot_do_in_one_line(
    args: list[str], message: str, tmp_path: Path
) -> None:
    import torch

    if not args and torch.cuda.is_available():
        pytest.skip("a GPU is here: the real run would start")
    done = run(args, tmp_path)
    assert done.returncode != 0 and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
