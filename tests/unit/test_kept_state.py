"""What a ``KeptState`` carries between requests besides its n-grams and history: the recycled
successors (``KeptState.successor_table``) and the draft budget's counts
(``DraftBudget.carry``), each used by the next request, and every output still ``generate``'s;
the deprecated ``lookahead_pool=NgramPool`` still carries them from call to call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import lookahead
from lookahead.drafts.budget import KEPT_WEIGHT, DraftBudget
from lookahead.drafts.successors import SuccessorTable
from lookahead.step.costmodel import CostCurve

from tiny_models import tiny_model

POOL = (("pool", 0.6, 0.9), ("pool", 0.3, 0.6))
ROWS = [(0, np.array([[40, 41, 42, 43]], dtype=np.int64)), (1, np.array([[50, 51]], dtype=np.int64))]
COPY = (np.array([40, 41, 60], dtype=np.int64), np.array([-1, 0, -1]), np.array([0.6, 0.5, 0.4]), 2)


def _learnt(steps: int) -> DraftBudget:
    """A budget that saw ``steps`` steps where 40 41 42 was appended: the copy tree's first two
    nodes and the pool's pair row up to its third token held, nothing else did."""
    plan = DraftBudget(8, CostCurve.linear(0.05), 0.0, POOL, 4)
    for _ in range(steps):
        plan.plan([COPY], ROWS)
        plan.learn([40, 41, 42, 9])
    return plan


def test_a_later_budget_starts_from_the_rates_learnt_at_most_kept_weight_deep():
    """Each bin's rate carries over as learnt, its weight cut to ``KEPT_WEIGHT``; so the
    next request feeds what the last one had learnt to feed."""
    old = _learnt(200)
    store = {"k": old}
    new = DraftBudget(8, CostCurve.linear(0.05), 0.0, POOL, 4)
    new.carry(store, "k")
    assert store["k"] is new  # the next request starts from this one
    seen = old.fed > 0
    assert seen.sum() >= 3 and old.fed.max() > KEPT_WEIGHT
    assert np.all(new.fed <= KEPT_WEIGHT + 1e-9) and np.all(new.fed[seen] > 0)
    np.testing.assert_allclose(new.held[seen] / new.fed[seen], old.held[seen] / old.fed[seen])
    # the copy ratio's two sides shrink alike: it stays on its side of 1, nearer to it
    assert (new.copy_ratio < 1) == (old.copy_ratio < 1) and abs(new.copy_ratio - 1) <= abs(old.copy_ratio - 1)
    assert new.plan([COPY], ROWS)[0].tolist() == old.plan([COPY], ROWS)[0].tolist()


def test_a_budget_with_other_bins_starts_fresh():
    store = {"k": _learnt(50)}
    other = DraftBudget(8, CostCurve.linear(0.05), 0.0, POOL[:1], 4)
    other.carry(store, "k")
    assert not other.fed.any() and store["k"] is other


def test_a_kept_pool_keeps_the_successor_table_for_the_next_request():
    """The second request's recycled successors start from the first request's predictions:
    on the same prompt they hold from its first step, where a fresh table knows nothing."""
    model = tiny_model("llama", "sdpa")
    ids = torch.tensor([[5, 9, 14, 7, 22, 31, 40, 11]])
    kwargs = dict(max_new_tokens=24, eos_token_id=None, pad_token_id=0)
    config = lookahead.LookaheadConfig(window=0, prompt_ngrams=False, copy_length=0, successors=2, method="classic")
    pool = lookahead.KeptState()
    expected = model.generate(ids, do_sample=False, **kwargs).tolist()
    cold, warm = lookahead.LookaheadStats(), lookahead.LookaheadStats()
    assert (
        lookahead.generate(
            model, ids, lookahead_config=config, lookahead_pool=pool, lookahead_stats=cold, **kwargs
        ).tolist()
        == expected
    )
    table = pool.successors
    assert isinstance(table, SuccessorTable) and table.shape == (model.config.vocab_size, 2, config.ngram - 1)
    assert (
        lookahead.generate(
            model, ids, lookahead_config=config, lookahead_pool=pool, lookahead_stats=warm, **kwargs
        ).tolist()
        == expected
    )
    assert pool.successors is table
    assert warm.source_tokens.get("successors", 0) > cold.source_tokens.get("successors", 0)
    wider = lookahead.LookaheadConfig(window=0, prompt_ngrams=False, copy_length=0, successors=3, method="classic")
    lookahead.generate(model, ids, lookahead_config=wider, lookahead_pool=pool, **kwargs)
    assert pool.successors is not table and pool.successors.shape[1] == 3


def test_seeded_sampling_with_a_kept_pool_stays_generate_s_across_requests():
    """Carried successors and budget counts change only what is guessed: every request's
    tokens are seeded ``generate``'s, greedy and sampled alike, batches included."""
    model = tiny_model("llama", "sdpa")
    pool = lookahead.KeptState()
    prompts = [torch.tensor([[5, 9, 14, 7, 22, 31] * 2]), torch.tensor([[5, 9, 14, 7, 22, 31, 40, 11]])]
    prompts.append(torch.tensor([[5, 9, 14, 7, 22, 31], [40, 11, 3, 17, 29, 8]]))
    for seed, ids in enumerate(prompts * 2):
        for sample in (False, True):
            kwargs = dict(max_new_tokens=20, eos_token_id=None, pad_token_id=0, attention_mask=torch.ones_like(ids))
            if sample:
                kwargs.update(do_sample=True, top_k=0, temperature=0.8)
            torch.manual_seed(seed)
            expected = model.generate(ids, **kwargs)
            torch.manual_seed(seed)
            got = lookahead.generate(model, ids, lookahead_pool=pool, **kwargs)
            assert got.tolist() == expected.tolist()
    assert pool.successors is not None and {key[0] for key in pool.budgets} == {False, True}


def test_an_ngram_pool_passed_alone_still_keeps_everything_with_a_warning():
    """``lookahead_pool=NgramPool(...)`` (lookahead 0.1's kept pool) warns that it is
    deprecated and keeps what a ``KeptState`` keeps, in one state per pool: the second call
    copies from the first one's text."""
    model = tiny_model("llama", "sdpa")
    ids = torch.tensor([[5, 9, 14, 7, 22, 31, 40, 11]])
    kwargs = dict(max_new_tokens=24, eos_token_id=None, pad_token_id=0)
    pool = lookahead.NgramPool(5, 2, context_tokens=2)
    expected = model.generate(ids, do_sample=False, **kwargs).tolist()
    runs = []
    for _ in range(2):
        stats = lookahead.LookaheadStats()
        with pytest.warns(DeprecationWarning, match="KeptState"):
            assert (
                lookahead.generate(model, ids, lookahead_pool=pool, lookahead_stats=stats, **kwargs).tolist()
                == expected
            )
        runs.append(stats)
    kept = pool.__dict__["_kept"]
    assert kept.pool is pool and len(kept.history) == 2 * (ids.shape[1] + 24 + 1)
    assert runs[1].forwards < runs[0].forwards
