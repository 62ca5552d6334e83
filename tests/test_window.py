"""The Jacobi window keeps each guess at the position it was made for."""

import numpy as np

from lookahead.window import JacobiWindow


def test_window_advance_and_slide_keep_columns_at_their_positions():
    window = JacobiWindow(levels=2, width=4, seed_tokens=np.arange(10, 20))
    window.tokens = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    window._model_levels = 2
    ngrams = window.advance(np.array([9, 10, 11, 12]), accepted=2)
    assert ngrams.tolist() == [[1, 5, 9], [2, 6, 10], [3, 7, 11], [4, 8, 12]]
    # new level 0 = old level 1, moved one column left for the extra accepted token
    assert window.tokens.tolist() == [[6, 7, 8, 8], [10, 11, 12, 12]]
    window.slide(2)
    assert window.tokens.tolist() == [[8, 8, 8, 8], [12, 12, 12, 12]]
