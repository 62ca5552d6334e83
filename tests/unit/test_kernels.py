"""The numba kernels' text n-grams (``lookahead.drafts.kernels``) against plain Python.

``text_ngrams`` files each n-gram once, starting after ``start`` with the token before. The
guess trie's merge is in tests/unit/test_trie.py, the copy guess's kernels in test_suffix.py.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from lookahead.drafts.kernels import text_ngrams


@given(tokens=st.lists(st.integers(0, 50), max_size=30), start=st.integers(-3, 30), n=st.integers(2, 6))
def test_text_ngrams_start_after_start_with_the_token_before(tokens, start, n):
    arr = np.array(tokens, dtype=np.int64)
    got, before = text_ngrams(arr, start, n)
    first = max(start, 0)
    assert got.tolist() == [tokens[i : i + n] for i in range(first, len(tokens) - n + 1)]
    assert before.tolist() == [tokens[i - 1] if i > 0 else -1 for i in range(first, len(tokens) - n + 1)]
