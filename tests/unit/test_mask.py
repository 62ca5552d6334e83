"""The step mask (``lookahead.step.mask``): what each fed token may attend to.

A step feeds ``[root | trie of guesses]`` at once (the classic shape adds the Jacobi window's
upper levels after the trie, its level 0 the trie's first row). The single-row mask must
equal a reference built from first principles (positions and ancestry,
``tests/helpers/mask_reference.py``), apply a sliding window between the step's own tokens
(not only against the cache), come in the model's dtype and on its device, and give hybrid
models one mask per layer type. The batch mask must show each row exactly what the single-row
mask shows it, over a cache with left padding and holes (entries of guesses a row did not
accept while another row accepted more); ``stack_steps`` pads rows with fillers that see
only themselves.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lookahead.classic import classic_layout
from lookahead.step.host import blocked_words, mask_words
from lookahead.step.mask import StepMask, batch_masks, stack_steps
from lookahead.verify.tree import GuessTree

from mask_reference import case_layout, reference_mask
from strategies import mask_cases
from tiny_models import SLIDING, VOCAB

tokens = st.integers(3, VOCAB - 1)


@given(mask_cases())
def test_step_mask_equals_the_reference(case):
    levels, width, tree, window, past_len, kv_offset, past_visible = case
    step = StepMask({None: window}, torch.float32, "cpu")
    layout = case_layout(levels, width, tree)
    offsets, mask = step.build(layout, {None: (kv_offset, past_len)}, torch.tensor(past_visible, dtype=torch.bool))
    expected = reference_mask(levels, width, tree, window, past_len, kv_offset, past_visible)
    assert mask.shape == (1, 1, *expected.shape) and mask.dtype == torch.float32
    blocked = torch.finfo(torch.float32).min
    assert torch.all((mask == 0) | (mask == blocked))
    assert ((mask[0, 0] == 0).numpy() == expected).all()
    upper = [1 + i + lv for lv in range(1, levels) for i in range(width)]
    assert offsets.tolist()[: 1 + width] == list(range(1 + width))  # the root, then level 0
    assert offsets.tolist()[1 + tree.size :] == upper


@given(mask_cases(), st.sampled_from([torch.float32, torch.bfloat16, torch.float16]))
def test_the_host_made_mask_equals_the_step_mask(case, dtype):
    """A CPU step's mask made on the host in one kernel (``host.mask_words`` over the step's
    layout, written as the dtype's bits) is ``StepMask.build``'s, value for value and dtype
    for dtype, where every layer attends the whole past (the only case the decoder makes it
    on the host)."""
    levels, width, tree, _, past_len, _, past_visible = case
    step = StepMask({None: None}, dtype, "cpu")
    layout = case_layout(levels, width, tree)
    offsets, expected = step.build(layout, {None: (0, past_len)}, torch.tensor(past_visible, dtype=torch.bool))
    host_offsets, allowed = layout
    words = mask_words(np.asarray(past_visible, dtype=bool), allowed, blocked_words(dtype))
    mask = torch.from_numpy(words).view(dtype)
    assert mask.dtype == expected.dtype and torch.equal(mask, expected)
    assert host_offsets.tolist() == offsets.tolist()


@given(mask_cases(), st.integers(1, 7))
def test_hybrid_models_get_one_mask_per_layer_type(case, window):
    """Full and sliding layers (gemma2, qwen2 with max_window_layers) each get their own
    mask, over the cache stretch their layers still hold."""
    levels, width, tree, _, past_len, kv_offset, past_visible = case
    groups = {"full_attention": None, "sliding_attention": window}
    step = StepMask(groups, torch.float32, "cpu")
    sizes = {"full_attention": (0, past_len), "sliding_attention": (kv_offset, past_len)}
    _, masks = step.build(case_layout(levels, width, tree), sizes, torch.tensor(past_visible, dtype=torch.bool))
    assert set(masks) == set(groups)
    for name, (offset, _) in sizes.items():
        expected = reference_mask(levels, width, tree, groups[name], past_len, offset, past_visible)
        assert ((masks[name][0, 0] == 0).numpy() == expected).all()


@given(mask_cases())
def test_step_mask_in_the_model_dtype(case):
    """A bf16 model gets a bf16 mask whose blocked entries are bf16's most negative value."""
    levels, width, tree, window, past_len, kv_offset, past_visible = case
    step = StepMask({None: window}, torch.bfloat16, "cpu")
    layout = case_layout(levels, width, tree)
    _, mask = step.build(layout, {None: (kv_offset, past_len)}, torch.tensor(past_visible, dtype=torch.bool))
    expected = reference_mask(levels, width, tree, window, past_len, kv_offset, past_visible)
    assert mask.dtype == torch.bfloat16
    assert ((mask[0, 0] == 0).numpy() == expected).all()
    assert (mask[0, 0][torch.from_numpy(~expected)] == torch.finfo(torch.bfloat16).min).all()


def test_step_mask_lives_on_the_model_device():
    """Positions and masks are built on the model's device (here torch's shape-only ``meta``
    device, which any tensor left on the CPU would clash with)."""
    tree = GuessTree.build(np.array([[4, 5, -1], [4, 6, 7], [8, -1, -1]]))
    groups = {"full_attention": None, "sliding_attention": 3}
    step = StepMask(groups, torch.float16, "meta")
    sizes = {"full_attention": (0, 6), "sliding_attention": (4, 6)}
    offsets, masks = step.build(classic_layout(tree, 2, 2), sizes, torch.ones(6, dtype=torch.bool, device="meta"))
    q = 1 + tree.size + 2
    assert offsets.device.type == "meta" and offsets.shape == (q,)
    for name, (kv_offset, past_len) in sizes.items():
        assert masks[name].device.type == "meta" and masks[name].dtype == torch.float16
        assert masks[name].shape == (1, 1, q, past_len - kv_offset + q)


def test_a_path_as_long_as_the_window_drops_the_root():
    """The off-by-one the reference would also catch, spelled out: at depth ``SLIDING`` the
    root is exactly ``SLIDING`` positions back, outside the window; one level up it is inside."""
    tree = GuessTree.build(np.arange(3, 3 + SLIDING, dtype=np.int64)[None])
    step = StepMask({None: SLIDING}, torch.float32, "cpu")
    _, mask = step.build(tree.layout(), {None: (0, 0)}, torch.zeros(0, dtype=torch.bool))
    sees_root = (mask[0, 0, :, 0] == 0).tolist()
    assert sees_root == [True] * SLIDING + [False]


@st.composite
def batch_steps(draw):
    """1-4 rows, each with its own step shape and trie and ``past_len`` committed entries,
    laid out in one cache: 0-2 holes before each entry and after the last, then left padding
    up to the longest row. Returns the rows ``(levels, width, tree, past_len)`` and
    ``past_visible``/``past_pos`` ``[B, L]`` (holes and padding: not kept, position 0)."""
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
    rows, past_visible, past_pos = case
    groups = {"full_attention": None, "sliding_attention": window} if hybrid else {None: window}
    layouts = [case_layout(levels, width, tree) for levels, width, tree, _ in rows]
    offsets = [torch.from_numpy(offsets) for offsets, _ in layouts]
    allowed = [torch.from_numpy(allowed) for _, allowed in layouts]
    width = max(o.shape[0] for o in offsets)
    stacked_offsets, stacked_allowed = stack_steps(offsets, allowed, width)
    positions = torch.tensor([past_len for *_, past_len in rows])
    masks = batch_masks(stacked_offsets, stacked_allowed, positions, past_visible, past_pos, groups, dtype)
    if not hybrid:
        masks = {None: masks}
    assert set(masks) == set(groups)
    length, blocked = past_visible.shape[1], torch.finfo(dtype).min
    for name, group_window in groups.items():
        mask = masks[name]
        assert mask.shape == (len(rows), 1, width, length + width) and mask.dtype == dtype
        assert torch.all((mask == 0) | (mask == blocked))
        for r, (levels, width_r, tree, past_len) in enumerate(rows):
            q = offsets[r].shape[0]
            seen = mask[r, 0, :q] == 0
            entries = past_visible[r].nonzero().reshape(-1).tolist()
            expected = reference_mask(levels, width_r, tree, group_window, past_len, 0, [True] * past_len)
            columns = entries + list(range(length, length + q))
            assert (seen[:, columns].numpy() == expected).all()
            assert not seen[:, :length][:, ~past_visible[r]].any()  # holes and padding
            assert not seen[:, length + q :].any()  # this row's filler tokens


@given(st.lists(st.integers(0, 6), min_size=1, max_size=4), st.integers(0, 3), st.data())
def test_stack_steps_pads_each_row_with_fillers_that_see_themselves(sizes, extra, data):
    width = max(sizes) + extra
    offsets = [
        torch.tensor(data.draw(st.lists(st.integers(0, 9), min_size=q, max_size=q)), dtype=torch.long) for q in sizes
    ]
    allowed = [
        torch.tensor(
            data.draw(st.lists(st.lists(st.booleans(), min_size=q, max_size=q), min_size=q, max_size=q)),
            dtype=torch.bool,
        ).reshape(q, q)
        for q in sizes
    ]
    out_offsets, out_allowed = stack_steps(offsets, allowed, width)
    assert out_offsets.shape == (len(sizes), width) and out_offsets.dtype == torch.long
    assert out_allowed.shape == (len(sizes), width, width) and out_allowed.dtype == torch.bool
    for r, q in enumerate(sizes):
        assert out_offsets[r].tolist() == offsets[r].tolist() + [0] * (width - q)
        expected = torch.eye(width, dtype=torch.bool)
        expected[:q] = False
        expected[:q, :q] = allowed[r]
        assert torch.equal(out_allowed[r], expected)


def test_batch_step_tensors_live_on_the_rows_device():
    """Offsets, attention and masks are built where the rows' tensors are (here torch's
    shape-only ``meta`` device, which a tensor left on the CPU would clash with)."""
    meta = dict(device="meta")
    offsets = [torch.zeros(3, dtype=torch.long, **meta), torch.zeros(2, dtype=torch.long, **meta)]
    allowed = [torch.ones(3, 3, dtype=torch.bool, **meta), torch.ones(2, 2, dtype=torch.bool, **meta)]
    stacked_offsets, stacked_allowed = stack_steps(offsets, allowed, 4)
    assert stacked_offsets.device.type == stacked_allowed.device.type == "meta"
    groups = {"full_attention": None, "sliding_attention": 3}
    masks = batch_masks(
        stacked_offsets,
        stacked_allowed,
        torch.zeros(2, dtype=torch.long, **meta),
        torch.ones(2, 5, dtype=torch.bool, **meta),
        torch.zeros(2, 5, dtype=torch.long, **meta),
        groups,
        torch.float16,
    )
    for mask in masks.values():
        assert mask.device.type == "meta" and mask.dtype == torch.float16 and mask.shape == (2, 1, 4, 9)
