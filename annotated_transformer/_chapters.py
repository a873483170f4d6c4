"""What the notebooks share to run their chapters: the repository root, the model they decode,
synthetic data, the console command run in subprocesses, and tables of recorded results.

Hand-written (not exported from a notebook) and private: the library does not need it; the Multi30k,
attention and multi-GPU chapters and the tests do.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from filelock import FileLock
from torch import Tensor

from annotated_transformer.checkpoint import load_checkpoint
from annotated_transformer.config import RuntimeOptions, TrainConfig, run_model
from annotated_transformer.data import split_files
from annotated_transformer.pipeline import train

ROOT = Path(__file__).resolve().parent.parent  # the repository root (the notebooks run from nbs/)
FULL_RUN_ENV = "MULTI30K_RUN"  # names the folder of a full run for the notebooks to decode
# the notebooks' model when no full run is given: 3 epochs in about 3 minutes on 2 CPU cores,
# training and validation (190 s measured with the CPU's packed dropout mask and fused Adam; 450 s
# before them, on a slower CPU); several times that when other work shares the cores
CPU_CONFIG = TrainConfig(model=run_model("small"), epochs=3, max_tokens=2048, warmup=300)


# the model of the book's "Try it" panel (ONNX in the page, chapters 08 and 22): as CPU_CONFIG, on
# one shared vocabulary of 8,000 subwords (§5.1), which a browser tokenizes exactly as Python does;
# 3 epochs in about 4 minutes on 2 CPU cores (256 s measured; 322 s before the packed mask and fused
# Adam, beside other work)
SUBWORD_CONFIG = replace(CPU_CONFIG, vocab_size=8000)
SUBWORD_RUN_ENV = "MULTI30K_SUBWORD_RUN"  # names the folder of a full subword run instead


def _trained(run_dir: Path, config: TrainConfig) -> Path:
    "The run in `run_dir`, trained (or resumed) to `config.epochs` first if unfinished."
    run_dir.mkdir(parents=True, exist_ok=True)
    # another notebook training it: wait, then find it finished (train's own lock refuses instead)
    with FileLock(run_dir / ".chapter.lock"):
        last = run_dir / "last.pt"
        if not (last.is_file() and load_checkpoint(last).epoch >= config.epochs):
            options = RuntimeOptions(progress=False)
            started = last.is_file()
            train(run_dir, config, resume=started, overwrite=not started, options=options)
    return run_dir


def chapter_run(root: Path = ROOT) -> tuple[Path, bool]:
    """The run the notebooks decode, and whether it is a full run: $MULTI30K_RUN, or the CPU default
    (`tools/render.py --prepare-run` trains it before the notebooks run: then they only read it)."""
    if os.environ.get(FULL_RUN_ENV):
        return Path(os.environ[FULL_RUN_ENV]), True
    return _trained(Path(root) / "runs" / "multi30k-cpu", CPU_CONFIG), False


def subword_run(root: Path = ROOT, prepare: bool = True) -> tuple[Path, bool]:
    """The subword run the book's page runs, and whether it is a full run: $MULTI30K_SUBWORD_RUN,
    or the CPU default (trained by `tools/render.py --prepare-run`, as `chapter_run`; `prepare`
    False: its folder only, trained or not)."""
    if os.environ.get(SUBWORD_RUN_ENV):
        return Path(os.environ[SUBWORD_RUN_ENV]), True
    run_dir = Path(root) / "runs" / "multi30k-subwords-cpu"
    return (_trained(run_dir, SUBWORD_CONFIG) if prepare else run_dir), False


# The words of the synthetic corpora: the fixed 192 pairs use the first four subjects, three verbs,
# four objects and four places; `sampled_pairs` draws from all of them, for more varied lengths.
SUBJECTS = [
    ("Ein Mann", "A man"),
    ("Eine Frau", "A woman"),
    ("Ein Kind", "A child"),
    ("Ein Hund", "A dog"),
    ("Zwei Männer", "Two men"),
    ("Drei Mädchen", "Three girls"),
    ("Ein alter Mann", "An old man"),
]
VERBS = [
    ("sieht", "sees"),
    ("hat", "has"),
    ("mag", "likes"),
    ("fährt", "rides"),
    ("trägt", "carries"),
    ("sucht", "looks for"),
    ("malt", "paints"),
]
OBJECTS = [
    ("einen Ball", "a ball"),
    ("ein Auto", "a car"),
    ("einen Baum", "a tree"),
    ("ein Haus", "a house"),
    ("ein Fahrrad", "a bike"),
    ("ein rotes Auto", "a red car"),
    ("eine große Tasche", "a big bag"),
    ("einen kleinen Hut", "a small hat"),
]
PLACES = [
    ("", ""),
    (" im Park", " in the park"),
    (" am Strand", " on the beach"),
    (" im Schnee", " in the snow"),
    (" auf der Straße vor dem alten Haus", " on the street in front of the old house"),
]


def _pairs(*word_lists: list[tuple[str, str]]) -> list[tuple[str, str]]:
    "Every (German, English) sentence the word lists make: subject, verb, object, place."
    return [
        (f"{s[0]} {v[0]} {o[0]}{p[0]}.", f"{s[1]} {v[1]} {o[1]}{p[1]}.")
        for s, v, o, p in itertools.product(*word_lists)
    ]


def synthetic_pairs() -> list[tuple[str, str]]:
    "192 distinct, consistent German-English sentence pairs, in a fixed shuffled order."
    pairs = _pairs(SUBJECTS[:4], VERBS[:3], OBJECTS[:4], PLACES[:4])
    random.Random(0).shuffle(pairs)
    return pairs


def sampled_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    "n distinct (German, English) pairs of 5 to 16 words, drawn from all the words by `seed`."
    pairs = _pairs(SUBJECTS, VERBS, OBJECTS, PLACES)
    if not 0 <= n <= len(pairs):
        raise ValueError(f"n={n}: there are {len(pairs)} distinct pairs to draw from")
    return random.Random(seed).sample(pairs, n)


def write_split(folder: Path, split: str, pairs: list[tuple[str, str]]) -> tuple[Path, Path]:
    "Write `pairs` as the Multi30k-named gzipped files of `split` in `folder`; return their paths."
    paths = tuple(Path(folder) / name for name in split_files(split))
    for path, side in zip(paths, (0, 1)):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write("".join(p[side] + "\n" for p in pairs))
    return paths


def start_python(
    *args: str,
    nproc: int = 1,  # with more than 1, torchrun starts that many processes on this machine
    log_dir: Path | None = None,  # torchrun's log folder; None: a folder of its own in /tmp
) -> subprocess.Popen:
    "Start `python ARGS`, alone or under torchrun, one thread a process; its output piped."
    torchrun = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    logs = ["--log-dir", str(log_dir)] if nproc > 1 and log_dir is not None else []
    command = [sys.executable, *(torchrun if nproc > 1 else []), *logs, *args]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}  # the processes share the CPU cores
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    )


def run_cli(
    *args: str, nproc: int = 1, log_dir: Path | None = None, timeout: float = 600.0
) -> subprocess.CompletedProcess:
    "Run `annotated-transformer ARGS` to the end, alone or in `nproc` processes; output captured."
    process = start_python("-m", "annotated_transformer.cli", *args, nproc=nproc, log_dir=log_dir)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def largest_difference(a: dict[str, Tensor] | Path, b: dict[str, Tensor] | Path) -> float:
    "The largest absolute difference of two models' weights: state dicts, or checkpoint files."
    a, b = (load_checkpoint(x).model if isinstance(x, Path) else x for x in (a, b))
    if a.keys() != b.keys():
        raise ValueError(f"the two models have different weights: {sorted(a.keys() ^ b.keys())}")
    return max((a[k] - b[k]).abs().max().item() for k in a)


def markdown_table(header: list[str], rows: list[list]) -> str:
    "A Markdown table: what a cell that reads `results/` shows (in the book and the README)."
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(str(x) for x in line) + " |" for line in lines)


def multi30k_scores(root: Path = ROOT, record: Path | None = None) -> str:
    "A recorded run's test2016 BLEU (by default results/multi30k.json), with the run that made it."
    record = Path(record or Path(root) / "results" / "multi30k.json")
    run = json.loads(record.read_text())
    rows = [
        [decoding, f"{s['sacrebleu']:.2f}", f"{s['tokenized_lowercase']:.2f}"]
        for decoding, s in run["test2016"].items()
    ]
    table = markdown_table(["test2016, decoding", "sacreBLEU", "tokenized BLEU"], rows)
    return (
        f"{table}\n\nRun: {run['what']}; {run['epochs']} epochs, "
        f"{run['training_hours']:.2f} hours on {run['machine']} (`results/{record.name}`)."
    )


def show_result(name: str, run: str, last: int | None = None, root: Path = ROOT) -> None:
    "Print a recorded result (results/NAME, its last `last` lines) under the run that wrote it."
    lines = (Path(root) / "results" / name).read_text().splitlines()
    print(f"results/{name}, from {run}:")
    print("\n".join(lines[-last:] if last else lines))


OPUS_VOCAB = 58_101  # Helsinki-NLP/opus-mt-de-en's: </s> is id 0, the padding token the last


def _opus_tokenizer(out: Path, pairs: list[tuple[str, str]]) -> None:
    "A MarianTokenizer in `out`: a sentencepiece model per language, one vocabulary of both."
    import io

    import sentencepiece as spm
    from transformers import MarianTokenizer

    pieces = {}
    for name, side in (("source.spm", 0), ("target.spm", 1)):
        model = io.BytesIO()
        texts = iter(pair[side] for pair in pairs)
        spm.SentencePieceTrainer.train(
            sentence_iterator=texts, model_writer=model, vocab_size=500, hard_vocab_limit=False,
            minloglevel=2,
        )  # fmt: skip
        (out / name).write_bytes(model.getvalue())
        p = spm.SentencePieceProcessor(model_proto=model.getvalue())
        pieces |= dict.fromkeys(p.id_to_piece(i) for i in range(3, p.get_piece_size()))
    tokens = ["</s>", "<unk>", *pieces]
    tokens += [f"<unused{i}>" for i in range(OPUS_VOCAB - 1 - len(tokens))] + ["<pad>"]
    (out / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    files = [str(out / n) for n in ("source.spm", "target.spm", "vocab.json")]
    MarianTokenizer(*files, source_lang="de", target_lang="en").save_pretrained(out)


def opus_like_folder(
    out: Path,
    pairs: list[tuple[str, str]],  # German-English text for the two sentencepiece models
    d_model: int = 64,  # OPUS-MT's are 512 wide and 6 layers deep: small here, the rest alike
    layers: int = 2,
    seed: int = 0,
) -> Path:
    """A folder shaped like the Hub's Helsinki-NLP/opus-mt-de-en, written by transformers: its
    configuration (its vocabulary's size, </s> id 0, the padding token the decoder's start, swish),
    its generation settings, a MarianTokenizer learned from `pairs`, and random weights."""
    import torch
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    out.mkdir(parents=True, exist_ok=True)
    _opus_tokenizer(out, pairs)
    pad, sizes = OPUS_VOCAB - 1, dict(encoder_layers=layers, decoder_layers=layers)
    sizes |= dict(encoder_attention_heads=4, decoder_attention_heads=4, d_model=d_model)
    sizes |= dict(encoder_ffn_dim=4 * d_model, decoder_ffn_dim=4 * d_model)
    ids = dict(pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0, bos_token_id=None)
    config = MarianConfig(
        vocab_size=OPUS_VOCAB, decoder_vocab_size=OPUS_VOCAB, activation_function="swish",
        max_position_embeddings=512, scale_embedding=True, share_encoder_decoder_embeddings=True,
        dropout=0.1, attention_dropout=0.0, activation_dropout=0.0, **ids, **sizes,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    model.generation_config = GenerationConfig(
        **ids, bad_words_ids=[[pad]], forced_eos_token_id=0, num_beams=4, max_length=512
    )
    model.save_pretrained(out)
    return out
