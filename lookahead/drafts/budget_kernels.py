"""Numba kernels of the draft budget (``budget.py``, whose docstring says what they compute):
adding a scored tree and merging rows into the candidates, the choice of the nodes a step
feeds, and the scoring of every candidate against what the step appended. Pure functions
over numpy arrays, compiled once with ``cache=True``; :class:`budget.DraftBudget` holds the
arrays and calls these.
"""

from __future__ import annotations

import numpy as np
from numba import njit

SHARE_BINS = 10
CONTEXTS = (1, 3, 7)  # the scored bins' context groups end at these lengths; the last is open
COPY_BINS = SHARE_BINS * (len(CONTEXTS) + 1)  # the bins of one scored source
# a copy node's chance per unit of share by context group, as measured: one token of
# agreement is weak evidence, eight are nearly proof (docs/benchmarks.md, CONTEXT_PRIORS)
CONTEXT_PRIORS = (0.5, 0.65, 0.85, 0.95)


@njit(cache=True)
def add_tree(
    t_tokens,
    t_parents,
    probs,
    n,
    match,
    first_bin,
    fed,
    held,
    prior,
    ratio,
    count,
    tokens,
    parents,
    cond,
    bins,
    rates,
    also,
    where,
):
    """Add a scored tree's ``n`` nodes (parents before children, -1 the root) to the first
    ``count`` candidates (the arrays have room); returns the new count. Node i's chance of
    holding once its parent holds: its context is ``match + depth - 1`` tokens (one of the
    groups ``CONTEXTS`` ends), its share ``probs[i] / probs[parent]`` (one of ``SHARE_BINS``);
    its bin is ``first_bin`` plus that share's in that group, whose counts start at ``prior``
    observations of its prior rate (``CONTEXT_PRIORS[group] x share``, kept in ``rates``)
    times ``ratio`` (at most 1). A node the candidates already hold (same parent and token)
    keeps its bin and the better chance, and learns into this bin too (``also``, the first
    other bin that proposed it). ``where[i]`` gets node i's candidate index."""
    depth = np.empty(n, dtype=np.int64)
    for i in range(n):
        par = t_parents[i]
        depth[i] = 1 if par < 0 else depth[par] + 1
        group = 0
        while group < len(CONTEXTS) and match + depth[i] - 1 > CONTEXTS[group]:
            group += 1
        share = probs[i] / probs[par] if par >= 0 else probs[i]
        b = first_bin + SHARE_BINS * group + min(int(share * SHARE_BINS), SHARE_BINS - 1)
        rate = CONTEXT_PRIORS[group] * share
        chance = (held[b] + prior * min(rate * ratio, 1.0)) / (fed[b] + prior)
        cur = -1 if par < 0 else where[par]
        node = -1
        for j in range(count):
            if parents[j] == cur and tokens[j] == t_tokens[i]:
                node = j
                break
        if node < 0:
            node = count
            count += 1
            tokens[node], parents[node], cond[node], bins[node], rates[node] = t_tokens[i], cur, chance, b, rate
            also[node] = -1
        else:
            cond[node] = max(cond[node], chance)
            if also[node] < 0 and bins[node] != b:
                also[node] = b
        where[i] = node
    return count


@njit(cache=True)
def merge_rows(rows, first_bin, shared, chances, count, tokens, parents, cond, bins, rates, also):
    """Add ``rows`` (int64 ``[r, d]``, -1 ends a row) as paths from the root to the tree's
    first ``count`` nodes (the arrays have room). A new node at depth d (from 0) learns into
    bin ``first_bin + d``, whose chance is ``chances[bin]``. A node another source proposed
    already keeps its bin, and the row's agreement counts as the row's *shared* bin's (``b +
    shared``: what the row's nodes held where another source proposed them too), whose chance
    it takes where better and which it learns into too (``also``). Returns the new count."""
    for r in range(rows.shape[0]):
        cur = -1
        for d in range(rows.shape[1]):
            t = rows[r, d]
            if t < 0:
                break
            b = first_bin + d
            node = -1
            for i in range(count):
                if parents[i] == cur and tokens[i] == t:
                    node = i
                    break
            if node < 0:
                node = count
                count += 1
                tokens[node], parents[node], cond[node] = t, cur, chances[b]
                bins[node], rates[node], also[node] = b, 0.0, -1
            elif bins[node] != b:  # not one of this row's own earlier rows
                cond[node] = max(cond[node], chances[b + shared])
                if also[node] < 0:
                    also[node] = b + shared
            cur = node
    return count


@njit(cache=True)
def choose(parents, cond, count, costs, overhead, fill, window, keep):
    """Mark in ``keep`` the nodes to feed: the n of highest path chance (parents before
    children: a child's chance is at most its parent's, and ties keep index order) for the n
    that maximises ``(1 + sum + window x (1 - top)) / (costs[n] + overhead)``, when that beats
    1, or for ``fill`` if more (nodes the step feeds for free: a batch's wider rows pay for
    them). ``costs[k - 1]`` prices a forward over k tokens, so at most ``len(costs) - 1`` nodes
    are fed. ``window`` (in [0, 1]) is what the next step's Jacobi guess is worth when it has
    one: any fed node the walk rejects yields that guess (``drafts.jacobi``), which the step
    misses with its likeliest node (path chance ``top``). Returns n."""
    path = np.empty(count)
    for i in range(count):
        par = parents[i]
        path[i] = cond[i] * (path[par] if par >= 0 else 1.0)
    order = np.empty(count, dtype=np.int64)  # by path chance, highest first, ties by index
    for i in range(count):  # insertion: a step has tens of candidates, and argsort compiles slowly
        j = i - 1
        while j >= 0 and path[order[j]] < path[i]:
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = i
    best, best_n, total = 1.0, 0, 1.0
    if count:
        total += window * (1.0 - path[order[0]])
    for k in range(min(count, costs.shape[0] - 1)):
        total += path[order[k]]
        value = total / (costs[k + 1] + overhead)
        if value > best:
            best, best_n = value, k + 1
    best_n = max(best_n, min(fill, count, costs.shape[0] - 1))
    for i in range(count):
        keep[i] = False
    for k in range(best_n):
        keep[order[k]] = True
    return best_n


@njit(cache=True)
def compact(keep, count, tokens, parents, bins, rates, out_t, out_p, out_b, out_r):
    """The kept nodes in their order into ``out_*``, parents renumbered; returns how many."""
    renumber = np.full(count, -1, dtype=np.int64)
    n = 0
    for i in range(count):
        if keep[i]:
            par = parents[i]
            renumber[i] = n
            out_t[n], out_p[n] = tokens[i], renumber[par] if par >= 0 else -1
            out_b[n], out_r[n] = bins[i], rates[i]
            n += 1
    return n


@njit(cache=True)
def chances_of(fed, held, prior, prior_rates, scale, out):
    """``out[b]``: bin b's chance of holding, its counts after ``prior`` observations of its
    prior rate times ``scale``."""
    for b in range(fed.shape[0]):
        out[b] = (held[b] + prior * scale * prior_rates[b]) / (fed[b] + prior)


@njit(cache=True)
def off_the_chain(parents, cond, count):
    """Zero the chance of every candidate off the likeliest chain (from the root, each node's
    child of highest chance, the first on a tie): a draft verified as one chain (inside
    vLLM) feeds a prefix of it."""
    on = np.zeros(count, dtype=np.bool_)
    cur = -1
    while True:
        best = -1
        for i in range(count):
            if parents[i] == cur and (best < 0 or cond[i] > cond[best]):
                best = i
        if best < 0:
            break
        on[best] = True
        cur = best
    for i in range(count):
        if not on[i]:
            cond[i] = 0.0


@njit(cache=True)
def record(tokens, parents, bins, also, rates, count, appended, fed, held, promised):
    """Score a step's candidates against ``appended`` (the tokens it appended, which are the
    model's own whatever was fed): each node whose parent held (the root always does) and
    whose place a token reached counts as fed in its bin (and in ``also``'s, where another
    source proposed it too), fed by the step or not, and as held where its path is a prefix
    of ``appended``; a scored node's prior rate (``rates``) adds to what its source was
    ``promised`` (one entry per scored source: its bins come first, ``COPY_BINS`` each)."""
    ok = np.zeros(count, dtype=np.bool_)
    depth = np.empty(count, dtype=np.int64)
    scored_bins = promised.shape[0] * COPY_BINS
    for i in range(count):
        par = parents[i]
        depth[i] = 1 if par < 0 else depth[par] + 1
        if (par >= 0 and not ok[par]) or depth[i] > appended.shape[0]:
            continue
        ok[i] = appended[depth[i] - 1] == tokens[i]
        fed[bins[i]] += 1.0
        held[bins[i]] += 1.0 if ok[i] else 0.0
        if also[i] >= 0:
            fed[also[i]] += 1.0
            held[also[i]] += 1.0 if ok[i] else 0.0
        if bins[i] < scored_bins:
            promised[bins[i] // COPY_BINS] += rates[i]
