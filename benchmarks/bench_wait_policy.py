"""OpenMP's wait policy on a shared CPU (issue 52 item 3): training steps and greedy translation of
the command line's small model, each in a fresh process (OpenMP reads its settings when PyTorch
loads), with the wait policy unset (OpenMP's default: a waiting thread spins a while before it
sleeps), PASSIVE (it sleeps at once) and a short spin (GNU OpenMP's GOMP_SPINCOUNT, PyTorch's
wheels' OpenMP), on 1 thread and on all cores; alone, beside one process spinning in Python on
every core, and beside two PyTorch trainings with OpenMP's defaults (another user's job, a test
suite: processes whose own threads spin too).

    python benchmarks/bench_wait_policy.py                      # prints the table; --json FILE
    python benchmarks/bench_wait_policy.py --worker train        # one measurement, as it runs

Each cell is the median of --rounds timings of the same fixed work, the settings interleaved round
by round; the ratio column divides each setting's time by the fastest setting's in that column.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

SETTINGS = {  # name: the environment a worker starts with (unset: as the user's shell leaves it)
    "default, all cores": {},
    "default, 1 thread": {"OMP_NUM_THREADS": "1"},
    "PASSIVE, all cores": {"OMP_WAIT_POLICY": "PASSIVE"},
    "PASSIVE, 1 thread": {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1"},
    "spin 10,000, all cores": {"GOMP_SPINCOUNT": "10000"},
}
OMP_SETTINGS = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT")  # what SETTINGS replace
NEIGHBOURS = ("alone", "beside Python spinning on every core", "beside two PyTorch trainings")
WORKLOADS = ("train", "translate")


def work(kind: str, steps: int) -> float:
    "Seconds of `steps` training steps or greedy-translation batches of the small model."
    import torch

    from annotated_transformer.batching import Batch
    from annotated_transformer.config import run_model
    from annotated_transformer.decoding import greedy_decode

    torch.manual_seed(0)
    vocab, cfg = 8000, run_model("small")
    model = cfg.build(vocab, vocab)
    ids = torch.randint(4, vocab, (32, 32, 20))  # 32 Multi30k-sized batches of 32 sentences
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    model.train(kind == "train")
    start = time.perf_counter()
    for i in range(steps):
        if kind == "train":
            batch = Batch(ids[2 * i % 32], ids[(2 * i + 1) % 32], pad=0)
            out = model.generator(model(batch.src, batch.tgt, batch.src_mask, batch.tgt_mask))
            loss = torch.nn.functional.nll_loss(out.flatten(0, 1), batch.tgt_y.flatten())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        else:
            with torch.no_grad():
                src = ids[i % 32]
                greedy_decode(model, src, (src != 0).unsqueeze(-2), 25, start_symbol=1)
    return time.perf_counter() - start


def unset() -> dict[str, str]:
    "This process's environment without the settings measured: OpenMP's defaults."
    return {k: v for k, v in os.environ.items() if k not in OMP_SETTINGS}


def timed(kind: str, steps: int, env: dict[str, str]) -> float:
    "The seconds a fresh worker process takes for the work, in the environment `env`."
    argv = [sys.executable, __file__, "--worker", kind, "--steps", str(steps)]
    done = subprocess.run(argv, env={**unset(), **env}, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)["seconds"]


def neighbours(kind: str) -> list[subprocess.Popen]:
    "The processes running beside the measured one: none, Python spinning, or PyTorch training."
    if kind == NEIGHBOURS[1]:
        spin = [sys.executable, "-c", "while True: pass"]
        return [subprocess.Popen(spin) for _ in range(os.cpu_count())]
    if kind == NEIGHBOURS[2]:
        train = [sys.executable, __file__, "--worker", "train", "--steps", str(10**9)]
        return [subprocess.Popen(train, env=unset(), stdout=subprocess.DEVNULL) for _ in range(2)]
    return []


def measure(steps: dict[str, int], rounds: int) -> dict:
    "The seconds of each round of each workload, setting and neighbourhood."
    table = {}
    for hood in NEIGHBOURS:
        running = neighbours(hood)
        time.sleep(5 if running else 0)  # PyTorch loaded and training
        if any(process.poll() is not None for process in running):
            raise RuntimeError(f"a neighbour process ended early: {hood}")
        try:
            for kind in WORKLOADS:
                times = {name: [] for name in SETTINGS}
                for r in range(rounds):
                    order = list(SETTINGS) if r % 2 == 0 else list(reversed(SETTINGS))
                    for name in order:
                        times[name].append(timed(kind, steps[kind], SETTINGS[name]))
                        said = f"{kind}, {hood}, {name}: {times[name][-1]:.1f} s"
                        print(said, file=sys.stderr, flush=True)
                column = f"{kind}, {hood}"
                table[column] = times
        finally:
            for process in running:
                process.kill()
    return table


def machine() -> str:
    "The CPU's model name and core count, and PyTorch's version."
    import torch

    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    names = [line.split(":", 1)[1].strip() for line in info.splitlines() if "model name" in line]
    cpu = names[0] if names else platform.processor()
    return f"{cpu}, {os.cpu_count()} cores; PyTorch {torch.__version__}"


def show(result: dict) -> str:
    """The table: for each workload and neighbourhood (a row each), each setting's median seconds,
    its ratio to the fastest median there, and its slowest round."""
    lines = [f"{result['machine']}; {result['steps']}; {result['rounds']} rounds"]
    lines.append(f"{'median s (x fastest) slowest s':<46}" + "".join(f"{n:>24}" for n in SETTINGS))
    for column, times in result["seconds"].items():
        medians = {name: statistics.median(t) for name, t in times.items()}
        cells = [
            f"{medians[n]:.1f} ({medians[n] / min(medians.values()):.2f}x) {max(times[n]):.1f}"
            for n in SETTINGS
        ]
        lines.append(f"{column:<46}" + "".join(f"{c:>24}" for c in cells))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", choices=WORKLOADS, help="time one workload in this process")
    parser.add_argument("--steps", type=int, help="the worker's steps")
    parser.add_argument("--train-steps", type=int, default=12, help="training steps per timing")
    parser.add_argument("--translate-batches", type=int, default=4, help="batches per timing")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the result here (a new file)")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps({"seconds": work(args.worker, args.steps)}))
        return
    if args.json and args.json.exists():
        parser.error(f"--json {args.json} exists: it is never overwritten")
    steps = {"train": args.train_steps, "translate": args.translate_batches}
    result = {
        "machine": machine(),
        "steps": f"{steps['train']} training steps, {steps['translate']} translated batches "
        f"(32 sentences of 20 tokens each)",
        "rounds": args.rounds,
        "seconds": measure(steps, args.rounds),
    }
    print(show(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
