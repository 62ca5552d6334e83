"""Which guessed tokens the model itself would have produced.

rules   the greedy rule and the seeded sampling rule a walk down the guess tree follows
noise   ``generate``'s sampling noise, replayed for rows that advance at their own pace
race    where a seeded sample parts from ``generate``'s: a rounding flip or a bug
boundary  how much rounding moves a token across a sampling warper's edge (top-k ... eta)
shifts    which way each score moves in the worst case, warper by warper
"""
