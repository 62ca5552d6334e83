"""The static cache: ``cache_implementation="static"`` decodes exactly as ``model.generate`` does
with it, on full-length static layers, with every step padded to a bucket size."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_batch import eos_ending_rows
from transformers import CompileConfig
from transformers.cache_utils import StaticCache, StaticLayer

import lookahead
from lookahead.checking import examples as testing
from lookahead.runtime import static as static_setup
from lookahead.runtime.static import ROUND, full_static_cache
from lookahead.step.batch import Holes
from lookahead.step.static import StaticSteps, bucket_for

from strategies import batch_rows, eos_ids, max_new_tokens, prompts
from tiny_models import CASES, left_pad, tiny_model

configs = testing.configs(max_window=6, max_ngram=5, max_guesses=6)


def static_generate(model, ids, **kwargs):
    return model.generate(ids, do_sample=False, cache_implementation="static", **kwargs)


@given(
    case=st.sampled_from(CASES),
    ids=prompts,
    config=configs,
    new=max_new_tokens,
    eos=eos_ids,
    options=testing.processor_options(),
    seed=st.none() | st.integers(0, 2**16),
)
def test_equals_static_generate(case, ids, config, new, eos, options, seed):
    """Every family (sliding windows included, applied by position on full-length layers),
    configs, EOS lists and processors, greedy or seeded sampling: the tokens of ``generate``'s
    own static-cache decoding."""
    model = tiny_model(*case)
    kwargs = dict(
        max_new_tokens=new,
        eos_token_id=eos,
        pad_token_id=0,
        attention_mask=torch.ones_like(ids),
        cache_implementation="static",
        do_sample=seed is not None,
        **options,
    )
    torch.manual_seed(seed or 0)
    expected = model.generate(ids, **kwargs)
    stats = lookahead.LookaheadStats()
    torch.manual_seed(seed or 0)
    got = lookahead.generate(model, ids, lookahead_config=config, lookahead_stats=stats, **kwargs)
    assert got.tolist() == expected.tolist()
    assert stats.new_tokens == expected.shape[1] - ids.shape[1]


@pytest.mark.parametrize("family", ["llama", "mistral"])
def test_steps_run_at_bucket_sizes_on_a_full_length_static_cache(family):
    """Every forward after the prefill feeds a bucket's number of tokens; the output carries
    the static cache, every layer full length, with room for the widest bucket."""
    model = tiny_model(family, "sdpa")
    ids = torch.tensor([[5, 9, 14, 7, 22, 31] * 4])
    widths = []
    hook = model.register_forward_pre_hook(
        lambda _, args, kw: widths.append(kw["input_ids"].shape[1]), with_kwargs=True
    )
    config = lookahead.LookaheadConfig(window=2, ngram=3, method="classic", static_buckets=(1, 4, 8, 16, 48))
    try:
        stats = lookahead.LookaheadStats()
        out = lookahead.generate(
            model,
            ids,
            max_new_tokens=40,
            eos_token_id=None,
            pad_token_id=0,
            cache_implementation="static",
            lookahead_config=config,
            lookahead_stats=stats,
            return_dict_in_generate=True,
        )
    finally:
        hook.remove()
    cache = out.past_key_values
    assert isinstance(cache, StaticCache) and all(type(layer) is StaticLayer for layer in cache.layers)
    room = max(48, config.widest_step)
    assert cache.layers[0].max_cache_len >= ids.shape[1] + 40 + room and cache.layers[0].max_cache_len % ROUND == 0
    steps = widths[1:]
    assert len(steps) == stats.steps and set(steps) <= {1, 4, 8, 16, 48} and len(set(steps)) > 1
    assert stats.tokens_per_forward > 1.5  # not vacuous: guesses held on repeating text


def test_commit_moves_the_kept_entries_down_and_resets_the_counter():
    """After a step over 5 tokens of which nodes 0, 2 and 4 are kept, the first L + 3 entries
    are those of a plain forward over the committed text, and the counter is L + 3."""
    model = tiny_model("llama", "sdpa")
    text = [5, 6, 7, 8, 9, 10]
    cache = full_static_cache(model, 32)
    with torch.no_grad():
        model(input_ids=torch.tensor([text]), cache=cache, use_cache=True)
        steps = StaticSteps(model, cache, buckets=(8,))
        step = [11, 12, 13, 14, 15]  # 12 and 14 follow 11 and 13 in this step's (made-up) tree
        allowed = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 0, 1, 1, 0], [1, 0, 1, 0, 1]])
        offsets = torch.tensor([0, 1, 1, 2, 2])
        keep = torch.cat([torch.ones(5, len(text), dtype=torch.bool), allowed.bool()], dim=1)
        mask = torch.zeros(keep.shape).masked_fill_(~keep, torch.finfo(torch.float32).min)[None, None]
        steps.forward(torch.tensor([step]), (len(text) + offsets)[None], mask, len(text))
        steps.commit(len(text), [0, 2, 4])
        committed = text + [11, 13, 15]
        fresh = full_static_cache(model, 32)
        model(input_ids=torch.tensor([committed]), cache=fresh, use_cache=True)
    n = len(committed)
    for got, want in zip(cache.layers, fresh.layers, strict=True):
        assert int(got.cumulative_length) == n
        torch.testing.assert_close(got.keys[:, :, :n], want.keys[:, :, :n], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(got.values[:, :, :n], want.values[:, :, :n], rtol=1e-4, atol=1e-5)


def test_compiled_steps_compile_each_bucket_once_in_the_warm_up(monkeypatch):
    """With a ``CompileConfig`` that compiles on CPU, the steps run through ``generate``'s own
    compiled forward: the warm-up before the prefill traces every bucket, decoding traces
    nothing more, and a second call reuses it all. (``backend="eager"`` keeps the test fast: dynamo's
    tracing and guards are what is tested, and the tokens must then equal eager ``generate``'s.)"""
    from torch._dynamo.utils import counters

    model = tiny_model("qwen2", "sdpa")
    ids = torch.tensor([[3, 4, 5, 6, 7] * 3])
    compile_config = CompileConfig(backend="eager")
    compile_config._compile_all_devices = True
    kwargs = dict(max_new_tokens=24, eos_token_id=None, pad_token_id=0, cache_implementation="static")
    expected = static_generate(model, ids, **{k: v for k, v in kwargs.items() if k != "cache_implementation"})
    config = lookahead.LookaheadConfig(window=2, ngram=3, guesses=2, method="classic", static_buckets=(1, 16))
    torch._dynamo.reset()
    counters.clear()
    model.__dict__.pop("_lookahead_cache", None)  # a cache of earlier tests on this model: its buckets are traced
    after_warm_up, real = [], static_setup.prepare

    def spy(steps, **kwargs):
        real(steps, **kwargs)
        after_warm_up.append((counters["stats"]["unique_graphs"], set(steps.graphs), steps.costs))

    monkeypatch.setattr(static_setup, "prepare", spy)
    graphs = []
    for _ in range(2):
        got = lookahead.generate(model, ids, lookahead_config=config, compile_config=compile_config, **kwargs)
        assert got.tolist() == expected.tolist()
        graphs.append(counters["stats"]["unique_graphs"])
    assert after_warm_up[0][1] == {1, 16} and 2 <= after_warm_up[0][0] == graphs[0] == graphs[1]
    assert after_warm_up[1][1] == set()  # the second call found its cache and its buckets traced
    assert after_warm_up[0][2] is None  # a fixed shape prices nothing: no timing


def test_compiled_buckets_are_timed_once_into_the_curve_that_prices_steps(monkeypatch):
    """Adaptive and compiled, each bucket's compiled forward is timed once per cache; that curve
    (sizes = the buckets) reaches the draft budget, and a later call reuses it."""
    from lookahead.step import loop

    model = tiny_model("llama", "sdpa")
    model.__dict__.pop("_lookahead_cache", None)
    compile_config = CompileConfig(backend="eager")
    compile_config._compile_all_devices = True
    priced = []
    real = loop.proposer_for

    def spy(config, rule, stats, kept, costs, *args):
        priced.append(costs)
        return real(config, rule, stats, kept, costs, *args)

    monkeypatch.setattr(loop, "proposer_for", spy)
    ids = torch.tensor([[5, 6, 7, 8] * 3])
    config = lookahead.LookaheadConfig(static_buckets=(1, 8, 32))
    kwargs = dict(max_new_tokens=16, eos_token_id=None, pad_token_id=0, cache_implementation="static")
    runs = [lookahead.LookaheadStats(), lookahead.LookaheadStats()]
    for stats in runs:
        got = lookahead.generate(
            model, ids, lookahead_config=config, compile_config=compile_config, lookahead_stats=stats, **kwargs
        )
        assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()
    assert runs[0].compiled_graphs == [1, 8, 32] and runs[0].warmup_s > 0 and runs[1].compiled_graphs == []
    assert priced[0].sizes == (1, 8, 32) and priced[0].unit_s > 0 and priced[1] is priced[0]


def test_a_later_call_reuses_the_cache_when_it_is_long_enough():
    model = tiny_model("llama", "sdpa")
    model.__dict__.pop("_lookahead_cache", None)
    kwargs = dict(eos_token_id=None, pad_token_id=0, cache_implementation="static", return_dict_in_generate=True)
    short, long_ = torch.tensor([[5, 6, 7] * 3]), torch.tensor([[5, 6, 7] * 100])
    first = lookahead.generate(model, short, max_new_tokens=20, **kwargs).past_key_values
    second = lookahead.generate(model, short, max_new_tokens=30, **kwargs)
    assert second.past_key_values is first  # emptied and reused: the same shapes, no new graphs
    assert (
        second.sequences.tolist()
        == static_generate(model, short, max_new_tokens=30, eos_token_id=None, pad_token_id=0).tolist()
    )
    third = lookahead.generate(model, long_, max_new_tokens=20, **kwargs).past_key_values
    assert third is not first and third.layers[0].max_cache_len >= 300 + 20 + max(
        lookahead.LookaheadConfig().static_buckets
    )


@given(
    case=st.sampled_from(CASES),
    rows=batch_rows(max_rows=4),
    config=configs,
    new=st.integers(1, 32),
    picks=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 31)), max_size=2),
    seed=st.none() | st.integers(0, 2**16),
)
def test_a_batch_equals_static_generate(case, rows, config, new, picks, seed):
    """Left-padded batches on the static cache, rows ending at EOS or not, greedy or seeded:
    ``generate``'s static-cache batch, token for token."""
    model = tiny_model(*case)
    ids, mask = left_pad(rows)
    kwargs = dict(
        attention_mask=mask,
        max_new_tokens=new,
        pad_token_id=0,
        eos_token_id=eos_ending_rows(model, ids, mask, new, picks),
        cache_implementation="static",
        do_sample=seed is not None,
    )
    torch.manual_seed(seed or 0)
    expected = model.generate(ids, **kwargs)
    torch.manual_seed(seed or 0)
    assert lookahead.generate(model, ids, lookahead_config=config, **kwargs).tolist() == expected.tolist()


def test_a_static_batch_keeps_every_row_and_gathers_its_holes_when_full(monkeypatch):
    """A batch on the static cache keeps all its rows in the cache (a finished row feeds a
    token nothing sees), and when holes would overflow the buffer they are gathered away."""
    monkeypatch.setattr(static_setup, "ROUND", 1)  # a cache of exactly what the request needs
    model = tiny_model("llama", "sdpa")
    model.__dict__.pop("_lookahead_cache", None)
    ids, mask = left_pad([[5, 9, 14, 7, 22, 31] * 3, [3, 4], [10, 11, 12] * 4])
    kwargs = dict(attention_mask=mask, max_new_tokens=60, pad_token_id=0, cache_implementation="static")
    eos = eos_ending_rows(model, ids, mask, 60, [(1, 5)])
    closes, real = [], Holes._close_holes
    monkeypatch.setattr(Holes, "_close_holes", lambda self: (closes.append(1), real(self)))
    config = lookahead.LookaheadConfig(method="classic", window=2, ngram=3, static_buckets=(1, 8, 16))
    got = lookahead.generate(model, ids, lookahead_config=config, eos_token_id=eos, **kwargs)
    assert got.tolist() == model.generate(ids, do_sample=False, eos_token_id=eos, **kwargs).tolist()
    cache = model._lookahead_cache
    assert (
        cache.layers[0].keys.shape[0] == 3 and cache.layers[0].max_cache_len == ids.shape[1] + 60 + config.widest_step
    )
    assert closes


def test_bucket_for_and_bucket_validation():
    assert [bucket_for(q, (1, 4, 16)) for q in (1, 2, 4, 5, 16, 17)] == [1, 4, 4, 16, 16, 17]
    for bad in ((), (4, 1), (1, 1), [1, 4]):
        with pytest.raises((ValueError, TypeError), match="static_buckets"):
            lookahead.LookaheadConfig(static_buckets=bad)
    with pytest.raises(ValueError, match="static_buckets item"):
        lookahead.LookaheadConfig(static_buckets=(0, 4))


def test_a_bucketed_curve_prices_a_step_at_its_padded_size():
    from lookahead.step.costmodel import CostCurve

    curve = CostCurve.linear(0.1)
    padded = curve.bucketed((1, 4, 16))
    assert [padded(k) for k in (1, 2, 4)] == [1.0, curve(4), curve(4)]
    assert padded(5) == padded(16) == curve(16) and padded(17) == curve(17)
