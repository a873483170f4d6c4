"""The console command `annotated-transformer`: train, evaluate and translate on Multi30k.

    annotated-transformer train --out runs/multi30k
    torchrun --standalone --nproc_per_node=gpu -m annotated_transformer.cli train --out runs/ddp
    annotated-transformer evaluate --checkpoint runs/multi30k/last.pt --split test2016
    annotated-transformer evaluate --checkpoint runs/multi30k/last.pt --beam 4 --average-last 5
    annotated-transformer translate --checkpoint runs/multi30k/last.pt "Ein Mann fährt Fahrrad."
    annotated-transformer translate --checkpoint runs/multi30k/last.pt --attention out.png "Ein Mann fährt Fahrrad."
    echo "Zwei Hunde spielen im Schnee." | annotated-transformer translate --checkpoint runs/multi30k/last.pt

Hand-written (not exported from a notebook): it only parses arguments and calls the library.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from annotated_transformer.checkpoint import average_last, load_checkpoint, model_from_checkpoint
from annotated_transformer.data import load_multi30k
from annotated_transformer.distributed import PRECISIONS, cleanup_distributed, default_precision, setup_distributed
from annotated_transformer.model import ModelConfig
from annotated_transformer.trainer import TrainConfig, train
from annotated_transformer.translation import bleu, detokenize, translate


def _train(args: argparse.Namespace) -> None:
    # Flags that were given override the defaults, or on --resume the checkpoint's configuration.
    overrides = {name: getattr(args, name) for name in ("epochs", "max_tokens", "accum_iter", "warmup", "seed") if getattr(args, name) is not None}
    base = TrainConfig.from_dict(load_checkpoint(args.out / "last.pt")["config"]) if args.resume else TrainConfig()
    model = base.model
    if args.model is not None:
        model = TrainConfig().model if args.model == "multi30k" else replace(ModelConfig.preset(args.model), norm_first=True)
    overrides["model"] = model if args.dropout is None else replace(model, dropout=args.dropout)
    setup = setup_distributed(args.backend, args.device)  # one process, or one of those torchrun started (Part 6)
    try:
        train(args.out, replace(base, **overrides), data_dir=args.data_dir, resume=args.resume, device=setup.device,
              progress=not args.quiet, precision=args.precision or default_precision(setup.device), compile=args.compile)
    finally:
        cleanup_distributed()


def _load(args: argparse.Namespace):
    ckpt = average_last(args.checkpoint, args.average_last) if args.average_last else load_checkpoint(args.checkpoint)
    model, src_vocab, tgt_vocab = model_from_checkpoint(ckpt)
    return (model.to(args.device) if args.device else model), src_vocab, tgt_vocab


def _decoding(args: argparse.Namespace) -> str:
    "How the output was made, for the report line."
    search = "greedy" if args.beam == 1 else f"beam {args.beam}, alpha {args.alpha}"
    return search + (f", average of the last {args.average_last} epochs" if args.average_last else "") + (", <unk> allowed" if args.allow_unk else "")


def _evaluate(args: argparse.Namespace) -> None:
    model, src_vocab, tgt_vocab = _load(args)
    pairs = load_multi30k(args.split, args.data_dir)
    hypotheses = translate(model, [de for de, _ in pairs], src_vocab, tgt_vocab, beam_size=args.beam, alpha=args.alpha,
                           allow_unk=args.allow_unk, progress=not args.quiet)
    print(f"{args.split} ({len(pairs)} sentences, {_decoding(args)}): {bleu(hypotheses, [en for _, en in pairs])}")


def _translate(args: argparse.Namespace) -> None:
    model, src_vocab, tgt_vocab = _load(args)
    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not sentences:
        raise ValueError("no sentences: give them as arguments or on standard input, one a line")
    if args.attention and args.attention.suffix.lower() != ".png":
        raise ValueError(f"--attention needs a .png file name, got {args.attention}")
    translations = translate(model, sentences, src_vocab, tgt_vocab, beam_size=args.beam, alpha=args.alpha, allow_unk=args.allow_unk)
    if args.attention:
        from annotated_transformer.visualization import plot_sentence, sentence_attention  # seaborn loads slowly: only when asked
    for i, (sentence, tokens) in enumerate(zip(sentences, translations), start=1):
        print(detokenize(tokens))
        if args.attention:
            maps = sentence_attention(model, sentence, src_vocab, tgt_vocab, translation=tokens)
            layer = len(model.encoder.layers) - 1 if args.layer is None else args.layer
            path = args.attention if len(sentences) == 1 else args.attention.with_stem(f"{args.attention.stem}-{i}")
            path.parent.mkdir(parents=True, exist_ok=True)
            plot_sentence(maps, layer).savefig(path, dpi=100)
            print(f"attention of layer {layer} saved to {path}", file=sys.stderr)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    "The argument parser of `annotated-transformer`."
    p = argparse.ArgumentParser(prog="annotated-transformer", description="Train, evaluate and use a Transformer on Multi30k German->English.")
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", type=Path, help="folder with the Multi30k .gz files (default: $MULTI30K_DIR, else download)")
    common.add_argument("--device", help="cuda or cpu (default: cuda when available)")

    t = sub.add_parser("train", parents=[common], help="train on Multi30k, a checkpoint per epoch")
    t.add_argument("--out", type=Path, required=True, help="folder for checkpoints (last.pt, epochK.pt)")
    t.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    t.add_argument("--model", choices=["multi30k", "tiny", "base", "big"], help="model sizes (default multi30k: N=3, d_model=256, pre-norm)")
    t.add_argument("--epochs", type=int, help=f"total epochs (default {TrainConfig().epochs})")
    t.add_argument("--max-tokens", type=int, help=f"tokens per batch (default {TrainConfig().max_tokens})")
    t.add_argument("--accum-iter", type=int, help="batches per optimizer step (default 1)")
    t.add_argument("--warmup", type=int, help=f"warmup steps (default {TrainConfig().warmup})")
    t.add_argument("--dropout", type=float, help="dropout rate of the model (default: the model's, 0.1)")
    t.add_argument("--seed", type=int, help="random seed (default 0)")
    t.add_argument("--precision", choices=list(PRECISIONS), help="mixed precision (default: bf16 on GPUs that support it, else fp32)")
    t.add_argument("--compile", action="store_true", help="torch.compile the model")
    t.add_argument("--backend", choices=["nccl", "gloo"], help="under torchrun: the collective backend (default: nccl on GPUs, gloo on CPUs)")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    t.set_defaults(run=_train)

    decoding = argparse.ArgumentParser(add_help=False)
    decoding.add_argument("--checkpoint", type=Path, required=True, help="a checkpoint written by train (e.g. OUT/last.pt)")
    decoding.add_argument("--beam", type=_positive, default=1, help="beam size (default 1: greedy; the paper uses 4)")
    decoding.add_argument("--alpha", type=float, default=0.6, help="beam search length penalty (default 0.6, as in the paper)")
    decoding.add_argument("--average-last", type=_positive, metavar="K", help="average the weights of the checkpoint's last K epochs")
    decoding.add_argument("--allow-unk", action="store_true", help="let translations contain <unk> (default: the next best word replaces it)")

    e = sub.add_parser("evaluate", parents=[common, decoding], help="BLEU of a checkpoint on a Multi30k split")
    e.add_argument("--split", default="test2016", choices=["train", "val", "test2016"])
    e.add_argument("--quiet", action="store_true", help="no progress bar")
    e.set_defaults(run=_evaluate)

    tr = sub.add_parser("translate", parents=[common, decoding], help="translate German sentences (arguments or stdin)")
    tr.add_argument("sentences", nargs="*", help="German sentences; read from standard input if none")
    tr.add_argument("--attention", type=Path, metavar="PNG", help="save attention heatmaps of each sentence (OUT-1.png, ... for several)")
    tr.add_argument("--layer", type=int, help="the layer whose attention --attention draws (default: the last)")
    tr.set_defaults(run=_translate)
    return p


def main(argv: list[str] | None = None) -> int:
    "Entry point: run the command; report expected errors in one line, without a traceback."
    args = parser().parse_args(argv)
    try:
        args.run(args)
    except (ValueError, FileNotFoundError, ConnectionError) as error:
        rank = f" (rank {os.environ['RANK']})" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else ""  # under torchrun
        print(f"annotated-transformer {args.command}{rank}: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
