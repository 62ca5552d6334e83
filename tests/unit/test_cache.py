"""KV cache commit and rollback (``lookahead.step.cache``) against recomputing the committed text.

After each step only the accepted path's entries stay, in order: every layer must hold what a
from-scratch prefill of the committed tokens holds (sliding layers: the same recent stretch),
also when a step's path is longer than the sliding window (then the kept nodes' logits equal a
from-scratch forward's too). The batch moves put every row's kept entries where the decoder
says among left padding and holes.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from torch.overrides import TorchFunctionMode
from transformers.cache_utils import DynamicCache

from lookahead.classic import classic_layout
from lookahead.step.cache import commit, commit_rows, gather_rows, held_from, prepare_cache, trim_rows
from lookahead.step.mask import StepMask, attention_groups
from lookahead.verify.tree import GuessTree

from tiny_models import SLIDING, SLIDING_FAMILIES, VOCAB, assert_cache_matches_recompute, fresh_cache, tiny_model

tokens = st.integers(3, VOCAB - 1)


class CacheMachine(RuleBasedStateMachine):
    """Each step feeds a random guess tree, keeps one random root-to-node path, commits it.

    Invariant: every layer holds exactly the entries a from-scratch prefill of the committed
    tokens holds (sliding layers: the same recent stretch).
    """

    @initialize(
        family=st.sampled_from(["llama", "mistral", "qwen2", "gemma2"]), prompt=st.lists(tokens, min_size=1, max_size=6)
    )
    def setup(self, family, prompt):
        self.model = tiny_model(family, "eager")
        self.committed = list(prompt)
        self.cache = fresh_cache(self.model, prompt)
        prepare_cache(self.cache)
        windows, self.index = attention_groups(self.model, self.cache)
        self.mask = StepMask(windows, torch.float32, "cpu")

    @rule(root=tokens, cands=st.lists(st.lists(tokens, min_size=3, max_size=3), max_size=4), data=st.data())
    def step(self, root, cands, data):
        past = len(self.committed)
        cand_arr = np.array(cands, dtype=np.int64).reshape(-1, 3)
        tree = GuessTree.build(cand_arr)
        sizes = {name: (held_from(self.cache.layers[i], past), past) for name, i in self.index.items()}
        offsets, mask = self.mask.build(tree.layout(), sizes, torch.ones(past, dtype=torch.bool))
        ids = torch.tensor([[root] + tree.tokens.tolist()])
        with torch.no_grad():
            self.model(
                input_ids=ids,
                position_ids=(past + offsets)[None],
                attention_mask=mask,
                cache=self.cache,
                use_cache=True,
            )
        path, node = [0], 0
        while True:
            kids = [1 + d for d in range(tree.size) if tree.parents[d] == node]
            if not kids or not data.draw(st.booleans()):
                break
            node = data.draw(st.sampled_from(kids))
            path.append(node)
        commit(self.cache, past, ids.shape[1], path)
        self.committed += [root] + [int(tree.tokens[n - 1]) for n in path[1:]]

    @invariant()
    def matches_recompute(self):
        if not hasattr(self, "cache"):
            return
        assert_cache_matches_recompute(self.cache, self.model, self.committed)


TestCacheMachine = CacheMachine.TestCase


class OpLog(TorchFunctionMode):
    """The names of the torch functions and tensor methods called while active."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def step_cache(layers: int, length: int) -> DynamicCache:
    cache = DynamicCache()
    for layer in range(layers):
        cache.update(torch.randn(1, 2, length, 4), torch.randn(1, 2, length, 4), layer)
    return cache


def test_a_contiguous_keep_moves_nothing():
    """When the kept nodes are the step's first k (plain steps, a path down the chain), the
    entries already sit where they belong: ``commit`` only cuts, it copies nothing."""
    cache = step_cache(2, 5 + 4)
    before = [layer.keys.clone() for layer in cache.layers]
    with OpLog() as log:
        commit(cache, 5, 4, [0, 1])
    assert "index_select" not in log.names and "__setitem__" not in log.names
    for layer, keys in zip(cache.layers, before):
        assert torch.equal(layer.keys, keys[:, :, :7])
    cache = step_cache(2, 5 + 4)
    with OpLog() as log:  # a keep with a gap does copy
        commit(cache, 5, 4, [0, 2])
    assert "index_select" in log.names


def test_commit_skips_layers_the_model_never_wrote():
    """A layer without entries (a model that writes fewer layers than the cache has) is left
    alone, and the layers after it are still committed."""
    cache = DynamicCache()
    keys = torch.randn(1, 2, 9, 4)
    cache.update(keys, keys, 0)
    cache.update(keys, keys, 2)  # layer 1 stays empty
    assert not cache.layers[1].is_initialized
    commit(cache, 5, 4, [0, 2, 3])
    expected = torch.cat([keys[:, :, :5], keys[:, :, [5, 7, 8]]], dim=2)
    assert torch.equal(cache.layers[0].keys, expected) and torch.equal(cache.layers[2].keys, expected)
    assert not cache.layers[1].is_initialized


class LongStepMachine(RuleBasedStateMachine):
    """Each step feeds ``[root | Jacobi window | trie of guesses longer than SLIDING]``,
    keeps the path to one node (often a deep one) and commits it.

    After each step the kept nodes' logits equal a from-scratch forward's at those positions
    (this sees the mask of every layer, the last one included), and every cache layer holds
    what a from-scratch prefill of the committed tokens holds (sliding layers: the same
    recent stretch).
    """

    @initialize(family=st.sampled_from(SLIDING_FAMILIES), prompt=st.lists(tokens, min_size=1, max_size=12))
    def setup(self, family, prompt):
        self.model = tiny_model(family, "eager")
        self.committed = list(prompt)
        self.cache = fresh_cache(self.model, prompt)
        prepare_cache(self.cache)
        self.windows, self.index = attention_groups(self.model, self.cache)

    @rule(
        root=tokens,
        levels=st.integers(1, 2),
        chain=st.lists(tokens, max_size=SLIDING + 2),
        cands=st.lists(st.lists(tokens, min_size=SLIDING + 1, max_size=SLIDING + 5), min_size=1, max_size=3),
        data=st.data(),
    )
    def step(self, root, levels, chain, cands, data):
        width, past = len(chain), len(self.committed)
        upper = [data.draw(st.lists(tokens, min_size=width, max_size=width)) for _ in range(levels - 1)]
        rows = ([chain] if chain else []) + cands  # the window's level 0 is the trie's first row
        m = max(len(c) for c in rows)
        tree = GuessTree.build(np.array([c + [-1] * (m - len(c)) for c in rows], dtype=np.int64))
        layout = classic_layout(tree, levels, width)
        step_mask = StepMask(self.windows, torch.float32, "cpu")
        sizes = {name: (held_from(self.cache.layers[i], past), past) for name, i in self.index.items()}
        offsets, mask = step_mask.build(layout, sizes, torch.ones(past, dtype=torch.bool))
        ids = torch.tensor([[root] + tree.tokens.tolist() + [t for row in upper for t in row]])
        with torch.no_grad():
            logits = self.model(
                input_ids=ids,
                position_ids=(past + offsets)[None],
                attention_mask=mask,
                cache=self.cache,
                use_cache=True,
            ).logits[0]

        nodes = list(range(1 + tree.size))
        deepest = max(nodes, key=lambda n: int(tree.depths[n - 1]) if n else 0)
        target = data.draw(st.one_of(st.just(deepest), st.sampled_from(nodes)))
        path = [target]
        while path[-1] != 0:
            path.append(int(tree.parents[path[-1] - 1]))
        path.reverse()
        commit(self.cache, past, ids.shape[1], path)
        self.committed += [int(ids[0, n]) for n in path]

        with torch.no_grad():
            full = self.model(input_ids=torch.tensor([self.committed])).logits[0]
        torch.testing.assert_close(logits[path], full[-len(path) :], rtol=1e-4, atol=1e-4)

    @invariant()
    def matches_recompute(self):
        if not hasattr(self, "cache"):
            return
        assert_cache_matches_recompute(self.cache, self.model, self.committed)


# 5 steps of at most 1 + (SLIDING + 2) + (SLIDING + 5) kept tokens stay within 256 positions
TestLongStepMachine = LongStepMachine.TestCase


TestLongStepMachine.settings = settings(stateful_step_count=5)


def random_cache(rows: int, length: int, layers: int = 2) -> DynamicCache:
    cache = DynamicCache()
    for layer in range(layers):
        cache.update(torch.randn(rows, 2, length, 3), torch.randn(rows, 2, length, 3), layer)
    return cache


def entries(cache: DynamicCache) -> list:
    """Per layer, keys and values as nested lists ``[row][position][head][dim]``."""
    return [[t.permute(0, 2, 1, 3).tolist() for t in (layer.keys, layer.values)] for layer in cache.layers]


@given(rows=st.integers(1, 4), past_len=st.integers(0, 5), step=st.integers(1, 6), data=st.data())
def test_commit_rows_moves_each_row_s_kept_entries(rows, past_len, step, data):
    """Row r keeps step entries ``keep[r]`` (any indices, repeats allowed: holes repeat one)."""
    m = data.draw(st.integers(1, step))
    keep = data.draw(st.lists(st.lists(st.integers(0, step - 1), min_size=m, max_size=m), min_size=rows, max_size=rows))
    cache = random_cache(rows, past_len + step)
    before = entries(cache)
    commit_rows(cache, past_len, torch.tensor(keep))
    expected = [
        [[row[:past_len] + [row[past_len + k] for k in kept] for row, kept in zip(t, keep)] for t in layer]
        for layer in before
    ]
    assert entries(cache) == expected


@given(rows=st.integers(1, 4), length=st.integers(1, 8), data=st.data())
def test_trim_and_gather_rows(rows, length, data):
    cut = data.draw(st.integers(0, length))
    cache = random_cache(rows, length)
    before = entries(cache)
    trim_rows(cache, cut)
    assert entries(cache) == [[[row[:cut] for row in t] for t in layer] for layer in before]
    cache = random_cache(rows, length)
    before = entries(cache)
    size = data.draw(st.integers(0, length))
    index = data.draw(
        st.lists(st.lists(st.integers(0, length - 1), min_size=size, max_size=size), min_size=rows, max_size=rows)
    )
    gather_rows(cache, torch.tensor(index, dtype=torch.long).reshape(rows, size))
    assert entries(cache) == [
        [[[row[i] for i in idx] for row, idx in zip(t, index)] for t in layer] for layer in before
    ]
