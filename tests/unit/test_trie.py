"""The guess trie: ``kernels.merge_trie`` against a plain-Python trie, and the walk down it.

``merge_trie`` folds the window's level 0 (a chain from the root) and rows of guesses into one
trie, so guesses sharing a prefix share its nodes and each shared token is fed (and paid for)
once. A merge that grafts a guess onto the wrong node keeps the output exact (verification
still only accepts what the model says) but quietly loses most accepted tokens, so nothing
but a direct check sees it: every guess must be a root path, equal edges must be one node,
and the node count must be the minimum.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from lookahead.sampling.rule import Pick
from lookahead.verify import kernels
from lookahead.verify.rules import walk
from lookahead.verify.tree import GuessTree

# A small alphabet makes shared prefixes (and shared tokens under different parents) common.
small = st.integers(0, 3)


def reference_trie(chain, rows, base):
    """The trie built the obvious way: ``{(parent, token): node}`` and the new nodes in order.

    Node 0 is the root, ``1 + i`` the chain's i-th token, ``base + d`` the d-th new node; a
    row ends at its first negative token."""
    edges = {(i, int(tok)): i + 1 for i, tok in enumerate(chain)}
    nodes = []  # (token, parent) of each new node, in creation order
    for row in rows:
        cur = 0
        for tok in row:
            if tok < 0:
                break
            nxt = edges.get((cur, int(tok)))
            if nxt is None:
                nxt = base + len(nodes)
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
    """``(chain, cands, n_cands, base)`` as the decoder passes them: a chain of W tokens, a
    window of ``levels * W`` cells before the drafts, rows of different lengths padded with
    -1 (sometimes with junk after the -1, which must be ignored), and possibly rows past
    ``n_cands`` that must be ignored too."""
    width = draw(st.integers(0, 5))
    chain = np.array(draw(st.lists(small, min_size=width, max_size=width)), dtype=np.int64)
    levels = draw(st.integers(1, 3))
    base = 1 + levels * width
    m = draw(st.integers(1, 6))
    rows = []
    for _ in range(draw(st.integers(0, 7))):
        length = draw(st.integers(0, m))
        row = draw(st.lists(small, min_size=length, max_size=length)) + [-1] * (m - length)
        if length + 1 < m and draw(st.booleans()):
            row[length + 1] = draw(small)  # junk after the terminator
        rows.append(row)
    cands = np.array(rows, dtype=np.int64).reshape(len(rows), m)
    n_cands = draw(st.integers(0, len(rows)))
    return chain, cands, n_cands, base


@given(trie_inputs())
def test_merge_trie_equals_the_reference_trie(inputs):
    """Same nodes, in the same order, with the same parents: so also the same (minimal) count."""
    chain, cands, n_cands, base = inputs
    tokens, parents, depths, anchors, attend = kernels.merge_trie(chain, cands, n_cands, base)
    _, nodes = reference_trie(chain, cands[:n_cands].tolist(), base)
    assert list(zip(tokens.tolist(), parents.tolist())) == nodes
    assert tokens.shape == parents.shape == depths.shape == anchors.shape == (len(nodes),)
    assert attend.shape == (len(nodes), len(nodes))
    # the types GuessTree documents (and the mask builder's torch.from_numpy relies on)
    assert tokens.dtype == parents.dtype == depths.dtype == anchors.dtype == np.int64
    assert attend.dtype == np.bool_


@given(trie_inputs())
def test_every_guess_is_a_root_path_and_equal_edges_are_one_node(inputs):
    """Checked from the output alone, without the reference's node order."""
    chain, cands, n_cands, base = inputs
    tokens, parents, _, _, _ = kernels.merge_trie(chain, cands, n_cands, base)
    width, t = chain.shape[0], tokens.shape[0]
    edges = [(i, int(tok), i + 1) for i, tok in enumerate(chain)]
    edges += [(int(p), int(tok), base + d) for d, (p, tok) in enumerate(zip(parents, tokens))]
    # one node per (parent, token): shared prefixes share nodes, with the chain too
    assert len({(p, tok) for p, tok, _ in edges}) == len(edges)
    kids = {(p, tok): node for p, tok, node in edges}
    # every parent is the root, a chain node or an earlier draft node
    for d, p in enumerate(parents.tolist()):
        assert 0 <= p <= width or base <= p < base + d
    # every guess is a path from the root
    prefixes = set()
    for row in cands[:n_cands].tolist():
        cur, guess = 0, guess_of(row)
        for k, tok in enumerate(guess):
            assert (cur, tok) in kids, f"guess {guess} breaks off after {k} tokens"
            cur = kids[(cur, tok)]
            prefixes.add(tuple(guess[: k + 1]))
    # minimal: one draft node per distinct guess prefix that the chain does not already hold
    on_chain = {tuple(chain[: k + 1].tolist()) for k in range(width)}
    assert t == len(prefixes - on_chain)


@given(trie_inputs())
def test_depths_anchors_and_attend_follow_the_parents(inputs):
    """``depths``: distance from the root; ``anchors``: nearest ancestor that is the root or a
    chain node; ``attend[d, e]``: e is d or one of its draft ancestors (what the mask uses)."""
    chain, cands, n_cands, base = inputs
    tokens, parents, depths, anchors, attend = kernels.merge_trie(chain, cands, n_cands, base)
    t = tokens.shape[0]

    def ancestors(d):
        """Draft ancestors of draft node d (itself included) and the first non-draft one."""
        seen, node = [], base + d
        while node >= base:
            seen.append(node - base)
            node = int(parents[node - base])
        return seen, node

    for d in range(t):
        drafts, anchor = ancestors(d)
        assert anchors[d] == anchor
        # a chain node i sits at depth i (the root at 0)
        assert depths[d] == anchor + len(drafts)
        assert set(np.flatnonzero(attend[d]).tolist()) == set(drafts)


def test_merge_trie_example():
    """The picture: chain [5, 6]; guesses [5, 7], [5, 6, 8], [6, 6] and [5, 7, 9]."""
    chain = np.array([5, 6], dtype=np.int64)
    cands = np.array([[5, 7, -1], [5, 6, 8], [6, 6, -1], [5, 7, 9]], dtype=np.int64)
    base = 1 + 2 * 2  # two levels of two columns
    tokens, parents, depths, anchors, attend = kernels.merge_trie(chain, cands, 4, base)
    # 7 under chain node 1 (token 5); 8 under chain node 2; 6 under the root, then 6 under it;
    # 9 under the first new node (7)
    assert tokens.tolist() == [7, 8, 6, 6, 9]
    assert parents.tolist() == [1, 2, 0, base + 2, base + 0]
    assert depths.tolist() == [2, 3, 1, 2, 3]
    assert anchors.tolist() == [1, 2, 0, 0, 1]
    assert attend.astype(int).tolist() == [
        [1, 0, 0, 0, 0],
        [0, 1, 0, 0, 0],
        [0, 0, 1, 0, 0],
        [0, 0, 1, 1, 0],
        [1, 0, 0, 0, 1],
    ]


@given(trie_inputs())
def test_guess_tree_children_cover_chain_and_drafts(inputs):
    """``GuessTree.children`` is the reference trie's edge map (the walk follows it)."""
    chain, cands, n_cands, base = inputs
    tree = GuessTree.build(chain, base, cands[:n_cands])
    edges, nodes = reference_trie(chain, cands[:n_cands].tolist(), base)
    assert tree.children() == edges
    assert tree.size == len(nodes)
    assert tree.base == base and tree.chain.tolist() == chain.tolist()


def test_guess_tree_without_guesses_is_the_chain():
    chain = np.array([4, 9, 4], dtype=np.int64)
    for cands in (None, np.zeros((0, 3), dtype=np.int64)):
        tree = GuessTree.build(chain, 4, cands)
        assert tree.size == 0 and tree.attend.shape == (0, 0)
        assert tree.children() == {(0, 4): 1, (1, 9): 2, (2, 4): 3}


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
    chain, cands, n_cands, base = inputs
    tree = GuessTree.build(chain, base, cands[:n_cands])
    edges, _ = reference_trie(chain, cands[:n_cands].tolist(), base)
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
    """``kernels.greedy_path`` (the walk when every pick is the node's fetched argmax) visits
    the nodes ``walk`` visits with a rule that picks those argmaxes; picks are scripted to
    follow the trie to a drawn node, so paths go deep."""
    chain, cands, n_cands, base = inputs
    tree = GuessTree.build(chain, base, cands[:n_cands])
    edges, _ = reference_trie(chain, cands[:n_cands].tolist(), base)
    parent_of = {child: (parent, tok) for (parent, tok), child in edges.items()}
    target = data.draw(st.sampled_from([0] + sorted(parent_of)))
    q = base + tree.size
    preds = np.array(data.draw(st.lists(st.integers(0, 4), min_size=q, max_size=q)), dtype=np.int64)
    node = target
    while node:
        parent, tok = parent_of[node]
        preds[parent] = tok
        node = parent
    out = np.empty(1 + len(chain) + tree.size, dtype=np.int64)
    n = kernels.greedy_path(tree.chain, tree.base, tree.tokens, tree.parents, preds, out)
    walked = [node for node, _ in walk(tree, ScriptedRule(dict(enumerate(preds.tolist()))), lambda: None)]
    assert out[:n].tolist() == walked and target in walked
