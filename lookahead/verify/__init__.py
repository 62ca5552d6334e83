"""Which guessed tokens the model itself would have produced.

tree    the step's guesses merged into one trie, and its attention layout
rules   the greedy rule, and the walk down the trie that any rule (``lookahead.sampling.rule``) follows
"""
