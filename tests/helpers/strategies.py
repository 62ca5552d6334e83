"""Shared hypothesis strategies for the tiny test models, built from ``lookahead.checking.examples``."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from lookahead.checking import examples as testing
from lookahead.verify.tree import GuessTree

from tiny_models import VOCAB

# Token ids 3.. are ordinary text; 0 pad, 1 bos, 2 eos in the tiny models' configs.
tokens = testing.token_ids(3, VOCAB - 1)


def repetitive_prompts(min_len=6, max_len=40):
    """A short motif repeated, with a few random edits: the pool really hits on these."""
    return testing.repetitive_prompts(tokens, min_len, max_len)


random_prompts = testing.random_prompts(tokens, 1, 30)
prompts = testing.prompts(tokens)
configs = testing.configs()
max_new_tokens = testing.max_new_tokens(1, 48)
eos_ids = testing.eos_ids(tokens)


def batch_rows(max_rows=8):
    """1..max_rows prompts (lists of ids), repetitive and random mixed, of different lengths."""
    row = st.one_of(repetitive_prompts(min_len=4, max_len=30), testing.random_prompts(tokens, 1, 24))
    return st.lists(row, min_size=1, max_size=max_rows)


@st.composite
def mask_cases(draw):
    """A step shape (a classic window of ``levels x width``; no window: width 0), a trie of
    guesses deeper than small windows whose first row is the window's level 0, a committed
    prefix partly padding, and the first index a layer still holds."""
    width = draw(st.integers(0, 4))
    levels = draw(st.integers(1, 3))
    chain = draw(st.lists(st.integers(0, 3), min_size=width, max_size=width))
    rows = ([chain] if width else []) + draw(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=8), max_size=4))
    m = max((len(r) for r in rows), default=1)
    cands = np.array([r + [-1] * (m - len(r)) for r in rows], dtype=np.int64).reshape(len(rows), m)
    tree = GuessTree.build(cands)
    past_len = draw(st.integers(0, 12))
    past_visible = draw(st.lists(st.booleans(), min_size=past_len, max_size=past_len))
    kv_offset = draw(st.integers(0, past_len))
    window = draw(st.one_of(st.none(), st.integers(1, 7)))
    return levels, width, tree, window, past_len, kv_offset, past_visible


# Token texts for the copy kernels: a 4-letter alphabet that includes 0 (a real id in most
# vocabularies), and texts stitched from pieces of one another so that long suffix matches,
# and matches longer than the cap, really occur.
copy_tokens = st.lists(st.integers(0, 3), max_size=24)


@st.composite
def copy_texts(draw, others=()):
    """A text of 1-40 tokens: random, or random pieces around a slice of one of ``others``
    (or of itself so far), so that its end often repeats something earlier."""
    text = draw(copy_tokens)
    for _ in range(draw(st.integers(0, 3))):
        sources = [o for o in others if o] + ([text] if text else [])
        if sources:
            src = draw(st.sampled_from(sources))
            a = draw(st.integers(0, len(src) - 1))
            text = text + src[a : a + draw(st.integers(1, 12))] + draw(st.lists(st.integers(0, 3), max_size=2))
    return text[:40] or [draw(st.integers(0, 3))]


@st.composite
def history_cases(draw):
    """``(earlier texts, text)``: the text often ends in a piece of an earlier one."""
    earlier = draw(st.lists(copy_texts(), max_size=3))
    return earlier, draw(copy_texts(earlier))
