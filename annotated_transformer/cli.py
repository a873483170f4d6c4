"""The console command `annotated-transformer`: train, evaluate, translate, export and parse.
Hand-written, it parses and calls the library; most flags are fields of the records they set
(`Choices`, `TrainConfig`, `RuntimeOptions`, `Search`), with their help, defaults and checks. Here
is only what a command line knows: its own flags (files, folders), stdin read as it arrives, output
files never overwritten, OpenMP's short spin (chapter 16), and errors in one line (`--debug`: the
traceback) with an exit status: 0 done, 2 a usage error, 1 a failure the library reports, 130
interrupted (out of memory: the flag that needs less named; else an "internal error" line)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import os
import re
import sys
import typing
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

if not {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} & set(os.environ):  # yours kept; read as torch loads
    os.environ["GOMP_SPINCOUNT"] = "10000"  # spin briefly, then sleep: chapter 16's table
from annotated_transformer import __version__
from annotated_transformer.config import ChoiceError, Choices, RuntimeOptions, TrainConfig
from annotated_transformer.config import check_setting
from annotated_transformer.data import ParallelFiles, not_a_file, split_pairs
from annotated_transformer.distributed import out_of_memory
from annotated_transformer.engines import ENGINES, FORMATS, QUANTIZATIONS, Export, check_loading
from annotated_transformer.engines import export_checkpoint, load_translator
from annotated_transformer.fast_decoding import Search, Translating
from annotated_transformer.hub import pretrained_name
from annotated_transformer.parsing import PARSING, Parser, parse_stream
from annotated_transformer.pipeline import resolve_run_config, run_corpus, train
from annotated_transformer.translator import chunks, evaluate, input_lines, open_output
from annotated_transformer.translator import translate_stream

EXAMPLES = """\
annotated-transformer train --out runs/multi30k                  # Multi30k German->English, words
annotated-transformer train --out runs/subwords --vocab-size 8000
annotated-transformer train --out runs/mine --train-src train.xx --train-tgt train.yy \\
    --valid-src valid.xx --valid-tgt valid.yy
annotated-transformer train --out runs/multi30k --resume --epochs 30
annotated-transformer train --out runs/lexical --arch lexical --train-pairs 10000
torchrun --standalone --nproc_per_node=gpu -m annotated_transformer.cli train --out runs/ddp
annotated-transformer evaluate --checkpoint runs/multi30k/last.pt --beam 4 --average-last 5
annotated-transformer evaluate --checkpoint runs/mine/last.pt --src test.xx --ref test.yy \\
    --output test.out
annotated-transformer evaluate --checkpoint runs/multi30k/last.pt --engine ctranslate2
annotated-transformer translate --checkpoint runs/multi30k/last.pt "Ein Mann fährt Fahrrad."
annotated-transformer translate --checkpoint runs/multi30k/last.pt --attention maps.png \\
    "Zwei Hunde spielen."
producer | annotated-transformer translate --checkpoint RUN/last.pt --buffer-size 1 | consumer
annotated-transformer translate --checkpoint runs/multi30k/last.pt --beam 4 --nbest 3 \\
    --output nbest.tsv < input.de                               # INDEX<TAB>SCORE<TAB>TEXT
annotated-transformer translate --checkpoint runs/multi30k-ct2 < input.de  # written by export
annotated-transformer export --checkpoint runs/multi30k/last.pt --out runs/multi30k-int8 \\
    --quantization int8 --average-last 5
annotated-transformer export --checkpoint runs/subwords/last.pt --out runs/hf --format transformers
annotated-transformer export --checkpoint runs/subwords/last.pt --out site/model --format onnx
annotated-transformer translate --checkpoint hf:Helsinki-NLP/opus-mt-de-en "Zwei Hunde spielen."
annotated-transformer train --out runs/parser --corpus treebank --model small --max-tokens 1024 \\
    --warmup 1000 --dropout 0.2 --epochs 40                     # §6.3: sentences to trees
echo "The cat sat on the mat ." | annotated-transformer parse --checkpoint runs/parser/last.pt
"""  # written once: the module's docstring shows them all, each command's --help its own


def examples(command: str | None = None, indent: str = "  ") -> str:
    "The examples (of `command`: those that run it), a line that goes on indented under its start."
    found = re.split(r"\n(?=\S)", EXAMPLES.strip())
    chosen = [text for text in found if command is None or f" {command} " in text.split("\\")[0]]
    return "\n".join(indent + line for text in chosen for line in text.splitlines())


__doc__ += f"\nExamples:\n\n{examples(indent='    ')}\n"


def _setting(cls: type, name: str, text: str) -> object:
    "An argparse type: the text as the field's type (int, float, str), checked by the record."
    hint = typing.get_type_hints(cls)[name]
    kind = next(k for k in typing.get_args(hint) or (hint,) if k is not type(None))
    try:
        value = kind(text)
    except ValueError:  # the record says what it expected, naming the text
        value = text
    try:
        return check_setting(cls, name, value)
    except ChoiceError as error:  # told as argparse tells a bad value: exit status 2
        raise argparse.ArgumentTypeError(str(error)) from None


def field_flags(p: argparse.ArgumentParser, cls: type, only=None, skip: Iterable[str] = ()) -> None:
    "A flag for each field of `cls` with help (`only` those, not those in `skip`): from the field."
    for f in dataclasses.fields(cls):
        m = f.metadata
        if not m.get("help") or f.name in skip or (only and f.name not in only):
            continue
        flag, help = m["flag"] or "--" + f.name.replace("_", "-"), m["help"]
        if "default" not in help and not (f.default is None or isinstance(f.default, bool)):
            help += f" (default {f.default})"  # the record's: None means not given
        kind = functools.partial(_setting, cls, f.name)  # the text checked by the record
        how = dict(type=kind, choices=m["choices"], metavar=m["metavar"])
        if typing.get_type_hints(cls)[f.name] is bool:  # a switch to the other value
            how = dict(action="store_false" if f.default else "store_true")
        p.add_argument(flag, dest=f.name, default=None, help=help, **how)


def given(args: argparse.Namespace, cls: type) -> dict:
    "The fields of `cls` that flags gave (not None), by name: the others keep the record's default."
    names = [f.name for f in dataclasses.fields(cls) if f.metadata.get("help")]
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


OWN_DATA = ("train_src", "train_tgt", "valid_src", "valid_tgt")  # your own data: all four or none
OWN_FLAGS = [  # the command line's own flags, which no record holds: (commands, flag, type, help)
    ("train export", "--out", Path, "the folder to write: a run's checkpoints, or an export"),
    ("train", "--resume", bool, "continue the run in OUT from its last.pt"),
    ("train export", "--overwrite", bool, "replace the run (or the export) already in OUT"),
    ("train", "--config", Path, "a file of TrainConfig's settings (.json or .toml; flags win)"),
    *[("train", "--" + n.replace("_", "-"), Path, f"your {n} file (all four)") for n in OWN_DATA],
    ("train evaluate", "--data-dir", Path, "the corpus's folder (default: its own; $MULTI30K_DIR)"),
    ("evaluate translate export parse", "--checkpoint", Path, "OUT/last.pt, an export, or hf:NAME"),
    ("evaluate translate", "--engine", ENGINES, "what decodes a checkpoint (default pytorch)"),
    ("evaluate translate export", "--average-last", int, "average the last K epochs' weights"),
    ("evaluate", "--split", str, "a split of the checkpoint's corpus (default: its test split)"),
    ("evaluate", "--src", Path, "your own source sentences, one a line; needs --ref"),
    ("evaluate", "--ref", Path, "their reference translations, line by line"),
    ("evaluate translate parse", "--output", Path, "write the output to this file (a new one)"),
    ("evaluate", "--json", bool, "print sacreBLEU's fields and the settings, as JSON"),
    ("translate parse", "--buffer-size", int, "stdin's lines N at a time (default 100)"),
    ("parse", "--pretty", bool, "draw each tree over several lines (default: one line each)"),
    ("translate", "--attention", Path, "save each sentence's attention maps to this .png"),
    ("translate", "--layer", int, "the layer whose attention --attention draws (default: last)"),
    ("export", "--format", FORMATS, "what to write (default ctranslate2; onnx: for a web page)"),
    ("export", "--quantization", QUANTIZATIONS, "how the weights are stored (default float32)"),
    ("train evaluate translate export parse", "--debug", bool, "on an error, show the traceback"),
]  # fmt: skip
REQUIRED, DEFAULTS = ("--out", "--checkpoint"), {"buffer_size": 100}
TOGETHER = (OWN_DATA, ("src", "ref"))  # all of a group or none
APART = (("train_src", "data_dir"), ("src", "split"))  # not both: your own data, or a corpus's
INPUTS, OUTPUTS = ("config", *OWN_DATA, "src", "ref"), ("output",)  # files to read, to write
RUNTIME_FLAGS = {"evaluate": {"device", "progress"}, "translate": {"device"}, "parse": {"device"}}
NOT_READ = {"no such file": "no such file", "a folder": "a folder, not a file"}  # by not_a_file


def own_flags(p: argparse.ArgumentParser, command: str) -> None:
    "The command line's own flags that `command` takes."
    for commands, flag, kind, help in OWN_FLAGS:
        if command in commands.split():
            how = dict(choices=kind) if isinstance(kind, tuple) else dict(type=kind)
            how = dict(action="store_true") if kind is bool else how
            p.add_argument(flag, **how, required=flag in REQUIRED, help=help)
    p.set_defaults(**DEFAULTS)


def _check_own(args: argparse.Namespace) -> None:
    "The own flags' rules: files to read exist, to write do not; groups all or none; some apart."
    flag, value = lambda name: "--" + name.replace("_", "-"), lambda name: getattr(args, name, None)
    for group in TOGETHER:
        missing = [flag(name) for name in group if value(name) is None]
        if 0 < len(missing) < len(group):
            names = ", ".join(map(flag, group))
            raise ChoiceError(f"{names} go together: {', '.join(missing)} missing")
    for one, other in APART:
        if value(one) is not None and value(other) is not None:
            raise ChoiceError(f"{flag(other)} does not go with {flag(one)}: give one of them")
    for name, path in ((n, value(n)) for n in INPUTS + OUTPUTS if value(n) is not None):
        if name in OUTPUTS and path.exists():
            raise ChoiceError(f"{flag(name)} {path} exists: it is never overwritten")
        # a pipe (`--src <(...)`) is read; what reads a file twice says it cannot (ParallelFiles)
        if name in INPUTS and (why := NOT_READ.get(not_a_file(path))):
            raise ChoiceError(f"{flag(name)} {path}: {why}")


def _train(args: argparse.Namespace) -> None:
    choices = Choices(**given(args, Choices), train=given(args, TrainConfig))
    options = RuntimeOptions(**given(args, RuntimeOptions))  # checked before anything is read
    own = [getattr(args, name) for name in OWN_DATA]
    files = ParallelFiles(own[:2], own[2:]) if own[0] else None
    limit = options.max_parameters  # of a resumed run's last.pt
    config = resolve_run_config(args.out, choices, args.config, files, args.resume, limit)
    corpus = files or (run_corpus(config, data_dir=args.data_dir) if args.data_dir else None)
    resume, overwrite = args.resume, args.overwrite
    train(args.out, config, corpus=corpus, resume=resume, overwrite=overwrite, options=options)


def _max_parameters(args: argparse.Namespace) -> int:
    "The most parameters a checkpoint or an export may declare: --max-parameters, or the default."
    return RuntimeOptions(**given(args, RuntimeOptions)).max_parameters


def _load(args: argparse.Namespace) -> Translating:
    "The translator of --checkpoint (a run's checkpoint or an export), as the flags ask."
    how = dict(engine=args.engine, device=args.device, max_parameters=_max_parameters(args))
    return load_translator(args.checkpoint, average_last=args.average_last, **how)


def _evaluate(args: argparse.Namespace) -> None:
    search = Search(**given(args, Search))
    if args.src is None and pretrained_name(args.checkpoint) is not None:
        raise ChoiceError(f"{args.checkpoint} has no corpus of its own: give --src and --ref")
    translator = _load(args)
    sources, references, name = args.src, args.ref, None
    if args.src is None:  # a split of the run's corpus, in its languages
        corpus = run_corpus(translator.config, data_dir=args.data_dir)
        name, pairs = split_pairs(corpus, args.split)
        sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    result = evaluate(translator, sources, references, search, name, args.progress is not False)
    if args.output is not None:
        with open_output(args.output) as f:  # a new file: not over one made meanwhile
            f.writelines(translator.detokenize(tokens) + "\n" for tokens in result.hypotheses)
    result = result.loaded_from(args.checkpoint, args.average_last)
    print(json.dumps(result.to_dict()) if args.json else result)


def _export(args: argparse.Namespace) -> None:
    asked = {k: getattr(args, k) for k in ("format", "quantization", "average_last", "overwrite")}
    asked = {k: v for k, v in asked.items() if v is not None}  # the others: Export's defaults
    how = Export(**asked, max_parameters=_max_parameters(args))
    out = export_checkpoint(args.checkpoint, args.out, how)
    print(
        f"{out}: a model for {how.format} ({how.quantization}); how to use it: {out / 'README.md'}"
    )


def _check_sentences(args: argparse.Namespace) -> None:
    "Refuse an empty sentence among the arguments, no input at all, and a --buffer-size below 1."
    empty = [i for i, s in enumerate(args.sentences, 1) if not s.strip()]
    if args.buffer_size < 1:
        raise ChoiceError(f"--buffer-size must be at least 1, got {args.buffer_size}")
    if empty:
        raise ChoiceError(
            f"sentence {empty[0]} of the arguments is empty: nothing to {args.command}"
        )
    if not args.sentences and sys.stdin is None:  # `<&-`: Python has no sys.stdin
        raise ChoiceError("no sentences: none given as arguments, and standard input is closed")


def _translate_inputs(args: argparse.Namespace) -> Iterator[list[str]]:
    """The sentences in chunks, after every check that needs no model: the arguments as one chunk,
    or standard input's lines --buffer-size at a time (all at once for --attention)."""
    attention = args.attention
    if attention and attention.suffix.lower() != ".png":
        raise ChoiceError(f"--attention needs a .png file name, got {attention}")
    if args.layer is not None and not attention:
        raise ChoiceError("--layer chooses the layer that --attention draws: give --attention too")
    if args.nbest is not None and attention:
        raise ChoiceError("--attention draws each sentence's best translation: leave out --nbest")
    _check_sentences(args)
    args.search = Search(**given(args, Search))  # built once, checked (--nbest <= --beam)
    limit = _max_parameters(args)
    engine = check_loading(args.checkpoint, args.average_last, args.engine, max_parameters=limit)
    if attention and engine == "ctranslate2":
        raise ChoiceError("--attention draws the PyTorch model's attention, not CTranslate2's")
    try:
        if attention:
            attention.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # FileExistsError: a file; NotADirectoryError, PermissionError
        reason = "it is not a folder" if isinstance(error, FileExistsError) else error.strerror
        raise OSError(f"cannot use {attention.parent} as --attention's folder: {reason}") from None
    if args.sentences:
        return iter([args.sentences])
    return chunks(input_lines(sys.stdin), None if args.attention else args.buffer_size)


def _save_attention(translator: Translating, sentences: list[str], layer: int, args, out) -> None:
    "Print the translations and save each sentence's attention maps of `layer`."
    from annotated_transformer.figures import save_attention_maps  # seaborn: only when asked

    for tokens, path in save_attention_maps(
        translator, sentences, args.attention, layer, args.search
    ):
        print(translator.detokenize(tokens), file=out)
        if path is not None:  # a blank line has none
            print(f"attention of layer {layer} saved to {path}", file=sys.stderr)


@contextmanager
def _quiet_if_closed() -> Iterator[None]:
    "The reader stopped early (`| head`): stop too, quietly."
    try:
        yield
    except BrokenPipeError:  # Python flushes stdout on exiting: not into the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _translate(args: argparse.Namespace) -> None:
    inputs = _translate_inputs(args)
    first = next(inputs, [])  # read, so checked, before the model loads
    translator = _load(args)
    if args.attention:  # the layer it draws: checked against the model before anything is written
        from annotated_transformer.figures import attention_layer  # seaborn: only when asked

        layer = attention_layer(translator.model, args.layer, "--layer")
    with _quiet_if_closed(), open_output(args.output) as out:
        if args.attention:  # `first` holds every sentence
            return _save_attention(translator, first, layer, args, out)
        nbest = args.nbest is not None
        translate_stream(translator, itertools.chain([first], inputs), out, args.search, nbest)


def _parse(args: argparse.Namespace) -> None:
    search = dataclasses.replace(PARSING, **given(args, Search))  # §6.3's search, flags applied
    _check_sentences(args)
    stdin = chunks(input_lines(sys.stdin), args.buffer_size)  # read only if no sentences given
    parser = Parser.from_checkpoint(args.checkpoint, args.device, _max_parameters(args))
    with _quiet_if_closed(), open_output(args.output) as out:
        parse_stream(
            parser, [args.sentences] if args.sentences else stdin, out, search, args.pretty
        )


COMMANDS = {  # name: (what it does, what runs it, the records whose fields are its flags)
    "train": ("train, a checkpoint per epoch", _train, (Choices, TrainConfig, RuntimeOptions)),
    "evaluate": ("BLEU of a checkpoint on a test split or your files", _evaluate, (Search,)),
    "translate": ("translate sentences (arguments or stdin)", _translate, (Search,)),
    "export": ("write a checkpoint's Transformer for CTranslate2, transformers, ONNX", _export, ()),
    "parse": ("parse sentences into trees: beam 21, alpha 0.3 unless flags say", _parse, (Search,)),
}


class _Parser(argparse.ArgumentParser):
    "An argument parser whose usage errors are the one line `PROG: error: MESSAGE`, exit status 2."

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    "The argument parser of `annotated-transformer`: each command's own flags and its records'."
    p = _Parser(prog="annotated-transformer", description="Train, evaluate and use a Transformer.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for name, (about, run, records) in COMMANDS.items():
        epilog, raw = f"examples:\n{examples(name)}", argparse.RawDescriptionHelpFormatter
        c = sub.add_parser(name, help=about, description=about, epilog=epilog, formatter_class=raw)
        c.set_defaults(run=run)
        own_flags(c, name)
        if name != "train":  # --quiet for evaluate; train has all of RuntimeOptions
            field_flags(c, RuntimeOptions, only=RUNTIME_FLAGS.get(name, set()) | {"max_parameters"})
        for record in records:
            field_flags(c, record, skip={"nbest"} if name in ("evaluate", "parse") else ())
        if name in ("translate", "parse"):
            c.add_argument("sentences", nargs="*", help="sentences; else standard input's lines")
    return p


def _one_line(error: object, args: argparse.Namespace) -> str:
    "The message in one line, naming the flag whose path it begins with: `--config FILE: ...`."
    text = " ".join(str(error).splitlines())
    paths = {n: str(v) for n, v in vars(args).items() if isinstance(v, Path)}
    # the path whole, not the start of a longer one (--out run, --config run.json)
    named = [n for n, v in paths.items() if re.match(re.escape(v) + r"(?![\w.-])", text)]
    return f"--{named[0].replace('_', '-')} {text}" if named else text


LESS = dict(train="--max-tokens (or model)", evaluate="--batch-size or --beam")  # less memory
LESS["translate"] = LESS["evaluate"]


def _report(error: BaseException, args: argparse.Namespace) -> tuple[str, int]:
    "What stopped the command, in one line, and the exit status that says what kind of stop."
    if isinstance(error, KeyboardInterrupt):  # Ctrl-C: what was done, if it was said
        return str(error) or "interrupted", 130
    if isinstance(error, (ValueError, OSError)):  # ChoiceError: a usage error
        return f"error: {_one_line(error, args)}", 2 if isinstance(error, ChoiceError) else 1
    if where := out_of_memory(error):
        less = f": a smaller {LESS[args.command]} needs less" if args.command in LESS else ""
        return f"error: out of memory on {where}{less}", 1
    if isinstance(error, RecursionError):  # a structure nested too deeply to walk
        return "error: input nested too deeply to read (RecursionError)", 1
    about = f"{type(error).__name__}: {_one_line(error, args)}"[:300]  # a bug: say so, in short
    return f"error: internal error ({about}); rerun with --debug for the traceback", 1


def main(argv: list[str] | None = None) -> int:
    "Run the command; report usage errors (status 2) and failures (status 1) in one line."
    args = parser().parse_args(argv)  # a bad flag exits here, with status 2
    rank = f" (rank {os.environ['RANK']})" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else ""
    say = lambda text: print(f"annotated-transformer {args.command}{rank}: {text}", file=sys.stderr)
    try:
        with warnings.catch_warnings():  # one line each; the usual display restored afterwards
            warnings.showwarning = lambda message, *_: say(f"warning: {_one_line(message, args)}")
            _check_own(args)
            args.run(args)
    except (KeyboardInterrupt, Exception) as error:  # a bug too: one line, not a traceback
        if args.debug:
            raise
        message, status = _report(error, args)
        say(message)
        return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
