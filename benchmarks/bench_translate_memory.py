"""Peak memory of `annotated-transformer translate` on a long standard input against a short one:
streaming keeps it flat.

The command reads standard input in chunks of --buffer-size lines and prints each chunk's
translations before it reads the next, so its peak resident memory should not depend on how many
lines come through the pipe. This script pipes `--lines` short German sentences (the synthetic
pairs' source side, cycled) into one fresh command and `--baseline-lines` into another, greedy
search, and reads each child's peak resident set size from the kernel (`os.wait4`'s `ru_maxrss`),
alternating the order every round. It prints both peaks, their ratio (flat memory: near 1), and the
lines per second. As a control, the long input also goes through with `--buffer-size` as large as
the input: one chunk, as if the command read all of standard input first, holding every line, its
tokens and its translation at once; that peak shows what the measurement sees when memory does grow
with the input.

Without --checkpoint it first trains one (the tiny preset, a few epochs of the synthetic pairs, so
that the model learns to stop; about a minute on a 2-core CPU).

    python benchmarks/bench_translate_memory.py                      # 100,000 lines against 1,000
    python benchmarks/bench_translate_memory.py --checkpoint runs/multi30k/last.pt --lines 20000
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

from annotated_transformer._chapters import synthetic_pairs, write_split
from annotated_transformer.cli import main as cli


def train_checkpoint(folder: Path, epochs: int) -> Path:
    "A tiny model trained on the synthetic pairs: small and quick, and it ends its sentences."
    pairs = synthetic_pairs()
    write_split(folder, "train", pairs[:176])
    write_split(folder, "val", pairs[176:])
    out = folder / "run"
    # made-up data on purpose: no warning that it differs from the published Multi30k
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Multi30k file differs from the published one")
        status = cli(
            [
                "train",
                "--out",
                str(out),
                "--data-dir",
                str(folder),
                "--model",
                "tiny",
                "--epochs",
                str(epochs),
                "--max-tokens",
                "400",
                "--warmup",
                "50",
                "--quiet",
                "--device",
                "cpu",
            ]
        )
    if status != 0:
        sys.exit(f"bench_translate_memory.py: training the checkpoint failed (status {status})")
    return out / "last.pt"


def peak_rss(checkpoint: Path, lines: int, buffer_size: int) -> tuple[int, float]:
    """Pipe `lines` sentences through a fresh `translate`; return its peak resident set size (KiB)
    and its lines per second."""
    sentences = [de for de, _ in synthetic_pairs()]
    command = [
        sys.executable,
        "-m",
        "annotated_transformer.cli",
        "translate",
        "--checkpoint",
        str(checkpoint),
        "--buffer-size",
        str(buffer_size),
        "--device",
        "cpu",
    ]
    start = time.perf_counter()
    child = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )

    # a line at a time, from a thread: the child reads while we write, as in a shell pipeline
    def feed() -> None:
        for i in range(lines):
            child.stdin.write(f"{sentences[i % len(sentences)]}\n".encode())
        child.stdin.close()

    writer = threading.Thread(target=feed)
    writer.start()
    printed = sum(1 for _ in child.stdout)
    writer.join()
    # this child's own peak, not the largest of all children so far
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if child.returncode != 0 or printed != lines:
        sys.exit(
            f"bench_translate_memory.py: translate exited with status {child.returncode}, "
            f"{printed} lines for {lines}"
        )
    return usage.ru_maxrss, lines / seconds  # ru_maxrss: KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        help="a checkpoint written by train (default: train a tiny one first)",
    )
    parser.add_argument("--lines", type=int, default=100_000, help="lines of the long input")
    parser.add_argument(
        "--baseline-lines", type=int, default=1_000, help="lines of the short input"
    )
    parser.add_argument("--buffer-size", type=int, default=100, help="translate's --buffer-size")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measurements of each input, alternating which goes first",
    )
    parser.add_argument(
        "--no-control", action="store_true", help="skip the control (the long input as one chunk)"
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=8,
        help="epochs of the checkpoint trained without --checkpoint",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = args.checkpoint or train_checkpoint(Path(folder), args.epochs)
        runs = {
            "short": (args.baseline_lines, args.buffer_size),
            "long": (args.lines, args.buffer_size),
        }
        if not args.no_control:
            runs["control"] = (args.lines, args.lines)
        peaks: dict[str, list[int]] = {name: [] for name in runs}
        for r in range(args.rounds):
            for name in list(runs) if r % 2 == 0 else list(reversed(runs)):
                lines, buffer_size = runs[name]
                peak, rate = peak_rss(checkpoint, lines, buffer_size)
                peaks[name].append(peak)
                print(
                    f"round {r + 1}/{args.rounds}: {lines:>9,} lines, "
                    f"--buffer-size {buffer_size:>9,}: peak RSS {peak / 1024:7.1f} MiB, "
                    f"{rate:7,.0f} lines/s",
                    flush=True,
                )
    peak = {name: statistics.median(values) for name, values in peaks.items()}
    print(
        f"peak RSS, {args.baseline_lines:,} lines: {peak['short'] / 1024:.1f} MiB; "
        f"{args.lines:,} lines: {peak['long'] / 1024:.1f} MiB; "
        f"ratio {peak['long'] / peak['short']:.3f} (--buffer-size {args.buffer_size}, greedy)"
    )
    if "control" in peak:
        print(
            f"control, {args.lines:,} lines in one chunk: {peak['control'] / 1024:.1f} MiB; "
            f"ratio {peak['control'] / peak['short']:.3f}"
        )


if __name__ == "__main__":
    main()
