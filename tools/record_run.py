"""Record a finished Multi30k run for the Multi30k chapter: its test2016 BLEU (greedy, beam 4, and
beam 4 over the average of the last five epochs, the paper's recipe), how many test sentences hold
a token its vocabulary does not know, its parameters and training history, and where and how it
was made.

    python tools/record_run.py runs/subwords-8000 --what "annotated-transformer train \\
        --out runs/subwords-8000 --vocab-size 8000" --out results/section51/subwords.json

The chapter's "Words or subwords" cell reads the records side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from pathlib import Path

import torch

from annotated_transformer.checkpoint import RunCheckpoint, average_last, load_checkpoint
from annotated_transformer.data import load_multi30k
from annotated_transformer.fast_decoding import Search
from annotated_transformer.model import count_parameters
from annotated_transformer.translator import Translator

PAPER_AVERAGE = 5  # §6.1: the average of the last 5 checkpoints


def unknown_sentences(ckpt: RunCheckpoint, sources: list[str]) -> int:
    "How many of the sources hold a token outside the run's source vocabulary."
    tokens = ckpt.tokenizers()[0].tokenize(sources)
    unk = ckpt.src_vocab.unk
    return sum(unk in ckpt.src_vocab.encode(t) for t in tokens)


def scores(last: Translator, run: Path, sources: list[str], references: list[str]) -> dict:
    "test2016 sacreBLEU of the run's last epoch, greedy and beam 4, and of its averaged weights."
    averaged = Translator.from_checkpoint(average_last(run / "last.pt", PAPER_AVERAGE))
    beam = Search(beam_size=4)
    return {
        "greedy": last.bleu(sources, references).sacrebleu,
        "beam 4, alpha 0.6": last.bleu(sources, references, beam).sacrebleu,
        f"beam 4, alpha 0.6, average of last {PAPER_AVERAGE}": averaged.bleu(
            sources, references, beam
        ).sacrebleu,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, help="the run's folder (last.pt and the last epochs)")
    p.add_argument("--what", required=True, help="the command that trained it")
    p.add_argument("--out", type=Path, required=True, help="the JSON record to write")
    p.add_argument("--data-dir", help="Multi30k folder (default: $MULTI30K_DIR, else download)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing record")
    args = p.parse_args()
    if not (args.run / "last.pt").is_file():
        sys.exit(f"{args.run}: no last.pt (is it a run folder?)")
    if args.out.exists() and not args.overwrite:
        sys.exit(f"{args.out} exists: --overwrite to replace it")
    ckpt = load_checkpoint(args.run / "last.pt")
    if ckpt.epoch < PAPER_AVERAGE:
        sys.exit(f"{args.run}: {ckpt.epoch} epochs, fewer than the {PAPER_AVERAGE} to average")
    pairs = load_multi30k("test2016", args.data_dir)
    sources, references = [de for de, _ in pairs], [en for _, en in pairs]
    last = Translator.from_checkpoint(ckpt)
    record = {
        "what": args.what,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}",
        "epochs": ckpt.epoch,
        "training_hours": round(sum(h["seconds"] for h in ckpt.history) / 3600, 2),
        # robust to a pause (a run stopped while the machine measured something else)
        "median_epoch_seconds": round(statistics.median(h["seconds"] for h in ckpt.history)),
        "vocabularies": [len(ckpt.src_vocab), len(ckpt.tgt_vocab)],
        "parameters": count_parameters(last.model),
        "test2016_sentences": len(sources),
        "unknown_sentences": unknown_sentences(ckpt, sources),
        "test2016": {
            k: round(s, 2) for k, s in scores(last, args.run, sources, references).items()
        },
        "history": ckpt.history,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k != "history"}, indent=1))


if __name__ == "__main__":
    main()
