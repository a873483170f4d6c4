"""Our decoder against an inference engine on the CPU: the same model, the same sentences, the same
threads.

Ten ways to translate the same German sentences (Multi30k's test2016, 1,000 of them) with one
trained checkpoint, greedy search and beam search (beam 4, alpha 0.6) each:

- ours: `Translator` (batched, cached `greedy_search` and `beam_search`, batches of 128);
- ours, compiled: the same with `Search(compile=True)` (`translate --compile`): the fixed-size
  cache and its step compiled by `torch.compile` (inductor, weights frozen); compiled during the
  warm-up round, which is not timed;
- ours, int8: the same after `torch.ao.quantization.quantize_dynamic` on every `nn.Linear` (int8
  weights, activations quantized on the fly);
- CTranslate2 float32: `ExportedTranslator`, the checkpoint exported with `export_model`;
- CTranslate2 int8: the same exported with `quantization="int8"`.

`--untrained SIZE` puts a model of another size (a preset: small, multi30k, base) with random
weights, seeded, in the checkpoint's place, with the checkpoint's vocabularies: it rarely produces
the end symbol, so every translation runs to its limit (source length + 50 tokens, about 60): the
speed of a model of that size, not its quality. `--no-int8` leaves the two int8 ways out.

Tokenization is done once, before timing (both sides would spend the same on it). Every way runs
once as a warm-up, then `--rounds` rounds time them all, in alternating order (benchmarks/common.py
`compare`). Then: sentences per second, the median of the rounds and the best round (the one least
disturbed by other work on a shared machine), each with its ratio to ours; BLEU (sacreBLEU, cased,
detokenized) of each, how many of each way's translations are ours (greedy against our greedy, beam
against our beam) with the first that differ, and the peak memory of each engine.

Each engine runs in a worker process of its own, which the parent asks to translate, round after
round: in one process PyTorch's and CTranslate2's thread pools get in each other's way. Each uses
the threads as a user gets them: PyTorch splits each operation between `--threads` threads;
CTranslate2 translates `--threads` batches at once, a thread each (`inter_threads`;
`ExportedTranslator` submits a batch per source length at once). The peak memory is each worker's
peak resident set size (VmHWM in /proc/self/status, Linux) after all rounds; every worker imports
PyTorch, CTranslate2 and spaCy, so the peaks share that base, shown by a worker that loads the
checkpoint and its tokenizers and builds nothing.

Run it on a quiet machine. OpenMP's threads spin for a while when they wait for work, which is
what makes PyTorch's small operations fast, and what makes a machine that other processes share
slow: there, OMP_WAIT_POLICY=PASSIVE (threads sleep at once) helps both engines; on a quiet
machine it slows our decoder down by more than half (each of the hundreds of operations of a step
waits for a sleeping thread to wake), and CTranslate2 hardly at all. The script passes the
environment on as it finds it and prints the setting.

    python benchmarks/bench_engines.py --checkpoint runs/multi30k/last.pt --rounds 5
    python benchmarks/bench_engines.py --checkpoint runs/multi30k/last.pt --untrained base \
        --no-int8 --limit 500
    python benchmarks/bench_engines.py --checkpoint runs/multi30k/last.pt --profile beam

--profile greedy (or beam) times that search of ours (with --compiled: ours, compiled) and of
CTranslate2 (float32) in two alternating rounds, then prints the PyTorch operations of one more
round of ours, by their own CPU time (torch.profiler; common.py `profile_round`): where our
decoder's time goes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import ctranslate2
import torch
from common import compare, profile_round
from torch import nn

from annotated_transformer.checkpoint import RunCheckpoint, load_checkpoint
from annotated_transformer.config import PRESETS
from annotated_transformer.data import load_multi30k
from annotated_transformer.engines import ExportedTranslator
from annotated_transformer.fast_decoding import Search
from annotated_transformer.translation import bleu
from annotated_transformer.translator import Translator

ROOT = Path(__file__).resolve().parent.parent
SEARCHES = {"greedy": Search(), "beam 4": Search(beam_size=4)}
ENGINES = ("ours", "ours, compiled", "ours, int8", "CTranslate2 float32", "CTranslate2 int8")
# PyTorch 2.13 warns that torch.ao.quantization will move to torchao: it is still PyTorch's int8
warnings.filterwarnings("ignore", r"torch\.ao\.quantization is deprecated", DeprecationWarning)
warnings.filterwarnings("ignore", r"torch\.quantize_per_tensor", UserWarning)


class Pretokenized:
    "A source tokenizer that returns tokens computed once: the timing leaves tokenization out."

    def __init__(self, tokenizer, sentences: list[str]):
        self.tokens = dict(zip(sentences, tokenizer.tokenize(sentences)))

    def tokenize(self, texts: list[str], progress: bool = False) -> list[list[str]]:
        return [self.tokens[t] for t in texts]


def model_checkpoint(args: argparse.Namespace) -> RunCheckpoint:
    "The checkpoint, or with --untrained a model of that size with random weights in its place."
    ckpt = load_checkpoint(args.checkpoint)
    if args.untrained is None:
        return ckpt
    tied = ckpt.config.model.share_embeddings
    model = replace(PRESETS[args.untrained], norm_first=True, share_embeddings=tied)  # as runs are
    torch.manual_seed(0)  # the same weights in every worker
    weights = model.build(len(ckpt.src_vocab), len(ckpt.tgt_vocab)).state_dict()
    return replace(ckpt, config=replace(ckpt.config, model=model), model=weights, resume=None)


def build(engine: str, args: argparse.Namespace) -> Translator | ExportedTranslator:
    "One of the ENGINES, loaded from the checkpoint."
    ckpt, threads = model_checkpoint(args), args.threads
    if engine.startswith("CTranslate2"):
        quantization = "int8" if engine.endswith("int8") else "float32"
        return ExportedTranslator.from_checkpoint(ckpt, threads=threads, quantization=quantization)
    translator = Translator.from_checkpoint(ckpt)
    if engine == "ours, int8":
        translator.model = torch.ao.quantization.quantize_dynamic(
            translator.model, {nn.Linear}, dtype=torch.qint8
        )
    return translator


def vmhwm() -> int:
    "This process's peak resident memory in KiB (VmHWM: since it started, not since its fork)."
    return int(re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1))


def serve(engine: str, args: argparse.Namespace, sentences: list[str]) -> None:
    "A worker: build `engine`, then answer the parent's JSON commands, a line each, until quit."
    translator = None
    if engine == "none":  # the base: the checkpoint and its tokenizers loaded, nothing built
        load_checkpoint(args.checkpoint).tokenizers()
    else:
        translator = build(engine, args)
        translator.src_tokenizer = Pretokenized(translator.src_tokenizer, sentences)
    last = {}
    for line in sys.stdin:
        command, *rest = json.loads(line)
        if command == "translate":
            search = replace(SEARCHES[rest[0]], compile=engine == "ours, compiled")
            last[rest[0]] = translator.translate(sentences, search)
        answer = {"ready": True, "translate": True, "peak": vmhwm()}.get(command)
        print(json.dumps(last[rest[0]] if command == "outputs" else answer), flush=True)
        if command == "quit":
            return


class Worker:
    "An engine in a process of its own: two OpenMP runtimes in one process slow each other down."

    def __init__(self, engine: str):
        command = [sys.executable, __file__, "--worker", engine, *sys.argv[1:]]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.ask("ready")

    def ask(self, *command: str):
        "Send a command, wait for the answer."
        self.process.stdin.write((json.dumps(command) + "\n").encode())
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())


def timed_runs(
    workers: dict[str, Worker], engines: list[str], size: int, rates: dict
) -> dict[str, Callable[[], int]]:
    "A run for each engine and search, by its worker, keeping every rate it ran at."

    def run(name: str, worker: Worker, search: str) -> Callable[[], int]:
        def go() -> int:
            start = time.perf_counter()
            worker.ask("translate", search)
            rates.setdefault(name, []).append(size / (time.perf_counter() - start))
            return size

        return go

    return {
        f"{engine}, {s}": run(f"{engine}, {s}", workers[engine], s)
        for s in SEARCHES
        for engine in engines
    }


def agreement(
    outputs: dict, engines: list[str], sentences: list[str], translator: Translator
) -> dict[str, int]:
    "How many translations of each way are ours, and the first ones that are not."
    same_as_ours = {}
    for s in SEARCHES:
        ours = outputs[f"ours, {s}"]
        for engine in engines[1:]:
            theirs = outputs[f"{engine}, {s}"]
            differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
            same = same_as_ours[f"{engine}, {s}"] = len(ours) - len(differ)
            print(
                f"{engine + ', ' + s:>28}: {same}/{len(ours)} translations the same as ours "
                f"({100 * same / len(ours):.1f}%)"
            )
            for i in differ[:3]:
                print(f"{'':30}{sentences[i]}")
                print(f"{'':32}ours:   {translator.detokenize(ours[i])}")
                print(f"{'':32}theirs: {translator.detokenize(theirs[i])}")
    return same_as_ours


def report(
    medians: dict[str, float],
    rates: dict[str, list[float]],
    outputs: dict,
    references: list[str],
    translator: Translator,
) -> dict[str, dict]:
    "The table: sentences per second (median and best round), the ratios to ours, BLEU."
    best = {name: max(r[1:]) for name, r in rates.items()}  # r[0]: the warm-up
    print(
        f"\n{'sentences/s:':>28} {'median':>8} {'x ours':>7} {'best':>8} {'x ours':>7} {'BLEU':>6}"
    )
    figures = {}
    for name, rate in medians.items():
        ours = "ours, " + name.rsplit(", ", 1)[1]
        score = bleu(outputs[name], references, translator.tgt_tokenizer).sacrebleu
        print(
            f"{name:>28} {rate:8.1f} {rate / medians[ours]:7.2f} {best[name]:8.1f} "
            f"{best[name] / best[ours]:7.2f} {score:6.2f}"
        )
        figures[name] = {"median": rate, "best": best[name], "rounds": rates[name][1:]}
        figures[name].update(bleu=round(score, 2), x_ours=rate / medians[ours])
    return figures


def cpu_name() -> str:
    "The processor's model name (Linux), else the machine's type."
    info = Path("/proc/cpuinfo")
    found = re.search(r"model name\s*:\s*(.+)", info.read_text()) if info.is_file() else None
    return found.group(1) if found else platform.machine()


def profile_search(args: argparse.Namespace, sentences: list[str]) -> None:
    "Our search against CTranslate2's (a worker each), then ours under torch.profiler."
    search = "greedy" if args.profile == "greedy" else "beam 4"
    way = "ours, compiled" if args.compiled else "ours"
    workers = {engine: Worker(engine) for engine in (way, "CTranslate2 float32")}
    for r in range(3):  # the first round warms up
        for name, worker in workers.items() if r % 2 else reversed(workers.items()):
            start = time.perf_counter()
            worker.ask("translate", search)
            if r:
                print(f"{name}, {search}: {time.perf_counter() - start:.3f} s", flush=True)
    for worker in workers.values():
        worker.ask("quit")
    ours = build("ours", args)
    ours.src_tokenizer = Pretokenized(ours.src_tokenizer, sentences)
    chosen = replace(SEARCHES[search], compile=args.compiled)
    profile_round(lambda: ours.translate(sentences, chosen), torch.device("cpu"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", type=Path, default=ROOT / "runs" / "multi30k" / "last.pt")
    p.add_argument(
        "--untrained",
        choices=[name for name in PRESETS if name != "big"],
        help="time a model of this size with random weights (and the checkpoint's vocabularies)",
    )
    p.add_argument("--no-int8", action="store_true", help="leave out the two int8 ways")
    p.add_argument("--no-compiled", action="store_true", help="leave out ours, compiled")
    p.add_argument("--compiled", action="store_true", help="--profile: ours, compiled")
    p.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    p.add_argument("--data-dir", help="Multi30k folder (default: $MULTI30K_DIR, else download)")
    p.add_argument("--limit", type=int, default=1000, help="the first N sentences of test2016")
    p.add_argument("--threads", type=int, default=2, help="threads of both engines")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--profile", choices=["greedy", "beam"], help="profile this search of ours instead"
    )
    p.add_argument("--worker", choices=[*ENGINES, "none"], help=argparse.SUPPRESS)  # a child
    args = p.parse_args()
    if not args.checkpoint.is_file():
        sys.exit(
            f"no checkpoint at {args.checkpoint}: annotated-transformer train --out runs/multi30k"
        )
    torch.set_num_threads(args.threads)
    pairs = load_multi30k("test2016", args.data_dir)[: args.limit]
    sentences, references = [de for de, _ in pairs], [en for _, en in pairs]
    if args.worker:
        serve(args.worker, args, sentences)
        return
    command = shlex.join(["python", "benchmarks/bench_engines.py", *sys.argv[1:]])
    print("command:", command)
    threads = f"{args.threads} thread{'s' if args.threads > 1 else ''} each"
    machine = (
        f"{cpu_name()}, {os.cpu_count()} cores; "
        f"PyTorch {torch.__version__}, CTranslate2 {ctranslate2.__version__}; "
        f"{threads}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}"
    )
    print(f"{machine}; load average at the start {os.getloadavg()[0]:.1f}")
    print(f"{args.checkpoint}; {len(sentences)} sentences of test2016, tokenized before timing")
    if args.untrained:
        m = PRESETS[args.untrained]
        print(f"untrained: {args.untrained} (N={m.N}, d_model={m.d_model}), random weights")
    if args.profile:
        profile_search(args, sentences)
        return
    left_out = ("int8",) * args.no_int8 + ("compiled",) * args.no_compiled
    engines = [e for e in ENGINES if not e.endswith(left_out)]
    workers = {engine: Worker(engine) for engine in engines}
    rates: dict[str, list[float]] = {}
    start = time.perf_counter()
    runs = timed_runs(workers, engines, len(sentences), rates)
    medians = compare(runs, args.rounds, "sentences/s")
    print(f"timing: {time.perf_counter() - start:.0f} s; load average {os.getloadavg()[0]:.1f}")
    outputs = {f"{e}, {s}": workers[e].ask("outputs", s) for e in engines for s in SEARCHES}
    translator = build("ours", args)  # its tokenizers, for the text
    figures = report(medians, rates, outputs, references, translator)
    print("\nthe same translations as ours (tokens), and the first three that differ:")
    same = agreement(outputs, engines, sentences, translator)
    print("\npeak resident memory of each engine's process (all rounds run), and of the base:")
    workers["none"] = Worker("none")
    peaks = {}
    for engine, worker in reversed(workers.items()):
        name = "(the base: nothing built)" if engine == "none" else engine
        peaks[engine] = worker.ask("peak") / 1024
        print(f"{name:>28}: {peaks[engine]:7.0f} MiB")
        worker.ask("quit")
    if args.json:
        record = dict(command=command, machine=machine, sentences=len(sentences))
        record.update(untrained=args.untrained, ways=figures, same_as_ours=same, peak_mib=peaks)
        args.json.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
