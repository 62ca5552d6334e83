"""Batches: a left-padded batch decodes to exactly what ``model.generate`` returns for it,
row by row: finished rows leave, stop strings and criteria per row, sampling per row, a kept
pool per row, one pool and successor table shared by the rows.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from transformers import StoppingCriteriaList, TextStreamer
from transformers.cache_utils import DynamicCache
from transformers.generation.stopping_criteria import MaxLengthCriteria

import lookahead
from lookahead import classic
from lookahead.checking import examples as testing
from lookahead.compat import output_cache_field
from lookahead.step.costmodel import CostCurve
from lookahead.step.loop import Decoder
from lookahead.step.rows import PAD_RUN
from lookahead.verify.rules import GreedyRule

from strategies import batch_rows
from tiny_models import CASES, VOCAB, left_pad, tiny_model, tiny_tokenizer

PAD = 0


MOTIFS = (
    [5, 9, 14, 7, 22, 31] * 4,
    [3, 4, 5, 6, 7] * 3,
    [10, 11, 12, 13, 14, 15, 16, 17, 18] * 3,
    [20, 21, 20, 21, 20],
)


def eos_ending_rows(model, ids, mask, new, picks):
    """EOS ids taken from the greedy continuations, so that some rows end early."""
    free = model.generate(
        ids, attention_mask=mask, do_sample=False, max_new_tokens=new, eos_token_id=None, pad_token_id=PAD
    )
    cont = free[:, ids.shape[1] :]
    return sorted({int(cont[r % cont.shape[0], t % cont.shape[1]]) for r, t in picks}) or None


@pytest.mark.parametrize("family,backend", CASES)
@given(
    rows=batch_rows(),
    config=testing.configs(max_window=6, max_ngram=5, max_guesses=6),
    new=st.integers(1, 32),
    picks=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 31)), max_size=2),
    dict_out=st.booleans(),
    penalty=st.sampled_from([None, 1.3]),
)
def test_batch_equals_generate(family, backend, rows, config, new, picks, dict_out, penalty):
    """Tokens, padding after a row ends, and per-step scores and logits, as ``generate``'s."""
    model = tiny_model(family, backend)
    ids, mask = left_pad(rows)
    kwargs = dict(
        attention_mask=mask,
        max_new_tokens=new,
        pad_token_id=PAD,
        repetition_penalty=penalty,
        eos_token_id=eos_ending_rows(model, ids, mask, new, picks),
    )
    if dict_out:
        kwargs.update(return_dict_in_generate=True, output_scores=True, output_logits=True)
    expected = model.generate(ids, do_sample=False, **kwargs)
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(model, ids, lookahead_config=config, lookahead_stats=stats, **kwargs)
    if not dict_out:
        assert got.tolist() == expected.tolist()
        return
    assert got.sequences.tolist() == expected.sequences.tolist()
    for name in ("scores", "logits"):
        mine, theirs = getattr(got, name), getattr(expected, name)
        assert len(mine) == len(theirs)
        for a, b in zip(mine, theirs):
            assert a.shape == b.shape
            finite = torch.isfinite(b)
            assert torch.equal(finite, torch.isfinite(a))
            torch.testing.assert_close(a[finite], b[finite], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_repetitive_rows_compress(family):
    """Not vacuous: on repetitive rows a batch still accepts several tokens per row-forward
    (priced by a fixed cheap curve: a measured one depends on the machine's load)."""
    model = tiny_model(family, "sdpa")
    ids, mask = left_pad(list(MOTIFS))
    kwargs = dict(attention_mask=mask, max_new_tokens=48, eos_token_id=None, pad_token_id=PAD)
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(model, ids, lookahead_stats=stats, lookahead_costs=CostCurve.linear(0.05), **kwargs)
    assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()
    assert stats.tokens_per_forward > 1.3
    assert stats.forwards < 48


def test_finished_rows_leave_the_batch():
    """A row that hits EOS early stops costing: later forwards run fewer rows."""
    model = tiny_model("llama", "sdpa")
    ids, mask = left_pad(list(MOTIFS))
    eos = eos_ending_rows(model, ids, mask, 40, [(3, 2)])
    kwargs = dict(attention_mask=mask, max_new_tokens=40, eos_token_id=eos, pad_token_id=PAD)
    expected = model.generate(ids, do_sample=False, **kwargs)
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(model, ids, lookahead_stats=stats, **kwargs)
    assert got.tolist() == expected.tolist()
    ended = [r for r in range(4) if expected[r, -1].item() == PAD and expected[r, ids.shape[1] :].eq(PAD).any()]
    assert ended, "the EOS picked should end a row early"
    assert stats.row_forwards < 4 * stats.forwards


def test_stop_strings_and_user_criteria_per_row():
    """Without EOS, a row stopped by a stop string goes on like ``generate``'s until all stop."""
    model, tok = tiny_model("qwen3", "sdpa"), tiny_tokenizer()
    ids, mask = left_pad(list(MOTIFS))
    free = model.generate(
        ids, attention_mask=mask, do_sample=False, max_new_tokens=30, eos_token_id=None, pad_token_id=PAD
    )
    stop = tok.decode(free[1, ids.shape[1] + 4 : ids.shape[1] + 6])
    kwargs = dict(
        attention_mask=mask, max_new_tokens=30, eos_token_id=None, pad_token_id=PAD, stop_strings=[stop], tokenizer=tok
    )
    expected = model.generate(ids, do_sample=False, **kwargs)
    stats = lookahead.LookaheadStats()
    assert lookahead.generate(model, ids, lookahead_stats=stats, **kwargs).tolist() == expected.tolist()
    # every row went on to the longest row's stop: the new tokens are the ones returned
    assert stats.new_tokens == expected.shape[0] * (expected.shape[1] - ids.shape[1])
    kwargs["eos_token_id"] = 2  # with an EOS criterion, stopped rows are padded instead
    expected = model.generate(ids, do_sample=False, **kwargs)
    assert lookahead.generate(model, ids, **kwargs).tolist() == expected.tolist()


def test_custom_generate_entry_point_takes_a_batch():
    model = tiny_model("phi3", "sdpa")
    ids, mask = left_pad(list(MOTIFS[:3]))
    kwargs = dict(attention_mask=mask, max_new_tokens=20, eos_token_id=None, pad_token_id=PAD)
    got = model.generate(ids, custom_generate=lookahead.custom_generate, do_sample=False, **kwargs)
    assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()


def test_sampling_each_row_has_the_models_distribution():
    """Row 1's second sampled token against its exact marginal sum_a p(a) p(b | a)."""
    model = tiny_model("llama", "sdpa")
    rows = [MOTIFS[0][:7], [4, 5, 6]]
    ids, mask = left_pad(rows)
    temperature = 2.0
    with torch.no_grad():
        first = torch.softmax(model(torch.tensor([rows[1]])).logits[0, -1] / temperature, -1)
        both = torch.tensor([rows[1] + [a] for a in range(VOCAB)])
        second = torch.softmax(model(both).logits[:, -1] / temperature, -1)
    marginal = (first[:, None] * second).sum(0).numpy()
    draws = 600
    counts = np.zeros(VOCAB)
    generator = torch.Generator().manual_seed(0)
    config = lookahead.LookaheadConfig(window=3, ngram=3, guesses=3, method="classic")
    for _ in range(draws):
        out = lookahead.generate(
            model,
            ids,
            attention_mask=mask,
            do_sample=True,
            temperature=temperature,
            top_k=0,
            max_new_tokens=2,
            eos_token_id=None,
            pad_token_id=PAD,
            generator=generator,
            lookahead_config=config,
        )
        counts[int(out[1, -1])] += 1
    top = np.argsort(-marginal)[:6]  # the likeliest tokens, the rest pooled
    observed = np.append(counts[top], draws - counts[top].sum())
    expected = draws * np.append(marginal[top], 1 - marginal[top].sum())
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < 22.5  # 6 degrees of freedom, p = 0.001


def test_cache_rows_equal_a_fresh_prefill():
    """After steps that accept different counts per row (holes) and after closing the holes,
    each row's visible cache entries are those of a from-scratch run of its real tokens."""
    model = tiny_model("mistral", "sdpa")
    ids, mask = left_pad(list(MOTIFS))
    stopping = StoppingCriteriaList([MaxLengthCriteria(max_length=ids.shape[1] + 200)])
    config = lookahead.LookaheadConfig(window=3, ngram=4, guesses=4, method="classic")
    decoder = Decoder(
        *(model, config, GreedyRule(None, False), lookahead.LookaheadStats(), stopping, lookahead.KeptState()),
        pad=PAD,
        proposers=classic.proposer_for,
    )
    decoder.prefill(ids, mask)
    cache = decoder.layout

    def check():
        for r, row in enumerate(decoder.live):
            real = row.seq.tokens[ids.shape[1] - len(MOTIFS[r]) : -1]
            out = model(torch.tensor([real]), cache=DynamicCache(), use_cache=True)
            fresh = getattr(out, output_cache_field(type(out)))
            keep = cache.past_visible[r]
            assert int(keep.sum()) == len(real) == int(cache.position[r])
            assert cache.past_pos[r][keep].tolist() == list(range(len(real)))
            for layer, ref in zip(cache.cache.layers, fresh.layers):
                torch.testing.assert_close(layer.keys[r][:, keep], ref.keys[0], atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(layer.values[r][:, keep], ref.values[0], atol=1e-5, rtol=1e-5)

    holes = 0
    for _ in range(6):
        decoder.step()
        holes += int((~cache.past_visible).sum())
        check()
    assert holes > 0
    cache._close_holes()
    check()
    assert cache.past_visible.shape[1] == int(cache.position.max())  # the longest row, no hole left
    decoder.step()
    check()


def test_bad_batches_are_clear_errors():
    model = tiny_model("llama", "sdpa")
    ids, mask = left_pad([[5, 6, 7], [8, 9]])
    right = torch.tensor([[1, 1, 1], [1, 1, 0]])
    with pytest.raises(ValueError, match="right padding.*padding_side"):
        lookahead.generate(model, ids, attention_mask=right, max_new_tokens=4)
    with pytest.raises(ValueError, match="attention_mask must have the shape of input_ids"):
        lookahead.generate(model, ids, attention_mask=mask[:, 1:], max_new_tokens=4)
    with pytest.raises(NotImplementedError, match="num_return_sequences"):
        lookahead.generate(model, ids, attention_mask=mask, max_new_tokens=4, num_return_sequences=2, do_sample=True)
    with pytest.raises(ValueError, match="streamer"):
        lookahead.generate(model, ids, attention_mask=mask, max_new_tokens=4, streamer=TextStreamer(tiny_tokenizer()))


def test_kept_state_remembers_each_row_s_real_text():
    """Each row's text goes to the kept history: its prompt without the padding, then what
    it generated up to where it stopped, then -1."""
    model = tiny_model("llama", "sdpa")
    ids, mask = left_pad(list(MOTIFS[:3]))
    eos = eos_ending_rows(model, ids, mask, 24, [(1, 3)])
    kwargs = dict(attention_mask=mask, max_new_tokens=24, eos_token_id=eos, pad_token_id=PAD)
    expected = model.generate(ids, do_sample=False, **kwargs)
    kept = lookahead.KeptState()
    assert lookahead.generate(model, ids, lookahead_pool=kept, **kwargs).tolist() == expected.tolist()
    texts = []
    for r, prompt in enumerate(MOTIFS[:3]):
        new = expected[r, ids.shape[1] :].tolist()
        ends = [i for i, t in enumerate(new) if t in eos]
        texts += list(prompt) + new[: ends[0] + 1 if ends else len(new)] + [-1]
    assert any(t in eos for t in texts), "some row should stop early"
    assert kept.history.tokens.tolist() == texts


def test_finished_rows_feed_pad_runs_while_scores_are_reported():
    """A row that stopped while scores are reported keeps feeding pad tokens, as
    ``generate``'s finished rows do, ``PAD_RUN`` of them per step after its last token."""
    model = tiny_model("llama", "sdpa")
    ids, mask = left_pad([MOTIFS[0], MOTIFS[2]])
    eos = eos_ending_rows(model, ids, mask, 30, [(0, 2)])
    kwargs = dict(
        attention_mask=mask,
        max_new_tokens=30,
        eos_token_id=eos,
        pad_token_id=PAD,
        return_dict_in_generate=True,
        output_scores=True,
    )
    expected = model.generate(ids, do_sample=False, **kwargs)
    fed = []  # row 0's (tokens, offsets from its root) per forward
    handle = model.register_forward_pre_hook(
        lambda module, args, kw: fed.append(
            (kw["input_ids"][0].tolist(), (kw["position_ids"][0] - kw["position_ids"][0, 0]).tolist())
        ),
        with_kwargs=True,
    )
    try:
        got = lookahead.generate(model, ids, **kwargs)
    finally:
        handle.remove()
    assert got.sequences.tolist() == expected.sequences.tolist()
    assert expected.sequences[0, -1] == PAD and expected.sequences[1, -1] != PAD, "row 0 should stop early"
    # a chain of pads after the root (a batch's filler tokens are not: they sit at offset 0)
    run = ([PAD] * PAD_RUN, list(range(1, 1 + PAD_RUN)))
    assert any((tokens[1 : 1 + PAD_RUN], offsets[1 : 1 + PAD_RUN]) == run for tokens, offsets in fed[1:])


def test_every_guess_source_contributes_in_a_batch():
    """With method="classic" every step has the fixed shape, and each source (the window,
    the copy guess, the pool) is credited with accepted tokens in some row; the forwards and
    their time are counted."""
    model = tiny_model("llama", "sdpa")
    ids, mask = left_pad(list(MOTIFS))
    config = lookahead.LookaheadConfig(window=3, ngram=4, guesses=4, method="classic")
    kwargs = dict(attention_mask=mask, max_new_tokens=40, eos_token_id=None, pad_token_id=PAD)
    stats, rows, spent = lookahead.LookaheadStats(), [], []
    hooks = [
        model.register_forward_pre_hook(
            lambda module, args, kw: rows.append(kw["input_ids"].shape[0]) or spent.append(-time.perf_counter()),
            with_kwargs=True,
        ),
        model.register_forward_hook(lambda module, args, out: spent.append(spent.pop() + time.perf_counter())),
    ]
    try:
        got = lookahead.generate(model, ids, lookahead_config=config, lookahead_stats=stats, **kwargs)
    finally:
        for hook in hooks:
            hook.remove()
    assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()
    assert (stats.forwards, stats.row_forwards) == (len(rows), sum(rows))
    assert sum(spent) <= stats.forward_s < stats.total_s  # each forward's time, inside the stats' timing
    assert stats.plain_steps == 0 and stats.window_steps == stats.steps
    assert all(stats.source_tokens.get(source, 0) > 0 for source in ("window", "copy", "pool")), stats.source_tokens


def test_rows_share_one_pool_and_one_successor_table():
    """What one row's text teaches, every row can guess from (recycled rows ``ngram - 1``
    long, as in one row's decoding)."""
    model = tiny_model("llama", "sdpa")
    ids, mask = left_pad(list(MOTIFS))
    stopping = StoppingCriteriaList([MaxLengthCriteria(max_length=ids.shape[1] + 8)])
    config = lookahead.LookaheadConfig(window=3, ngram=4, guesses=4, successors=2)
    decoder = Decoder(
        model, config, GreedyRule(None, False), lookahead.LookaheadStats(), stopping, lookahead.KeptState(), pad=PAD
    )
    rows_of_logits = []
    handle = model.register_forward_hook(lambda module, args, out: rows_of_logits.append(out.logits.shape[1]))
    try:
        decoder.prefill(ids, mask)
    finally:
        handle.remove()
    assert rows_of_logits == [1]  # the prefill computes the last position's logits only
    pools = {id(source.pool) for row in decoder.rows for source in row.proposer.sources if source.name == "pool"}
    tables = {
        id(source.table) for row in decoder.rows for source in row.proposer.sources if source.name == "successors"
    }
    assert len(pools) == len(tables) == 1 and decoder.rows[0].proposer.kept.pool is not None
    table = decoder.rows[0].proposer.kept.successors
    assert table is not None and (table.k, table.length) == (2, config.ngram - 1)


def test_batch_with_recycled_guesses_equals_greedy():
    """A batch shares one successor table between its rows (its ``KeptState``'s); with no other
    source on, recycled guesses are what it accepts beyond one token a step."""
    model = tiny_model("llama", "sdpa")
    ids = torch.tensor([[0, 0, 5, 6, 7, 8, 9, 5, 6], [4, 8, 15, 4, 8, 15, 4, 8, 15]])
    kwargs = dict(max_new_tokens=24, eos_token_id=None, pad_token_id=0, attention_mask=(ids != 0).long())
    config = lookahead.LookaheadConfig(
        window=0, guesses=0, copy_length=0, prompt_ngrams=False, method="classic", successors=2
    )
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(model, ids, lookahead_config=config, lookahead_stats=stats, **kwargs)
    assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()
    assert stats.source_tokens.get("successors", 0) > 0


def test_rows_fill_the_width_the_widest_row_pays_for(monkeypatch):
    """A batch step is as wide as its widest row; a narrower row's draft budget fills that
    room with more of its candidates (the forward pays for it anyway), never past it, and the
    batch stays exact."""
    from lookahead.step.rows import Row

    model = tiny_model("llama", "sdpa")
    ids, mask = left_pad([[5, 9, 14, 7, 22, 31] * 4, [3, 41, 12, 8, 30, 17, 2, 44, 6, 25, 39]])
    kwargs = dict(attention_mask=mask, max_new_tokens=32, eos_token_id=None, pad_token_id=0)
    seen = []
    real = Row.refill

    def refill(self, plan, width):
        out = real(self, plan, width)
        seen.append((len(plan.tokens), len(out.tokens), width))
        return out

    monkeypatch.setattr(Row, "refill", refill)
    got = lookahead.generate(model, ids, lookahead_costs=CostCurve.linear(0.05), **kwargs)
    assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()
    assert all(after <= width and after >= before for before, after, width in seen)
    assert any(after > before for before, after, _ in seen), seen
