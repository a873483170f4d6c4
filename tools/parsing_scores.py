"""Score treebank runs on the test files as §6.3 decodes (beam 21, alpha 0.3, input + 300) and
greedily, and the right-branching baseline; write what nbs/21_parsing.ipynb reads to
results/parsing/: NAME-SEARCH.json (EVALB's summaries, the share well-formed, the seconds) and
NAME-SEARCH-trees.txt (each test sentence's parse on one line).

    python tools/parsing_scores.py runs/parsing/transformer-seed1 runs/parsing/lstm-seed1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from annotated_transformer.model import count_parameters
from annotated_transformer.translator import PARSING, Parser
from annotated_transformer.trees import Treebank, right_branching_scores, score_parses, show_tree

SEARCHES = {"greedy": dataclasses.replace(PARSING, beam_size=1), "beam21": PARSING}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="*", type=Path, help="run folders (their last.pt is scored)")
    p.add_argument("--out", type=Path, default=Path("results/parsing"))
    p.add_argument("--searches", nargs="+", default=list(SEARCHES), choices=list(SEARCHES))
    p.add_argument("--limit", type=int, help="score only the first N test sentences (dry runs)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    golds = Treebank().trees("test")[: args.limit]
    baseline = right_branching_scores(golds)
    (args.out / "right-branching.json").write_text(json.dumps(baseline.to_dict(), indent=1))
    print(f"right-branching: {baseline.scores}")
    for run in args.runs:
        parser = Parser.from_checkpoint(run / "last.pt")
        t = parser.translator
        parameters = count_parameters(t.model)
        sentences = [" ".join(gold.leaves()) for gold in golds]
        for name in args.searches:
            start = time.time()
            parses = parser.parse(sentences, SEARCHES[name], progress=True)
            seconds = time.time() - start
            result = {**score_parses(golds, parses).to_dict(), "seconds": seconds}
            history = json.loads((run / "history.json").read_text())
            result.update(
                epochs=len(history),
                training_seconds=sum(epoch["seconds"] for epoch in history),
                parameters=parameters,
                vocabularies=[len(t.src_vocab), len(t.tgt_vocab)],
            )
            stem = args.out / f"{run.name}-{name}"
            stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
            trees = "".join(show_tree(parse.tree) + "\n" for parse in parses)
            Path(f"{stem}-trees.txt").write_text(trees)
            print(
                f"{run.name} {name}: F1 {result['all']['f1']:.2f} (<= 40: "
                f"{result['short']['f1']:.2f}), well-formed {result['well_formed']:.1f}%, "
                f"one XX per word {result['one_slot_per_word']:.1f}%, {seconds:.0f} s"
            )


if __name__ == "__main__":
    main()
