"""tools/gpu_runs.sh, every figure that needs a GPU in steps of at most 8 minutes, one step a call,
checked by its dry run: the same steps at tiny sizes on the CPU, on the synthetic corpus. What is
checked: called again and again with no step, it runs the steps in order, one a call, and each
writes its results (the machine, the training benchmark with MFU and the peer's ratio, the two
Multi30k runs with their logs, histories and test2016 scores greedy and with beam 4 over an average,
the Table 3 rows, §6.3's parser on a made-up treebank) and its STEP.done; once all are recorded a
call does nothing; a recorded step runs again only with --again; a step stops at its time limit
unrecorded, and Table 3 at its deadline with rows left; --list; what it cannot do is refused in one
line. And tools/gpu_wheels.sh's pinned list, read without fetching anything.
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
WHEELS = ROOT / "tools" / "gpu_wheels.sh"
STEPS = ["machine+bench", "subwords", "words", "table3", "parser"]


def run(
    args: list[str], data_dir: Path, treebank: Path | None = None, **env: str
) -> subprocess.CompletedProcess:
    env = {**os.environ, "MULTI30K_DIR": str(data_dir), **env}
    if treebank is not None:
        env["TREEBANK_DIR"] = str(treebank)
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=1200
    )


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, list[str]]:
    """The dry run, once for the module, called with no step until all are recorded: (its results
    folder, the corpus, the treebank, each call's output)."""
    from conftest import SYNTHETIC_DIFFERS, write_synthetic_corpus
    from synthetic import write_treebank

    corpus = write_synthetic_corpus(tmp_path_factory.mktemp("multi30k"))
    treebank = write_treebank(tmp_path_factory.mktemp("treebank") / "tb")
    out = tmp_path_factory.mktemp("gpu") / "results"
    outputs = []
    # the corpus differs from Multi30k on purpose
    for _ in STEPS:
        done = run(["--dry-run", str(out)], corpus, treebank, PYTHONWARNINGS=SYNTHETIC_DIFFERS)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        outputs.append(done.stdout)
    return out, corpus, treebank, outputs


def test_each_call_runs_the_next_step_and_records_it(dry_run) -> None:
    out, _, _, outputs = dry_run
    for number, (step, output) in enumerate(zip(STEPS, outputs), 1):
        assert output.startswith(f"== {number}. {step}: ")
        assert f"== {step}: recorded in {out}/{step}.done" in output
        assert not any(f"== {other}: recorded" in output for other in STEPS if other != step)
    for text, output in (("subwords", outputs[1]), ("words", outputs[2])):
        # the dry run's fast flags: --fused-loss (torch.compile is left to the GPU)
        assert "--fused-loss" in output and ("--vocab-size 300" in output) == (text == "subwords")
        assert "no GPU (dry run)" in (out / f"{step}.done").read_text()
    assert not list(out.glob(".*.tmp"))


def test_every_step_writes_its_results(dry_run) -> None:
    out, _, _, _ = dry_run
    assert "no GPU (dry run)" in (out / "machine.txt").read_text()
    bench = (out / "bench_gpu_training.txt").read_text()
    assert "MFU" in bench and "/ peer (nn.Transformer" in bench
    for text in ("words", "subwords"):
        name = f"multi30k-{text}"
        assert "epoch 2:" in (out / f"{name}-train.txt").read_text()
        assert len(json.loads((out / f"{name}-history.json").read_text())) == 2
        greedy = json.loads((out / f"{name}-test2016-greedy.json").read_text())
        beam = json.loads((out / f"{name}-test2016-beam4-avg2.json").read_text())
        assert (greedy["beam"], beam["beam"], beam["average_last"]) == (1, 4, 2)
        assert greedy["data"] == "test2016" and 0 <= beam["score"] <= 100
    subwords = json.loads((out / "multi30k-subwords-test2016-greedy.json").read_text())
    words = json.loads((out / "multi30k-words-test2016-greedy.json").read_text())
    assert subwords["parameters"] != words["parameters"]  # one shared vocabulary against two
    for row in ("base", "E"):
        assert json.loads((out / "table3" / f"{row}-seed0-val-beam4.json").read_text())["beam"] == 4
        assert (out / "table3" / f"{row}-seed0-history.json").is_file()
    parser = json.loads((out / "parsing" / "transformer-4x1024-seed1-greedy.json").read_text())
    assert parser["epochs"] == 1 and parser["all"]["sentences"] == 3  # --limit 3
    assert 0 <= parser["all"]["f1"] <= 100 and (out / "parsing" / "right-branching.json").is_file()


def test_once_all_are_recorded_a_call_does_nothing_and_list_says_so(dry_run) -> None:
    out, corpus, _, _ = dry_run
    before = {path: path.stat().st_mtime_ns for path in out.rglob("*")}
    done = run(["--dry-run", str(out)], corpus)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith(f"== all 5 steps are recorded in {out}: nothing to run")
    listed = run(["--dry-run", str(out), "--list"], corpus)
    lines = listed.stdout.splitlines()
    assert listed.returncode == 0 and len(lines) == 5
    for number, (step, line) in enumerate(zip(STEPS, lines), 1):
        assert line.startswith(f"{number}. {step}") and " recorded (" in line
        assert "s, no GPU (dry run))" in line
    assert {path: path.stat().st_mtime_ns for path in out.rglob("*")} == before


def test_a_recorded_step_runs_again_only_when_asked(dry_run) -> None:
    out, corpus, treebank, _ = dry_run
    refused = run(["--dry-run", str(out), "parser"], corpus, treebank)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "parser is recorded" in refused.stderr and "--again" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    first = (out / "parsing" / "transformer-4x1024-seed1-history.json").stat().st_mtime_ns
    again = run(["--dry-run", str(out), "parser", "--again"], corpus, treebank)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "== parser: recorded" in again.stdout
    assert (out / "parsing" / "transformer-4x1024-seed1-history.json").stat().st_mtime_ns > first


def test_the_table3_rows_done_are_skipped_by_a_second_call(dry_run) -> None:
    out, corpus, _, _ = dry_run
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


def test_table3_stops_at_its_deadline_unrecorded_and_the_list_counts_its_rows(
    tmp_path: Path,
) -> None:
    out = tmp_path / "results"
    (out / "table3").mkdir(parents=True)
    (out / "table3" / "base-seed0-val-beam4.json").write_text("{}")  # a row an earlier call did
    # a step of 60 s and rows of 1,000: no row may start
    done = run(["--dry-run", str(out), "table3"], tmp_path, BUDGET="60", ROW_SECONDS="1000")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "== base, seed 0: done" in done.stdout
    assert "== E, seed 0: no time left" in done.stdout
    assert "== table3: stopped before its time limit with work left" in done.stdout
    assert not (out / "table3.done").exists()
    listed = run(["--dry-run", str(out), "--list"], tmp_path).stdout.splitlines()
    assert listed[3].startswith("4. table3") and "not recorded, 1 rows so far" in listed[3]
    assert all("not recorded" in line for line in listed)


def test_a_step_past_its_time_limit_is_stopped_and_not_recorded(tmp_path: Path) -> None:
    out = tmp_path / "results"
    done = run(["--dry-run", str(out)], tmp_path, BUDGET="1")  # the benchmark needs more
    assert done.returncode == 124
    assert done.stdout.startswith("== 1. machine+bench: ") and "(at most 1 s)" in done.stdout
    assert "machine+bench stopped at its time limit, 1 s (BUDGET); not recorded" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (out / "machine+bench.done").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["machine+bench", "--again"], "no GPU here; use --dry-run DIR"),
        (["--fast"], "unknown argument '--fast'"),
        (["bench"], "unknown step 'bench' (steps: machine+bench subwords words table3 parser)"),
        (["words", "table3"], "one step at a time, not 'words' and 'table3'"),
        (["--again"], "--again needs the STEP"),
        (["--dry-run"], "--dry-run needs a folder"),
        (["--dry-run", "--list"], "--dry-run needs a folder"),
    ],
)
def test_it_refuses_what_it_cannot_do_in_one_line(
    args: list[str], message: str, tmp_path: Path
) -> None:
    import torch

    if args[0] == "machine+bench" and torch.cuda.is_available():
        pytest.skip("a GPU is here: the real run would start")
    done = run(args, tmp_path)
    assert done.returncode == 2 and message in done.stderr and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_budget_that_is_no_number_of_seconds_is_refused(tmp_path: Path) -> None:
    done = run(["--dry-run", str(tmp_path), "--list"], tmp_path, BUDGET="8m")
    assert done.returncode == 2 and "BUDGET is a step's time limit in seconds" in done.stderr


def test_the_wheels_are_pinned_one_version_each_and_listed_without_fetching() -> None:
    assert subprocess.run(["bash", "-n", str(WHEELS)]).returncode == 0
    listed = subprocess.run(
        ["bash", str(WHEELS), "--print"], capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0 and listed.stderr == ""
    pins = listed.stdout.split()
    names = [pin.split("==")[0] for pin in pins]
    assert all(pin.count("==") == 1 and pin.split("==")[1][0].isdigit() for pin in pins)
    assert len(set(names)) == len(names)  # one version of each: two stop the whole install
    # what the steps need beyond the GPU image: words, the treebank, the scores, the install
    assert {"spacy", "thinc", "blis", "pydantic", "nltk", "sacrebleu", "setuptools"} <= set(names)
    assert ".whl/" in (ROOT / ".gitignore").read_text().split()  # fetched, never committed
    wrong = subprocess.run(["bash", str(WHEELS), "--fetch"], capture_output=True, text=True)
    assert wrong.returncode == 2 and "unknown argument '--fetch'" in wrong.stderr


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
    # exact: the settings, copied
    assert (configs["base", 1].seed, configs["D3", 1].smoothing, base.smoothing) == (1, 0.0, 0.1)
    one_head = configs["A1", 0].model  # the row's change on the CPU model's sizes
    assert (one_head.h, one_head.N, one_head.d_model, one_head.d_ff) == (1, 2, 128, 512)
    assert configs["D3", 0].model == base.model and base.model.h == 4
    again = subprocess.run(script, capture_output=True, text=True, env=env, timeout=300)
    assert again.stdout.count(": done (") == 6  # a second call skips every finished run


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
