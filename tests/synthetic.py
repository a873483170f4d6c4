"""The tests' shared helpers: the synthetic corpora and files of them, tiny models, and the
project's tools loaded as modules.

The German-English ones live in `annotated_transformer._chapters`, which the notebooks use too:
`synthetic_pairs` (a fixed set of 192 pairs), `sampled_pairs` (any number of pairs of more varied
length) and `write_split` (Multi30k-named .gz files). `made_up_pairs` makes parallel text in two
made-up languages, for runs on your own files; `write_lines` writes any lines, plain or gzipped.
`tool("render")` is tools/render.py as a module, for the tests of the tools.
"""

from __future__ import annotations

import gzip
import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from annotated_transformer._chapters import sampled_pairs, synthetic_pairs, write_split
from annotated_transformer.model import ModelConfig

__all__ = [
    "made_up_pairs",
    "sampled_pairs",
    "synthetic_pairs",
    "write_lines",
    "write_split",
    "write_treebank",
    "TINY_VOCAB",
    "tiny_model",
    "params",
    "assert_params_equal",
    "tool",
]

SYLLABLES = ["ka", "lo", "mi", "zu", "ré", "tan", "vø", "shi", "por", "el"]


def made_up_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    "Sentences of a made-up language and their translations: each word its own, in reverse order."
    rng = random.Random(seed)
    words = sorted({"".join(rng.sample(SYLLABLES, 2)) for _ in range(60)})
    # a second spelling system, with a non-ASCII letter
    other = {w: w[::-1].upper()[:3] + "ß" + w[:1] for w in words}
    pairs = []
    for _ in range(n):
        sentence = rng.sample(words, rng.randint(3, 7))
        pairs.append(
            (" ".join(sentence) + ".", " ".join(other[w] for w in reversed(sentence)) + " !")
        )
    return pairs


def write_lines(path: Path, lines: list[str], gzipped: bool = False) -> Path:
    "Write `lines`, one a line, to `path` (gzipped if asked); return the path."
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if gzipped else data)
    return path


# ------------------------------------------------ tiny models (tests of the training loops, losses)
TINY_VOCAB = 11  # the tiny models' vocabulary: 0 padding, 1 start, 2..10 content


def tiny_model(seed: int = 0) -> nn.Module:
    "A one-layer model (d_model 16, no dropout) over TINY_VOCAB tokens; `seed` draws its weights."
    torch.manual_seed(seed)
    return ModelConfig(N=1, d_model=16, d_ff=32, h=2, dropout=0.0).build(TINY_VOCAB, TINY_VOCAB)


def params(model: nn.Module) -> list[torch.Tensor]:
    "A copy of the model's parameters, to compare with later."
    return [p.detach().clone() for p in model.parameters()]


def assert_params_equal(a: list[torch.Tensor], b: list[torch.Tensor], atol: float = 0.0) -> None:
    "Two lists of parameters hold the same tensors, to `atol`."
    assert len(a) == len(b)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, atol=atol, rtol=0.0)


# ------------------------------------------------------------------------- the tools, as modules
TOOLS = Path(__file__).resolve().parent.parent / "tools"


def tool(name: str) -> ModuleType:
    "tools/NAME.py as a module (the tools are scripts beside the book, not a package)."
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # where its dataclasses look up their annotations
    spec.loader.exec_module(module)
    return module


# a made-up treebank: files wsj_0001-0003 (training), wsj_0160 (validation), wsj_0180 (test)
DET, NOUN, VERB = ["the", "a"], ["cat", "dog", "mat", "bird", "man"], ["saw", "liked", "chased"]
PREP, PARTICLE = ["on", "near", "with"], ["up", "away"]
FILES = {1: 14, 2: 13, 3: 13, 160: 8, 180: 8}  # file number: trees in it


def noun_phrase(draw: random.Random, label: str = "NP") -> str:
    return f"({label} (DT {draw.choice(DET)}) (NN {draw.choice(NOUN)}))"


def made_up_tree(draw: random.Random) -> str:
    "A tree as the treebank writes it: wrapped, function tags, indices, now and then a trace."
    verb_phrase = f"(VBD {draw.choice(VERB)}) {noun_phrase(draw)}"
    kind = draw.randrange(4)
    if kind == 1:
        verb_phrase += f" (PP-LOC=2 (IN {draw.choice(PREP)}) {noun_phrase(draw)})"
    elif kind == 2:
        verb_phrase += f" (PRT (RP {draw.choice(PARTICLE)}))"
    elif kind == 3:
        verb_phrase += " (SBAR (-NONE- 0) (S (NP-SBJ (-NONE- *T*-1)) (VP (VBD sat))))"
    end = " (. .)" if draw.random() < 0.7 else ""
    return f"( (S {noun_phrase(draw, 'NP-SBJ-1')} (VP {verb_phrase}){end}) )"


def write_treebank(folder: Path, seed: int = 0) -> Path:
    "The made-up treebank's files in `folder`."
    draw = random.Random(seed)
    folder.mkdir(parents=True)
    for number, count in FILES.items():
        text = "\n".join(made_up_tree(draw) for _ in range(count)) + "\n"
        (folder / f"wsj_{number:04d}.mrg").write_text(text)
    return folder
