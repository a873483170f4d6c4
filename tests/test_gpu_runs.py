"""tools/gpu_runs.sh, the one command for every figure that needs a GPU, checked by its dry run:
the same steps at tiny sizes on the CPU, on the synthetic corpus. What is checked: every step writes
its results (the machine, the training benchmark with MFU and the peer's ratio, the four Multi30k
runs with their logs, histories and test2016 scores greedy and with beam 4 over an average, the
Table 3 rows, §6.3's parser on a made-up treebank); a second call skips the rows already done;
without a GPU the real run refuses to start, and an unknown argument is refused, each in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from annotated_transformer.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "gpu_runs.sh"


def run(
    args: list[str], data_dir: Path, treebank: Path | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "MULTI30K_DIR": str(data_dir)}
    if treebank is not None:
        env["TREEBANK_DIR"] = str(treebank)
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=1200
    )


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    "The dry run, once for the module: (its results folder, the corpus it read)."
    from conftest import SYNTHETIC_DIFFERS, write_synthetic_corpus
    from synthetic import write_treebank

    corpus = write_synthetic_corpus(tmp_path_factory.mktemp("multi30k"))
    treebank = write_treebank(tmp_path_factory.mktemp("treebank") / "tb")
    out = tmp_path_factory.mktemp("gpu") / "results"
    with pytest.MonkeyPatch.context() as patch:  # the corpus differs from Multi30k on purpose
        patch.setenv("PYTHONWARNINGS", SYNTHETIC_DIFFERS)
        done = run(["--dry-run", str(out)], corpus, treebank)
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
        assert json.loads((out / "table3" / f"{row}-seed0-val-beam4.json").read_text())["beam"] == 4
        assert (out / "table3" / f"{row}-seed0-history.json").is_file()
    parser = json.loads((out / "parsing" / "transformer-4x1024-seed1-greedy.json").read_text())
    assert parser["epochs"] == 1 and parser["all"]["sentences"] == 3  # --limit 3
    assert 0 <= parser["all"]["f1"] <= 100 and (out / "parsing" / "right-branching.json").is_file()


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
    assert again.returncode == 0 and "== base, seed 0: done" in again.stdout


def test_table3_at_cpu_scale_trains_each_row_with_each_seed_on_one_subset(tmp_path: Path) -> None:
    from conftest import SYNTHETIC_DIFFERS, write_synthetic_corpus

    corpus = write_synthetic_corpus(tmp_path / "multi30k")
    results = tmp_path / "results"
    settings = dict(SCALE="cpu", ROWS="base A1 D3", SEEDS="0 1", EPOCHS="1", SUBSET="100", JOBS="2")
    env = {
        **os.environ,
        **settings,
        "TRAIN_ARGS": "--max-tokens 500",
        "RUNS_DIR": str(tmp_path / "runs"),
        "RESULTS_DIR": str(results),
        "MULTI30K_DIR": str(corpus),
        "PYTHONWARNINGS": SYNTHETIC_DIFFERS,
    }
    script = ["bash", str(ROOT / "tools" / "table3_runs.sh")]
    done = subprocess.run(script, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert 'SCALE=cpu EPOCHS=1 SEEDS="0 1" JOBS=2' in (results / "machine.txt").read_text()
    configs = {}
    for row in ("base", "A1", "D3"):
        for seed in (0, 1):
            scores = json.loads((results / f"{row}-seed{seed}-val-beam4.json").read_text())
            assert scores["beam"] == 4 and 0 <= scores["score"] <= 100
            assert len(json.loads((results / f"{row}-seed{seed}-history.json").read_text())) == 1
            ckpt = load_checkpoint(tmp_path / "runs" / f"{row}-seed{seed}" / "last.pt")
            configs[row, seed] = ckpt.config
            # one subset for every seed: the vocabularies, made from it, are the same
            assert (
                ckpt.src_vocab.itos
                == load_checkpoint(tmp_path / "runs" / "base-seed0" / "last.pt").src_vocab.itos
            )
    base = configs["base", 0]
    assert (base.train_pairs, base.subset_seed, base.model.d_model, base.model.N) == (
        100,
        0,
        128,
        2,
    )
    assert (configs["base", 1].seed, configs["D3", 1].smoothing, base.smoothing) == (1, 0.0, 0.1)
    one_head = configs["A1", 0].model  # the row's change on the CPU model's sizes
    assert (one_head.h, one_head.N, one_head.d_model, one_head.d_ff) == (1, 2, 128, 512)
    assert configs["D3", 0].model == base.model and base.model.h == 4
    again = subprocess.run(script, capture_output=True, text=True, env=env, timeout=300)
    assert again.stdout.count(": done (") == 6  # a second call skips every finished run


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


@pytest.mark.parametrize(
    "settings, message",
    [({"SCALE": "huge"}, "unknown SCALE 'huge'"), ({"ROWS": "base Z9"}, "unknown row 'Z9'")],
)
def test_table3_refuses_an_unknown_scale_or_row_in_one_line(settings: dict, message: str) -> None:
    done = subprocess.run(
        ["bash", str(ROOT / "tools" / "table3_runs.sh")],
        capture_output=True,
        text=True,
        env={**os.environ, **settings},
        timeout=60,
    )
    assert done.returncode == 2 and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
