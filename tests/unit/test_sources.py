"""The guess sources behind their one interface (``drafts.source``): what each proposes, in
which bins, and what it learns; ties included. Verification keeps outputs exact whatever a
source guesses, so these pin the choices each source's docstring promises."""

import numpy as np
import torch
from transformers import (
    LogitsProcessorList,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import lookahead
from lookahead.drafts.budget import DraftBudget
from lookahead.drafts.copy_drafter import CopyDrafter
from lookahead.drafts.jacobi import WindowSource, moved_on
from lookahead.drafts.planner import sources_for
from lookahead.drafts.pool import NgramPool, PoolSource
from lookahead.drafts.source import Bin, Context, Outcome
from lookahead.drafts.successors import SuccessorSource, SuccessorTable
from lookahead.sampling.guess import NoiseRace
from lookahead.step.costmodel import CostCurve
from lookahead.step.proposer import Proposer
from lookahead.step.sequence import TokenSequence
from lookahead.verify.rules import GreedyRule
from lookahead.verify.tree import GuessTree

from tiny_models import recycle

ROWS = np.zeros((0, 0), dtype=np.int64)


def tree(rows):
    return GuessTree.build(np.asarray(rows, dtype=np.int64) if rows else None)


def text(*tokens):
    return np.asarray(tokens, dtype=np.int64)


# the window


def test_the_deepest_branch_of_a_tie_is_the_first_child_s():
    guesses = tree([[7, 8], [6, 5]])
    kids = guesses.children()
    assert guesses.branches(0, 4).tolist() == [[kids[(0, 7)], kids[(kids[(0, 7)], 8)]]]
    swapped = tree([[6, 5], [7, 8]])
    kids = swapped.children()
    assert swapped.branches(0, 4).tolist() == [[kids[(0, 6)], kids[(kids[(0, 6)], 5)]]]


def test_children_are_ranked_likeliest_first_the_first_of_a_tie_first():
    guesses = tree([[2], [1], [3], [4]])  # the root's children, tokens 2, 1, 3, 4 in tree order
    scores = np.array([0.0, 2.0, 1.0, 2.0, 1.0], dtype=np.float32)
    firsts = guesses.branches(0, 1, scores, most=4)[:, 0]
    assert guesses.tokens[firsts - 1].tolist() == [1, 3, 2, 4]


def test_the_window_keeps_a_row_per_fed_sibling_likeliest_first_up_to_its_most():
    """After a step whose root fed children 7 and 6 (each with a branch below) and whose walk
    accepted none of them, the rows are the picks after each child's branch, the likeliest
    child's first, at most ``most`` of them, ``depth`` tokens each."""
    guesses = tree([[7, 8, 9], [6, 5, -1], [4, -1, -1]])
    kids = guesses.children()
    seven, six, four = kids[(0, 7)], kids[(0, 6)], kids[(0, 4)]
    picks = lambda nodes: [100 + v for v in nodes]  # noqa: E731
    scores = np.zeros(10, dtype=np.float32)
    scores[[7, 6, 4]] = [1.0, 3.0, 2.0]
    rank = lambda node: scores  # noqa: E731
    source = WindowSource(depth=2, most=2)
    source.learn(Outcome(text(1, 2, 3), 1, guesses, [0], picks, rank))
    eight = kids[(seven, 8)]
    five = kids[(six, 5)]
    assert source.propose(Context(text(1, 2, 3))) == [source.rows]
    assert source.rows.tolist() == [[100 + six, 100 + five], [100 + four, -1]]
    source = WindowSource(depth=3, most=1)
    source.learn(Outcome(text(1, 2, 3), 1, guesses, [0], picks, rank))
    assert source.rows.tolist() == [[100 + six, 100 + five]]
    source = WindowSource(depth=3, most=3)  # without a rank: the deepest branch alone
    source.learn(Outcome(text(1, 2, 3), 1, guesses, [0], picks, None))
    assert source.rows.tolist() == [[100 + seven, 100 + eight, 100 + kids[(eight, 9)]]]


def test_without_a_branch_the_old_first_row_moves_on_and_each_row_is_scored():
    """With no branch to read, the first row moves on past the appended tokens; the budget
    scores the window's first guessed token at every step that had a row, fed or not."""
    source = WindowSource(depth=3, most=2)
    budget = DraftBudget(8, CostCurve.linear(1.0), 0.0, source.bins, 3)  # dear: nothing is fed
    source.rows = np.array([[4, 5, 6], [9, 9, 9]], dtype=np.int64)
    leaf = tree([])
    steps = [(text(1, 2, 4), 1, [[5, 6]]), (text(1, 2, 4, 7, 8), 2, []), (text(1, 2, 4, 7, 8, 3), 1, [])]
    scored = []
    for after, accepted, left in steps:  # 4 held; 5 did not (nothing left); no row: nothing scored
        assert budget.plan([], [(0, source.rows)] if source.rows.size else [])[0].shape[0] == 0
        budget.learn(after[-accepted:])
        scored.append((budget.window_seen[0], budget.window_held[0]))
        source.learn(Outcome(after, accepted, leaf, list(range(accepted)), lambda nodes: nodes))
        assert source.rows.tolist() == left
    assert scored == [(1, 1), (2, 1), (2, 1)]
    assert moved_on(np.array([[4, -1]]), 1).shape == (0, 0)


def test_a_full_first_row_is_filed_under_the_root_alone():
    filed = []

    class Pool:
        def insert(self, ngrams, before=None):
            filed.append((np.asarray(ngrams).tolist(), before))

    guesses = tree([[7, 8], [6, -1]])
    rank = lambda node: np.zeros(10, dtype=np.float32)  # noqa: E731  (a tie: the tree's order)
    source = WindowSource(depth=2, most=2, pool=Pool())
    source.learn(Outcome(text(1, 2, 3), 1, guesses, [0], lambda nodes: [50 + v for v in nodes], rank))
    kids = guesses.children()
    seven, eight = kids[(0, 7)], kids[(kids[(0, 7)], 8)]
    assert filed == [([[3, 50 + seven, 50 + eight]], None)]
    source.learn(Outcome(text(1, 2, 3, 6), 1, tree([[6, -1]]), [0], lambda nodes: [9 for _ in nodes], rank))
    assert len(filed) == 1  # a row shorter than depth is no n-gram


# the pool, the successors, the copy guess


def test_the_pool_proposes_the_pair_s_rows_then_the_key_s_in_two_bins():
    pool = NgramPool(3, 2, context_tokens=2)
    pool.insert(np.array([[5, 6, 7]]), np.array([4]))  # after the pair (4, 5)
    pool.insert(np.array([[5, 8, 9]]))  # after 5 alone
    stats = lookahead.LookaheadStats()
    source = PoolSource(pool, stats, file_text=True)
    pair, key = source.propose(Context(text(4, 5)))
    assert pair.tolist() == [[6, 7]] and [8, 9] in key.tolist() and len(source.bins) == 2
    assert (stats.pool_lookups, stats.pool_hits) == (1, 1)
    assert [row.size for row in source.propose(Context(text(3, 11)))] == [0, 0] and stats.pool_hits == 1
    source.learn(Outcome(text(1, 2, 3, 4), 1, None, [0], None))
    assert pool.lookup(2).tolist() == [[3, 4]] and pool.lookup(1).size == 0  # only n-grams that end in new tokens


def test_the_successors_first_row_learns_apart_from_the_others():
    table = SuccessorTable(8, 3, 2)
    logits = torch.full((2, 8), -10.0)
    logits[0, 4], logits[0, 6], logits[0, 2] = 3.0, 2.0, 1.0
    logits[1, 5] = 1.0
    recycle(table, torch.tensor([3, 4]), logits)
    first, rest = SuccessorSource(table).propose(Context(text(1, 3)))
    assert first.tolist() == [[4, 5]] and rest[:, 0].tolist() == [6, 2]


def test_the_copy_guess_proposes_its_scored_tree():
    drafter = CopyDrafter(8, 4, 0.1)
    context = Context(text(1, 2, 3, 4, 1, 2))
    tokens, parents, probs, match = drafter.propose(context)
    assert drafter.scored and drafter.bins == ()
    assert tokens.tolist()[:2] == [3, 4] and parents.tolist()[:2] == [-1, 0] and match == 2
    assert drafter.rows(context.text)[0].tolist()[:2] == [3, 4]


# the proposer: a list of sources the budget prices alike


class Echo:
    """A source that always guesses the same row, learning in one bin of its own."""

    name = "echo"
    scored = False
    bins = (Bin("echo", 0.9, 0.9),)
    top_k = 0
    reads_noise = False

    def __init__(self):
        self.learnt = []

    def propose(self, context):
        return [np.array([[21, 22, 23]], dtype=np.int64)]

    def learn(self, outcome):
        self.learnt.append(outcome.accepted)


def seeded_proposer(config, extra=()):
    """A row's proposer over ``config``'s sources and ``extra`` ones, for a vocabulary of 32."""
    stats, kept = lookahead.LookaheadStats(), lookahead.KeptState()
    proposer = Proposer(config, GreedyRule(None, keep_rows=False), stats, kept, costs=CostCurve.linear(0.05))
    proposer.sources = sources_for(config, kept, stats, 32) + list(extra)
    proposer.planner = proposer._planner()
    return proposer, stats


def test_the_budget_s_bins_follow_the_sources_the_window_first():
    config = lookahead.LookaheadConfig(successors=2)
    proposer, _ = seeded_proposer(config)
    assert [source.name for source in proposer.sources] == ["window", "pool", "successors", "copy"]
    names = [b.name for b in proposer.planner.budget.row_sources]
    assert names == ["window", "pool", "pool", "successors", "successors"]


def test_an_added_source_is_priced_fed_and_taught_like_any_other():
    config = lookahead.LookaheadConfig(window=0, guesses=0, successors=0, copy_length=0)
    echo = Echo()
    proposer, _ = seeded_proposer(config, [echo])
    seq = TokenSequence(torch.tensor([[1, 2, 3]]), [], None, lookahead.LookaheadStats(), False, False)
    plan = proposer.plan(seq)
    assert plan.tokens == [3, 21, 22, 23] and plan.origins == ("echo",)
    logits = torch.zeros(4, 32)
    for node, token in enumerate([21, 22, 23, 24]):
        logits[node, token] = 1.0
    assert proposer.verify(seq, plan, logits, logits.argmax(-1).numpy()) == [0, 1, 2, 3]
    assert seq.tokens[3:] == [21, 22, 23, 24] and echo.learnt == [4]


# the guess race: the nucleus edge and ties split by it, as generate's warpers have them


def exact(logits, noise, processors):
    scores = processors(torch.zeros(1, 1, dtype=torch.long), logits.clone())
    return int((torch.softmax(scores, dim=-1) / noise).argmax())


def warped(warper) -> LogitsProcessorList:
    """``generate``'s sampling list at T = 1 with one more warper."""
    return LogitsProcessorList([TemperatureLogitsWarper(1.0), warper])


def assert_races_agree(logits, processors, favourites) -> int:
    """Each of ``favourites`` in turn gets the smallest noise, so the race's pick shows whether
    its support holds it: the guess race picks what ``generate``'s race picks. Returns the
    last pick."""
    for favourite in favourites:
        noise = torch.ones(logits.shape)
        noise[0, favourite] = 1e-9
        want = exact(logits, noise, processors)
        assert NoiseRace.of(processors).picks(logits, [0], noise).tolist() == [want], favourite
    return want


def test_the_race_s_nucleus_ends_where_generate_s_does_ties_included():
    """Probabilities 0.4, 0.3, 0.3 and top-p 0.6: ``generate`` keeps 0.4 and the later of the
    two tied 0.3s (the cut falls inside the tie); each token in turn gets the smallest noise,
    so the race's pick shows which tokens its nucleus holds."""
    logits = torch.log(torch.tensor([[0.4, 0.3, 0.3, 1e-4]]))
    for top_p in (0.4, 0.6, 0.7, 0.99):
        assert_races_agree(
            logits, LogitsProcessorList([TemperatureLogitsWarper(1.0), TopPLogitsWarper(top_p)]), range(4)
        )


def test_the_race_s_min_p_edge_is_generate_s():
    logits = torch.log(torch.tensor([[0.5, 0.1, 0.1, 0.3]]))
    for min_p in (0.2, 0.21, 0.19):
        assert_races_agree(
            logits, LogitsProcessorList([TemperatureLogitsWarper(1.0), MinPLogitsWarper(min_p)]), range(4)
        )


def test_the_race_s_top_k_keeps_every_token_tied_with_its_k_th():
    logits = torch.log(torch.tensor([[0.4, 0.3, 0.3, 1e-4]]))
    for top_k in (1, 2, 3):
        assert_races_agree(
            logits, LogitsProcessorList([TemperatureLogitsWarper(1.0), TopKLogitsWarper(top_k)]), range(4)
        )


def test_the_race_past_the_slice_cuts_a_tie_as_generate_s_top_p_does():
    """A row wider than the raced slice: 64 tokens of 0.0125 each (0.8 in all), then two tied
    at 0.01 past them, the rest far below. Top-p 0.805 keeps the later of the two only."""
    probs = torch.full((200,), 0.18 / 134)
    probs[:64], probs[[70, 150]] = 0.0125, 0.01
    logits = torch.log(probs)[None]
    processors = warped(TopPLogitsWarper(0.805))
    assert assert_races_agree(logits, processors, (70, 150, 3)) == 3
    assert exact(logits, torch.ones(1, 200).index_fill_(1, torch.tensor([150]), 1e-9), processors) == 150
