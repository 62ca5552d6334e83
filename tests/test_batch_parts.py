"""The batch step's mask and cache moves, against the single-row mask and plain-Python copies.

A batch cache has one length for all rows: a row's committed entries sit among left padding
and holes (entries of guesses a row did not accept while another row accepted more). The
batch mask must show each row exactly what the single-row mask shows it over a cache without
holes (``tests/mask_reference.py`` derives that one from first principles), and the cache
moves must put every row's entries where the decoder says.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from transformers.cache_utils import DynamicCache

from lookahead.cache import commit_rows, gather_rows, trim_rows
from lookahead.mask import StepMask, batch_masks, stack_steps
from mask_reference import reference_mask
from strategies import mask_cases


@st.composite
def batch_steps(draw):
    """1-4 rows, each with its own step shape and trie and ``past_len`` committed entries,
    laid out in one cache: 0-2 holes before each entry and after the last, then left padding
    up to the longest row. Returns the rows ``(levels, width, tree, past_len)`` and
    ``past_keep``/``past_pos`` ``[B, L]`` (holes and padding: not kept, position 0)."""
    rows, layouts = [], []
    for _ in range(draw(st.integers(1, 4))):
        levels, width, tree, _, past_len, _, _ = draw(mask_cases())
        holes = draw(st.lists(st.integers(0, 2), min_size=past_len + 1, max_size=past_len + 1))
        layout = []
        for pos in range(past_len + 1):
            layout += [(False, 0)] * holes[pos] + ([(True, pos)] if pos < past_len else [])
        rows.append((levels, width, tree, past_len))
        layouts.append(layout)
    length = max(len(layout) for layout in layouts)
    layouts = [[(False, 0)] * (length - len(layout)) + layout for layout in layouts]
    keep = torch.tensor([[k for k, _ in layout] for layout in layouts], dtype=torch.bool).reshape(len(rows), length)
    pos = torch.tensor([[p for _, p in layout] for layout in layouts], dtype=torch.long).reshape(len(rows), length)
    return rows, keep, pos


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hybrid", [False, True])
@given(case=batch_steps(), window=st.one_of(st.none(), st.integers(1, 7)))
def test_batch_mask_shows_each_row_its_own_step(case, window, hybrid, dtype):
    """Row r of the batch mask, its holes and padding dropped, is the single-row mask of its
    cache without them; holes, padding and other rows' filler tokens are never seen."""
    rows, past_keep, past_pos = case
    groups = {"full_attention": None, "sliding_attention": window} if hybrid else {None: window}
    steps = [StepMask(levels, width, groups, dtype, "cpu") for levels, width, _, _ in rows]
    offsets = [step.offsets(tree) for step, (_, _, tree, _) in zip(steps, rows)]
    allowed = [step.allowed(tree) for step, (_, _, tree, _) in zip(steps, rows)]
    width = max(o.shape[0] for o in offsets)
    stacked_offsets, stacked_allowed = stack_steps(offsets, allowed, width)
    positions = torch.tensor([past_len for *_, past_len in rows])
    masks = batch_masks(stacked_offsets, stacked_allowed, positions, past_keep, past_pos, groups, dtype)
    if not hybrid:
        masks = {None: masks}
    assert set(masks) == set(groups)
    length, blocked = past_keep.shape[1], torch.finfo(dtype).min
    for name, group_window in groups.items():
        mask = masks[name]
        assert mask.shape == (len(rows), 1, width, length + width) and mask.dtype == dtype
        assert torch.all((mask == 0) | (mask == blocked))
        for r, (levels, width_r, tree, past_len) in enumerate(rows):
            q = offsets[r].shape[0]
            seen = mask[r, 0, :q] == 0
            entries = past_keep[r].nonzero().reshape(-1).tolist()
            expected = reference_mask(levels, width_r, tree, group_window, past_len, 0, [True] * past_len)
            columns = entries + list(range(length, length + q))
            assert (seen[:, columns].numpy() == expected).all()
            assert not seen[:, :length][:, ~past_keep[r]].any()  # holes and padding
            assert not seen[:, length + q:].any()  # this row's filler tokens


@given(st.lists(st.integers(0, 6), min_size=1, max_size=4), st.integers(0, 3), st.data())
def test_stack_steps_pads_each_row_with_fillers_that_see_themselves(sizes, extra, data):
    width = max(sizes) + extra
    offsets = [torch.tensor(data.draw(st.lists(st.integers(0, 9), min_size=q, max_size=q)), dtype=torch.long)
               for q in sizes]
    allowed = [torch.tensor(data.draw(st.lists(st.lists(st.booleans(), min_size=q, max_size=q), min_size=q,
                                               max_size=q)), dtype=torch.bool).reshape(q, q) for q in sizes]
    out_offsets, out_allowed = stack_steps(offsets, allowed, width)
    assert out_offsets.shape == (len(sizes), width) and out_offsets.dtype == torch.long
    assert out_allowed.shape == (len(sizes), width, width) and out_allowed.dtype == torch.bool
    for r, q in enumerate(sizes):
        assert out_offsets[r].tolist() == offsets[r].tolist() + [0] * (width - q)
        expected = torch.eye(width, dtype=torch.bool)
        expected[:q] = False
        expected[:q, :q] = allowed[r]
        assert torch.equal(out_allowed[r], expected)


def random_cache(rows: int, length: int, layers: int = 2) -> DynamicCache:
    cache = DynamicCache()
    for layer in range(layers):
        cache.update(torch.randn(rows, 2, length, 3), torch.randn(rows, 2, length, 3), layer)
    return cache


def entries(cache: DynamicCache) -> list:
    """Per layer, keys and values as nested lists ``[row][position][head][dim]``."""
    return [[t.permute(0, 2, 1, 3).tolist() for t in (layer.keys, layer.values)] for layer in cache.layers]


@given(rows=st.integers(1, 4), past_len=st.integers(0, 5), step=st.integers(1, 6), data=st.data())
def test_commit_rows_moves_each_row_s_kept_entries(rows, past_len, step, data):
    """Row r keeps step entries ``keep[r]`` (any indices, repeats allowed: holes repeat one)."""
    m = data.draw(st.integers(1, step))
    keep = data.draw(st.lists(st.lists(st.integers(0, step - 1), min_size=m, max_size=m), min_size=rows,
                              max_size=rows))
    cache = random_cache(rows, past_len + step)
    before = entries(cache)
    commit_rows(cache, past_len, torch.tensor(keep))
    expected = [[[row[:past_len] + [row[past_len + k] for k in kept] for row, kept in zip(t, keep)] for t in layer]
                for layer in before]
    assert entries(cache) == expected


@given(rows=st.integers(1, 4), length=st.integers(1, 8), data=st.data())
def test_trim_and_gather_rows(rows, length, data):
    cut = data.draw(st.integers(0, length))
    cache = random_cache(rows, length)
    before = entries(cache)
    trim_rows(cache, cut)
    assert entries(cache) == [[[row[:cut] for row in t] for t in layer] for layer in before]
    cache = random_cache(rows, length)
    before = entries(cache)
    size = data.draw(st.integers(0, length))
    index = data.draw(st.lists(st.lists(st.integers(0, length - 1), min_size=size, max_size=size), min_size=rows,
                               max_size=rows))
    gather_rows(cache, torch.tensor(index, dtype=torch.long).reshape(rows, size))
    assert entries(cache) == [[[[row[i] for i in idx] for row, idx in zip(t, index)] for t in layer]
                              for layer in before]


def test_batch_step_tensors_live_on_the_rows_device():
    """Offsets, attention and masks are built where the rows' tensors are (here torch's
    shape-only ``meta`` device, which a tensor left on the CPU would clash with)."""
    meta = dict(device="meta")
    offsets = [torch.zeros(3, dtype=torch.long, **meta), torch.zeros(2, dtype=torch.long, **meta)]
    allowed = [torch.ones(3, 3, dtype=torch.bool, **meta), torch.ones(2, 2, dtype=torch.bool, **meta)]
    stacked_offsets, stacked_allowed = stack_steps(offsets, allowed, 4)
    assert stacked_offsets.device.type == stacked_allowed.device.type == "meta"
    groups = {"full_attention": None, "sliding_attention": 3}
    masks = batch_masks(stacked_offsets, stacked_allowed, torch.zeros(2, dtype=torch.long, **meta),
                        torch.ones(2, 5, dtype=torch.bool, **meta), torch.zeros(2, 5, dtype=torch.long, **meta),
                        groups, torch.float16)
    for mask in masks.values():
        assert mask.device.type == "meta" and mask.dtype == torch.float16 and mask.shape == (2, 1, 4, 9)
