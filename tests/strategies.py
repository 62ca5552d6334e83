"""Shared hypothesis strategies: prompts that do and do not repeat, configs, lengths."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from lookahead import LookaheadConfig
from tiny_models import VOCAB

# Token ids 3.. are ordinary text; 0 pad, 1 bos, 2 eos in the tiny models' configs.
tokens = st.integers(min_value=3, max_value=VOCAB - 1)


@st.composite
def repetitive_prompts(draw, min_len=6, max_len=40):
    """A short motif repeated, with a few random edits: the pool really hits on these."""
    motif = draw(st.lists(tokens, min_size=2, max_size=6))
    length = draw(st.integers(min_len, max_len))
    ids = (motif * (length // len(motif) + 1))[:length]
    for _ in range(draw(st.integers(0, 2))):
        ids[draw(st.integers(0, length - 1))] = draw(tokens)
    return ids


random_prompts = st.lists(tokens, min_size=1, max_size=30)
prompts = st.one_of(repetitive_prompts(), random_prompts).map(lambda ids: torch.tensor([ids]))

configs = st.builds(
    LookaheadConfig,
    window=st.integers(1, 16),
    ngram=st.integers(2, 7),
    guesses=st.integers(0, 16),
    method=st.sampled_from(["lookahead", "lookahead", "jacobi"]),
    prompt_ngrams=st.booleans(),
    copy_length=st.sampled_from([0, 1, 4, 8, 12]),
    copy_match=st.integers(1, 3),
    context_tokens=st.sampled_from([1, 2]),
    adaptive=st.booleans(),
)
max_new_tokens = st.integers(1, 48)
eos_ids = st.one_of(st.none(), tokens, st.lists(tokens, min_size=1, max_size=3))
