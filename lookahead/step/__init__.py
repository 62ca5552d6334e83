"""One step: a forward over the last token and the guesses that pay, verified, committed.

loop        the decode loop (Decoder) for one sequence or a batch: plan, forward, verify, commit, stop
proposer    one row's planner, rule and walk (``lookahead.classic``: the published fixed shape)
rows        a row of the loop, a batch's processors seen from one slot, a finished row's pads
single      one sequence's cache and its host-made steps (``OneRow``)
batch       a left-padded batch's cache, with holes (``Holes``)
mask        positions and the additive 4D attention mask of a step
host        a step's one upload and one read of the logits (``kernels``: its numba)
cache       committing accepted KV entries to a ``DynamicCache``
static      the same on a ``StaticCache``, compiled once per step-size bucket
costmodel   a forward's cost by its width (a curve): what the budget prices nodes with
sequence    the growing token sequence, its stopping criteria checked after every token
"""
