"""Where a step's guesses come from, and which of them it feeds.

Sources, each proposing continuations of the text's end:
    window        the Jacobi window: guessed future tokens, refined by every step
    pool          n-grams read off the window's trajectories and the text, keyed by token
    successors    every fed token's top-k successors, recycled from the verify logits
    copy_drafter  what followed the text's end where it occurred before (text, earlier
                  requests, a corpus ``suffix.SuffixIndex``), as a scored tree
Choosing and shaping:
    budget        one budget over all sources: the nodes most likely to hold, as many as pay
    tree          the chosen guesses merged into one trie, and its attention layout
    proposer      one row's sources, budget and learning, step by step
Numba kernels behind them: ``kernels`` (pool, successors, trie) and ``suffix_kernels``.
"""
