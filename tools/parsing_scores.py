"""Score treebank runs as nbs/24_parsing.ipynb reports them, and the right-branching baseline; write
what the chapter reads to results/parsing/:

- NAME-SEARCH.json and NAME-SEARCH-trees.txt: the test files' EVALB summaries (the share of outputs
  that were trees before repair, the seconds) and each test sentence's parse on one line, for each
  SEARCH: `tree-greedy` and `tree-beam21` write only trees (the `trees` strategy, the parser's
  default); `greedy` and `beam21` are unconstrained, their outputs repaired. beam21 is §6.3's
  search: beam 21, alpha 0.3, input + 300.
- NAME-val.json (with --val-epochs): the validation files' F1, constrained greedy search, after each
  epoch whose weights the run kept (`train --keep-epochs`), and with the last 5 and 10 epochs
  averaged: what a recipe is chosen on.

    python tools/parsing_scores.py runs/parsing/transformer-seed1 runs/parsing/lstm-seed1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import time
from pathlib import Path

from annotated_transformer.checkpoint import average_last
from annotated_transformer.model import count_parameters
from annotated_transformer.parsing import PARSING, Parser
from annotated_transformer.translator import Translator
from annotated_transformer.trees import Treebank, right_branching_scores, score_parses, show_tree

SEARCHES = {
    "tree-greedy": dataclasses.replace(PARSING, beam_size=1),
    "tree-beam21": PARSING,
    "greedy": dataclasses.replace(PARSING, beam_size=1, strategy="greedy"),
    "beam21": dataclasses.replace(PARSING, strategy="beam"),
}


def scored(parser: Parser, golds: list, search_name: str) -> tuple[dict, list]:
    "EVALB's summaries of the parser's parses of the gold trees' sentences, with the seconds."
    start = time.time()
    sentences = [" ".join(gold.leaves()) for gold in golds]
    parses = parser.parse(sentences, SEARCHES[search_name], progress=True)
    return {**score_parses(golds, parses).to_dict(), "seconds": time.time() - start}, parses


def test_scores(run: Path, golds: list, names: list[str], out: Path) -> None:
    "The run's last epoch on the test files, each search."
    parser = Parser.from_checkpoint(run / "last.pt")
    t, history = parser.translator, json.loads((run / "history.json").read_text())
    for name in names:
        result, parses = scored(parser, golds, name)
        result.update(
            epochs=len(history),
            training_seconds=sum(epoch["seconds"] for epoch in history),
            parameters=count_parameters(t.model),
            vocabularies=[len(t.src_vocab), len(t.tgt_vocab)],
        )
        stem = out / f"{run.name}-{name}"
        stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
        Path(f"{stem}-trees.txt").write_text("".join(show_tree(p.tree) + "\n" for p in parses))
        print(
            f"{run.name} {name}: F1 {result['all']['f1']:.2f} (<= 40: "
            f"{result['short']['f1']:.2f}), well-formed {result['well_formed']:.1f}%, "
            f"one XX per word {result['one_slot_per_word']:.1f}%, {result['seconds']:.0f} s"
        )


def validation_scores(run: Path, golds: list, out: Path) -> None:
    """Each kept epoch's F1 on the validation files (constrained greedy search), and that of the
    last 5 and 10 epochs' weights averaged (§6.1's checkpoint averaging)."""
    epochs = sorted(run.glob("epoch*.pt"), key=lambda p: int(re.sub(r"\D", "", p.stem)))
    found = {"epochs": [], "average_last": {}}
    for path in epochs:
        result, _ = scored(Parser.from_checkpoint(path), golds, "tree-greedy")
        epoch = int(re.sub(r"\D", "", path.stem))
        found["epochs"].append({"epoch": epoch, **{k: result[k]["f1"] for k in ("all", "short")}})
        print(f"{run.name} epoch {epoch}: validation F1 {result['all']['f1']:.2f}")
    for k in (5, 10):
        if len(epochs) >= k:
            parser = Parser(Translator.from_checkpoint(average_last(run / "last.pt", k)))
            result, _ = scored(parser, golds, "tree-greedy")
            found["average_last"][str(k)] = {part: result[part]["f1"] for part in ("all", "short")}
            print(
                f"{run.name} the last {k} epochs averaged: validation F1 {result['all']['f1']:.2f}"
            )
    (out / f"{run.name}-val.json").write_text(json.dumps(found, indent=1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="*", type=Path, help="run folders (their last.pt is scored)")
    p.add_argument("--out", type=Path, default=Path("results/parsing"))
    p.add_argument("--searches", nargs="+", default=list(SEARCHES), choices=list(SEARCHES))
    p.add_argument("--val-epochs", action="store_true", help="each kept epoch's validation F1")
    p.add_argument("--no-test", action="store_true", help="skip the test files (recipe search)")
    p.add_argument("--limit", type=int, help="score only the first N sentences (dry runs)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    treebank = Treebank()
    if not args.no_test:
        golds = treebank.trees("test")[: args.limit]
        baseline = right_branching_scores(golds)
        (args.out / "right-branching.json").write_text(json.dumps(baseline.to_dict(), indent=1))
        print(f"right-branching: {baseline.scores}")
        for run in args.runs:
            test_scores(run, golds, args.searches, args.out)
    if args.val_epochs:
        val_golds = treebank.trees("val")[: args.limit]
        for run in args.runs:
            validation_scores(run, val_golds, args.out)


if __name__ == "__main__":
    main()
