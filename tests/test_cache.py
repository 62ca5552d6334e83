"""KV commit and rollback against recomputing the committed text from scratch."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from torch.overrides import TorchFunctionMode
from transformers.cache_utils import DynamicCache

from lookahead.cache import commit, held_from, prepare_cache
from lookahead.decode import attention_groups
from lookahead.mask import StepMask
from lookahead.tree import GuessTree
from tiny_models import VOCAB, assert_cache_matches_recompute, fresh_cache, tiny_model

tokens = st.integers(3, VOCAB - 1)


class CacheMachine(RuleBasedStateMachine):
    """Each step feeds a random guess tree, keeps one random root-to-node path, commits it.

    Invariant: every layer holds exactly the entries a from-scratch prefill of the committed
    tokens holds (sliding layers: the same recent stretch).
    """

    @initialize(family=st.sampled_from(["llama", "mistral", "qwen2", "gemma2"]),
                prompt=st.lists(tokens, min_size=1, max_size=6))
    def setup(self, family, prompt):
        self.model = tiny_model(family, "eager")
        self.committed = list(prompt)
        self.cache = fresh_cache(self.model, prompt)
        prepare_cache(self.cache)
        windows, self.index = attention_groups(self.model, self.cache)
        self.mask = StepMask(1, 0, windows, torch.float32, "cpu")

    @rule(root=tokens, cands=st.lists(st.lists(tokens, min_size=3, max_size=3), max_size=4), data=st.data())
    def step(self, root, cands, data):
        past = len(self.committed)
        cand_arr = np.array(cands, dtype=np.int64).reshape(-1, 3)
        tree = GuessTree.build(np.zeros(0, dtype=np.int64), 1, cand_arr)
        sizes = {name: (held_from(self.cache.layers[i], past), past) for name, i in self.index.items()}
        offsets, mask = self.mask.build(tree, sizes, torch.ones(past, dtype=torch.bool))
        ids = torch.tensor([[root] + tree.tokens.tolist()])
        with torch.no_grad():
            self.model(input_ids=ids, position_ids=(past + offsets)[None], attention_mask=mask,
                       cache=self.cache, use_cache=True)
        path, node = [0], 0
        while True:
            kids = [tree.base + d for d in range(tree.size) if tree.parents[d] == node]
            if not kids or not data.draw(st.booleans()):
                break
            node = data.draw(st.sampled_from(kids))
            path.append(node)
        commit(self.cache, past, ids.shape[1], torch.tensor(path))
        self.committed += [root] + [int(tree.tokens[n - tree.base]) for n in path[1:]]

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
        commit(cache, 5, 4, torch.tensor([0, 1]))
    assert "index_select" not in log.names and "__setitem__" not in log.names
    for layer, keys in zip(cache.layers, before):
        assert torch.equal(layer.keys, keys[:, :, :7])
    cache = step_cache(2, 5 + 4)
    with OpLog() as log:  # a keep with a gap does copy
        commit(cache, 5, 4, torch.tensor([0, 2]))
    assert "index_select" in log.names


def test_commit_skips_layers_the_model_never_wrote():
    """A layer without entries (a model that writes fewer layers than the cache has) is left
    alone, and the layers after it are still committed."""
    cache = DynamicCache()
    keys = torch.randn(1, 2, 9, 4)
    cache.update(keys, keys, 0)
    cache.update(keys, keys, 2)  # layer 1 stays empty
    assert not cache.layers[1].is_initialized
    commit(cache, 5, 4, torch.tensor([0, 2, 3]))
    expected = torch.cat([keys[:, :, :5], keys[:, :, [5, 7, 8]]], dim=2)
    assert torch.equal(cache.layers[0].keys, expected) and torch.equal(cache.layers[2].keys, expected)
    assert not cache.layers[1].is_initialized
