"""One step: a forward over the last token and the guesses that pay, verified, committed.

decode      the loop for one sequence: plan, forward, verify, commit, learn
proposer    one row's sources, draft budget and rule (``classic``: the published fixed shape)
inputs      a step's inputs and the timed forward both decoders share
batch       the same loop for a left-padded batch (``batch_rows``: one row's view)
mask        positions and the additive 4D attention mask of a step
host        a step's one upload and one read of the logits (``kernels``: host-made masks)
cache       committing accepted KV entries to a ``DynamicCache``
static      the same on a ``StaticCache``, compiled once per step-size bucket
costmodel   a forward's cost by its width (a curve): what the budget prices nodes with
sequence    the growing token sequence, its stopping criteria checked after every token
"""
