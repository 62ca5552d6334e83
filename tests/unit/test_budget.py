"""The draft budget (``lookahead.drafts.budget``) against plain Python: rows merged into the copy
tree, the nodes a step feeds (the most tokens per unit of cost, always a tree), what each bin
learns from a step, and the whole budget's choice under dear and nearly free forwards."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead.drafts import budget_kernels as budget
from lookahead.drafts.budget import KEPT_WEIGHT, RATIO_PRIOR, DraftBudget
from lookahead.drafts.budget_kernels import CONTEXT_PRIORS, COPY_BINS, SHARE_BINS
from lookahead.drafts.source import Bin
from lookahead.step.costmodel import CostCurve

tokens = st.integers(0, 5)


@st.composite
def trees(draw, max_nodes=12):
    """A tree with parents before children: ``(tokens, parents)``, siblings' tokens distinct."""
    n = draw(st.integers(0, max_nodes))
    toks, parents = [], []
    for i in range(n):
        par = draw(st.integers(-1, i - 1))
        taken = {t for t, p in zip(toks, parents) if p == par}
        free = [t for t in range(6) if t not in taken]
        if not free:
            break
        toks.append(draw(st.sampled_from(free)))
        parents.append(par)
    return np.array(toks, dtype=np.int64), np.array(parents, dtype=np.int64)


def paths(toks, parents) -> dict[tuple[int, ...], int]:
    """Each node's root-to-node token path."""
    out = {}
    for i in range(len(toks)):
        node, path = i, []
        while node >= 0:
            path.append(int(toks[node]))
            node = int(parents[node])
        out[tuple(reversed(path))] = i
    return out


@settings(max_examples=200)
@given(tree=trees(), rows=st.lists(st.lists(tokens, min_size=1, max_size=4), max_size=3), data=st.data())
def test_merge_rows_adds_each_row_as_a_path(tree, rows, data):
    """After the merge every earlier node and every row prefix is a path; an earlier node on a
    row's path keeps its own bin, takes the better of its chance and the row's shared bin's,
    and learns into that shared bin too (``also``); new nodes learn into the bin of the first
    row that made them, and no other (a later row of the same source through them changes
    nothing)."""
    toks, parents = tree
    n = len(toks)
    cap = n + 4 * len(rows)
    t, p = np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64)
    cond, bins, rates, also = np.empty(cap), np.empty(cap, dtype=np.int64), np.empty(cap), np.empty(cap, dtype=np.int64)
    t[:n], p[:n], bins[:n], rates[:n], also[:n] = toks, parents, 0, 0.5, -1
    cond[:n] = data.draw(st.lists(st.floats(0, 1), min_size=n, max_size=n)) if n else []
    before = cond[:n].copy()
    chances = np.linspace(0.1, 0.9, COPY_BINS + 8)
    shared = 4  # a row bin's shared twin sits 4 bins on
    grid = np.full((len(rows), 4), -1, dtype=np.int64)
    for r, row in enumerate(rows):
        grid[r, : len(row)] = row
    count = budget.merge_rows(grid, COPY_BINS, shared, chances, n, t, p, cond, bins, rates, also)
    got = paths(t[:count], p[:count])
    assert len(got) == count  # no path twice: shared prefixes were shared
    assert set(paths(toks, parents)) <= set(got)
    row_bins = {}
    for row in rows:
        for d in range(len(row)):
            row_bins.setdefault(tuple(row[: d + 1]), COPY_BINS + d)
    assert set(got) == set(paths(toks, parents)) | set(row_bins)
    for path, node in got.items():
        if path in row_bins:
            twin = row_bins[path] + shared
            want = max(before[node], chances[twin]) if node < n else chances[row_bins[path]]
            assert cond[node] == pytest.approx(want)
            assert bins[node] == (0 if node < n else row_bins[path])
            assert also[node] == (twin if node < n else -1)
            assert rates[node] == (0.5 if node < n else 0.0)
        else:
            assert cond[node] == before[node] and bins[node] == 0 and also[node] == -1


def reference_choice(parents, cond, costs, overhead, window=0.0):
    """Brute force: the best value over every tree (parent-closed set) of nodes, any of
    which also buys the window's guess where the likeliest candidate misses."""
    n = len(parents)
    path = []
    for i in range(n):
        path.append(cond[i] * (path[parents[i]] if parents[i] >= 0 else 1.0))
    best = 1.0
    for mask in range(1, 1 << n):
        chosen = [i for i in range(n) if mask >> i & 1]
        if len(chosen) >= len(costs) or any(parents[i] >= 0 and not mask >> parents[i] & 1 for i in chosen):
            continue
        bought = window * (1 - max(path))
        best = max(best, (1 + bought + sum(path[i] for i in chosen)) / (costs[len(chosen)] + overhead))
    return best, path


@settings(max_examples=200)
@given(
    tree=trees(max_nodes=8),
    data=st.data(),
    per_token=st.sampled_from([0.0, 0.02, 0.2, 1.0]),
    window=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
)
def test_choose_feeds_the_tree_worth_most_per_cost(tree, data, per_token, window):
    """The chosen nodes form a tree, and no tree of the candidates is worth more per cost,
    counting the window guess that any fed node buys the next step where it misses."""
    _, parents = tree
    n = len(parents)
    cond = np.array(data.draw(st.lists(st.floats(0, 1), min_size=n, max_size=n)), dtype=np.float64)
    curve = CostCurve.linear(per_token)
    costs = np.array([curve(k) for k in range(1, 8)])  # at most 6 nodes fed
    keep = np.zeros(n, dtype=np.bool_)
    fed = budget.choose(parents, cond, n, costs, 0.05, 0, window, keep) if n else 0
    assert fed == keep.sum() <= 6
    assert all(parents[i] < 0 or keep[parents[i]] for i in range(n) if keep[i])
    best, path = reference_choice(parents, cond, costs, 0.05, window)
    bought = window * (1 - max(path)) if fed else 0.0
    value = (1 + bought + sum(path[i] for i in range(n) if keep[i])) / (costs[fed] + 0.05) if fed else 1.0
    assert value == pytest.approx(best)
    # asked to fill f nodes (free ones), it feeds at least min(f, candidates, room), still a
    # tree, and never a node less likely than one it leaves out
    fill = data.draw(st.integers(0, 8))
    filled = np.zeros(n, dtype=np.bool_)
    more = budget.choose(parents, cond, n, costs, 0.05, fill, window, filled) if n else 0
    assert more == filled.sum() == max(fed, min(fill, n, 6))
    assert all(parents[i] < 0 or filled[parents[i]] for i in range(n) if filled[i])
    if more and more < n:
        assert min(path[i] for i in range(n) if filled[i]) >= max(path[i] for i in range(n) if not filled[i])


@given(tree=trees(max_nodes=8), data=st.data(), two=st.floats(0.5, 0.94))
def test_where_a_guessed_node_costs_less_than_nothing_every_step_with_a_candidate_feeds_one(tree, data, two):
    """Where two tokens (with the decoder's overhead) cost less than one, as a CPU's slow
    one-query bf16 kernel makes them, a step with any candidate never feeds its root alone,
    whatever the candidates' chances."""
    _, parents = tree
    n = len(parents)
    cond = np.array(data.draw(st.lists(st.floats(0, 1), min_size=n, max_size=n)), dtype=np.float64)
    costs = np.array([1.0, two, two + 0.1, two + 0.2])
    keep = np.zeros(n, dtype=np.bool_)
    assert budget.choose(parents, cond, n, costs, 0.05, 0, 0.0, keep) >= min(n, 1)


@settings(max_examples=200)
@given(tree=trees(), appended=st.lists(tokens, min_size=1, max_size=6))
def test_record_counts_nodes_whose_parent_held(tree, appended):
    """A node, fed or not, counts as fed in its bin (and in its ``also`` bin, where another
    source proposed it too) where its parent held (or it hangs off the root) and the step
    appended a token at its place, and as held where its path is a prefix of what the step
    appended; a copy node counted so adds its prior rate to what copies were promised. A node
    past the appended tokens is not counted: nothing says whether it held."""
    toks, parents = tree
    n = len(toks)
    size = COPY_BINS + 3
    kinds = np.array([3, SHARE_BINS + 7, COPY_BINS, COPY_BINS + 1], dtype=np.int64)  # two copy bins, two row bins
    bins = kinds[np.arange(n) % 4]
    also = np.where(np.arange(n) % 3 == 0, COPY_BINS + 2, -1)  # every third node a row shares
    rates = np.linspace(0.1, 0.9, n)
    fed, held, promised = np.zeros(size), np.zeros(size), np.zeros(1)
    budget.record(toks, parents, bins, also, rates, n, np.array(appended, dtype=np.int64), fed, held, promised)
    want_fed, want_held, want_promised = np.zeros(size), np.zeros(size), 0.0
    for path, node in paths(toks, parents).items():
        if len(path) > len(appended) or tuple(appended[: len(path) - 1]) != path[:-1]:
            continue  # no token reached it, or its parent did not hold
        for b in [bins[node]] + ([also[node]] if also[node] >= 0 else []):
            want_fed[b] += 1
            want_held[b] += tuple(appended[: len(path)]) == path
        want_promised += rates[node] if bins[node] < COPY_BINS else 0.0
    assert fed.tolist() == want_fed.tolist() and held.tolist() == want_held.tolist()
    assert promised[0] == pytest.approx(want_promised)


def chain(n: int, share: float = 1.0, match: int = 1):
    """A copy tree: one chain of n nodes, each holding ``share`` of its parent's occurrences,
    grown from a match of ``match`` tokens."""
    return (
        np.arange(10, 10 + n, dtype=np.int64),
        np.arange(-1, n - 1, dtype=np.int64),
        share ** np.arange(1, n + 1, dtype=np.float64),
        match,
    )


POOL = (("pool", 0.6, 0.9), ("pool", 0.3, 0.6))


def test_dear_forwards_feed_nothing_free_ones_the_whole_draft():
    """Under a curve that charges each fed token a forward no draft pays; over a nearly flat
    one the whole tree and every row do, each row tagged with its leaf's source."""
    rows = [(1, np.array([[40, 41, -1, -1]], dtype=np.int64))]
    dear = DraftBudget(8, CostCurve.linear(1.0), 0.0, POOL, 4)
    assert dear.plan([chain(6)], rows)[0].shape[0] == 0
    cheap = DraftBudget(8, CostCurve.linear(0.001), 0.0, POOL, 4)
    got, origins = cheap.plan([chain(6)], rows)
    assert sorted(map(tuple, got.tolist())) == [(10, 11, 12, 13, 14, 15), (40, 41, -1, -1, -1, -1)]
    assert sorted(origins) == ["copy", "pool"]


def test_bins_learn_what_held():
    """A copy share whose nodes always miss stops being fed; one whose nodes hold keeps being
    fed; a row bin that never held is no longer worth feeding; unseen bins keep their prior.
    A bin's nodes are scored at every step a token reaches them, fed or not."""
    costs = CostCurve.linear(0.05)
    plan = DraftBudget(8, costs, 0.0, POOL, 4)
    assert plan.plan([chain(3)], [])[0].shape[1] == 3
    for _ in range(30):
        plan.plan([chain(3)], [])
        plan.learn([99])  # the first node missed
    assert plan.plan([chain(3)], [])[0].shape[0] == 0
    b = SHARE_BINS - 1  # share 1.0, a context of one token
    assert plan.fed[b] == 30 and plan.held[b] == 0  # scored at every step, fed or not
    assert plan.copy_ratio < 1  # and every copy bin's prior fell with it
    assert plan.fed[5] == 0  # a half share was never seen
    rows = [(0, np.array([[40, 41, 42, 43]], dtype=np.int64))]
    for _ in range(30):
        plan.plan([None], rows)
        plan.learn([40, 41, 42, 43, 7])  # the whole row held
    assert plan.plan([None], rows)[0].tolist() == [[40, 41, 42, 43]]
    assert plan.held[COPY_BINS] == plan.fed[COPY_BINS] == 30
    missed = [(1, np.array([[50, 51]], dtype=np.int64))]
    assert plan.plan([None], missed)[0].shape[0] == 1
    for _ in range(30):
        plan.plan([None], missed)
        plan.learn([7])
    assert plan.plan([None], missed)[0].shape[0] == 0
    first_key_bin = COPY_BINS + 4
    assert plan.fed[first_key_bin] == 30 and plan.held[first_key_bin] == 0  # scored, fed or not
    assert plan.fed[first_key_bin + 1] == 0  # its second token was never reached


def test_a_copy_node_starts_from_its_share_in_its_context_group():
    """Before anything is learnt, a copy node's chance is ``CONTEXT_PRIORS[group] x share``
    times the copy ratio (at most 1), its group the one its context falls in (the match
    length plus its depth less one: groups 1, 2-3, 4-7, 8 and more), its bin that share's
    within the group; what a bin learnt outweighs its prior."""
    toks, parents, probs, _ = chain(5, 0.5)
    cond, bins, rates = np.empty(5), np.empty(5, dtype=np.int64), np.empty(5)
    fed, held = np.zeros(COPY_BINS), np.zeros(COPY_BINS)
    out_t, out_p, where, also = (np.empty(5, dtype=np.int64) for _ in range(4))

    def add(match, ratio):  # the chain's nodes become candidates 0..4, in order
        assert (
            budget.add_tree(
                toks,
                parents,
                probs,
                5,
                match,
                0,
                fed,
                held,
                2.0,
                ratio,
                0,
                out_t,
                out_p,
                cond,
                bins,
                rates,
                also,
                where,
            )
            == 5
        )

    add(2, 1.0)  # contexts 2-6
    want = [CONTEXT_PRIORS[1] * 0.5] * 2 + [CONTEXT_PRIORS[2] * 0.5] * 3
    assert cond.tolist() == pytest.approx(want) and rates.tolist() == pytest.approx(want)
    assert bins.tolist() == [SHARE_BINS + 5] * 2 + [2 * SHARE_BINS + 5] * 3
    add(8, 0.5)  # contexts 8-12
    assert bins.tolist() == [3 * SHARE_BINS + 5] * 5
    assert cond.tolist() == pytest.approx([CONTEXT_PRIORS[3] * 0.5 * 0.5] * 5)  # a ratio of 0.5 halves it
    add(8, 4.0)
    assert cond.tolist() == pytest.approx([1.0] * 5)  # a chance is at most 1
    fed[3 * SHARE_BINS + 5], held[3 * SHARE_BINS + 5] = 10.0, 0.0  # that bin never held
    add(8, 1.0)
    assert cond[0] == pytest.approx(2 * CONTEXT_PRIORS[3] * 0.5 / 12)


def test_the_copy_ratio_moves_every_copy_bin():
    """Where one copy bin's nodes miss, the copy ratio falls from 1 and so does the chance of
    a bin never fed; where they hold more than promised it rises."""
    costs = CostCurve.linear(0.05)
    plan = DraftBudget(8, costs, 0.0, POOL, 4)
    assert plan.copy_ratio == 1.0
    for _ in range(10):
        plan.plan([chain(1, match=8)], [])
        plan.learn([99])
    assert plan.copy_ratio == pytest.approx(RATIO_PRIOR / (RATIO_PRIOR + plan.promised[0]))
    assert plan.promised[0] == pytest.approx(CONTEXT_PRIORS[3] * plan.fed[3 * SHARE_BINS + 9])
    low = plan.copy_ratio
    plan.plan([chain(1, match=2)], [])  # an unseen bin
    chance = plan._arrays[0][4][0]
    assert chance == pytest.approx(CONTEXT_PRIORS[1] * low)
    rising = DraftBudget(8, costs, 0.0, POOL, 4)
    for _ in range(10):
        rising.plan([chain(1)], [])  # promised half a token each time
        rising.learn([10, 5])
    assert rising.copy_ratio > 1.5


def test_scaled_priors_feed_less_until_the_bins_learn():
    """Scaled by a sampling rule's low ceiling, priors no longer promise what greedy text
    held: a draft that pays at scale 1 is not fed at 0.2, and counts learnt stand unscaled."""
    costs = CostCurve.linear(0.3)
    rows = [(0, np.array([[40, 41, 42, 43]], dtype=np.int64))]
    plan = DraftBudget(8, costs, 0.0, POOL, 4)
    assert plan.plan([chain(3)], rows)[0].shape[0] > 0
    plan.scale_priors(0.2)
    assert plan.plan([chain(3)], rows)[0].shape[0] == 0
    plan.scale_priors(1.0)
    for _ in range(20):
        plan.plan([None], rows)
        plan.learn([40, 41, 42, 43, 7])
    plan.scale_priors(0.2)
    assert plan.plan([None], rows)[0].tolist() == [[40, 41, 42, 43]]


def test_refill_feeds_free_room_with_the_likeliest_nodes():
    """Where every fed token costs a forward the budget feeds nothing; a batch row padded to a
    wider row's width may fill that room for free: ``refill(n)`` chooses the n likeliest of the
    same candidates (a tree: the chain's first three, then the row's first token, likelier
    than the chain's fourth), and what it fed is what is learnt."""
    plan = DraftBudget(8, CostCurve.linear(1.0), 0.0, POOL, 4)
    rows = [(1, np.array([[40, 41, -1, -1]], dtype=np.int64))]
    assert plan.plan([chain(6)], rows)[0].shape[0] == 0
    got, origins = plan.refill(4)
    assert got.tolist() == [[10, 11, 12], [40, -1, -1]] and origins == ("copy", "pool")
    plan.learn([10, 11, 99])
    assert plan.fed[:COPY_BINS].sum() == 3 and plan.held[:COPY_BINS].sum() == 2
    assert plan.refill(100)[0].size and plan.refill(0)[0].shape[0] == 0  # capped, and back to none


WINDOW = (Bin("window", 0.25, 0.5, free=True),) + POOL


def test_a_fed_node_also_buys_the_next_step_a_window_guess():
    """Where two tokens cost a little more than one, a weak row does not pay by itself; with
    a window source any fed node also buys the next step's Jacobi guess, so it is fed while
    the window's first token holds as often as its prior says, and no longer once it was
    scored missing at many steps. The score carries to a later request, shrunk."""
    costs = CostCurve((1, 2, 4), (1.0, 1.04, 1.1))
    weak = [(2, np.array([[40, -1]], dtype=np.int64))]  # the pool's key rows, prior 0.3
    alone = DraftBudget(8, costs, 0.0, POOL, 2)
    alone.scale_priors(0.05)  # a flat sampling rule: the row's chance is 0.015
    assert alone.plan([None], [(1, weak[0][1])])[0].shape[0] == 0
    plan = DraftBudget(8, costs, 0.0, WINDOW, 2)
    plan.scale_priors(0.05)
    assert plan.window_value == pytest.approx(0.25)  # unscaled: its prior rate
    assert plan.window_worth == pytest.approx(0.25 - 0.04)  # less a second token's price
    assert plan.plan([None], weak)[0].tolist() == [[40]]
    plan.learn([7])
    for _ in range(40):
        plan.score_window(False)
    assert plan.window_value == pytest.approx(2 * 0.25 / 42)
    assert plan.plan([None], weak)[0].shape[0] == 0
    for _ in range(60):
        plan.score_window(True)
    assert plan.window_value == pytest.approx((60 + 0.5) / 102)
    later = DraftBudget(8, costs, 0.0, WINDOW, 2)
    store = {}
    plan.carry(store, "key")
    later.carry(store, "key")
    dear = DraftBudget(8, CostCurve((1, 2, 4), (1.0, 1.3, 1.35)), 0.0, WINDOW, 2)
    assert dear.window_worth == 0.0  # on a curve where a second token is dear it buys nothing
    assert later.window_seen[0] == pytest.approx(KEPT_WEIGHT)
    assert later.window_value == pytest.approx((KEPT_WEIGHT * 0.6 + 0.5) / (KEPT_WEIGHT + 2))


@settings(max_examples=200)
@given(tree=trees(max_nodes=8), data=st.data(), per_token=st.sampled_from([0.0, 0.3, 1.0]))
def test_ties_keep_a_parent_before_its_child(tree, data, per_token):
    """Chances drawn from 0, 1/2 and 1 tie all the time (a child of chance 1 ties its parent's
    path chance; chance-0 nodes tie each other): whatever number of nodes is fed, freely or
    by the budget's own choice, every fed node's parent is fed too (ties keep index order,
    and a parent comes before its children)."""
    _, parents = tree
    n = len(parents)
    cond = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=n, max_size=n)), dtype=np.float64)
    curve = CostCurve.linear(per_token)
    costs = np.array([curve(k) for k in range(1, n + 2)])
    for fill in range(n + 1):
        keep = np.zeros(n, dtype=np.bool_)
        fed = budget.choose(parents, cond, n, costs, 0.0, fill, 0.0, keep) if n else 0
        assert fed == keep.sum() >= min(fill, n)
        assert all(parents[i] < 0 or keep[parents[i]] for i in range(n) if keep[i]), (parents, cond, fill)


def test_a_tie_at_the_cut_feeds_the_parent():
    """The case a one-character slip in the insertion order (``<=`` for ``<``) gets wrong: a
    child of chance 1 ties its parent's path chance, and one node pays where two do not."""
    parents, cond = np.array([-1, 0]), np.array([0.5, 1.0])
    keep = np.zeros(2, dtype=np.bool_)
    assert budget.choose(parents, cond, 2, np.array([1.0, 1.2, 2.0]), 0.0, 0, 0.0, keep) == 1
    assert keep.tolist() == [True, False]
    plan = DraftBudget(4, CostCurve((1, 2, 3), (1.0, 1.2, 2.0)), 0.0, POOL, 2)
    plan.prior_rates[:] = 0.0  # the two depths' bins promise 0.5 and 1.0: a tie of path chances
    plan.fed[:], plan.held[:] = 0.0, 0.0
    plan.held[COPY_BINS : COPY_BINS + 2], plan.fed[COPY_BINS : COPY_BINS + 2] = [1.0, 2.0], [2.0, 2.0]
    plan.prior = 1e-9
    plan._update()
    assert plan.plan([None], [(0, np.array([[40, 41]], dtype=np.int64))])[0].tolist() == [[40]]


def test_a_node_two_sources_share_keeps_its_bin_and_learns_in_the_row_s_shared_bin():
    """A row that runs along the copy tree merges into it: the shared node keeps the copy's
    bin, takes the better of its chance and the row source's shared bin's, and learns into
    that shared bin (``4 x 2`` row bins on: the pool's two arrays at four depths)."""
    plan = DraftBudget(8, CostCurve.linear(0.01), 0.0, POOL, 4)
    rows = [(0, np.array([[10, 11, 50]], dtype=np.int64))]
    got, origins = plan.plan([chain(2)], rows)
    tokens, parents, bins, _, cond, _, also = (a[: plan._count] for a in plan._arrays[0])
    assert tokens.tolist() == [10, 11, 50] and parents.tolist() == [-1, 0, 1]
    assert bins[0] < COPY_BINS and bins[1] < COPY_BINS and bins[2] == COPY_BINS + 2
    shared = COPY_BINS + 8
    assert also.tolist() == [shared, shared + 1, -1]
    assert cond[0] == max(plan._chances[shared], CONTEXT_PRIORS[0] * 1.0)
    assert got.tolist() == [[10, 11, 50]] and origins == ("pool",)
    plan.learn([10, 11, 50, 7])
    assert plan.fed[shared : shared + 2].tolist() == plan.held[shared : shared + 2].tolist() == [1, 1]
    assert plan.fed[COPY_BINS : COPY_BINS + 3].tolist() == [0, 0, 1]  # the row's own: its node 50 alone
