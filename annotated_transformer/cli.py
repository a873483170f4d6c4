"""The console command `annotated-transformer`: train, evaluate and translate, on Multi30k or your
own parallel text.

    annotated-transformer train --out runs/multi30k
    annotated-transformer train --out runs/subwords --vocab-size 8000
    annotated-transformer train --out runs/en-fr --src-lang en --tgt-lang fr --vocab-size 8000
    annotated-transformer train --out runs/mine --train-src train.xx --train-tgt train.yy \\
        --valid-src val.xx --valid-tgt val.yy
    annotated-transformer train --out runs/lexical --arch lexical --train-pairs 10000
    annotated-transformer evaluate --checkpoint runs/mine/last.pt --src test.xx --ref test.yy \\
        --output test.out
    torchrun --standalone --nproc_per_node=gpu -m annotated_transformer.cli train --out runs/ddp
    annotated-transformer evaluate --checkpoint runs/multi30k/last.pt --split test2016
    annotated-transformer evaluate --checkpoint runs/multi30k/last.pt --beam 4 --average-last 5
    annotated-transformer translate --checkpoint runs/multi30k/last.pt "Ein Mann fährt Fahrrad."
    annotated-transformer translate --checkpoint runs/multi30k/last.pt --attention out.png \\
        "Ein Mann fährt Fahrrad."
    echo "Zwei Hunde spielen." | annotated-transformer translate --checkpoint runs/multi30k/last.pt
    producer | annotated-transformer translate --checkpoint RUN/last.pt --buffer-size 1 | consumer
    annotated-transformer translate --checkpoint runs/multi30k/last.pt --beam 4 --nbest 4 \\
        --output nbest.tsv < test.de
    annotated-transformer export --checkpoint runs/multi30k/last.pt --out runs/multi30k-ct2 \\
        --quantization int8
    annotated-transformer translate --checkpoint runs/multi30k-ct2 "Ein Mann fährt Fahrrad."
    annotated-transformer evaluate --checkpoint runs/multi30k/last.pt --engine ctranslate2

Your own data: plain-text files, one sentence a line (optionally gzipped), line i of the source
file translated by line i of the target file; such a run uses subwords (default --vocab-size
8000), with one shared vocabulary and tied embeddings (§3.4, §5.1). The checkpoint carries its
subword model: `translate` and `evaluate` need nothing else. Empty input lines give empty output
lines.

`translate` streams standard input: it translates and prints (flushed) every --buffer-size lines
(default 100) as they arrive, so it fits a pipeline, answers as you type with --buffer-size 1, and
its memory does not grow with the input. --nbest K prints the K best translations of each sentence
with their scores, tab-separated.

`export` writes a checkpoint's Transformer as a CTranslate2 model folder (pip install
'annotated-transformer[export]'), with its tokenizer and a README saying how to load it; `translate`
and `evaluate` take that folder as --checkpoint, or decode a checkpoint with CTranslate2 when given
--engine ctranslate2: the same flags, tokens and searches, an inference engine's speed.

Hand-written (not exported from a notebook): it only parses arguments and calls the library.
Exit status: 0 done; 2 a usage error (a bad flag value, a wrong combination: found before anything
is loaded where possible); 1 a failure the library reports (a missing or corrupt file, a checkpoint
or data that cannot be used); 130 interrupted (Ctrl-C). Either way one line on standard error,
`annotated-transformer COMMAND: error: ...` (with `--debug`, Python's traceback instead, for a bug
report).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import signal
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import NoReturn, TextIO

import torch

from annotated_transformer import __version__
from annotated_transformer.checkpoint import RunCheckpoint, average_last, load_checkpoint
from annotated_transformer.config import (
    DEFAULT_VOCAB_SIZE,
    PRECISION_NAMES,
    PRESETS,
    ChoiceError,
    Choices,
    RuntimeOptions,
    TrainConfig,
    arch_of,
    resolve_config,
)
from annotated_transformer.data import load_multi30k, read_lines
from annotated_transformer.distributed import (
    cleanup_distributed,
    default_precision,
    setup_distributed,
)
from annotated_transformer.engines import (
    QUANTIZATIONS,
    ExportedModel,
    ExportedTranslator,
    NotExportable,
    check_out,
    export_model,
    import_ctranslate2,
    is_exported,
)
from annotated_transformer.model import EncoderDecoder, count_parameters
from annotated_transformer.recurrent import ARCHS
from annotated_transformer.runs import refuse_links
from annotated_transformer.trainer import train
from annotated_transformer.translation import Search, SentenceError, Translator, bleu

FILE_FLAGS = ("train_src", "train_tgt", "valid_src", "valid_tgt")
TRAIN_FLAGS = (
    "epochs",
    "max_tokens",
    "accum_iter",
    "warmup",
    "seed",
    "src_lang",
    "tgt_lang",
    "train_pairs",
    "subset_seed",
    "skip_long",
)  # TrainConfig's fields that flags of the same name set


class Interrupted(Exception):
    "Ctrl-C, with what had been done: exit status 130, as a shell reports it."


class UsageError(Exception):
    "A bad flag value or combination found after parsing: exit status 2."


def _check_file(flag: str, path: Path) -> None:
    "Refuse a flag's file that is missing or is a folder, naming the flag and the path."
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a folder, not a file")
    if not path.is_file():
        raise UsageError(f"{flag} {path}: no such file")


# ------------------------------------------------------------------------------------------ train
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
            f"your own data needs all four of --train-src, --train-tgt, --valid-src and "
            f"--valid-tgt: {missing} missing"
        )
    for name in FILE_FLAGS:
        _check_file(f"--{name.replace('_', '-')}", getattr(args, name))
    return {"train": (args.train_src, args.train_tgt), "val": (args.valid_src, args.valid_tgt)}


def _choices(args: argparse.Namespace) -> Choices:
    "What the flags choose of a run's configuration (None where a flag is not given)."
    given = {name: getattr(args, name) for name in TRAIN_FLAGS if getattr(args, name) is not None}
    return Choices(
        size=args.model,
        arch=args.arch,
        enc_layers=args.enc_layers,
        dec_layers=args.dec_layers,
        dropout=args.dropout,
        vocab_size=args.vocab_size,
        train=given,
    )


def _train_config(args: argparse.Namespace, files: dict | None) -> TrainConfig:
    "The run's configuration: the configuration chapter's `resolve_config` of the flags."
    if args.resume and args.config:
        raise UsageError(
            "--config sets up a new run; a resumed run keeps the configuration in its checkpoint"
        )
    if args.config is not None:
        _check_file("--config", args.config)
    last = args.out / "last.pt"
    if args.resume:
        refuse_links(args.out, "last.pt")  # read before the folder is claimed: never through a link
    # without last.pt, train says what the folder holds and how to go on
    stored = load_checkpoint(last).config if args.resume and last.exists() else None
    try:
        return resolve_config(_choices(args), args.config, files is not None, stored, str(last))
    except ChoiceError as error:
        raise UsageError(str(error)) from None
    except ValueError as error:  # the config file's: named by the flag too
        if args.config is not None and str(error).startswith(f"{args.config}:"):
            raise ValueError(f"--config {error}") from None
        raise


def _train(args: argparse.Namespace) -> None:
    if args.resume and args.overwrite:
        raise UsageError(
            "--resume continues the run in --out and --overwrite replaces it: give one of them"
        )
    files = _files(args)
    if files and (args.data_dir or args.src_lang or args.tgt_lang):
        raise UsageError(
            "--data-dir, --src-lang and --tgt-lang choose Multi30k's files: leave them "
            "out with --train-src and the others"
        )
    config = _train_config(args, files)
    setup = setup_distributed(args.backend, args.device)  # alone, or one of torchrun's processes
    options = RuntimeOptions(
        device=str(setup.device),
        compile=args.compile,
        precision=args.precision or default_precision(setup.device),
        fused_loss=args.fused_loss,
        tensorboard=args.tensorboard,
        progress=not args.quiet,
    )
    try:
        train(
            args.out,
            config,
            data_dir=args.data_dir,
            files=files,
            resume=args.resume,
            overwrite=args.overwrite,
            options=options,
        )
    finally:
        cleanup_distributed()


# ------------------------------------------------------------------------ evaluate and translate
def _checkpoint(args: argparse.Namespace) -> RunCheckpoint:
    "The checkpoint --checkpoint names, its last epochs averaged with --average-last."
    path, k = args.checkpoint, args.average_last
    if path.is_dir():  # a missing file is the loader's to report (exit status 1)
        raise UsageError(
            f"--checkpoint {path} is a folder, not a file (nor a model folder written by export)"
        )
    return average_last(path, k) if k else load_checkpoint(path)


def _engine(args: argparse.Namespace) -> str:
    "What decodes: CTranslate2 for a folder written by export or with --engine ctranslate2."
    return "ctranslate2" if is_exported(args.checkpoint) else args.engine or "pytorch"


def _check_engine(args: argparse.Namespace) -> None:
    "Refuse what the engine cannot do, before anything is loaded."
    exported = is_exported(args.checkpoint)
    if exported and args.engine == "pytorch":
        raise UsageError(
            f"--checkpoint {args.checkpoint} is a model exported to CTranslate2: "
            f"leave out --engine pytorch, or give the checkpoint it was exported from"
        )
    if exported and args.average_last:
        raise UsageError(
            f"--average-last averages a run's checkpoints; {args.checkpoint} is one exported "
            f"model (export --average-last K exports an average)"
        )
    if _engine(args) == "pytorch":
        return
    if getattr(args, "attention", None):  # translate's
        raise UsageError(
            "--attention draws the PyTorch model's attention: give a checkpoint, without "
            "--engine ctranslate2"
        )
    import_ctranslate2()  # a missing package is said before anything loads


def _load(args: argparse.Namespace) -> tuple[Translator | ExportedTranslator, TrainConfig]:
    "The translator of --checkpoint, with the engine asked for, and the run's configuration."
    if is_exported(args.checkpoint):
        translator = ExportedTranslator.from_dir(args.checkpoint, device=args.device)
        return translator, translator.config
    ckpt = _checkpoint(args)
    if args.engine != "ctranslate2":
        return Translator.from_checkpoint(ckpt, device=args.device), ckpt.config
    try:
        return ExportedTranslator.from_checkpoint(ckpt, device=args.device), ckpt.config
    except NotExportable as error:
        raise UsageError(f"--engine ctranslate2: {error}") from None


def _search(args: argparse.Namespace) -> Search:
    "The search the decoding flags ask for."
    return Search(beam_size=args.beam, alpha=args.alpha, allow_unk=args.allow_unk)


def _scored_lines(
    translator: Translator,
    lines: list[str],
    args: argparse.Namespace,
    nbest: int = 1,
    progress: bool = False,
) -> list[list[tuple[list[str], float]]]:
    "The `nbest` best (tokens, score) of each line, best first; none for an empty line (aligned)."
    rows = [i for i, line in enumerate(lines) if line.strip()]
    try:
        found = translator.nbest([lines[i] for i in rows], _search(args), nbest, progress)
    except SentenceError as error:  # its place among the non-empty lines -> among all lines
        raise SentenceError(rows[error.index], error.reason) from None
    scored: list[list[tuple[list[str], float]]] = [[] for _ in lines]
    for i, best in zip(rows, found):
        scored[i] = best
    return scored


def _translate_lines(
    translator: Translator, lines: list[str], args: argparse.Namespace, progress: bool = False
) -> list[list[str]]:
    "Target tokens for each line; none for an empty line, so that the output lines up."
    return [
        best[0][0] if best else []
        for best in _scored_lines(translator, lines, args, progress=progress)
    ]


def _decoding(args: argparse.Namespace) -> str:
    "How the output was made, for the report line."
    search = "greedy" if args.beam == 1 else f"beam {args.beam}, alpha {args.alpha}"
    average = f", average of the last {args.average_last} epochs" if args.average_last else ""
    engine = ", CTranslate2" if _engine(args) == "ctranslate2" else ""
    return search + average + (", <unk> allowed" if args.allow_unk else "") + engine


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
            "--src and --ref go together: the sentences to translate and their "
            "reference translations"
        )
    if args.src is not None and args.split is not None:
        raise UsageError("--split chooses a Multi30k split: leave it out with --src and --ref")
    for flag, path in (("--src", args.src), ("--ref", args.ref)):
        if path is not None:
            _check_file(flag, path)
    _check_new_output(args.output)
    _check_engine(args)


def _test_set(args: argparse.Namespace, config: TrainConfig) -> tuple[list[str], list[str], str]:
    "The sentences to translate, their references, and the data's name: your files or a split."
    if args.src is not None:
        sources = read_lines(args.src, allow_empty=True)
        references = read_lines(args.ref, allow_empty=True)
        if len(sources) != len(references):
            raise ValueError(
                f"{args.src} has {len(sources)} lines but {args.ref} has "
                f"{len(references)}: the reference file must translate the source "
                f"file line by line"
            )
        return sources, references, args.src.name
    split = args.split or "test2016"
    pairs = load_multi30k(split, args.data_dir, langs=(config.src_lang, config.tgt_lang))
    return [src for src, _ in pairs], [tgt for _, tgt in pairs], split


def _evaluate(args: argparse.Namespace) -> None:
    _evaluation_inputs(args)
    translator, config = _load(args)
    sources, references, name = _test_set(args, config)
    try:
        hypotheses = _translate_lines(translator, sources, args, progress=not args.quiet)
    except SentenceError as error:
        raise ValueError(f"{name}, line {error.index + 1}: {error.reason}") from None
    if args.output is not None:
        with open(args.output, "x", encoding="utf-8") as f:  # "x": not over a file made meanwhile
            f.writelines(translator.detokenize(tokens) + "\n" for tokens in hypotheses)
    scores = bleu(hypotheses, references, translator.tgt_tokenizer)
    if not args.json:
        print(f"{name} ({len(sources)} sentences, {_decoding(args)}): {scores}")
        return
    settings = dict(
        data=name,
        sentences=len(sources),
        checkpoint=str(args.checkpoint),
        arch=arch_of(config.model),
        parameters=_parameters(translator),
        engine=_engine(args),
        beam=args.beam,
        alpha=args.alpha,
        average_last=args.average_last,
        allow_unk=args.allow_unk,
    )  # sacreBLEU's own fields, then what and how
    print(
        json.dumps({**scores.fields, "tokenized_lowercase": scores.tokenized_lowercase, **settings})
    )


def _parameters(translator: Translator | ExportedTranslator) -> int:
    "The model's parameters, a tied matrix once (an exported model's: counted when exported)."
    model = translator.model
    return model.parameters if isinstance(model, ExportedModel) else count_parameters(model)


def _stdin_lines() -> Iterator[str]:
    "Standard input's lines (blank ones too) as they arrive, decoded one by one: errors name lines."
    binary = getattr(sys.stdin, "buffer", None)  # None: stdin replaced by a text stream (a test)
    for number, line in enumerate(sys.stdin if binary is None else binary, start=1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"standard input, line {number}: byte "
                    f"{error.object[error.start]:#04x} at position {error.start + 1} "
                    f"is not UTF-8 text"
                ) from None
        yield line.rstrip("\r\n")


def _chunks(lines: Iterable[str], size: int | None) -> Iterator[list[str]]:
    "`lines` in lists of `size` (None: one list), each as soon as it is complete; none for none."
    lines = iter(lines)
    while chunk := list(itertools.islice(lines, size)):
        yield chunk


def _check_translate_flags(args: argparse.Namespace) -> None:
    "Refuse combinations of translate's flags that cannot work, before anything is read."
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
            f"--nbest {args.nbest} needs --beam {args.nbest} or more: a beam of "
            f"{args.beam} ends with at most {args.beam} translations"
        )
    _check_new_output(args.output)
    _check_engine(args)
    empty = [i for i, sentence in enumerate(args.sentences, start=1) if not sentence.strip()]
    if empty:
        raise UsageError(
            f"sentence {empty[0]} of the arguments is empty: there is nothing to translate"
        )


def _translate_inputs(args: argparse.Namespace) -> Iterator[list[str]]:
    """The sentences to translate, in chunks, after every check that needs no model.

    The arguments are one chunk. Standard input streams: chunks of --buffer-size lines, each read
    once the one before is printed, so output comes while input still arrives and memory does not
    grow with the input (--attention reads it all, as one chunk). Standard input without a sentence
    (empty, or blank lines only) is no error: like any filter, the command prints a line for each
    line read, nothing for nothing, so a pipeline whose producer has nothing to say still succeeds.
    """
    _check_translate_flags(args)
    if args.attention:
        try:
            args.attention.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # FileExistsError: a file; NotADirectoryError, PermissionError
            reason = "it is not a folder" if isinstance(error, FileExistsError) else error.strerror
            raise OSError(
                f"cannot use {args.attention.parent} as the folder for --attention: {reason}"
            ) from None
    if args.sentences:
        return iter([args.sentences])
    return _chunks(_stdin_lines(), None if args.attention else args.buffer_size)


def _output_lines(
    translator: Translator, lines: list[str], start: int, args: argparse.Namespace
) -> list[str]:
    "What translate prints for input lines start, start + 1, ...: translations, or --nbest's lines."
    text = translator.detokenize
    if args.nbest is None:
        return [text(tokens) for tokens in _translate_lines(translator, lines, args)]
    scored = _scored_lines(translator, lines, args, args.nbest)
    return [
        f"{start + i}\t{score:.4f}\t{text(tokens)}"
        for i, best in enumerate(scored)
        for tokens, score in best
    ]


def _print_with_attention(
    translator: Translator, sentences: list[str], layer: int, args: argparse.Namespace, out: TextIO
) -> None:
    "Print the translations and save each sentence's attention maps; every map first."
    from annotated_transformer.visualization import plot_sentence  # seaborn: only when asked

    translations = _translate_lines(translator, sentences, args)
    maps = [
        translator.attention(s, translation=tokens) if s.strip() else None
        for s, tokens in zip(sentences, translations)
    ]  # one refused: nothing printed
    for i, (tokens, found) in enumerate(zip(translations, maps), start=1):
        print(translator.detokenize(tokens), file=out)
        if found is not None:
            stem = f"{args.attention.stem}-{i}"
            path = args.attention if len(sentences) == 1 else args.attention.with_stem(stem)
            plot_sentence(found, layer).savefig(path, dpi=100)
            print(f"attention of layer {layer} saved to {path}", file=sys.stderr)


def _layer(args: argparse.Namespace, translator: Translator) -> int:
    "The layer --attention draws: --layer, checked against the model, or the last."
    model = translator.model
    layers = len(model.encoder.layers) if isinstance(model, EncoderDecoder) else 1
    if args.layer is not None and not 0 <= args.layer < layers:
        raise UsageError(
            f"--layer {args.layer} is out of range: the model has {layers} layers, "
            f"numbered 0 to {layers - 1}"
        )
    return layers - 1 if args.layer is None else args.layer


@contextmanager
def _ctrl_c_held() -> Iterator[None]:
    "Hold Ctrl-C back while the block runs: it arrives after, so counts match what was written."
    pressed = []
    previous = signal.signal(signal.SIGINT, lambda *_: pressed.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pressed:
            raise KeyboardInterrupt


def _lines(count: int) -> str:
    return f"{count} line{'' if count == 1 else 's'}"


def _stream(
    translator: Translator, chunks: Iterable[list[str]], args: argparse.Namespace, out: TextIO
) -> None:
    "Translate and write chunk after chunk; a stop (an error, Ctrl-C) says what was written."
    read, written = 0, 0  # input lines translated, output lines written (more with --nbest)
    try:
        for lines in chunks:
            refused = None
            try:
                output = _output_lines(translator, lines, read, args)
            except SentenceError as error:  # the lines before it are written, then it stops
                refused, lines = error, lines[: error.index]
                output = _output_lines(translator, lines, read, args) if lines else []
            with _ctrl_c_held():  # written and counted, or neither
                out.writelines(line + "\n" for line in output)
                out.flush()  # shown now, while the next chunk is read
                read, written = read + len(lines), written + len(output)
            if refused:
                raise ValueError(
                    f"stopped at input line {read + 1} after writing {_lines(written)}: "
                    f"line {read + 1} {refused.reason}"
                )
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted after writing {_lines(written)}") from None


def _translate(args: argparse.Namespace) -> None:
    chunks = _translate_inputs(args)
    first = next(chunks, [])  # read, so checked, before the model loads
    translator, _ = _load(args)
    layer = _layer(args, translator)  # before translating: nothing is printed
    output = open(args.output, "x", encoding="utf-8") if args.output else nullcontext(sys.stdout)
    try:
        with output as out:  # "x": never over an existing file
            if args.attention:  # `first` holds every sentence
                _print_with_attention(translator, first, layer, args, out)
                return
            _stream(translator, itertools.chain([first], chunks), args, out)
    except BrokenPipeError:  # the reader stopped early (`| head`): stop too, quietly
        # Python flushes stdout on exiting: not into the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


# ------------------------------------------------------------------------------------------ export
def _export(args: argparse.Namespace) -> None:
    try:
        check_out(args.out, args.overwrite)  # before anything loads, as the engine's package
    except FileExistsError as error:
        raise UsageError(f"--out {error}") from None
    import_ctranslate2()
    ckpt = _checkpoint(args)
    try:
        out = export_model(ckpt, args.out, args.quantization, args.overwrite)
    except NotExportable as error:
        raise UsageError(f"--checkpoint {args.checkpoint}: {error}") from None
    print(f"{out}: a CTranslate2 model ({args.quantization}); how to use it: {out / 'README.md'}")


# ----------------------------------------------------------------------------- the argument parser
def _checked(
    convert: Callable[[str], float], accept: Callable[[float], bool], expected: str
) -> Callable[[str], float]:
    "An argparse type: `convert` the text, refusing what it cannot read and what `accept` rejects."

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
# the four special tokens, the 256 byte pieces and at least one character
_vocab_size = _checked(int, lambda n: n >= 261, "a whole number at least 261")
_seed = _checked(int, lambda n: 0 <= n < 2**32, "a whole number from 0 to 2**32 - 1")
_alpha = _checked(float, lambda x: math.isfinite(x) and x >= 0, "a finite number at least 0")
_dropout = _checked(float, lambda x: 0 <= x < 1, "a probability at least 0 and below 1")  # not NaN


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
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    count = {"cuda": cuda, "mps": int(torch.backends.mps.is_available())}
    if device.type not in count:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a device this command runs on: use cpu, cuda, cuda:N or mps"
        )
    n = count[device.type]
    if n == 0:
        raise argparse.ArgumentTypeError(
            f"{text} is not available: this machine has no "
            f"{device.type} device that PyTorch can use"
        )
    if device.index is not None and device.index >= n:
        raise argparse.ArgumentTypeError(
            f"{text} is not available: this machine has {n} "
            f"{device.type} device(s), {device.type}:0 to "
            f"{device.type}:{n - 1}"
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
  annotated-transformer evaluate --checkpoint runs/mine/last.pt --src test.xx --ref test.yy \\
      --output test.out""",
    "translate": """examples:
  annotated-transformer translate --checkpoint runs/multi30k/last.pt "Ein Mann fährt Fahrrad."
  annotated-transformer translate --checkpoint runs/multi30k/last.pt --attention maps.png \\
      "Zwei Hunde spielen."
  annotated-transformer translate --checkpoint runs/mine/last.pt --beam 4 < input.xx > output.yy
  annotated-transformer translate --checkpoint runs/mine/last.pt --output output.yy < input.xx
  annotated-transformer translate --checkpoint runs/multi30k/last.pt --buffer-size 1  # as you type
  annotated-transformer translate --checkpoint runs/multi30k/last.pt --beam 4 --nbest 3 \\
      < input.de    # INDEX<TAB>SCORE<TAB>TEXT
  annotated-transformer translate --checkpoint runs/multi30k-ct2 < input.de  # written by export
  annotated-transformer translate --checkpoint runs/multi30k/last.pt --engine ctranslate2 \\
      < input.de""",
    "export": """examples:
  annotated-transformer export --checkpoint runs/multi30k/last.pt --out runs/multi30k-ct2
  annotated-transformer export --checkpoint runs/multi30k/last.pt --out runs/multi30k-int8 \\
      --quantization int8 --average-last 5
  annotated-transformer translate --checkpoint runs/multi30k-ct2 < input.de""",
}


def _train_parser(sub, parents: list[argparse.ArgumentParser]) -> None:
    "The train command's flags."
    t = sub.add_parser(
        "train",
        parents=parents,
        help="train on Multi30k or your own files, a checkpoint per epoch",
        epilog=EXAMPLES["train"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
        type=_vocab_size,
        help=f"subwords: one shared vocabulary of this "
        f"size, tied embeddings (default for your own files: {DEFAULT_VOCAB_SIZE}; "
        f"Multi30k: words unless given)",
    )
    t.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="a training configuration (.json or "
        ".toml: TrainConfig's settings, the model's under 'model'); flags given override it",
    )
    _model_flags(t)
    _schedule_flags(t)
    _runtime_flags(t)
    t.set_defaults(run=_train)


def _runtime_flags(t: argparse.ArgumentParser) -> None:
    "The flags that choose how a run trains on this machine (not stored in the run)."
    t.add_argument(
        "--precision",
        choices=list(PRECISION_NAMES),
        help="mixed precision (default: bf16 on GPUs that support it, else fp32)",
    )
    t.add_argument("--compile", action="store_true", help="torch.compile the model")
    t.add_argument(
        "--fused-loss",
        action="store_true",
        help="compute the loss from the decoder's "
        "outputs in chunks, never all logits at once (same values)",
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
    t.add_argument(
        "--skip-long",
        action="store_true",
        default=None,
        help="leave out training pairs longer than the model's max_len (default: refuse the data)",
    )
    t.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bars (none when the output is not a terminal)",
    )


def _model_flags(t: argparse.ArgumentParser) -> None:
    "The flags that choose the model."
    t.add_argument(
        "--arch",
        choices=["transformer", *ARCHS],
        help="the architecture (default "
        "transformer; lstm: an attentional LSTM encoder-decoder; lexical: the same with "
        "the lexical model)",
    )
    t.add_argument(
        "--model",
        choices=list(PRESETS),
        help="the Transformer's size (default "
        "multi30k: N=3, d_model=256; small: N=2, d_model=128, a few minutes on a CPU; "
        "all pre-norm)",
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
        "--dropout", type=_dropout, help="dropout rate of the model (default: the model's, 0.1)"
    )


def _schedule_flags(t: argparse.ArgumentParser) -> None:
    "The flags that set the data, the batches and the schedule."
    defaults = TrainConfig()
    t.add_argument(
        "--train-pairs",
        type=_positive,
        metavar="N",
        help="train on N of the training pairs, chosen at random by --seed (default: all)",
    )
    t.add_argument(
        "--subset-seed",
        type=_seed,
        metavar="SEED",
        help="draw --train-pairs' subset by this seed instead (several seeds, one subset)",
    )
    t.add_argument("--epochs", type=_positive, help=f"total epochs (default {defaults.epochs})")
    t.add_argument(
        "--max-tokens", type=_positive, help=f"tokens per batch (default {defaults.max_tokens})"
    )
    t.add_argument("--accum-iter", type=_positive, help="batches per optimizer step (default 1)")
    t.add_argument("--warmup", type=_positive, help=f"warmup steps (default {defaults.warmup})")
    t.add_argument("--seed", type=_seed, help="random seed (default 0)")


def _decoding_flags() -> argparse.ArgumentParser:
    "The flags evaluate and translate share: the checkpoint and the search."
    d = argparse.ArgumentParser(add_help=False)
    d.add_argument(
        "--checkpoint",
        type=Path,
        required=True,
        help="a checkpoint written by train (OUT/last.pt), or a model folder written by export",
    )
    d.add_argument(
        "--engine",
        choices=["pytorch", "ctranslate2"],
        help="what decodes a checkpoint: pytorch (default) or ctranslate2 (exported on the fly; "
        "pip install 'annotated-transformer[export]'); a folder written by export runs with "
        "ctranslate2",
    )
    d.add_argument(
        "--beam", type=_positive, default=1, help="beam size (default 1: greedy; the paper uses 4)"
    )
    d.add_argument(
        "--alpha",
        type=_alpha,
        default=0.6,
        help="beam search length penalty (default 0.6, as in the paper)",
    )
    d.add_argument(
        "--average-last",
        type=_positive,
        metavar="K",
        help="average the weights of the checkpoint's last K epochs",
    )
    d.add_argument(
        "--allow-unk",
        action="store_true",
        help="let translations contain <unk> (default: the next best word replaces it)",
    )
    return d


def _evaluate_parser(sub, parents: list[argparse.ArgumentParser]) -> None:
    "The evaluate command's flags."
    e = sub.add_parser(
        "evaluate",
        parents=parents,
        help="BLEU of a checkpoint on a Multi30k split or on your own files",
        epilog=EXAMPLES["evaluate"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
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


def _translate_parser(sub, parents: list[argparse.ArgumentParser]) -> None:
    "The translate command's flags."
    tr = sub.add_parser(
        "translate",
        parents=parents,
        help="translate sentences (arguments or stdin)",
        epilog=EXAMPLES["translate"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
        help="standard "
        "input: translate and print every N lines as they arrive, so the command "
        "streams (default 100; 1: line by line)",
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
        help="the K best translations of each "
        "sentence (K at most --beam), best first, a line each: "
        "INDEX<TAB>SCORE<TAB>TRANSLATION, INDEX the sentence's place in the input "
        "counted from 0, SCORE the one the search ranks by, to 4 decimals (beam: "
        "log-probability / length penalty; greedy: log-probability); no line for a "
        "blank input line",
    )
    tr.add_argument(
        "--attention",
        type=Path,
        metavar="PNG",
        help="save attention heatmaps of each "
        "sentence (OUT-1.png, ... for several): a Transformer's three kinds of "
        "attention in one layer, a recurrent model's attention over the source; reads "
        "all of standard input before translating",
    )
    tr.add_argument(
        "--layer", type=int, help="the layer whose attention --attention draws (default: the last)"
    )
    tr.set_defaults(run=_translate)


def _export_parser(sub, parents: list[argparse.ArgumentParser]) -> None:
    "The export command's flags."
    x = sub.add_parser(
        "export",
        parents=parents,
        help="write a checkpoint's Transformer as a CTranslate2 model folder",
        epilog=EXAMPLES["export"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    x.add_argument(
        "--checkpoint", type=Path, required=True, help="a checkpoint written by train (OUT/last.pt)"
    )
    x.add_argument("--out", type=Path, required=True, help="the model folder to write (a new one)")
    x.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        default="float32",
        help="how the weights are stored: float32 (default: the same translations), int8 "
        "(8-bit weights: smaller and faster, a translation may differ) or int8_float32 (on a "
        "CPU the same as int8)",
    )
    x.add_argument(
        "--overwrite", action="store_true", help="replace the model folder OUT written by export"
    )
    x.add_argument(
        "--average-last",
        type=_positive,
        metavar="K",
        help="export the average of the weights of the checkpoint's last K epochs",
    )
    x.set_defaults(run=_export)


def parser() -> argparse.ArgumentParser:
    "The argument parser of `annotated-transformer`."
    p = _Parser(
        prog="annotated-transformer",
        description="Train, evaluate and use a Transformer: "
        "Multi30k (German->English by default) or your own parallel text.",
        epilog="annotated-transformer COMMAND --help shows a command's flags and examples.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument(
        "--debug",
        action="store_true",
        help="on an error, show Python's traceback (for a bug report)",
    )
    common = argparse.ArgumentParser(add_help=False, parents=[debug])
    common.add_argument(
        "--device",
        type=_device,
        help="cpu, cuda, cuda:N or mps (default: train on cuda when available; decode on cpu)",
    )
    data = argparse.ArgumentParser(add_help=False)
    data.add_argument(
        "--data-dir",
        type=Path,
        help="folder with the Multi30k .gz files (default: $MULTI30K_DIR, else download)",
    )
    _train_parser(sub, [common, data])
    _evaluate_parser(sub, [common, data, _decoding_flags()])
    _translate_parser(sub, [common, _decoding_flags()])
    _export_parser(sub, [debug])
    return p


def _one_line_warning(command: str) -> Callable:
    "A `warnings.showwarning` printing `annotated-transformer COMMAND: warning: ...`, one line."

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = " ".join(str(message).splitlines())
        print(f"annotated-transformer {command}: warning: {text}", file=sys.stderr)

    return show


def main(argv: list[str] | None = None) -> int:
    "Run the command; report usage errors (status 2) and failures (status 1) in one line."
    args = parser().parse_args(argv)  # a bad flag exits here, with status 2
    try:
        with warnings.catch_warnings():  # restores the default display afterwards
            warnings.showwarning = _one_line_warning(args.command)
            args.run(args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"annotated-transformer {args.command}: interrupted", file=sys.stderr)
        return 130
    except (UsageError, ValueError, OSError, Interrupted) as error:  # OSError: FileNotFoundError
        if args.debug:
            raise
        under_torchrun = int(os.environ.get("WORLD_SIZE", "1")) > 1
        rank = f" (rank {os.environ['RANK']})" if under_torchrun else ""
        message = " ".join(str(error).splitlines())  # one line, whatever the library's message
        kind = "" if isinstance(error, Interrupted) else "error: "
        print(f"annotated-transformer {args.command}{rank}: {kind}{message}", file=sys.stderr)
        return 2 if isinstance(error, UsageError) else 130 if isinstance(error, Interrupted) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
