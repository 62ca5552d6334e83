"""The cross-request history: earlier texts kept in the pool, copied from by later requests."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import lookahead
from lookahead import kernels
from strategies import history_cases
from tiny_models import tiny_model


def reference_copy(history: list[int], tokens: list[int], max_match: int, length: int) -> list[int]:
    """What the copy guess should propose, by brute force: the longest suffix match in the text
    (latest among equals, copying on past its end), unless an earlier text matches more."""
    n = len(tokens)

    def matched(seq, end):
        m = 0
        while m < min(max_match, n) and m < end and seq[end - 1 - m] == tokens[n - 1 - m]:
            m += 1
        return m

    own = [(matched(tokens, end), end) for end in range(n - 1, 0, -1)]
    best_m, best = max(own, key=lambda x: x[0], default=(0, -1)) if own else (0, -1)
    if best_m:
        best = next(end for m, end in own if m == best_m)
    hist = [(matched(history, end), end) for end in range(len(history) - 1, 0, -1) if history[end] >= 0]
    hist_m = max((m for m, _ in hist), default=0)
    if hist_m > best_m:
        end = next(e for m, e in hist if m == hist_m)
        out = []
        while len(out) < length and end + len(out) < len(history) and history[end + len(out)] >= 0:
            out.append(history[end + len(out)])
        return out
    if best_m == 0:
        return []
    out = []
    for j in range(length):
        out.append(tokens[best + j] if best + j < n else out[best + j - n])
    return out


@settings(max_examples=400)  # a pure function on short arrays: examples are cheap
@given(case=history_cases(), max_match=st.integers(1, 6), length=st.integers(1, 8))
def test_copy_with_history_equals_the_reference(case, max_match, length):
    earlier, text = case
    history = [t for e in earlier for t in e + [-1]]
    out = np.zeros(length, dtype=np.int64)
    n = kernels.copy_guess_with_history(np.array(history, dtype=np.int64), np.array(text, dtype=np.int64),
                                        max_match, length, out)
    assert out[:n].tolist() == reference_copy(history, text, max_match, length)


def test_history_is_bounded_and_saved(tmp_path):
    pool = lookahead.NgramPool(3, 2, history=10)
    pool.remember(np.arange(3, 9))
    pool.remember(np.array([20, 21, 22]))
    assert pool.history.tolist() == [4, 5, 6, 7, 8, -1, 20, 21, 22, -1]
    pool.save(tmp_path / "p.npz")
    loaded = lookahead.NgramPool.load(tmp_path / "p.npz")
    assert loaded.history.tolist() == pool.history.tolist() and loaded.history_capacity == 10
    assert lookahead.NgramPool(3, 2, history=0).history.shape == (0,)


def test_a_kept_pool_copies_from_the_previous_request():
    """The second request repeats the first one's text: with the pool kept, its copy guesses
    come from the history (more tokens per forward), and the output stays greedy's."""
    model = tiny_model("llama", "sdpa")
    first = torch.tensor([[5, 9, 14, 7, 22, 31, 40, 11, 3, 17, 29, 8]])
    kwargs = dict(max_new_tokens=24, eos_token_id=None, pad_token_id=0)
    greedy_first = model.generate(first, do_sample=False, **kwargs)
    second = greedy_first[:, 4:12 + 6]  # starts inside the first text, so only history can copy on
    config = lookahead.LookaheadConfig(window=0, successors=0, prompt_ngrams=False, adaptive=False)
    pool = lookahead.NgramPool(config.ngram, config.guesses, config.pool_capacity, config.context_tokens)
    lookahead.generate(model, first, lookahead_config=config, lookahead_pool=pool, **kwargs)
    assert pool.history.shape[0] == greedy_first.shape[1] + 1
    cold, warm = lookahead.LookaheadStats(), lookahead.LookaheadStats()
    expected = model.generate(second, do_sample=False, **kwargs)
    got = lookahead.generate(model, second, lookahead_config=config, lookahead_stats=cold, **kwargs)
    assert got.tolist() == expected.tolist()
    got = lookahead.generate(model, second, lookahead_config=config, lookahead_pool=pool, lookahead_stats=warm,
                             **kwargs)
    assert got.tolist() == expected.tolist()
    assert warm.source_tokens.get("copy", 0) > cold.source_tokens.get("copy", 0)
    assert warm.tokens_per_forward > cold.tokens_per_forward
