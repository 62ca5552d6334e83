"""Checking lookahead against plain decoding, and what the commands share.

check      the property check behind ``lookahead check``
exactness  what "the same tokens" means where outputs are compared
loading    a model for the commands and the benchmark (a folder, or the embedded one)
request    the ``generate`` keywords every compared decoding shares
verdict    where a seeded sample parts from ``generate``'s: a rounding flip of the race, or a bug
boundary   how much rounding moves a token across a sampling warper's edge (``shifts``: which way)
"""
