"""``sampling.warpers``: generate's processors applied one by one, a top-k then top-p from the
row's top k alone, and a top-p alone over radix-sorted values, give ``LogitsProcessorList``'s
scores bit for bit."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from transformers import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from lookahead.sampling.sort_kernels import cut_values, sort_rows
from lookahead.sampling.warpers import SMALL, chain, top_k_top_p, top_p

IDS = torch.zeros(1, 3, dtype=torch.long)


VOCABS = [2, 7, 60, 300, 8192]


@st.composite
def rows(draw, vocab=None):
    """A float32 row ``[1, V]``: plain, rounded to bfloat16 or to integers (ties everywhere),
    with some entries -inf or one NaN."""
    vocab = vocab or draw(st.sampled_from(VOCABS))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    row = torch.randn(1, vocab, generator=gen) * draw(st.sampled_from([0.1, 1.0, 4.0, 12.0]))
    rounding = draw(st.sampled_from(["none", "bfloat16", "integer"]))
    if rounding == "bfloat16":
        row = row.bfloat16().float()
    elif rounding == "integer":
        row = row.round()
    if draw(st.booleans()):
        row[0, torch.randint(0, vocab, (vocab // 2,), generator=gen)] = -math.inf
    if draw(st.integers(0, 9)) == 0:
        row[0, int(torch.randint(0, vocab, (1,), generator=gen))] = math.nan
    return row


@st.composite
def batches(draw):
    """Rows ``[n, V]`` as :func:`rows` draws them, some with signed zeros or +inf."""
    vocab = draw(st.sampled_from(VOCABS))
    batch = torch.cat([draw(rows(vocab)) for _ in range(draw(st.integers(1, 3)))])
    extra = draw(st.sampled_from(["none", "zeros", "inf"]))
    if extra == "zeros":
        batch[:, : batch.shape[1] // 2] = 0.0
        batch[:, : batch.shape[1] // 4] = -0.0
    elif extra == "inf":
        batch[-1, -1] = math.inf
    return batch


@st.composite
def warper_lists(draw):
    """Warpers in ``generate``'s order, top-k and top-p often together."""
    warpers = [TemperatureLogitsWarper(draw(st.sampled_from([0.5, 0.7, 1.0, 1.5])))]
    if draw(st.integers(0, 3)):
        warpers.append(TopKLogitsWarper(draw(st.sampled_from([1, 2, 5, 50, 64, 2000])), min_tokens_to_keep=1))
    if draw(st.integers(0, 3)):
        keep = draw(st.integers(1, 3))
        warpers.append(TopPLogitsWarper(draw(st.sampled_from([0.0, 0.3, 0.9, 0.95, 1.0])), min_tokens_to_keep=keep))
    if draw(st.booleans()):
        warpers.append(MinPLogitsWarper(draw(st.sampled_from([0.05, 0.2]))))
    return LogitsProcessorList(warpers)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bits, NaN where NaN."""
    return (
        a.shape == b.shape and torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))
    )


@given(rows(), warper_lists())
def test_the_chain_gives_the_list_s_scores_bit_for_bit(row, warpers):
    assert same(chain(warpers)(IDS, row.clone()), warpers(IDS, row.clone()))


@given(rows(), st.sampled_from([1, 5, 50]), st.sampled_from([0.5, 0.9, 0.95]), st.integers(1, 3))
def test_top_k_top_p_is_the_two_warpers_or_declines(row, k, p, keep):
    """Wherever it answers, it answers what the two warpers give."""
    want = TopPLogitsWarper(p, min_tokens_to_keep=keep)(IDS, TopKLogitsWarper(k)(IDS, row.clone()))
    got = top_k_top_p(row.clone(), k, p, keep)
    assert got is None or same(got, want)


@given(batches(), st.sampled_from([0.0, 0.3, 0.9, 0.95, 1.0]), st.integers(1, 3))
def test_top_p_is_the_warper_or_declines(batch, p, keep):
    """Wherever it answers, it answers what ``TopPLogitsWarper`` gives, row by row of a batch."""
    want = TopPLogitsWarper(p, min_tokens_to_keep=keep)(IDS, batch.clone())
    got = top_p(batch.clone(), p, keep, -math.inf)
    assert got is None or same(got, want)


@given(batches())
def test_the_radix_sort_gives_torch_sort_s_values(batch):
    """The same values in the same order (torch.equal holds -0.0 equal to 0.0, whose order
    the two sorts may differ in); it flags rows with a NaN or no finite maximum."""
    ascending = torch.empty_like(batch)
    clean = sort_rows(batch.numpy(), ascending.numpy())
    top = batch.max(dim=-1).values
    assert clean == bool(not batch.isnan().any() and top.isfinite().all())
    if not batch.isnan().any():
        assert torch.equal(ascending, torch.sort(batch).values)


def test_the_cut_is_the_lowest_value_kept_or_a_split_tie():
    ascending = torch.tensor([[-1.0, 0.5, 0.5, 2.0], [-1.0, 0.5, 0.5, 2.0]])
    cut = torch.empty(2)
    assert cut_values(ascending.numpy(), np.array([1, 0]), cut.numpy())
    assert cut.tolist() == [0.5, -math.inf]
    assert not cut_values(ascending.numpy(), np.array([0, 2]), cut.numpy())
    assert cut_values(ascending.numpy(), np.array([3, 3]), cut.numpy()) and cut.tolist() == [2.0, 2.0]


def test_top_p_answers_on_plain_rows_and_on_bfloat16_ones():
    """The fast path is taken (bench's sampling is top-p alone, top_k=0): every float32 row of
    a batch, and bfloat16 rows where no tie straddles the boundary. Gaussian rows rounded to
    bfloat16 tie densely there (the embedded model's rows: 79% answered, 2026-12-04)."""
    gen = torch.Generator().manual_seed(1)
    plain = torch.randn(20, 8192, generator=gen) * 3 / 0.7
    assert top_p(plain, 0.95, 1, -math.inf) is not None
    rounded = plain.bfloat16().float()
    assert sum(top_p(row[None], 0.95, 1, -math.inf) is not None for row in rounded) >= 3


def test_a_row_with_nothing_to_remove_comes_back_a_copy():
    row = torch.tensor([[1.0, 2.0, 3.0]])
    got = top_p(row, 1.0, 1, -math.inf)
    assert torch.equal(got, row) and got.data_ptr() != row.data_ptr()


def test_it_answers_for_generate_s_defaults_on_plain_and_bfloat16_rows():
    """The fast path is taken on ordinary rows (generate's top_k = 50, top-p 0.95), so the
    chain does not merely fall back: every float32 row, and most rows rounded to bfloat16,
    whose ties at the k-th value it keeps too (ties at the top-p boundary it declines)."""
    gen = torch.Generator().manual_seed(0)
    plain = [torch.randn(1, 8192, generator=gen) * 3 / 0.7 for _ in range(20)]
    assert all(top_k_top_p(row, 50, 0.95, 1) is not None for row in plain)
    rounded = [row.bfloat16().float() for row in plain]
    assert sum(top_k_top_p(row, 50, 0.95, 1) is not None for row in rounded) >= 10


def test_a_tie_at_the_k_th_value_keeps_every_tied_entry():
    row = torch.tensor([[5.0, 4.0, 3.0, 3.0, 3.0, 1.0]])
    got = top_k_top_p(row.clone(), 3, 1.0, 1)
    want = TopKLogitsWarper(3)(IDS, row.clone())
    assert got is not None and torch.equal(got, want)
    assert torch.isfinite(got).sum() == 5


def test_a_tie_split_by_the_top_p_boundary_is_left_to_the_warper():
    """Of two equal lowest entries top-p removes one only: which, the warper's sort decides."""
    row = torch.log(torch.tensor([[0.6, 0.3, 0.05, 0.05]]))
    cumulative = row.softmax(-1).sort().values.cumsum(-1)  # ascending: 0.05, 0.1, ...
    assert cumulative[0, 0] <= 0.06 < cumulative[0, 1]
    assert top_k_top_p(row, 4, 0.94, 1) is None
    warpers = LogitsProcessorList([TopKLogitsWarper(4), TopPLogitsWarper(0.94)])
    assert same(chain(warpers)(IDS, row.clone()), warpers(IDS, row.clone()))


@pytest.mark.parametrize("size", [SMALL + 1])
def test_a_top_k_past_small_is_left_to_the_warpers(size):
    row = torch.randn(1, size + 10)
    assert top_k_top_p(row, size, 0.9, 1) is None


def test_processors_that_take_more_arguments_keep_the_list():
    class NeedsMore:
        def __call__(self, input_ids, scores, cur_len):
            return scores

    warpers = LogitsProcessorList([TemperatureLogitsWarper(0.7), NeedsMore()])
    assert chain(warpers) is warpers


def test_other_processors_run_as_they_are():
    ids = torch.tensor([[1, 2, 2]])
    row = torch.randn(1, 10)
    warpers = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.3), TopKLogitsWarper(4), TopPLogitsWarper(0.8)])
    assert same(chain(warpers)(ids, row.clone()), warpers(ids, row.clone()))
