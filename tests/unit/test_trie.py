"""The guess trie: ``kernels.merge_trie`` against a plain-Python trie, and the walk down it.

``merge_trie`` folds rows of guesses (the classic window's level 0 among them) into one trie,
so guesses sharing a prefix share its nodes and each shared token is fed (and paid for) once.
A merge that grafts a guess onto the wrong node keeps the output exact (verification still
only accepts what the model says) but quietly loses most accepted tokens, so nothing but a
direct check sees it: every guess must be a root path, equal edges must be one node, and the
node count must be the minimum.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from lookahead.sampling.rule import Pick
from lookahead.verify import kernels
from lookahead.verify.rules import walk
from lookahead.verify.tree import ROOT_ONLY, GuessTree

# A small alphabet makes shared prefixes (and shared tokens under different parents) common.
small = st.integers(0, 3)


def reference_trie(rows):
    """The trie built the obvious way: ``{(parent, token): node}`` and the new nodes in order.

    Node 0 is the root, ``1 + d`` the d-th new node; a row ends at its first negative token."""
    edges = {}
    nodes = []  # (token, parent) of each new node, in creation order
    for row in rows:
        cur = 0
        for tok in row:
            if tok < 0:
                break
            nxt = edges.get((cur, int(tok)))
            if nxt is None:
                nxt = 1 + len(nodes)
                nodes.append((int(tok), cur))
                edges[(cur, int(tok))] = nxt
            cur = nxt
    return edges, nodes


def guess_of(row):
    """A row's guess: its tokens up to the first negative one."""
    out = []
    for tok in row:
        if tok < 0:
            break
        out.append(int(tok))
    return out


@st.composite
def trie_inputs(draw):
    """``(cands, n_cands)`` as the proposers pass them: rows of different lengths padded with
    -1 (sometimes with junk after the -1, which must be ignored), and possibly rows past
    ``n_cands`` that must be ignored too."""
    m = draw(st.integers(1, 6))
    rows = []
    for _ in range(draw(st.integers(0, 8))):
        length = draw(st.integers(0, m))
        row = draw(st.lists(small, min_size=length, max_size=length)) + [-1] * (m - length)
        if length + 1 < m and draw(st.booleans()):
            row[length + 1] = draw(small)  # junk after the terminator
        rows.append(row)
    cands = np.array(rows, dtype=np.int64).reshape(len(rows), m)
    return cands, draw(st.integers(0, len(rows)))


@given(trie_inputs())
def test_merge_trie_equals_the_reference_trie(inputs):
    """Same nodes, in the same order, with the same parents: so also the same (minimal) count."""
    cands, n_cands = inputs
    tokens, parents, depths, attend = kernels.merge_trie(cands, n_cands)
    _, nodes = reference_trie(cands[:n_cands].tolist())
    assert list(zip(tokens.tolist(), parents.tolist())) == nodes
    assert tokens.shape == parents.shape == depths.shape == (len(nodes),)
    assert attend.shape == (len(nodes), len(nodes))
    # the types GuessTree documents (and the mask builder's torch.as_tensor relies on)
    assert tokens.dtype == parents.dtype == depths.dtype == np.int64
    assert attend.dtype == np.bool_


@given(trie_inputs())
def test_every_guess_is_a_root_path_and_equal_edges_are_one_node(inputs):
    """Checked from the output alone, without the reference's node order."""
    cands, n_cands = inputs
    tokens, parents, _, _ = kernels.merge_trie(cands, n_cands)
    edges = [(int(p), int(tok), 1 + d) for d, (p, tok) in enumerate(zip(parents, tokens))]
    # one node per (parent, token): shared prefixes share nodes
    assert len({(p, tok) for p, tok, _ in edges}) == len(edges)
    kids = {(p, tok): node for p, tok, node in edges}
    # every parent is the root or an earlier node
    for d, p in enumerate(parents.tolist()):
        assert 0 <= p <= d
    # every guess is a path from the root
    prefixes = set()
    for row in cands[:n_cands].tolist():
        cur, guess = 0, guess_of(row)
        for k, tok in enumerate(guess):
            assert (cur, tok) in kids, f"guess {guess} breaks off after {k} tokens"
            cur = kids[(cur, tok)]
            prefixes.add(tuple(guess[: k + 1]))
    # minimal: one node per distinct guess prefix
    assert tokens.shape[0] == len(prefixes)


@given(trie_inputs())
def test_depths_and_attend_follow_the_parents(inputs):
    """``depths``: distance from the root; ``attend[d, e]``: e is d or one of its ancestors
    (what the mask uses)."""
    cands, n_cands = inputs
    tokens, parents, depths, attend = kernels.merge_trie(cands, n_cands)
    for d in range(tokens.shape[0]):
        seen, node = [], 1 + d
        while node:
            seen.append(node - 1)
            node = int(parents[node - 1])
        assert depths[d] == len(seen)
        assert set(np.flatnonzero(attend[d]).tolist()) == set(seen)


def test_merge_trie_example():
    """The picture: guesses [5, 6] (a classic window's level 0), [5, 7], [5, 6, 8], [6, 6] and
    [5, 7, 9]."""
    cands = np.array([[5, 6, -1], [5, 7, -1], [5, 6, 8], [6, 6, -1], [5, 7, 9]], dtype=np.int64)
    tokens, parents, depths, attend = kernels.merge_trie(cands, 5)
    # 5 and 6 the first row; 7 a second child of 5; 8 under the first row's 6; 6 under the
    # root, then 6 under it; 9 under 7
    assert tokens.tolist() == [5, 6, 7, 8, 6, 6, 9]
    assert parents.tolist() == [0, 1, 1, 2, 0, 5, 3]
    assert depths.tolist() == [1, 2, 2, 3, 1, 2, 3]
    assert attend.astype(int).tolist() == [
        [1, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0],
        [1, 0, 1, 0, 0, 0, 0],
        [1, 1, 0, 1, 0, 0, 0],
        [0, 0, 0, 0, 1, 0, 0],
        [0, 0, 0, 0, 1, 1, 0],
        [1, 0, 1, 0, 0, 0, 1],
    ]
    offsets, allowed = GuessTree.build(cands).layout()
    assert offsets.tolist() == [0, 1, 2, 2, 3, 1, 2, 3]
    assert allowed[:, 0].all() and allowed[1:, 1:].tolist() == attend.tolist()


@given(trie_inputs())
def test_guess_tree_children_are_the_reference_edges(inputs):
    """``GuessTree.children`` is the reference trie's edge map (the walk follows it)."""
    cands, n_cands = inputs
    tree = GuessTree.build(cands[:n_cands])
    edges, nodes = reference_trie(cands[:n_cands].tolist())
    assert tree.children() == edges
    assert tree.size == len(nodes)


def test_guess_tree_without_guesses_is_the_root_alone():
    for cands in (None, np.zeros((0, 3), dtype=np.int64)):
        tree = GuessTree.build(cands)
        assert tree.size == 0 and tree.attend.shape == (0, 0) and tree.children() == {}
        assert [a.tolist() for a in tree.layout()] == [[0], [[True]]]
    assert ROOT_ONLY.size == 0 and ROOT_ONLY.children() == {}


class ScriptedRule:
    """A verification rule that picks ``script[node]`` and records what it was shown."""

    def __init__(self, script):
        self.script = script
        self.calls = []

    def __call__(self, node, sequence, children):
        self.calls.append((node, sequence, sorted(children)))
        return Pick(self.script.get(node, 99), None, None)


@given(trie_inputs(), st.data())
def test_walk_follows_the_rule_down_the_trie(inputs, data):
    """The walk visits the root, then the child carrying each picked token, and stops at the
    first pick no child carries; every node visited yields its pick, and the rule sees each
    node's children and the sequence as it is at that moment. The rule is scripted to follow
    the path to a drawn node and then pick at random, so walks go deep."""
    cands, n_cands = inputs
    tree = GuessTree.build(cands[:n_cands])
    edges, _ = reference_trie(cands[:n_cands].tolist())
    parent_of = {child: (parent, tok) for (parent, tok), child in edges.items()}
    target = data.draw(st.sampled_from([0] + sorted(parent_of)))
    script = {}
    node = target
    while node:
        parent, tok = parent_of[node]
        script[parent] = tok
        node = parent
    for node in [0] + sorted(parent_of):
        script.setdefault(node, data.draw(st.integers(0, 4)))  # 4 is never a child's token
    expected, node = [0], 0
    while (node, script[node]) in edges:
        node = edges[(node, script[node])]
        expected.append(node)
    assert target in expected
    rule, appended = ScriptedRule(script), []
    for node, pick in walk(tree, rule, lambda: list(appended)):
        assert pick.token == script[node]
        appended.append(pick.token)
    assert [n for n, _, _ in rule.calls] == expected
    for k, (node, sequence, children) in enumerate(rule.calls):
        assert sequence == [script[n] for n in expected[:k]]
        assert children == sorted(tok for (p, tok) in edges if p == node)


def test_walk_without_a_tree_picks_once():
    rule = ScriptedRule({0: 5})
    assert [(n, p.token) for n, p in walk(None, rule, lambda: "seq")] == [(0, 5)]
    assert rule.calls == [(0, "seq", [])]


@given(trie_inputs(), st.data())
def test_greedy_path_is_the_walk_of_the_argmax(inputs, data):
    """``GuessTree.greedy_path`` (the walk when every pick is the node's fetched argmax, in one
    kernel) visits the nodes ``walk`` visits with a rule that picks those argmaxes; picks are
    scripted to follow the trie to a drawn node, so paths go deep."""
    cands, n_cands = inputs
    tree = GuessTree.build(cands[:n_cands])
    edges, _ = reference_trie(cands[:n_cands].tolist())
    parent_of = {child: (parent, tok) for (parent, tok), child in edges.items()}
    target = data.draw(st.sampled_from([0] + sorted(parent_of)))
    q = 1 + tree.size
    preds = np.array(data.draw(st.lists(st.integers(0, 4), min_size=q, max_size=q)), dtype=np.int64)
    node = target
    while node:
        parent, tok = parent_of[node]
        preds[parent] = tok
        node = parent
    walked = [node for node, _ in walk(tree, ScriptedRule(dict(enumerate(preds.tolist()))), lambda: None)]
    assert tree.greedy_path(preds) == walked and target in walked
