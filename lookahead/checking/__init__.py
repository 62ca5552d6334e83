"""Checking lookahead against plain decoding, and what the commands share.

check      the property check behind ``lookahead check``
exactness  what "the same tokens" means where outputs are compared
loading    a model for the commands and the benchmark (a folder, or the embedded one)
request    the ``generate`` keywords every compared decoding shares
"""
