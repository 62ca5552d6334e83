"""Seeded sampling as ``model.generate`` does it, and guesses of its samples.

rule          the sampling rule a walk down the guess tree follows (``generate``'s race, replayed)
noise         ``generate``'s exponential noise blocks, replayed row by row and peeked ahead
warpers       ``generate``'s processors applied one by one, cheaper (``sort_kernels``: top-p)
guess         the token a future position's race will emit, guessed from a step's logits and the
              known noise (``guess_kernels``: the race over whole rows)
"""
