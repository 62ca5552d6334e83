"""Shared hypothesis strategies for the tiny test models, built from ``lookahead.testing``."""

from __future__ import annotations

from lookahead import testing
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
    from hypothesis import strategies as st

    row = st.one_of(repetitive_prompts(min_len=4, max_len=30), testing.random_prompts(tokens, 1, 24))
    return st.lists(row, min_size=1, max_size=max_rows)
