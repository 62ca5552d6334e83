"""Tokens per forward that each guess source earns on its own: floors a lost source breaks.

Every source can fail silently: the output stays exact because every guess is verified, and
only the speed-up goes. So for each source there is a fixed case (tiny model, prompt, config
with ``method="classic"`` so that the draft budget cannot move the numbers, every other
source off) whose tokens per forward was measured, and the test asserts at least 90% of it.
Each floor is well above 1 (what a lost source gives) and, for the two sources whose bugs
were seen to pass the suite before (trie merge, window rows), a planted bug is checked to
miss the floor.

Measured with torch 2.13 on CPU, fp32 (see ``MEASURED``); if an intended change moves a
number, re-measure with ``PYTHONPATH=tests/helpers python tests/unit/test_compression.py`` and update it.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList

import lookahead
from lookahead.classic import ClassicProposer
from lookahead.verify import kernels

from tiny_models import tiny_model

MARGIN = 0.9


def only(**fields) -> lookahead.LookaheadConfig:
    """A config with every guess source off except those in ``fields``, and a fixed shape.
    (``successors`` is turned off where the config has it: a source added later with a
    default on would otherwise inflate the numbers.)"""
    off = dict(window=0, guesses=0, copy_length=0, prompt_ngrams=False, method="classic")
    if "successors" in {f.name for f in dataclasses.fields(lookahead.LookaheadConfig)}:
        off["successors"] = 0
    return lookahead.LookaheadConfig(**{**off, **fields})


# Repetitive prompts in the style of the suite's compression tests.
PROMPTS = ([4, 8, 15] * 5, [16, 23, 42, 7] * 5, [9, 9, 10, 11, 12] * 3, [5, 9, 14, 7, 22, 31] * 3)

# source -> (model family, config). Measured tokens per forward over PROMPTS, 48 new tokens
# each, torch 2.13 CPU fp32; in brackets what the planted bugs below gave.
CASES = {
    # the n-gram pool filled from the prompt and the accepted text, nothing else: 2.909
    "pool": ("gpt2", only(ngram=4, guesses=4, prompt_ngrams=True)),
    # the copy guess (prompt lookup over the text itself), nothing else: 6.621
    "copy": ("gpt2", only(copy_length=16)),
    # the Jacobi window as the only source: its n-grams reach the pool, which sees nothing else
    # (verifying level 0 alone earns about 1.0 on these models): 2.207 [rows shifted: 1.401]
    "window": ("phi", only(window=4, ngram=5, guesses=4)),
    # window level 0, copy and pool guesses merged into one trie: 3.368 [parent ignored: 2.341]
    "trie merge": ("llama", only(window=4, ngram=5, guesses=8, copy_length=16, prompt_ngrams=True)),
}
MEASURED = {"pool": 2.909, "copy": 6.621, "window": 2.207, "trie merge": 3.368}
NEW = 48


def run(name: str) -> lookahead.LookaheadStats:
    """Stats over all ``PROMPTS``, each output checked against greedy."""
    family, config = CASES[name]
    model = tiny_model(family, "sdpa")
    total = lookahead.LookaheadStats()
    kwargs = dict(max_new_tokens=NEW, eos_token_id=None, pad_token_id=0)
    for prompt in PROMPTS:
        ids = torch.tensor([prompt])
        got = lookahead.generate(model, ids, lookahead_config=config, lookahead_stats=total, **kwargs)
        assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()
    assert total.window_steps == (total.steps if config.window else 0)  # the fixed shape's level 0, every step
    return total


def compression(name: str) -> float:
    """Tokens per forward over all ``PROMPTS``."""
    return run(name).tokens_per_forward


# the sources a case may credit: its own (the window's n-grams reach the pool, and level 0
# is verified too, so the window case may credit both)
CREDITED = {"pool": {"pool"}, "copy": {"copy"}, "window": {"window", "pool"}, "trie merge": {"window", "copy", "pool"}}


@pytest.mark.parametrize("name", list(CASES))
def test_each_source_keeps_its_compression(name):
    floor = MARGIN * MEASURED[name]
    assert floor > 1.2, "a floor this low would not notice the source missing"
    stats = run(name)
    assert stats.tokens_per_forward >= floor
    # every accepted guessed token (all but the one each step and each prefill picks for
    # free) is credited, to a source that was on
    assert sum(stats.source_tokens.values()) == stats.new_tokens - stats.steps - len(PROMPTS)
    assert set(stats.source_tokens) <= CREDITED[name]


# Two-token pool keys: text in which a token's continuation depends on the token before it
# (7 follows both 5 and 6, then goes on differently), forced by a logits processor so the
# random model writes it. One pool guess per step: keyed by the last token alone, it is the
# continuation seen last, wrong half the time; keyed by the last two, it is right.
# Measured: 3.636 tokens per forward with context_tokens=2, 2.667 with context_tokens=1.
AMBIGUOUS = [5, 7, 9, 11, 13, 6, 7, 12, 14, 16]
TWO_TOKEN_MEASURED = 3.636


class Ambiguous(LogitsProcessor):
    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, AMBIGUOUS[input_ids.shape[1] % len(AMBIGUOUS)]] += 100.0
        return scores


def two_token_compression(context_tokens: int) -> float:
    model = tiny_model("llama", "sdpa")
    config = only(ngram=4, guesses=1, prompt_ngrams=True, context_tokens=context_tokens)
    ids = torch.tensor([AMBIGUOUS * 3])
    kwargs = dict(
        max_new_tokens=40, eos_token_id=None, pad_token_id=0, logits_processor=LogitsProcessorList([Ambiguous()])
    )
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(model, ids, lookahead_config=config, lookahead_stats=stats, **kwargs)
    assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()
    return stats.tokens_per_forward


def test_two_token_keys_keep_their_compression():
    assert two_token_compression(2) >= MARGIN * TWO_TOKEN_MEASURED
    assert two_token_compression(1) < MARGIN * TWO_TOKEN_MEASURED  # what the second token is worth


def test_the_counts_the_floors_read_add_up(monkeypatch):
    """Tokens per forward is new tokens over forwards: every forward is counted (the
    prefill and one per step), every step's appended tokens land in the histogram, and the
    forward time adds up over all forwards (each made to take at least 5 ms here)."""
    model = tiny_model("gpt2", "sdpa")
    forward = model.forward

    def slow_forward(*args, **kwargs):
        time.sleep(0.005)
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", slow_forward)
    stats = lookahead.LookaheadStats()
    lookahead.generate(
        model,
        torch.tensor([PROMPTS[0]]),
        max_new_tokens=30,
        eos_token_id=None,
        pad_token_id=0,
        lookahead_config=CASES["copy"][1],
        lookahead_stats=stats,
    )
    assert stats.new_tokens == 30 == 1 + sum(k * n for k, n in enumerate(stats.accepted))
    assert stats.forwards == stats.steps + 1 == sum(stats.accepted) + 1
    assert stats.forward_s >= 0.005 * stats.forwards
    assert stats.forward_s <= stats.total_s


def merge_ignoring_parent(cands, n_cands):
    """``kernels.merge_trie`` with a planted bug: a token already in the trie is reused
    wherever it hangs, so guesses get grafted onto the wrong nodes."""
    tokens, parents, depths = [], [], []
    for c in range(n_cands):
        cur = 0
        for tok in cands[c].tolist():
            if tok < 0:
                break
            # the bug: parents[d] == cur is not checked
            nxt = next((1 + d for d in range(len(tokens)) if tokens[d] == tok), -1)
            if nxt < 0:
                tokens.append(tok)
                parents.append(cur)
                depths.append(1 if cur == 0 else depths[cur - 1] + 1)
                nxt = len(tokens)
            cur = nxt
    t = len(tokens)
    attend = np.zeros((t, t), dtype=np.bool_)
    for d in range(t):
        attend[d, d] = True
        if parents[d] > 0:
            attend[d, :d] |= attend[parents[d] - 1, :d]
    as_array = lambda xs: np.array(xs, dtype=np.int64)  # noqa: E731
    return as_array(tokens), as_array(parents), as_array(depths), attend


def test_trie_merge_ignoring_the_parent_misses_the_floor(monkeypatch):
    """The test of the test: output stays exact, tokens per forward drop below the floor."""
    monkeypatch.setattr(kernels, "merge_trie", merge_ignoring_parent)
    assert compression("trie merge") < MARGIN * MEASURED["trie merge"]


def test_window_learning_from_shifted_rows_misses_the_floor(monkeypatch):
    """The test of the test: the window's predictions taken one row off; the pool then files
    n-grams of the wrong positions."""
    advance = ClassicProposer._advance_window

    def shifted(self, plan, preds, accepted, root):
        return advance(self, plan, np.roll(preds, 1), accepted, root)

    monkeypatch.setattr(ClassicProposer, "_advance_window", shifted)
    assert compression("window") < MARGIN * MEASURED["window"]


if __name__ == "__main__":  # re-measure: PYTHONPATH=tests/helpers python tests/unit/test_compression.py
    torch.set_num_threads(2)
    print({case: round(compression(case), 3) for case in CASES})
