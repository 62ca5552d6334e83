"""Where a step's guesses come from, and which of them pay.

source        the interface every source fits: propose candidates, learn from the step
Sources, each proposing continuations of the text's end:
    jacobi        the Jacobi window: each step's free iterations, the next step's guesses
    pool          n-grams of the text and the window's trajectories, keyed by token
    successors    every fed token's top-k successors, recycled from the verify logits
    copy_drafter  what followed the text's end where it occurred before (text, earlier
                  requests, a corpus ``suffix.SuffixIndex``), as a scored tree
budget        one budget over all sources: the nodes most likely to hold, as many as pay
window        the classic shape's Jacobi window: levels of guesses fed every step
Numba kernels behind them: ``kernels`` (pool, successors) and ``suffix_kernels``.
"""
