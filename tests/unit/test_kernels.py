"""The numba kernels' copy guesses and text n-grams (``lookahead.kernels``) against plain Python.

``text_ngrams`` files each n-gram once, starting after ``start`` with the token before; the copy
guess follows the latest longest match of the text's suffix and loops on, also across the
kept history of earlier requests. The guess trie's merge is in tests/unit/test_trie.py.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead import kernels
from lookahead.kernels import text_ngrams

from strategies import copy_texts, history_cases


@given(tokens=st.lists(st.integers(0, 50), max_size=30), start=st.integers(-3, 30), n=st.integers(2, 6))
def test_text_ngrams_start_after_start_with_the_token_before(tokens, start, n):
    arr = np.array(tokens, dtype=np.int64)
    got, before = text_ngrams(arr, start, n)
    first = max(start, 0)
    assert got.tolist() == [tokens[i : i + n] for i in range(first, len(tokens) - n + 1)]
    assert before.tolist() == [tokens[i - 1] if i > 0 else -1 for i in range(first, len(tokens) - n + 1)]


@given(tokens=st.lists(st.integers(0, 5), min_size=1, max_size=40), match=st.integers(1, 3), length=st.integers(1, 8))
def test_copy_guess_follows_the_latest_longest_match_and_loops_on(tokens, match, length):
    from lookahead.kernels import copy_guess

    arr = np.array(tokens, dtype=np.int64)
    out = np.empty(length, dtype=np.int64)
    got = out[: copy_guess(arr, match, length, out)].tolist()
    expected = []
    for k in range(min(match, len(tokens) - 1), 0, -1):
        tail = tokens[-k:]
        starts = [s for s in range(len(tokens) - k) if tokens[s : s + k] == tail]
        if starts:
            s = max(starts)
            text = list(tokens)
            while len(expected) < length:  # the text as it would go on if it repeated
                text.append(text[s + k + len(expected)])
                expected.append(text[-1])
            break
    assert got == expected


@settings(max_examples=400)  # a pure function on short arrays: examples are cheap
@given(tokens=copy_texts(), match=st.integers(1, 8), length=st.integers(1, 8))
def test_copy_follows_the_longest_suffix_match(tokens, match, length):
    """Among earlier ends of the text, the one whose preceding tokens match the most trailing
    tokens (capped at ``match``) wins, the latest among equals."""
    arr = np.array(tokens, dtype=np.int64)
    out = np.empty(length, dtype=np.int64)
    got = out[: kernels.copy_guess(arr, match, length, out)].tolist()
    n, best, best_m = len(tokens), None, 0
    for end in range(n - 1, 0, -1):
        m = 0
        while m < min(match, n - 1) and m < end and tokens[end - 1 - m] == tokens[n - 1 - m]:
            m += 1
        if m > best_m:
            best, best_m = end, m
    expected = []
    if best is not None:
        text = list(tokens)
        while len(expected) < length:
            text.append(text[best + len(expected)])
            expected.append(text[-1])
    assert got == expected


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
    n = kernels.copy_guess_with_history(
        np.array(history, dtype=np.int64), np.array(text, dtype=np.int64), max_match, length, out
    )
    assert out[:n].tolist() == reference_copy(history, text, max_match, length)
