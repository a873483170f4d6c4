"""The synthetic corpora of the tests, and files of them.

The German-English ones live in `annotated_transformer._chapters`, which the notebooks use too:
`synthetic_pairs` (a fixed set of 192 pairs), `sampled_pairs` (any number of pairs of more varied
length) and `write_split` (Multi30k-named .gz files). `made_up_pairs` makes parallel text in two
made-up languages, for runs on your own files; `write_lines` writes any lines, plain or gzipped.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

from annotated_transformer._chapters import sampled_pairs, synthetic_pairs, write_split

__all__ = ["made_up_pairs", "sampled_pairs", "synthetic_pairs", "write_lines", "write_split"]

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
