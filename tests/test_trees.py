"""The treebank and its trees (annotated_transformer.trees, chapter 11): no real treebank needed,
every tree here is written by hand.

1. read_trees: several trees a file, the unlabelled wrapper gone (TOP when it holds several),
   unbalanced text refused naming its source; clean: traces and what they leave empty gone, labels
   plain, -LRB- and -NONE- tags kept as tags.
2. linearize and delinearize: the round trip on every tree here, each of the six repair rules on
   its own, and on random token sequences a tree over exactly the sentence's words.
3. The EVALB scorer: one test per COLLINS.prm rule, on trees where the rule changes the score, the
   expected counts worked out by hand; the summaries sum counts over sentences.
4. Where the treebank is found (a folder, combined/, treebank/combined/, a zip, $TREEBANK_DIR,
   nltk's data folders), its split by file, the Treebank corpus and its tokenizers.
5. The right-branching baseline and how a tree is shown.
"""

from __future__ import annotations

import random
import zipfile
from collections import Counter
from pathlib import Path

import nltk
import pytest
import torch
from nltk import Tree

from annotated_transformer import data
from annotated_transformer.config import ChoiceError
from annotated_transformer.trees import (
    SPLIT_FILES,
    XX,
    BracketScore,
    Delinearized,
    SpaceTokenizer,
    Treebank,
    TreeGrammar,
    brackets,
    clean,
    delinearize,
    evalb,
    length,
    linearize,
    plain_label,
    read_trees,
    right_branching,
    right_branching_scores,
    score_parses,
    sentence_score,
    show_tree,
    split_trees,
    tags,
    treebank_texts,
    with_tags,
)

# Two files as the treebank writes them: each tree in an unlabelled wrapper, function tags and
# indices on the labels, traces under -NONE-, brackets among the words as -LRB- and -RRB-.
FILE_A = """
( (S
    (NP-SBJ-1 (DT The) (NN board) )
    (VP (VBD was)
      (VP (VBN expected)
        (S
          (NP-SBJ (-NONE- *-1) )
          (VP (TO to)
            (VP (VB meet)
              (PP-TMP=2 (IN on) (NP (NNP Monday) )))))))
    (. .) ))
( (S
    (NP-SBJ (PRP He) )
    (VP (VBD said)
      (SBAR (-NONE- 0)
        (S
          (NP-SBJ (NNS sales) )
          (VP (VBD rose)
            (NP (-LRB- -LRB-) (CD 5) (NN %) (-RRB- -RRB-) )))))
    (, ,) (`` ``) (NP-SBJ (-NONE- *T*-2) ) ('' '') (. .) ))
"""
FILE_B = """( (NP (NNP Pierre) (NNP Vinken) ) (. .) )
( (S (NP-SBJ (-NONE- *) ) (VP (-NONE- *?*) ) ) )
( (FRAG (ADVP-LOC-CLR (RB here) ) (PRT (RP up) ) ) )
"""
CLEAN_A = [
    "(S (NP (DT The) (NN board)) (VP (VBD was) (VP (VBN expected) (S (VP (TO to) (VP (VB meet)"
    " (PP (IN on) (NP (NNP Monday)))))))) (. .))",
    "(S (NP (PRP He)) (VP (VBD said) (SBAR (S (NP (NNS sales)) (VP (VBD rose) (NP (-LRB- -LRB-)"
    " (CD 5) (NN %) (-RRB- -RRB-)))))) (, ,) (`` ``) ('' '') (. .))",
]
CLEAN_B = [
    "(TOP (NP (NNP Pierre) (NNP Vinken)) (. .))",
    None,  # only traces
    "(FRAG (ADVP (RB here)) (PRT (RP up)))",
]


def tree(text: str) -> Tree:
    return Tree.fromstring(text)


def line(t: Tree) -> str:
    return " ".join(t.pformat(margin=10**6).split())


def hand_made() -> list[Tree]:
    "Every tree of the two files, raw and cleaned (not the one that cleaning empties)."
    raw = read_trees(FILE_A) + read_trees(FILE_B)
    return raw + [c for c in map(clean, raw) if c is not None]


# ---------------------------------------------------------------------------- reading, cleaning
def test_read_trees_takes_every_tree_of_a_file_without_the_wrapper():
    trees = read_trees(FILE_A + FILE_B)
    assert [t.label() for t in trees] == ["S", "S", "TOP", "S", "FRAG"]
    assert trees[0].leaves()[:3] == ["The", "board", "was"] and trees[0][0].label() == "NP-SBJ-1"
    # the wrapper holding two constituents becomes TOP over both, in order
    assert [child.label() for child in trees[2]] == ["NP", "."]
    assert trees[2].leaves() == ["Pierre", "Vinken", "."]
    assert read_trees("") == [] and read_trees("\n\n") == []


@pytest.mark.parametrize(
    "text, says",
    [
        ("( (S (NN a) )\n( (S (NN b)) )", "1 bracket(s) left open at the end"),
        ("( (S (NN a)) ))", "a ')' closes nothing (character 15)"),
    ],
)
def test_read_trees_refuses_unbalanced_text_naming_the_source(text, says):
    with pytest.raises(ValueError) as error:
        read_trees(text, "wsj_0042.mrg")
    assert str(error.value) == f"wsj_0042.mrg: {says}"


@pytest.mark.parametrize(
    "label, plain",
    [("NP-SBJ-1", "NP"), ("PP-LOC=2", "PP"), ("NP=3", "NP"), ("ADVP-LOC-CLR", "ADVP"),
     ("S", "S"), ("-NONE-", "-NONE-"), ("-LRB-", "-LRB-"), ("-RRB-", "-RRB-")],
)  # fmt: skip
def test_plain_label_drops_function_tags_and_indices_but_not_dashed_tags(label, plain):
    assert plain_label(label) == plain


def test_clean_removes_traces_and_what_they_empty_and_plains_the_labels():
    cleaned = [clean(t) for t in read_trees(FILE_A + FILE_B)]
    assert [None if c is None else line(c) for c in cleaned] == CLEAN_A + CLEAN_B
    # the brackets among the words are tags and words, kept as they are
    assert ("-LRB-", "-LRB-") in [(tag, word) for word, tag in cleaned[1].pos()]
    assert "-NONE-" not in {tag for c in cleaned if c is not None for _, tag in c.pos()}


def test_clean_removes_emptied_constituents_at_every_depth():
    nested = tree("(S (NP (NP (SBAR (-NONE- 0) (S (-NONE- *T*)))) (PP (-NONE- *))) (VP (VB go)))")
    assert line(clean(nested)) == "(S (VP (VB go)))"
    assert clean(tree("(S (NP-SBJ (-NONE- *)) (VP (-NONE- *?*)))")) is None
    assert clean(tree("(-NONE- *)")) is None


def test_clean_does_not_change_the_tree_it_is_given():
    raw = read_trees(FILE_A)[0]
    before = raw.copy(deep=True)
    clean(raw)
    assert raw == before


# ------------------------------------------------------------------ linearize and delinearize
def test_linearize_writes_brackets_and_a_slot_per_word():
    t = tree("(S (NP (DT the) (NN cat)) (VP (VBD sat)) (. .))")
    assert linearize(t) == "(S (NP XX XX )NP (VP XX )VP XX )S".split()


@pytest.mark.parametrize("index", range(len(hand_made())))
def test_delinearize_gives_back_every_hand_made_tree(index):
    t = hand_made()[index]
    back = delinearize(linearize(t), t.leaves(), tags(t))
    assert back.tree == t and back.well_formed
    # without the tags: the same brackets, every tag XX
    plain = delinearize(linearize(t), t.leaves()).tree
    assert plain == with_tags(t, [XX] * len(t.leaves()))


def test_the_hand_made_trees_are_the_five_raw_and_four_cleaned():
    assert len(hand_made()) == 9  # the round trip above covers all of them


def repaired(tokens: str, words: str = "a b c") -> tuple[str, bool]:
    result = delinearize(tokens.split(), words.split())
    return line(result.tree), result.well_formed


def test_delinearize_of_a_well_formed_sequence_needs_no_repair():
    assert repaired("(S (NP XX XX )NP XX )S") == ("(S (NP (XX a) (XX b)) (XX c))", True)


def test_delinearize_puts_the_given_tags_on_the_words():
    got = delinearize("(S (NP XX XX )NP XX )S".split(), ["the", "cat", "."], ["DT", "NN", "."])
    assert line(got.tree) == "(S (NP (DT the) (NN cat)) (. .))" and got.well_formed


@pytest.mark.parametrize("stray", ["<unk>", "(", "the", "<s>"])
def test_rule_1_a_token_neither_bracket_nor_slot_is_dropped(stray):
    assert repaired(f"(S (NP XX {stray} XX )NP XX )S") == ("(S (NP (XX a) (XX b)) (XX c))", False)


def test_rule_2_a_slot_after_every_word_has_one_is_dropped():
    assert repaired("(S (NP XX XX )NP XX XX )S XX") == ("(S (NP (XX a) (XX b)) (XX c))", False)


def test_rule_3_a_closing_bracket_with_nothing_open_is_dropped():
    assert repaired(")S )NP (S (NP XX XX )NP XX )S )S") == ("(S (NP (XX a) (XX b)) (XX c))", False)


def test_rule_3_a_closing_bracket_of_another_label_closes_the_innermost_and_its_label_wins():
    assert repaired("(S (NP XX XX )VP XX )NP") == ("(S (NP (XX a) (XX b)) (XX c))", False)


def test_rule_4_a_constituent_closed_with_nothing_inside_is_dropped():
    assert repaired("(S (NP )NP XX XX XX )S") == ("(S (XX a) (XX b) (XX c))", False)
    # emptiness all the way up: the inner one dropped leaves the outer one empty too
    assert repaired("(S (VP (NP )NP )VP XX XX XX )S") == ("(S (XX a) (XX b) (XX c))", False)


def test_rule_5_words_without_a_slot_go_to_the_innermost_open_constituent_all_closed():
    assert repaired("(S (NP XX") == ("(S (NP (XX a) (XX b) (XX c)))", False)
    assert repaired("(S XX (NP XX XX )NP") == ("(S (XX a) (NP (XX b) (XX c)))", False)
    # an open constituent left empty at the end is dropped as it closes
    assert repaired("(S XX XX XX )S (NP") == ("(S (XX a) (XX b) (XX c))", False)


def test_rule_6_several_constituents_at_the_top_are_wrapped_in_TOP():
    assert repaired("(NP XX )NP (VP XX XX )VP") == ("(TOP (NP (XX a)) (VP (XX b) (XX c)))", False)
    # rule 5 put the words left over at the top, beside the closed constituent
    assert repaired("(S XX )S") == ("(TOP (S (XX a)) (XX b) (XX c))", False)
    assert repaired("") == ("(TOP (XX a) (XX b) (XX c))", False)


def test_rule_6_a_bare_word_is_wrapped_in_TOP():
    assert repaired("XX", "a") == ("(TOP (XX a))", False)
    assert repaired("(S XX )S", "a") == ("(S (XX a))", True)


ALPHABET = ["(S", ")S", "(NP", ")NP", XX, "<unk>"]


def random_tree(words: list[str], draw: random.Random) -> Tree:
    "A tree of S and NP constituents over `words`, its shape drawn at random."
    if len(words) == 1 and draw.random() < 0.5:
        return Tree(XX, words)
    cut = draw.randint(1, len(words))
    inside = [random_tree(words[:cut], draw)]
    if cut < len(words):
        inside.append(random_tree(words[cut:], draw))
    return Tree(draw.choice(["S", "NP"]), inside)


def random_tokens(words: list[str], draw: random.Random) -> list[str]:
    "Tokens drawn from ALPHABET, or a tree's linearization with a few tokens changed (or none)."
    if draw.random() < 0.5:
        return [draw.choice(ALPHABET) for _ in range(draw.randint(0, 16))]
    tokens = linearize(random_tree(words, draw))
    for _ in range(draw.choice([0, 0, 1, 2])):
        at = draw.randrange(len(tokens) + 1)
        edit = draw.choice(["insert", "delete", "replace"])
        if edit == "insert" or at == len(tokens):
            tokens.insert(at, draw.choice(ALPHABET))
        elif edit == "delete":
            del tokens[at]
        else:
            tokens[at] = draw.choice(ALPHABET)
    return tokens


def test_delinearize_of_any_sequence_is_a_tree_over_exactly_the_words():
    draw, kinds = random.Random(2015), Counter()
    for _ in range(2000):
        words = [f"w{i}" for i in range(draw.randint(1, 7))]
        tokens = random_tokens(words, draw)
        got = delinearize(tokens, words)
        assert got.tree.leaves() == words, (tokens, words)
        assert {tag for _, tag in got.tree.pos()} == {XX}, tokens
        # no constituent without a word, every label one the tokens opened (or TOP)
        assert all(len(sub.leaves()) for sub in got.tree.subtrees()), (tokens, line(got.tree))
        assert {sub.label() for sub in got.tree.subtrees()} <= {"S", "NP", "TOP", XX}
        # well-formed exactly when the tokens are the linearization of the tree they gave
        assert got.well_formed == (linearize(got.tree) == tokens), (tokens, words)
        kinds[got.well_formed, got.tree.label() == "TOP"] += 1
    # the draw met well-formed sequences, repaired ones and ones wrapped in TOP
    assert kinds[True, False] > 300 and kinds[False, False] > 300 and kinds[False, True] > 300
    assert kinds[True, True] == 0


# ------------------------------------------------------------------------------ the EVALB scorer
def score(gold: str, test: str) -> tuple[int, int, int]:
    "(gold brackets, the parse's, matched) of one sentence."
    s = sentence_score(tree(gold), tree(test))
    return s.gold, s.test, s.matched


@pytest.mark.parametrize("tag", [",", ":", "``", "''", "."])
def test_punctuation_is_deleted_so_a_bracket_differing_by_it_matches(tag):
    gold = f"(S (NP (DT the) (NN cat)) (VP (VBD sat)) ({tag} x))"
    test = f"(S (NP (DT the) (NN cat)) (VP (VBD sat) ({tag} x)))"
    assert score(gold, test) == (3, 3, 3)  # S 0-3, NP 0-2, VP 2-3 in both: x is gone
    assert brackets(tree(gold))[0] == ["the", "cat", "sat"]


def test_other_tags_are_kept_so_the_same_bracket_does_not_match():
    gold = "(S (NP (DT the) (NN cat)) (VP (VBD sat)) ($ x))"
    test = "(S (NP (DT the) (NN cat)) (VP (VBD sat) ($ x)))"
    assert score(gold, test) == (3, 3, 2)  # VP 2-3 against VP 2-4


def test_traces_are_deleted_and_the_brackets_they_empty_too():
    gold = "(S (NP-SBJ (-NONE- *-1)) (VP (VBD sat) (NP (PRP it))))"
    test = "(S (VP (VBD sat) (NP (PRP it))))"
    assert score(gold, test) == (3, 3, 3)  # S 0-2, VP 0-2, NP 1-2: no NP over the trace
    assert brackets(tree(gold)) == (["sat", "it"], Counter({("S", 0, 2): 1, ("VP", 0, 2): 1,
                                                           ("NP", 1, 2): 1}))  # fmt: skip


def test_a_TOP_bracket_is_not_counted():
    gold = "(S (NP (NN a)) (VP (VB b)))"
    assert score(gold, "(TOP (NP (NN a)) (VP (VB b)))") == (3, 2, 2)
    s = sentence_score(tree(gold), tree("(TOP (NP (NN a)) (VP (VB b)))"))
    assert (s.precision, round(s.recall, 2)) == (100.0, 66.67)  # exact: whole counts
    assert score(gold, "(TOP (S (NP (NN a)) (VP (VB b))))") == (3, 3, 3)


def test_function_tags_and_indices_are_stripped_before_comparing():
    gold = "(S (NP-SBJ-1 (NN a)) (VP (VB b) (PP-LOC=2 (IN c) (NP (NN d)))))"
    assert score(gold, "(S (NP (NN a)) (VP (VB b) (PP (IN c) (NP (NN d)))))") == (5, 5, 5)
    assert score(gold, "(S (NX (NN a)) (VP (VB b) (PP (IN c) (NP (NN d)))))") == (5, 5, 4)


def test_ADVP_and_PRT_are_one_label():
    gold = "(S (NP (PRP he)) (VP (VBD gave) (PRT (RP up))))"
    assert score(gold, "(S (NP (PRP he)) (VP (VBD gave) (ADVP (RP up))))") == (4, 4, 4)
    assert score(gold, "(S (NP (PRP he)) (VP (VBD gave) (ADJP (RP up))))") == (4, 4, 3)


def test_a_bracket_left_with_no_word_is_removed():
    gold = "(S (NP (NN a)) (VP (VB b)) (PRN (, ,) (: --)))"
    assert score(gold, "(S (NP (NN a)) (VP (VB b)) (, ,) (: --))") == (3, 3, 3)
    assert all(start < end for _, start, end in brackets(tree(gold))[1])


def test_a_bracket_twice_in_the_gold_tree_matches_once_if_the_parse_has_it_once():
    gold, test = "(S (NP (NP (NN a))) (VP (VB b)))", "(S (NP (NN a)) (VP (VB b)))"
    assert brackets(tree(gold))[1][("NP", 0, 1)] == 2
    assert score(gold, test) == (4, 3, 3)  # the NP 0-1 bracket: recall 1/2
    s = sentence_score(tree(gold), tree(test))
    assert (s.precision, s.recall) == (100.0, 75.0)  # exact: 100 * 3 / 3, 100 * 3 / 4


def test_a_bracket_twice_in_the_parse_matches_once_if_the_gold_tree_has_it_once():
    gold, test = "(S (NP (NN a)) (VP (VB b)))", "(S (NP (NP (NN a))) (VP (VB b)))"
    assert score(gold, test) == (3, 4, 3)
    s = sentence_score(tree(gold), tree(test))
    assert (s.precision, s.recall) == (75.0, 100.0)  # exact: 100 * 3 / 4, 100 * 3 / 3


def counts(s: BracketScore) -> tuple[int, int, int, int]:
    "(sentences, gold brackets, the parses', matched) of a summary."
    return s.sentences, s.gold, s.test, s.matched


def flat(words: int, extra: str = "") -> str:
    "(S (NP w0 ... w(n-1)) (VP (VB v)) EXTRA): `words` + 1 words before EXTRA's."
    return f"(S (NP {' '.join(f'(NN w{i})' for i in range(words))}) (VP (VB v)){extra})"


def test_the_second_summary_counts_sentences_of_at_most_40_words():
    goods = [
        flat(39, " (. .)"),  # 41 words, the full stop counted: out of the second summary
        flat(39, " (NP (-NONE- *))"),  # 40 words, the trace not counted: in it
        "(S (NP (NN a)) (VP (VB b)))",  # 2 words: in it
    ]
    golds = [tree(g) for g in goods]
    assert [length(g) for g in golds] == [41, 40, 2]
    # the parses: the long one gets none of its three brackets, the others all of theirs
    tests = [
        tree(flat(39, " (. .)").replace("(S (NP", "(X (Y").replace("(VP", "(Z")),
        tree(flat(39)),
        tree("(S (NP (NN a)) (VP (VB b)))"),
    ]
    scores = evalb(golds, tests)
    assert counts(scores.all) == (3, 9, 9, 6)
    assert counts(scores.short) == (2, 6, 6, 6)
    assert scores.short.f1 == 100.0 and round(scores.all.f1, 2) == 66.67  # exact: whole counts
    assert str(scores).startswith("all: 3 sentences, P 66.67 R 66.67 F1 66.67 | <= 40 words: 2")


def test_the_summaries_sum_counts_not_sentence_scores():
    golds = [tree("(S (NN a))"), tree("(S (NP (NN a) (NN b)) (VP (VB c) (NN d)))")]
    tests = [tree("(S (NN a))"), tree("(X (Y (NN a)) (Z (NN b) (VB c) (NN d)))")]
    scores = evalb(golds, tests)
    assert counts(scores.all) == (2, 4, 4, 1)
    # 25, where the mean of the sentences' F1 (100 and 0) would be 50
    # exact: 100 * 1 / 4, from whole counts
    assert (scores.all.precision, scores.all.recall, scores.all.f1) == (25.0, 25.0, 25.0)


def test_bracket_scores_add_up_and_say_zero_with_nothing_to_count():
    empty = BracketScore(0, 0, 0, 0)
    assert (empty.precision, empty.recall, empty.f1) == (0.0, 0.0, 0.0)  # exact: nothing counted
    total = BracketScore(1, 4, 3, 3) + BracketScore(2, 5, 6, 1)
    assert total == BracketScore(3, 9, 9, 4)


def test_a_parse_over_other_words_is_refused_naming_the_sentence():
    golds = [tree("(S (NN a) (NN b))"), tree("(S (NN c) (NN d))")]
    tests = [tree("(S (NN a) (NN b))"), tree("(S (NN c) (NN e))")]
    with pytest.raises(ValueError, match=r"^sentence 2: the parse's words are not the gold tree"):
        evalb(golds, tests)


def test_parses_of_another_count_than_the_gold_trees_are_refused():
    with pytest.raises(ValueError, match="^2 gold trees but 1 parses$"):
        evalb([tree("(S (NN a))")] * 2, [tree("(S (NN a))")])


# ------------------------------------------------------------------------ finding the treebank
def write_files(folder: Path, texts: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        (folder / name).write_text(text)
    return folder


FILES = {"wsj_0001.mrg": FILE_A, "wsj_0199.mrg": FILE_B}
EXPECTED = {1: FILE_A, 199: FILE_B}


def zipped(path: Path, inside: str = "treebank/combined/") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as package:
        for name, text in FILES.items():
            package.writestr(inside + name, text)
        package.writestr("treebank/parsed/wsj_0001.prd", "not a tree")
        package.writestr("treebank/README", "hello")
    return path


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    "$TREEBANK_DIR unset and nltk looking in an empty folder of the test's own."
    monkeypatch.delenv("TREEBANK_DIR", raising=False)
    nowhere = tmp_path / "nltk_data"
    monkeypatch.setattr(nltk.data, "path", [str(nowhere)])
    return nowhere


def test_the_treebank_is_read_from_a_folder_of_mrg_files(tmp_path, no_env):
    folder = write_files(tmp_path / "tb", {**FILES, "wsj_0001.pos": "x", "README": "y"})
    assert treebank_texts(folder) == EXPECTED
    assert treebank_texts(str(folder)) == EXPECTED


@pytest.mark.parametrize("under", ["combined", "treebank/combined"])
def test_the_treebank_is_read_from_combined_under_the_folder(tmp_path, no_env, under):
    write_files(tmp_path / "tb" / under, FILES)
    assert treebank_texts(tmp_path / "tb") == EXPECTED


def test_the_treebank_is_read_from_its_zip_or_a_folder_holding_it(tmp_path, no_env):
    package = zipped(tmp_path / "tb" / "treebank.zip")
    assert treebank_texts(package) == EXPECTED
    assert treebank_texts(tmp_path / "tb") == EXPECTED


def test_TREEBANK_DIR_names_the_folder_and_a_given_folder_wins(tmp_path, no_env, monkeypatch):
    folder = write_files(tmp_path / "tb", FILES)
    monkeypatch.setenv("TREEBANK_DIR", str(folder))
    assert treebank_texts() == EXPECTED
    other = write_files(tmp_path / "other", {"wsj_0002.mrg": FILE_B})
    assert treebank_texts(other) == {2: FILE_B}


def test_the_treebank_is_found_in_nltks_data_folders(tmp_path, no_env):
    write_files(no_env / "corpora" / "treebank" / "combined", FILES)
    assert treebank_texts() == EXPECTED


def test_the_treebank_is_found_as_nltks_downloader_leaves_it(tmp_path, no_env):
    zipped(no_env / "corpora" / "treebank.zip")
    assert treebank_texts() == EXPECTED


def test_a_folder_without_the_treebank_is_refused_naming_it(tmp_path, no_env, monkeypatch):
    folder = write_files(tmp_path / "empty", {"wsj_1.mrg": FILE_A, "notes.txt": "x"})
    with pytest.raises(ChoiceError, match=f"^{folder}: no treebank files"):
        treebank_texts(folder)
    monkeypatch.setenv("TREEBANK_DIR", str(tmp_path / "missing"))
    with pytest.raises(ChoiceError, match=f"^{tmp_path / 'missing'}: no treebank files"):
        treebank_texts()


def test_no_treebank_anywhere_is_refused_saying_how_to_get_it(no_env):
    with pytest.raises(ChoiceError) as error:
        treebank_texts()
    assert "python -m nltk.downloader treebank" in str(error.value)
    assert "--data-dir" in str(error.value) and "$TREEBANK_DIR" in str(error.value)


# ------------------------------------------------------------------------ the split, the corpus
ONE = "( (S (NP (NN {0})) (VP (VB {0}s)) (. .)) )\n"
SPLIT_TEXTS = {n: ONE.format(f"w{n}") for n in (1, 2, 159, 160, 179, 180, 199, 200)}


def test_split_trees_take_each_splits_files_in_order():
    words = {s: [t.leaves()[0] for t in split_trees(SPLIT_TEXTS, s)] for s in SPLIT_FILES}
    assert words == {"train": ["w1", "w2", "w159"], "val": ["w160", "w179"],
                     "test": ["w180", "w199"]}  # fmt: skip
    # cleaned, the trace-only tree dropped
    trees = split_trees({1: FILE_A + FILE_B}, "train")
    assert [line(t) for t in trees] == CLEAN_A + [c for c in CLEAN_B if c]


def test_a_split_without_files_is_refused():
    with pytest.raises(ChoiceError, match="none of the val files, wsj_0160 to 0179"):
        split_trees({1: ONE.format("a"), 180: ONE.format("b")}, "val")
    with pytest.raises(ChoiceError, match="split 'dev'"):
        split_trees(SPLIT_TEXTS, "dev")


def test_an_unbalanced_file_is_refused_naming_it():
    with pytest.raises(ValueError, match="^wsj_0002.mrg: 1 bracket"):
        split_trees({1: ONE.format("a"), 2: "( (S (NN b) )"}, "train")


def write_treebank(folder: Path, texts: dict[int, str]) -> Path:
    return write_files(folder, {f"wsj_{n:04d}.mrg": text for n, text in texts.items()})


def test_the_treebank_corpus_pairs_words_with_linearized_trees(tmp_path, no_env):
    folder = write_treebank(tmp_path / "tb", {**SPLIT_TEXTS, 1: FILE_A})
    corpus = Treebank(folder)
    pairs = corpus.pairs("train")
    assert pairs[0] == (
        "The board was expected to meet on Monday .",
        "(S (NP XX XX )NP (VP XX (VP XX (S (VP XX (VP XX (PP XX (NP XX )NP )PP )VP )VP )S )VP )VP"
        " XX )S",
    )
    assert len(pairs) == 4 and pairs[-1] == ("w159 w159s .", "(S (NP XX )NP (VP XX )VP XX )S")
    assert corpus.pairs("test") == [
        (f"w{n} w{n}s .", "(S (NP XX )NP (VP XX )VP XX )S") for n in (180, 199)
    ]
    assert [line(t) for t in corpus.trees("val")] == [
        f"(S (NP (NN w{n})) (VP (VB w{n}s)) (. .))" for n in (160, 179)
    ]


def test_the_corpus_is_what_open_corpus_gives_and_is_tested_on_test(tmp_path, no_env):
    folder = write_treebank(tmp_path / "tb", SPLIT_TEXTS)
    corpus = data.open_corpus("treebank", folder)
    assert isinstance(corpus, Treebank) and corpus.data_dir == folder
    assert corpus.test_splits == ("test",) and corpus.name == "treebank"
    assert data.CORPORA["treebank"] is Treebank
    assert corpus.pairs("test") == Treebank(folder).pairs("test")


def test_the_treebank_runs_tokenizers_split_at_spaces():
    tokenizers = data.word_tokenizers("treebank", ("de", "en"))
    assert len(tokenizers) == 2 and all(isinstance(t, SpaceTokenizer) for t in tokenizers)


def test_the_origin_changes_with_a_training_or_validation_file_only(tmp_path, no_env):
    folder = write_treebank(tmp_path / "tb", SPLIT_TEXTS)
    corpus = Treebank(folder)
    first = corpus.origin()
    assert list(first) == ["treebank"] and len(first["treebank"]) == 64
    write_treebank(folder, {199: ONE.format("changed")})  # a test file
    assert corpus.origin() == first
    write_treebank(folder, {2: ONE.format("changed")})  # a training file
    second = corpus.origin()
    assert second != first
    write_treebank(folder, {179: ONE.format("changed")})  # a validation file
    assert corpus.origin() != second


def test_the_origin_changes_when_a_tree_moves_from_training_to_validation(tmp_path, no_env):
    "The same text in other files is other pairs in each split: the origin must tell them apart."
    a, b, c = (ONE.format(word) for word in "abc")
    before = write_treebank(tmp_path / "before", {159: a + b, 160: c})
    after = write_treebank(tmp_path / "after", {159: a, 160: b + c})
    assert Treebank(before).pairs("train") != Treebank(after).pairs("train")
    assert Treebank(before).origin() != Treebank(after).origin()


def test_the_space_tokenizer_splits_and_joins_at_spaces():
    tokenizer = SpaceTokenizer()
    assert tokenizer.tokenize(["(S (NP XX )NP )S", "  a  b ", ""]) == [
        ["(S", "(NP", "XX", ")NP", ")S"],
        ["a", "b"],
        [],
    ]
    text = "The cat -LRB- sat -RRB- ."
    assert tokenizer.detokenize(tokenizer.tokenize([text])[0]) == text
    with pytest.raises(TypeError, match=r"a list of texts, not one text"):
        tokenizer.tokenize("a b")


# ------------------------------------------------------------------ the baseline, how it is shown
def test_right_branching_on_one_two_and_three_words():
    assert line(right_branching(["a"])) == "(S (XX a))"
    assert line(right_branching(["a", "b"])) == "(S (XX a) (NP (XX b)))"
    assert line(right_branching(["a", "b", "c"])) == "(S (XX a) (NP (XX b) (NP (XX c))))"
    assert line(right_branching(["a", "b"], root="X", inside="Y")) == "(X (XX a) (Y (XX b)))"
    words = [f"w{i}" for i in range(9)]
    assert right_branching(words).leaves() == words and right_branching(words).height() == 11


def test_right_branching_scores_hand_the_gold_tags_to_the_baseline():
    gold = tree("(S (NP (DT the) (NN cat)) (VP (VBD sat)) (. .))")
    # the baseline (S the (NP cat (NP sat (NP .)))) with the gold tags: S 0-3, NP 1-3, NP 2-3
    # (the NP over the full stop is emptied); the gold tree: S 0-3, NP 0-2, VP 2-3
    scores = right_branching_scores([gold, gold])
    assert counts(scores.scores.all) == (2, 6, 6, 2)
    assert scores.well_formed == 100.0  # exact: 100 * 2 / 2
    assert (  # exact: whole counts
        round(scores.to_dict()["all"]["f1"], 2) == 33.33
        and scores.to_dict()["short"]["sentences"] == 2
    )


def test_with_tags_replaces_the_tags_of_a_copy():
    t = tree("(S (NP (XX the) (XX cat)) (XX .))")
    tagged = with_tags(t, ["DT", "NN", "."])
    assert line(tagged) == "(S (NP (DT the) (NN cat)) (. .))"
    assert tags(t) == [XX, XX, XX]


def test_show_tree_on_one_line_and_drawn():
    t = clean(read_trees(FILE_A)[1])
    shown = show_tree(t)
    assert shown == CLEAN_A[1] and "\n" not in shown
    assert Tree.fromstring(shown) == t
    drawn = show_tree(t, pretty=True)
    assert len(drawn.splitlines()) > 5
    assert all(word in drawn for word in t.leaves())
    drawn_a = show_tree(clean(read_trees(FILE_A)[0]), pretty=True)
    assert all(word in drawn_a for word in ["The", "board", "was", "expected", "Monday"])


def test_a_delinearized_parse_is_shown_as_the_tree_it_holds():
    parse = Delinearized(right_branching(["a", "b"]), True, 2)
    assert show_tree(parse.tree) == "(S (XX a) (NP (XX b)))"


@pytest.mark.parametrize(
    "tokens, slots, counted",
    [
        ("(S XX XX XX )S", 3, 100.0),  # one XX per word
        (
            "(S XX XX )S",
            2,
            0.0,
        ),  # a word without a slot: the repair gives it one, the count says so
        ("(S XX XX XX XX )S", 4, 0.0),  # an XX too many, dropped by the repair
    ],
)
def test_the_slots_written_are_counted_before_the_repair(tokens, slots, counted):
    gold = tree("(S (DT the) (NN cat) (VBD sat))")
    parse = delinearize(tokens.split(), gold.leaves())
    assert parse.slots == slots and parse.tree.leaves() == gold.leaves()
    assert score_parses([gold], [parse]).one_slot_per_word == counted


# ------------------------------------------------------------------ 6. the search that writes trees
TREE_TOKENS = ["<s>", "</s>", "<blank>", "<unk>", XX, "(S", ")S", "(NP", ")NP", "(VP", ")VP", "(PP"]


def walk(grammar, words, room, seed: int) -> list[list[str]]:
    """Each row's tokens, chosen at random among the allowed ones until </s>, the rows reordered
    at random after every step (as a beam search reorders them); asserts the mask never empties."""
    g = torch.Generator().manual_seed(seed)
    rows = len(words)
    state, written = grammar.start(words, room), [[] for _ in range(rows)]
    while not all(w and w[-1] == "</s>" for w in written):
        mask = grammar.allowed(state)
        assert mask.any(dim=1).all(), "a row with no allowed token"
        choice = torch.multinomial(mask.float(), 1, generator=g).squeeze(1)
        for w, c in zip(written, choice.tolist()):
            if not (w and w[-1] == "</s>"):
                w.append(TREE_TOKENS[c])
        grammar.advance(state, choice)
        order = torch.randperm(rows, generator=g)
        state.select(order)
        written = [written[i] for i in order]
        words, room = words[order], room[order]
    return [w[:-1] for w in written], words.tolist(), room.tolist()


@pytest.mark.parametrize("seed", range(5))
def test_every_walk_the_grammar_allows_is_a_tree_over_the_words(seed: int) -> None:
    grammar = TreeGrammar(TREE_TOKENS, end=1)
    g = torch.Generator().manual_seed(100 + seed)
    words = torch.randint(0, 12, (200,), generator=g)
    room = words + 3 + torch.randint(0, 20, (200,), generator=g)
    for out, n, r in zip(*walk(grammar, words, room, seed)):
        sentence = [f"w{i}" for i in range(n)]
        back = delinearize(out, sentence)
        assert back.tree.leaves() == sentence and back.slots == n, out
        assert back.well_formed or n == 0, out  # no word: no tree, and nothing written
        assert len(out) + 1 <= r  # </s> included, within the room
        assert "(PP" not in out  # its closing bracket is not in the vocabulary


def test_the_grammar_allows_exactly_the_next_steps_of_a_tree() -> None:
    grammar = TreeGrammar(TREE_TOKENS, end=1)
    state = grammar.start(torch.tensor([2, 0]), torch.tensor([9, 5]))

    def allowed(row: int) -> set[str]:
        return {t for t, ok in zip(TREE_TOKENS, grammar.allowed(state)[row].tolist()) if ok}

    opens = {"(S", "(NP", "(VP"}
    assert allowed(0) == opens and allowed(1) == {"</s>"}  # no word: nothing to write
    for token, expected in [
        ("(S", {XX} | opens),  # the root open: not closed while empty
        ("(NP", {XX} | opens),
        (XX, {XX, ")NP"} | opens),  # only the innermost's closing bracket
        (")NP", {XX} | opens),  # the root is not closed before every word is placed
        (XX, {")S"}),  # every word placed: no XX, no new constituent
        (")S", {"</s>"}),  # one tree
    ]:
        grammar.advance(state, torch.tensor([TREE_TOKENS.index(token), 1]))
        assert allowed(0) == expected, token


def test_the_grammar_keeps_room_to_finish() -> None:
    grammar = TreeGrammar(TREE_TOKENS, end=1)
    state = grammar.start(torch.tensor([1]), torch.tensor([4]))  # (S XX )S </s>: no room for more
    for token, expected in [
        ("(S", {"(S", "(NP", "(VP"}),
        (XX, {XX}),
        (")S", {")S"}),
        ("</s>", {"</s>"}),
    ]:
        allowed = {t for t, ok in zip(TREE_TOKENS, grammar.allowed(state)[0].tolist()) if ok}
        assert allowed == expected, token
        grammar.advance(state, torch.tensor([TREE_TOKENS.index(token)]))
    with pytest.raises(ChoiceError, match="a tree over 5 words takes 8 tokens, and 7 are allowed"):
        grammar.start(torch.tensor([5]), torch.tensor([7]))
