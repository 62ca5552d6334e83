"""One step: a forward over ``[last token | window | guesses]``, verified, committed.

decode      the loop for one sequence: propose, forward, verify, commit, learn
batch       the same for a left-padded batch (``batch_rows``: one row's view)
mask        positions and the additive 4D attention mask of a step
host        a step's one upload and one read of the logits (``kernels``: host-made masks)
cache       committing accepted KV entries to a ``DynamicCache``
static      the same on a ``StaticCache``, compiled once per step-size bucket
controller  each step's shape by expected tokens per unit cost (``costmodel``: the cost)
sequence    the growing token sequence; ``stopping``: criteria after every token
attention   an opt-in sdpa backend that skips ``repeat_kv`` on masked GQA steps
"""
