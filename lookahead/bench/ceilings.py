"""The oracle behind ``benchmarks/ceilings.py``: the least cost of decoding a text whose
guessable positions are known, on a cost curve (``lookahead.step.costmodel.CostCurve``).

An oracle that knows which source is right feeds exactly the sample's next tokens, one node per
position, for as long as a run of hits lasts, and splits runs wherever that is cheaper. It pays
no step overhead and never feeds a wrong node, so a real decoder stays below it.
"""

from __future__ import annotations


def oracle_cost(hits: list[bool], curve) -> float:
    """The least summed cost, in one-token forwards, of decoding ``len(hits)`` tokens when a
    step may feed a guess for each of the next positions while they are hits.

    ``hits[i]``: position ``i + 1`` (counted after the text's last known token) could be guessed
    right. A step from ``a`` known positions feeds the last known token and ``k`` guesses
    (positions ``a + 1 .. a + k``, all hits), costs ``curve(k + 1)`` and knows ``a + k + 1``
    positions after it (the model's own next token comes free). Plain decoding costs
    ``len(hits)``. Example, on a curve where 2 tokens cost 1.5 and 3 cost 1.6::

        hits  F T T F        a=0: position 1 is no hit: a plain step, 1.0, 1 known
                             a=1: positions 2, 3 are hits: 2 guesses, 1.6, all 4 known -> 2.6
    """
    n = len(hits)
    best = [0.0] * (n + 1)
    run = 0
    for a in range(n - 1, -1, -1):
        run = run + 1 if hits[a] else 0  # hits in a row from position a + 1
        best[a] = min(curve(k + 1) + best[min(a + k + 1, n)] for k in range(run + 1))
    return best[0]
