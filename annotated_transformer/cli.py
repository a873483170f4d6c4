"""The console command `annotated-transformer`: train, evaluate and translate, on Multi30k or your own parallel text.

    annotated-transformer train --out runs/multi30k
    annotated-transformer train --out runs/subwords --vocab-size 8000
    annotated-transformer train --out runs/en-fr --src-lang en --tgt-lang fr --vocab-size 8000
    annotated-transformer train --out runs/mine --train-src train.xx --train-tgt train.yy --valid-src val.xx --valid-tgt val.yy
    annotated-transformer train --out runs/lexical --arch lexical --train-pairs 10000
    annotated-transformer evaluate --checkpoint runs/mine/last.pt --src test.xx --ref test.yy --output test.out
    torchrun --standalone --nproc_per_node=gpu -m annotated_transformer.cli train --out runs/ddp
    annotated-transformer evaluate --checkpoint runs/multi30k/last.pt --split test2016
    annotated-transformer evaluate --checkpoint runs/multi30k/last.pt --beam 4 --average-last 5
    annotated-transformer translate --checkpoint runs/multi30k/last.pt "Ein Mann fährt Fahrrad."
    annotated-transformer translate --checkpoint runs/multi30k/last.pt --attention out.png "Ein Mann fährt Fahrrad."
    echo "Zwei Hunde spielen im Schnee." | annotated-transformer translate --checkpoint runs/multi30k/last.pt
    producer | annotated-transformer translate --checkpoint runs/multi30k/last.pt --buffer-size 1 | consumer
    annotated-transformer translate --checkpoint runs/multi30k/last.pt --beam 4 --nbest 4 --output nbest.tsv < test.de

Your own data: plain-text files, one sentence a line (optionally gzipped), line i of the source file
translated by line i of the target file; such a run uses subwords (default --vocab-size 8000), with one
shared vocabulary and tied embeddings (§3.4, §5.1). The checkpoint carries its subword model:
`translate` and `evaluate` need nothing else. Empty input lines give empty output lines.

`translate` streams standard input: it translates and prints (flushed) every --buffer-size lines (default
100) as they arrive, so it fits a pipeline, answers as you type with --buffer-size 1, and its memory does not
grow with the input. --nbest K prints the K best translations of each sentence with their scores, tab-separated.

Hand-written (not exported from a notebook): it only parses arguments and calls the library.
Exit status: 0 done; 2 a usage error (a bad flag value, a wrong combination: found before anything is
loaded where possible); 1 a failure the library reports (a missing or corrupt file, a checkpoint or data
that cannot be used). Either way one line on standard error, `annotated-transformer COMMAND: error: ...`
(with `--debug`, Python's traceback instead, for a bug report).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import asdict, replace
from pathlib import Path
from typing import NamedTuple, NoReturn, TextIO

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import torch

from annotated_transformer import __version__
from annotated_transformer.checkpoint import (
    average_last,
    load_checkpoint,
    model_from_checkpoint,
    tokenizers_from_checkpoint,
)
from annotated_transformer.data import Vocab, load_multi30k, read_lines
from annotated_transformer.distributed import (
    PRECISIONS,
    cleanup_distributed,
    default_precision,
    setup_distributed,
)
from annotated_transformer.model import EncoderDecoder, ModelConfig, count_parameters
from annotated_transformer.recurrent import ARCHS, RecurrentConfig, RecurrentEncoderDecoder, arch_of
from annotated_transformer.trainer import TrainConfig, train
from annotated_transformer.translation import bleu, detokenize, translate_nbest


DEFAULT_VOCAB_SIZE = 8000  # subwords for your own files when --vocab-size is not given
FILE_FLAGS = ("train_src", "train_tgt", "valid_src", "valid_tgt")


def _files(args: argparse.Namespace) -> dict[str, tuple[Path, Path]] | None:
    "The training and validation files the flags name (all four or none), checked to exist."
    given = [name for name in FILE_FLAGS if getattr(args, name) is not None]
    if not given:
        return None
    if len(given) < len(FILE_FLAGS):
        missing = ", ".join(
            "--" + name.replace("_", "-") for name in FILE_FLAGS if name not in given
        )
        raise UsageError(
            f"your own data needs all four of --train-src, --train-tgt, --valid-src and --valid-tgt: {missing} missing"
        )
    for name in FILE_FLAGS:
        if not getattr(args, name).is_file():
            raise UsageError(f"--{name.replace('_', '-')} {getattr(args, name)}: no such file")
    return {"train": (args.train_src, args.train_tgt), "val": (args.valid_src, args.valid_tgt)}


def _config_file(path: Path) -> TrainConfig:
    "A training configuration from a JSON or TOML file: any of `TrainConfig`'s settings (the model's under 'model'), the rest default."
    if not path.is_file():
        raise UsageError(f"--config {path}: no such file")
    try:
        settings = (
            tomllib.loads(path.read_text())
            if path.suffix == ".toml"
            else json.loads(path.read_text())
        )
        defaults, model = TrainConfig().to_dict(), settings.get("model", {})
        if model.get("arch", "transformer") != "transformer":  # a recurrent model: its own defaults
            defaults["model"] = asdict(RecurrentConfig(arch=model["arch"]))
        return TrainConfig.from_dict(
            {**defaults, **settings, "model": {**defaults["model"], **model}}
        )
    except (
        ValueError,
        TypeError,
        AttributeError,
    ) as error:  # not JSON/TOML, an unknown setting, a bad value, not a table
        raise ValueError(f"--config {path}: {error}") from None


def _train_config(args: argparse.Namespace, files: dict | None) -> TrainConfig:
    "The defaults, the --config file or on --resume the checkpoint's configuration, with the flags that were given."
    if args.resume and args.config:
        raise UsageError(
            "--config sets up a new run; a resumed run keeps the configuration in its checkpoint"
        )
    overrides = {
        name: getattr(args, name)
        for name in (
            "epochs",
            "max_tokens",
            "accum_iter",
            "warmup",
            "seed",
            "src_lang",
            "tgt_lang",
            "train_pairs",
        )
        if getattr(args, name) is not None
    }
    if args.resume:
        base = TrainConfig.from_dict(load_checkpoint(args.out / "last.pt")["config"])
    else:
        base = _config_file(args.config) if args.config else TrainConfig()
    vocab_size = (
        args.vocab_size
        or base.vocab_size
        or (DEFAULT_VOCAB_SIZE if files and not args.resume else None)
    )
    model = _model_config(args, base.model)
    if not (
        args.resume or args.config
    ):  # subwords: one shared vocabulary and the three tied weights of §3.4
        model = replace(model, share_embeddings=vocab_size is not None)
    overrides["model"] = model if args.dropout is None else replace(model, dropout=args.dropout)
    return replace(base, **overrides, vocab_size=vocab_size)


def _model_config(
    args: argparse.Namespace, base: ModelConfig | RecurrentConfig
) -> ModelConfig | RecurrentConfig:
    "The model --arch, --model and the layer counts choose; `base` (the default, the --config file's or the resumed run's) if none is given."
    layers = {
        name: getattr(args, name)
        for name in ("enc_layers", "dec_layers")
        if getattr(args, name) is not None
    }
    arch = args.arch or arch_of(base)
    if arch == "transformer":
        if layers:
            raise UsageError(
                "--enc-layers and --dec-layers size a recurrent model (--arch lstm or lexical): "
                "a Transformer's size comes from --model"
            )
        if args.model is None:
            return base if arch_of(base) == "transformer" else TrainConfig().model
        return (
            TrainConfig().model
            if args.model == "multi30k"
            else replace(ModelConfig.preset(args.model), norm_first=True)
        )
    if args.model is not None:
        raise UsageError(
            f"--model chooses a Transformer's size: it does not apply to --arch {arch} (use --enc-layers and --dec-layers)"
        )
    start = base if arch_of(base) == arch else RecurrentConfig(arch=arch)
    return replace(start, **layers)


def _train(args: argparse.Namespace) -> None:
    if args.resume and args.overwrite:
        raise UsageError(
            "--resume continues the run in --out and --overwrite replaces it: give one of them"
        )
    files = _files(args)
    if files and (args.data_dir or args.src_lang or args.tgt_lang):
        raise UsageError(
            "--data-dir, --src-lang and --tgt-lang choose Multi30k's files: leave them out with --train-src and the others"
        )
    config = _train_config(args, files)
    setup = setup_distributed(
        args.backend, args.device
    )  # one process, or one of those torchrun started (Part 6)
    try:
        train(
            args.out,
            config,
            data_dir=args.data_dir,
            files=files,
            resume=args.resume,
            overwrite=args.overwrite,
            device=setup.device,
            progress=not args.quiet,
            precision=args.precision or default_precision(setup.device),
            compile=args.compile,
            fused_loss=args.fused_loss,
            tensorboard=args.tensorboard,
        )
    finally:
        cleanup_distributed()


class UsageError(Exception):
    "A bad flag value or combination found after parsing (e.g. a --layer the checkpoint's model does not have): exit status 2."


class Loaded(NamedTuple):
    "What decoding needs from a checkpoint."

    model: EncoderDecoder | RecurrentEncoderDecoder
    src_vocab: Vocab
    tgt_vocab: Vocab
    tokenizers: tuple  # (source, target)
    config: TrainConfig


def _load(args: argparse.Namespace) -> Loaded:
    ckpt = (
        average_last(args.checkpoint, args.average_last)
        if args.average_last
        else load_checkpoint(args.checkpoint)
    )
    model, src_vocab, tgt_vocab = model_from_checkpoint(ckpt, args.checkpoint)
    tokenizers = tokenizers_from_checkpoint(ckpt, args.checkpoint)
    model = model.to(args.device) if args.device else model
    return Loaded(model, src_vocab, tgt_vocab, tokenizers, TrainConfig.from_dict(ckpt["config"]))


def _scored_lines(
    loaded: Loaded,
    lines: list[str],
    args: argparse.Namespace,
    nbest: int = 1,
    progress: bool = False,
) -> list[list[tuple[list[str], float]]]:
    "The `nbest` best (target tokens, score) of each line, best first; none for an empty line, so that the output lines up with the input."
    model, src_vocab, tgt_vocab, (src_tok, _), _ = loaded
    rows = [i for i, line in enumerate(lines) if line.strip()]
    found = (
        translate_nbest(
            model,
            [lines[i] for i in rows],
            src_vocab,
            tgt_vocab,
            src_tok,
            beam_size=args.beam,
            nbest=nbest,
            alpha=args.alpha,
            allow_unk=args.allow_unk,
            progress=progress,
        )
        if rows
        else []
    )
    scored: list[list[tuple[list[str], float]]] = [[] for _ in lines]
    for i, best in zip(rows, found):
        scored[i] = best
    return scored


def _translate_lines(
    loaded: Loaded, lines: list[str], args: argparse.Namespace, progress: bool = False
) -> list[list[str]]:
    "Target tokens for each line; none for an empty line, so that the output lines up with the input."
    return [
        best[0][0] if best else [] for best in _scored_lines(loaded, lines, args, progress=progress)
    ]


def _decoding(args: argparse.Namespace) -> str:
    "How the output was made, for the report line."
    search = "greedy" if args.beam == 1 else f"beam {args.beam}, alpha {args.alpha}"
    return (
        search
        + (f", average of the last {args.average_last} epochs" if args.average_last else "")
        + (", <unk> allowed" if args.allow_unk else "")
    )


def _check_new_output(path: Path | None) -> None:
    "Refuse an --output file that exists: the command never overwrites one."
    if path is not None and path.exists():
        raise UsageError(
            f"--output {path} exists: choose another name or delete it (it is never overwritten)"
        )


def _evaluation_inputs(args: argparse.Namespace) -> None:
    "Check the flags of evaluate that need no model (so before it loads)."
    if (args.src is None) != (args.ref is None):
        raise UsageError(
            "--src and --ref go together: the sentences to translate and their reference translations"
        )
    if args.src is not None and args.split is not None:
        raise UsageError("--split chooses a Multi30k split: leave it out with --src and --ref")
    for flag, path in (("--src", args.src), ("--ref", args.ref)):
        if path is not None and not path.is_file():
            raise UsageError(f"{flag} {path}: no such file")
    _check_new_output(args.output)


def _evaluate(args: argparse.Namespace) -> None:
    _evaluation_inputs(args)
    loaded = _load(args)
    if args.src is not None:
        sources, references = (
            read_lines(args.src, allow_empty=True),
            read_lines(args.ref, allow_empty=True),
        )
        if len(sources) != len(references):
            raise ValueError(
                f"{args.src} has {len(sources)} lines but {args.ref} has {len(references)}: "
                f"the reference file must translate the source file line by line"
            )
        name = args.src.name
    else:
        split = args.split or "test2016"
        pairs = load_multi30k(
            split, args.data_dir, langs=(loaded.config.src_lang, loaded.config.tgt_lang)
        )
        sources, references, name = [src for src, _ in pairs], [tgt for _, tgt in pairs], split
    hypotheses = _translate_lines(loaded, sources, args, progress=not args.quiet)
    if args.output is not None:
        with open(
            args.output, "x", encoding="utf-8"
        ) as f:  # "x": never over a file that appeared meanwhile
            f.writelines(detokenize(tokens, loaded.tokenizers[1]) + "\n" for tokens in hypotheses)
    scores = bleu(hypotheses, references, loaded.tokenizers[1])
    if args.json:  # sacreBLEU's own fields, then what was translated and how
        print(
            json.dumps(
                {
                    **scores.fields,
                    "tokenized_lowercase": scores.tokenized_lowercase,
                    "data": name,
                    "sentences": len(sources),
                    "checkpoint": str(args.checkpoint),
                    "arch": arch_of(loaded.config.model),
                    "parameters": count_parameters(loaded.model),
                    "beam": args.beam,
                    "alpha": args.alpha,
                    "average_last": args.average_last,
                    "allow_unk": args.allow_unk,
                }
            )
        )
    else:
        print(f"{name} ({len(sources)} sentences, {_decoding(args)}): {scores}")


def _stdin_lines() -> Iterator[str]:
    "The lines of standard input (blank ones too) as they arrive, decoded as UTF-8 one at a time so that an error names its line."
    binary = getattr(
        sys.stdin, "buffer", None
    )  # None where sys.stdin was replaced by a text stream (an embedding program, a test)
    for number, line in enumerate(sys.stdin if binary is None else binary, start=1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"standard input, line {number}: byte {error.object[error.start]:#04x} at position "
                    f"{error.start + 1} is not UTF-8 text"
                ) from None
        yield line.rstrip("\r\n")


def _chunks(lines: Iterable[str], size: int | None) -> Iterator[list[str]]:
    "`lines` in lists of `size` (None: one list of them all), each given as soon as it is complete; none at all for no lines."
    lines = iter(lines)
    while chunk := list(itertools.islice(lines, size)):
        yield chunk


def _translate_inputs(args: argparse.Namespace) -> Iterator[list[str]]:
    """The sentences to translate, in chunks, after every check of the arguments that needs no model (so before it loads).

    The arguments are one chunk. Standard input streams: chunks of --buffer-size lines, each read once the one before is
    printed, so output comes while input still arrives and memory does not grow with the input (--attention reads it all,
    as one chunk). Standard input without a sentence (empty, or blank lines only) is no error: like any filter, the command
    prints a line for each line read, nothing for nothing, so a pipeline whose producer has nothing to say still succeeds;
    refusing it would also mean holding back every output line until the input ends.
    """
    if args.attention and args.attention.suffix.lower() != ".png":
        raise UsageError(f"--attention needs a .png file name, got {args.attention}")
    if args.layer is not None and not args.attention:
        raise UsageError("--layer chooses the layer that --attention draws: give --attention too")
    if args.nbest is not None and args.attention:
        raise UsageError(
            "--attention draws the best translation of each sentence: leave out --nbest"
        )
    if args.nbest is not None and args.nbest > args.beam:
        raise UsageError(
            f"--nbest {args.nbest} needs --beam {args.nbest} or more: a beam of {args.beam} ends with at most "
            f"{args.beam} translations"
        )
    _check_new_output(args.output)
    empty = [i for i, sentence in enumerate(args.sentences, start=1) if not sentence.strip()]
    if empty:
        raise UsageError(
            f"sentence {empty[0]} of the arguments is empty: there is nothing to translate"
        )
    if args.attention:
        try:
            args.attention.parent.mkdir(parents=True, exist_ok=True)
        except (
            OSError
        ) as error:  # FileExistsError: it is a file; NotADirectoryError, PermissionError, ...
            reason = "it is not a folder" if isinstance(error, FileExistsError) else error.strerror
            raise OSError(
                f"cannot use {args.attention.parent} as the folder for --attention: {reason}"
            ) from None
    if args.sentences:
        return iter([args.sentences])
    return _chunks(_stdin_lines(), None if args.attention else args.buffer_size)


def _output_lines(
    loaded: Loaded, lines: list[str], start: int, args: argparse.Namespace
) -> list[str]:
    "What translate prints for `lines` (input lines start, start + 1, ...): a translation each, or --nbest's INDEX<TAB>SCORE<TAB>TEXT lines."
    tgt_tok = loaded.tokenizers[1]
    if args.nbest is None:
        return [detokenize(tokens, tgt_tok) for tokens in _translate_lines(loaded, lines, args)]
    return [
        f"{start + i}\t{score:.4f}\t{detokenize(tokens, tgt_tok)}"
        for i, best in enumerate(_scored_lines(loaded, lines, args, args.nbest))
        for tokens, score in best
    ]


def _print_with_attention(
    loaded: Loaded, sentences: list[str], layer: int, args: argparse.Namespace, out: TextIO
) -> None:
    "Print the translations and save the attention maps of each sentence; every map first: one refused prints nothing."
    from annotated_transformer.visualization import (
        plot_sentence,
        sentence_attention,
    )  # seaborn loads slowly: only when asked

    model, src_vocab, tgt_vocab, (src_tok, tgt_tok), _ = loaded
    translations = _translate_lines(loaded, sentences, args)
    maps = [
        sentence_attention(model, s, src_vocab, tgt_vocab, translation=tokens, tokenizer=src_tok)
        if s.strip()
        else None
        for s, tokens in zip(sentences, translations)
    ]
    for i, (tokens, found) in enumerate(zip(translations, maps), start=1):
        print(detokenize(tokens, tgt_tok), file=out)
        if found is not None:
            path = (
                args.attention
                if len(sentences) == 1
                else args.attention.with_stem(f"{args.attention.stem}-{i}")
            )
            plot_sentence(found, layer).savefig(path, dpi=100)
            print(f"attention of layer {layer} saved to {path}", file=sys.stderr)


def _translate(args: argparse.Namespace) -> None:
    chunks = _translate_inputs(args)
    first = next(chunks, [])  # read, so checked, before the model loads
    loaded = _load(args)
    layers = len(loaded.model.encoder.layers) if isinstance(loaded.model, EncoderDecoder) else 1
    if (
        args.layer is not None and not 0 <= args.layer < layers
    ):  # before translating: nothing is printed
        raise UsageError(
            f"--layer {args.layer} is out of range: the model has {layers} layers, numbered 0 to {layers - 1}"
        )
    layer = layers - 1 if args.layer is None else args.layer
    try:
        with (
            open(args.output, "x", encoding="utf-8") if args.output else nullcontext(sys.stdout)
        ) as out:  # "x": never overwrite
            if args.attention:  # `first` holds every sentence
                _print_with_attention(loaded, first, layer, args, out)
                return
            start = 0
            for lines in itertools.chain([first], chunks):
                out.writelines(line + "\n" for line in _output_lines(loaded, lines, start, args))
                out.flush()  # shown now, while the next chunk is read
                start += len(lines)
    except (
        BrokenPipeError
    ):  # the reader stopped early (`| head`): stop too, quietly, as other filters do
        os.dup2(
            os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno()
        )  # Python flushes stdout on exiting: not into the closed pipe


def _checked(
    convert: Callable[[str], float], accept: Callable[[float], bool], expected: str
) -> Callable[[str], float]:
    "An argparse type: `convert` the text, refusing what it cannot read and what `accept` rejects, both with `expected` in the message."

    def check(text: str) -> float:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text}")
        return value

    return check


_positive = _checked(int, lambda n: n >= 1, "a whole number at least 1")
_seed = _checked(int, lambda n: 0 <= n < 2**32, "a whole number from 0 to 2**32 - 1")
_alpha = _checked(float, lambda x: math.isfinite(x) and x >= 0, "a finite number at least 0")
_dropout = _checked(
    float, lambda x: 0 <= x < 1, "a probability at least 0 and below 1"
)  # NaN fails both comparisons


def _language(text: str) -> str:
    "An argparse type: a language code as Multi30k's file names use it (de, en, fr, cs, ...)."
    if not (text.isascii() and text.isalpha() and text.islower() and 2 <= len(text) <= 3):
        raise argparse.ArgumentTypeError(
            f"expected a language code such as de, en or fr, got {text!r}"
        )
    return text


def _device(text: str) -> str:
    "An argparse type: a device PyTorch knows and this machine has (cpu, cuda, cuda:N or mps)."
    try:
        device = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a device: use cpu, cuda, cuda:N or mps"
        ) from None
    if device.type == "cpu":
        return text
    count = {
        "cuda": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "mps": int(torch.backends.mps.is_available()),
    }
    if device.type not in count:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a device this command runs on: use cpu, cuda, cuda:N or mps"
        )
    n = count[device.type]
    if n == 0:
        raise argparse.ArgumentTypeError(
            f"{text} is not available: this machine has no {device.type} device that PyTorch can use"
        )
    if device.index is not None and device.index >= n:
        raise argparse.ArgumentTypeError(
            f"{text} is not available: this machine has {n} {device.type} device(s), "
            f"{device.type}:0 to {device.type}:{n - 1}"
        )
    return text


class _Parser(argparse.ArgumentParser):
    "An argument parser whose usage errors are the one line `PROG: error: MESSAGE`, exit status 2."

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


EXAMPLES = {  # shown under each command's --help
    "train": """examples:
  annotated-transformer train --out runs/multi30k                  # Multi30k German->English, words
  annotated-transformer train --out runs/subwords --vocab-size 8000
  annotated-transformer train --out runs/en-fr --src-lang en --tgt-lang fr --vocab-size 8000
  annotated-transformer train --out runs/mine --train-src train.xx --train-tgt train.yy \\
      --valid-src valid.xx --valid-tgt valid.yy
  annotated-transformer train --out runs/multi30k --resume --epochs 30""",
    "evaluate": """examples:
  annotated-transformer evaluate --checkpoint runs/multi30k/last.pt --beam 4 --average-last 5
  annotated-transformer evaluate --checkpoint runs/mine/last.pt --src test.xx --ref test.yy --output test.out""",
    "translate": """examples:
  annotated-transformer translate --checkpoint runs/multi30k/last.pt "Ein Mann fährt Fahrrad."
  annotated-transformer translate --checkpoint runs/multi30k/last.pt --attention maps.png "Zwei Hunde spielen."
  annotated-transformer translate --checkpoint runs/mine/last.pt --beam 4 < input.xx > output.yy
  annotated-transformer translate --checkpoint runs/mine/last.pt --output output.yy < input.xx
  annotated-transformer translate --checkpoint runs/multi30k/last.pt --buffer-size 1    # line by line, as you type
  annotated-transformer translate --checkpoint runs/multi30k/last.pt --beam 4 --nbest 3 < input.de    # INDEX<TAB>SCORE<TAB>TEXT""",
}


def parser() -> argparse.ArgumentParser:
    "The argument parser of `annotated-transformer`."
    p = _Parser(
        prog="annotated-transformer",
        description="Train, evaluate and use a Transformer: Multi30k (German->English by default) "
        "or your own parallel text.",
        epilog="annotated-transformer COMMAND --help shows a command's flags and examples.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--device",
        type=_device,
        help="cpu, cuda, cuda:N or mps (default: train on cuda when available; decode on cpu)",
    )
    common.add_argument(
        "--debug",
        action="store_true",
        help="on an error, show Python's traceback (for a bug report)",
    )
    data = argparse.ArgumentParser(add_help=False)
    data.add_argument(
        "--data-dir",
        type=Path,
        help="folder with the Multi30k .gz files (default: $MULTI30K_DIR, else download)",
    )
    examples = {
        name: dict(epilog=text, formatter_class=argparse.RawDescriptionHelpFormatter)
        for name, text in EXAMPLES.items()
    }

    t = sub.add_parser(
        "train",
        parents=[common, data],
        help="train on Multi30k or your own files, a checkpoint per epoch",
        **examples["train"],
    )
    t.add_argument(
        "--out", type=Path, required=True, help="folder for checkpoints (last.pt, epochK.pt)"
    )
    t.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    t.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run already in OUT (its checkpoints are deleted first)",
    )
    for flag, what in (
        ("--train-src", "training source"),
        ("--train-tgt", "training target"),
        ("--valid-src", "validation source"),
        ("--valid-tgt", "validation target"),
    ):
        t.add_argument(
            flag,
            type=Path,
            metavar="FILE",
            help=f"your own data: the {what} sentences, one a line (plain or .gz)",
        )
    t.add_argument(
        "--src-lang",
        type=_language,
        help="Multi30k's source language (default de; the folder's languages: de, en, fr, ...)",
    )
    t.add_argument("--tgt-lang", type=_language, help="Multi30k's target language (default en)")
    t.add_argument(
        "--vocab-size",
        type=_positive,
        help=f"subwords: one shared vocabulary of this size, tied embeddings "
        f"(default for your own files: {DEFAULT_VOCAB_SIZE}; Multi30k: words unless given)",
    )
    t.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="a training configuration (.json or .toml: TrainConfig's settings, "
        "the model's under 'model'); flags given override it",
    )
    t.add_argument(
        "--arch",
        choices=["transformer", *ARCHS],
        help="the architecture (default transformer; lstm: an attentional LSTM "
        "encoder-decoder; lexical: the same with the lexical model; Part 8)",
    )
    t.add_argument(
        "--model",
        choices=["multi30k", "small", "tiny", "base", "big"],
        help="the Transformer's size (default multi30k: N=3, d_model=256; small: N=2, d_model=128, a few minutes on a CPU; all pre-norm)",
    )
    t.add_argument(
        "--enc-layers",
        type=_positive,
        help="--arch lstm or lexical: bidirectional LSTM layers of the encoder (default 1)",
    )
    t.add_argument(
        "--dec-layers",
        type=_positive,
        help="--arch lstm or lexical: LSTM layers of the decoder (default 1)",
    )
    t.add_argument(
        "--train-pairs",
        type=_positive,
        metavar="N",
        help="train on N of the training pairs, chosen at random by --seed (default: all)",
    )
    t.add_argument(
        "--epochs", type=_positive, help=f"total epochs (default {TrainConfig().epochs})"
    )
    t.add_argument(
        "--max-tokens",
        type=_positive,
        help=f"tokens per batch (default {TrainConfig().max_tokens})",
    )
    t.add_argument("--accum-iter", type=_positive, help="batches per optimizer step (default 1)")
    t.add_argument(
        "--warmup", type=_positive, help=f"warmup steps (default {TrainConfig().warmup})"
    )
    t.add_argument(
        "--dropout", type=_dropout, help="dropout rate of the model (default: the model's, 0.1)"
    )
    t.add_argument("--seed", type=_seed, help="random seed (default 0)")
    t.add_argument(
        "--precision",
        choices=list(PRECISIONS),
        help="mixed precision (default: bf16 on GPUs that support it, else fp32)",
    )
    t.add_argument("--compile", action="store_true", help="torch.compile the model")
    t.add_argument(
        "--fused-loss",
        action="store_true",
        help="compute the loss from the decoder's outputs in chunks, never all logits at once (same values)",
    )
    t.add_argument(
        "--backend",
        choices=["nccl", "gloo"],
        help="under torchrun: the collective backend (default: nccl on GPUs, gloo on CPUs)",
    )
    t.add_argument(
        "--tensorboard",
        action="store_true",
        help="also write TensorBoard logs to OUT/tensorboard (pip install tensorboard)",
    )
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    t.set_defaults(run=_train)

    decoding = argparse.ArgumentParser(add_help=False)
    decoding.add_argument(
        "--checkpoint",
        type=Path,
        required=True,
        help="a checkpoint written by train (e.g. OUT/last.pt)",
    )
    decoding.add_argument(
        "--beam", type=_positive, default=1, help="beam size (default 1: greedy; the paper uses 4)"
    )
    decoding.add_argument(
        "--alpha",
        type=_alpha,
        default=0.6,
        help="beam search length penalty (default 0.6, as in the paper)",
    )
    decoding.add_argument(
        "--average-last",
        type=_positive,
        metavar="K",
        help="average the weights of the checkpoint's last K epochs",
    )
    decoding.add_argument(
        "--allow-unk",
        action="store_true",
        help="let translations contain <unk> (default: the next best word replaces it)",
    )

    e = sub.add_parser(
        "evaluate",
        parents=[common, data, decoding],
        help="BLEU of a checkpoint on a Multi30k split or on your own files",
        **examples["evaluate"],
    )
    e.add_argument(
        "--split",
        choices=["train", "val", "test2016"],
        help="the Multi30k split (default test2016)",
    )
    e.add_argument(
        "--src",
        type=Path,
        metavar="FILE",
        help="your own source sentences, one a line (plain or .gz); needs --ref",
    )
    e.add_argument(
        "--ref", type=Path, metavar="FILE", help="their reference translations, line by line"
    )
    e.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help="write the translations here, one a line (a new file)",
    )
    e.add_argument(
        "--json",
        action="store_true",
        help="print the result as JSON: sacreBLEU's fields and the decoding settings",
    )
    e.add_argument("--quiet", action="store_true", help="no progress bar")
    e.set_defaults(run=_evaluate)

    tr = sub.add_parser(
        "translate",
        parents=[common, decoding],
        help="translate sentences (arguments or stdin)",
        **examples["translate"],
    )
    tr.add_argument(
        "sentences",
        nargs="*",
        help="source sentences; read from standard input if none, one a line",
    )
    tr.add_argument(
        "--buffer-size",
        type=_positive,
        default=100,
        metavar="N",
        help="standard input: translate and print every N lines "
        "as they arrive, so the command streams (default 100; 1: line by line)",
    )
    tr.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help="write the translations here instead of standard output (a new file)",
    )
    tr.add_argument(
        "--nbest",
        type=_positive,
        metavar="K",
        help="the K best translations of each sentence (K at most --beam), best "
        "first, a line each: INDEX<TAB>SCORE<TAB>TRANSLATION, INDEX the sentence's place in the input counted from 0, "
        "SCORE the one the search ranks by, to 4 decimals (beam: log-probability / length penalty; greedy: "
        "log-probability); no line for a blank input line",
    )
    tr.add_argument(
        "--attention",
        type=Path,
        metavar="PNG",
        help="save attention heatmaps of each sentence (OUT-1.png, ... for several): a "
        "Transformer's three kinds of attention in one layer, a recurrent model's attention over the source; "
        "reads all of standard input before translating",
    )
    tr.add_argument(
        "--layer", type=int, help="the layer whose attention --attention draws (default: the last)"
    )
    tr.set_defaults(run=_translate)
    return p


def _one_line_warning(command: str) -> Callable:
    "A `warnings.showwarning` that prints `annotated-transformer COMMAND: warning: ...`, without Python's source line."

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        print(
            f"annotated-transformer {command}: warning: {' '.join(str(message).splitlines())}",
            file=sys.stderr,
        )

    return show


def main(argv: list[str] | None = None) -> int:
    "Entry point: run the command; report usage errors (status 2) and failures (status 1) in one line, without a traceback."
    args = parser().parse_args(argv)  # a bad flag exits here, with status 2
    try:
        with warnings.catch_warnings():  # restores the default display afterwards
            warnings.showwarning = _one_line_warning(args.command)
            args.run(args)
    except (
        UsageError,
        ValueError,
        OSError,
    ) as error:  # OSError: FileNotFoundError, PermissionError, ConnectionError, ...
        if args.debug:
            raise
        rank = (
            f" (rank {os.environ['RANK']})" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else ""
        )  # under torchrun
        message = " ".join(
            str(error).splitlines()
        )  # one line, whatever the library's message holds
        print(f"annotated-transformer {args.command}{rank}: error: {message}", file=sys.stderr)
        return 2 if isinstance(error, UsageError) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
