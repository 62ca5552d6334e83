"""Sliding-window attention when one step accepts more tokens than the window is long.

In a sliding layer a token sees only the ``sliding_window`` newest positions, itself
included. A step feeds many tokens at once, so the step mask itself must apply the window
between the step's own tokens (not only against the cache). That only matters once a step's
path is deeper than the window, which short guesses never reach: here guesses are longer
than ``SLIDING`` and every check compares with what plain decoding computes.

Three levels:

- the step mask against a reference built from first principles (positions and ancestry);
- a cache state machine on every sliding family: steps with long guesses and a Jacobi window,
  a path kept, KV entries and the kept nodes' logits compared with a from-scratch forward;
- ``lookahead.generate`` against ``model.generate`` (tokens and logits) on text the copy
  guess predicts, with a check that some step really accepted more than ``SLIDING`` tokens,
  and on the models' own text from repetitive prompts.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from transformers import LogitsProcessor, LogitsProcessorList

import lookahead
from lookahead.cache import commit, held_from, prepare_cache
from lookahead.decode import attention_groups
from lookahead.mask import StepMask
from lookahead.tree import GuessTree
from mask_reference import reference_mask
from strategies import mask_cases
from tiny_models import CASES, SLIDING, VOCAB, assert_cache_matches_recompute, fresh_cache, tiny_model

SLIDING_FAMILIES = ("mistral", "qwen2", "qwen3", "phi3", "gemma2")
tokens = st.integers(3, VOCAB - 1)


# --- the mask --------------------------------------------------------------------------------


@given(mask_cases())
def test_step_mask_equals_the_reference(case):
    levels, width, tree, window, past_len, kv_offset, past_keep = case
    step = StepMask(levels, width, {None: window}, torch.float32, "cpu")
    offsets, mask = step.build(tree, {None: (kv_offset, past_len)}, torch.tensor(past_keep, dtype=torch.bool))
    expected = reference_mask(levels, width, tree, window, past_len, kv_offset, past_keep)
    assert mask.shape == (1, 1, *expected.shape) and mask.dtype == torch.float32
    blocked = torch.finfo(torch.float32).min
    assert torch.all((mask == 0) | (mask == blocked))
    assert ((mask[0, 0] == 0).numpy() == expected).all()
    assert offsets.tolist()[: 1 + levels * width] == [0] + [1 + i + l for l in range(levels) for i in range(width)]


@given(mask_cases(), st.integers(1, 7))
def test_hybrid_models_get_one_mask_per_layer_type(case, window):
    """Full and sliding layers (gemma2, qwen2 with max_window_layers) each get their own
    mask, over the cache stretch their layers still hold."""
    levels, width, tree, _, past_len, kv_offset, past_keep = case
    groups = {"full_attention": None, "sliding_attention": window}
    step = StepMask(levels, width, groups, torch.float32, "cpu")
    sizes = {"full_attention": (0, past_len), "sliding_attention": (kv_offset, past_len)}
    _, masks = step.build(tree, sizes, torch.tensor(past_keep, dtype=torch.bool))
    assert set(masks) == set(groups)
    for name, (offset, _) in sizes.items():
        expected = reference_mask(levels, width, tree, groups[name], past_len, offset, past_keep)
        assert ((masks[name][0, 0] == 0).numpy() == expected).all()


@given(mask_cases())
def test_step_mask_in_the_model_dtype(case):
    """A bf16 model gets a bf16 mask whose blocked entries are bf16's most negative value."""
    levels, width, tree, window, past_len, kv_offset, past_keep = case
    step = StepMask(levels, width, {None: window}, torch.bfloat16, "cpu")
    _, mask = step.build(tree, {None: (kv_offset, past_len)}, torch.tensor(past_keep, dtype=torch.bool))
    expected = reference_mask(levels, width, tree, window, past_len, kv_offset, past_keep)
    assert mask.dtype == torch.bfloat16
    assert ((mask[0, 0] == 0).numpy() == expected).all()
    assert (mask[0, 0][torch.from_numpy(~expected)] == torch.finfo(torch.bfloat16).min).all()


def test_step_mask_lives_on_the_model_device():
    """Positions and masks are built on the model's device (here torch's shape-only ``meta``
    device, which any tensor left on the CPU would clash with)."""
    tree = GuessTree.build(np.array([4, 5], dtype=np.int64), 1 + 2 * 2, np.array([[4, 6, 7], [8, -1, -1]]))
    groups = {"full_attention": None, "sliding_attention": 3}
    step = StepMask(2, 2, groups, torch.float16, "meta")
    sizes = {"full_attention": (0, 6), "sliding_attention": (4, 6)}
    offsets, masks = step.build(tree, sizes, torch.ones(6, dtype=torch.bool, device="meta"))
    q = 1 + 2 * 2 + tree.size
    assert offsets.device.type == "meta" and offsets.shape == (q,)
    for name, (kv_offset, past_len) in sizes.items():
        assert masks[name].device.type == "meta" and masks[name].dtype == torch.float16
        assert masks[name].shape == (1, 1, q, past_len - kv_offset + q)


def test_a_path_as_long_as_the_window_drops_the_root():
    """The off-by-one the reference would also catch, spelled out: at depth ``SLIDING`` the
    root is exactly ``SLIDING`` positions back, outside the window; one level up it is inside."""
    chain = np.zeros(0, dtype=np.int64)
    tree = GuessTree.build(chain, 1, np.arange(3, 3 + SLIDING, dtype=np.int64)[None])
    step = StepMask(0, 0, {None: SLIDING}, torch.float32, "cpu")
    _, mask = step.build(tree, {None: (0, 0)}, torch.zeros(0, dtype=torch.bool))
    sees_root = (mask[0, 0, :, 0] == 0).tolist()
    assert sees_root == [True] * SLIDING + [False]


# --- the cache, step by step -------------------------------------------------------------------


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

    @rule(root=tokens, levels=st.integers(1, 2), chain=st.lists(tokens, max_size=SLIDING + 2),
          cands=st.lists(st.lists(tokens, min_size=SLIDING + 1, max_size=SLIDING + 5), min_size=1, max_size=3),
          data=st.data())
    def step(self, root, levels, chain, cands, data):
        width, past = len(chain), len(self.committed)
        upper = [data.draw(st.lists(tokens, min_size=width, max_size=width)) for _ in range(levels - 1)]
        base = 1 + levels * width
        m = max(len(c) for c in cands)
        cand_arr = np.array([c + [-1] * (m - len(c)) for c in cands], dtype=np.int64)
        tree = GuessTree.build(np.array(chain, dtype=np.int64), base, cand_arr)
        step_mask = StepMask(levels, width, self.windows, torch.float32, "cpu")
        sizes = {name: (held_from(self.cache.layers[i], past), past) for name, i in self.index.items()}
        offsets, mask = step_mask.build(tree, sizes, torch.ones(past, dtype=torch.bool))
        ids = torch.tensor([[root] + chain + [t for row in upper for t in row] + tree.tokens.tolist()])
        with torch.no_grad():
            logits = self.model(input_ids=ids, position_ids=(past + offsets)[None], attention_mask=mask,
                                cache=self.cache, use_cache=True).logits[0]

        nodes = list(range(width + 1)) + [base + d for d in range(tree.size)]
        deepest = max(nodes, key=lambda n: n if n <= width else int(tree.depths[n - base]))
        target = data.draw(st.one_of(st.just(deepest), st.sampled_from(nodes)))
        path = [target]
        while path[-1] != 0:
            node = path[-1]
            path.append(node - 1 if node <= width else int(tree.parents[node - base]))
        path.reverse()
        commit(self.cache, past, ids.shape[1], torch.tensor(path))
        self.committed += [int(ids[0, n]) for n in path]

        with torch.no_grad():
            full = self.model(input_ids=torch.tensor([self.committed])).logits[0]
        torch.testing.assert_close(logits[path], full[-len(path):], rtol=1e-4, atol=1e-4)

    @invariant()
    def matches_recompute(self):
        if not hasattr(self, "cache"):
            return
        assert_cache_matches_recompute(self.cache, self.model, self.committed)


# 5 steps of at most 1 + (SLIDING + 2) + (SLIDING + 5) kept tokens stay within 256 positions
TestLongStepMachine = LongStepMachine.TestCase
TestLongStepMachine.settings = settings(stateful_step_count=5)


# --- whole generations -------------------------------------------------------------------------

# A wide window and long copy guesses: on text that repeats, single steps accept up to
# copy_length + 1 tokens, far more than SLIDING.
LONG_STEPS = lookahead.LookaheadConfig(window=16, ngram=5, guesses=8, copy_length=16, copy_match=6, adaptive=False)
SLIDING_CASES = [(family, backend) for family, backend in CASES if family in SLIDING_FAMILIES]
PERIOD = [5, 9, 14, 7, 22, 31, 40, 12, 27, 18, 33]  # 11 distinct tokens, longer than SLIDING


class Periodic(LogitsProcessor):
    """Makes greedy text continue ``PERIOD`` (a +100 bias on the next token of the pattern),
    so copy guesses hold in full whatever the random model prefers. Tokens are then forced,
    but the raw logits that ``output_logits`` reports are still the model's own, computed
    under the step's mask: they are what the comparison checks."""

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, PERIOD[input_ids.shape[1] % len(PERIOD)]] += 100.0
        return scores


def generate_both(model, ids, config, new, **extra):
    kwargs = dict(max_new_tokens=new, eos_token_id=None, pad_token_id=0, return_dict_in_generate=True,
                  output_logits=True, **extra)
    expected = model.generate(ids, do_sample=False, **kwargs)
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(model, ids, lookahead_config=config, lookahead_stats=stats, **kwargs)
    return expected, got, stats


def assert_same_generation(expected, got):
    """Same tokens, and the same logits at every position (a wrong mask shows in the logits
    even where it does not flip an argmax)."""
    assert got.sequences.tolist() == expected.sequences.tolist()
    assert len(got.logits) == len(expected.logits)
    for a, b in zip(got.logits, expected.logits):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def longest_step(stats):
    return max(k for k, n in enumerate(stats.accepted) if n)


@pytest.mark.parametrize("family,backend", SLIDING_CASES)
def test_steps_longer_than_the_window_equal_greedy(family, backend):
    model = tiny_model(family, backend)
    ids = torch.tensor([PERIOD * 3])
    processors = LogitsProcessorList([Periodic()])
    expected, got, stats = generate_both(model, ids, LONG_STEPS, 64, logits_processor=processors)
    assert expected.sequences[0, -len(PERIOD):].tolist() != [expected.sequences[0, -1].item()] * len(PERIOD)
    assert_same_generation(expected, got)
    assert longest_step(stats) > SLIDING, f"no step accepted more than the {SLIDING}-token window: {stats.accepted}"


@settings(max_examples=max(4, settings.default.max_examples // 2))
@given(family=st.sampled_from(SLIDING_FAMILIES), motif=st.lists(tokens, min_size=2, max_size=7),
       repeats=st.integers(3, 6), window=st.integers(8, 16), copy_length=st.sampled_from([10, 16, 24]))
def test_long_copied_steps_equal_greedy(family, motif, repeats, window, copy_length):
    """The model's own text on repetitive prompts (no forcing): tokens and logits."""
    model = tiny_model(family, "eager")
    config = lookahead.LookaheadConfig(window=window, ngram=4, guesses=4, copy_length=copy_length, copy_match=4,
                                       adaptive=False)
    expected, got, _ = generate_both(model, torch.tensor([motif * repeats]), config, 48)
    assert_same_generation(expected, got)
