"""One round trip per step: the host uploads a step's inputs once and reads its logits once
(``lookahead.step.host``), plus one upload of the commit's index when the accepted path is not contiguous.

On a GPU every ``.cpu()``, ``.tolist()``, ``.item()``, ``int()`` or ``bool()`` of a device tensor
waits for the device, and so does a copy from pageable host memory. These tests run on the CPU,
where nothing waits, so they count reads of tensors: what ``fetch`` returns are numpy arrays,
read freely, and a read of any tensor inside a decoding step is a transfer a GPU would wait
for. Host data may reach the device only through ``upload``: a ``torch.tensor`` or
``torch.from_numpy`` in the package during a step is another copy.
"""

from __future__ import annotations

import traceback

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import lookahead
from lookahead.step import host
from lookahead.step.loop import Decoder

from tiny_models import left_pad, tiny_model

READS = ("cpu", "tolist", "item", "numpy", "__int__", "__bool__", "__float__", "__index__")


class Reads:
    """Counts, inside decoding steps, ``fetch`` calls and reads of tensors outside it."""

    def __init__(self, monkeypatch):
        self.fetches = self.steps = self.other = self.uploads = self.copies = 0
        self.where: list[str] = []
        self._in_step = False
        real_fetch = host.fetch

        def fetch(logits, k=0):  # its own read is the one transfer a step makes
            self.fetches += self._in_step
            inside, self._in_step = self._in_step, False
            try:
                preds, top, scores = real_fetch(logits, k)
            finally:
                self._in_step = inside
            return preds, top, scores

        def counted_upload(real):  # what goes up counts once, and is not itself a read
            def send(*args):
                self.uploads += self._in_step
                inside, self._in_step = self._in_step, False
                try:
                    return real(*args)
                finally:
                    self._in_step = inside

            return send

        upload = counted_upload(host.upload)
        monkeypatch.setattr("lookahead.step.loop.fetch", fetch)
        for module in (
            "lookahead.step.single",
            "lookahead.step.batch",
            "lookahead.step.cache",
            "lookahead.step.static",
        ):
            monkeypatch.setattr(f"{module}.upload", upload)
        host_views = counted_upload(host.views)

        def views(*arrays):  # a CPU step's inputs made on the host: its one "upload"
            made = host_views(*arrays)
            assert all(t.device.type == "cpu" for t in made)
            return made

        monkeypatch.setattr("lookahead.step.single.views", views)
        for name in ("tensor", "from_numpy"):
            monkeypatch.setattr(torch, name, self._made(getattr(torch, name), name))
        for name in READS:
            monkeypatch.setattr(torch.Tensor, name, self._counted(getattr(torch.Tensor, name), name))
        monkeypatch.setattr(Decoder, "step", self._stepped(Decoder.step))

    def _counted(self, real, name):
        def read(tensor, *args, **kwargs):
            if self._in_step:
                self.other += 1
                self.where.append(f"{name} at {traceback.extract_stack(limit=2)[0]}")
            return real(tensor, *args, **kwargs)

        return read

    def _made(self, real, name):
        def make(*args, **kwargs):
            caller = traceback.extract_stack(limit=2)[0]
            if self._in_step and "/lookahead/" in caller.filename:
                self.copies += 1
                self.where.append(f"torch.{name} at {caller}")
            return real(*args, **kwargs)

        return make

    def _stepped(self, real):
        def step(decoder, *args):
            self._in_step, self.steps = True, self.steps + 1
            try:
                return real(decoder, *args)
            finally:
                self._in_step = False

        return step


@pytest.mark.parametrize("on_host", [True, False], ids=["host-made steps", "device-made masks"])
@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_a_greedy_step_reads_its_logits_once(monkeypatch, cache_implementation, on_host):
    """Full shape (window, pool, copy and recycled guesses), greedy, one row: per step one
    fetch and no other read of a device tensor, whether the step's mask is made on the host
    (the CPU path) or, as on a device, from the uploaded layout where the model runs."""
    if not on_host:
        monkeypatch.setattr("lookahead.step.single.host_masks", lambda *args: False)
    model = tiny_model("llama", "sdpa")
    ids = torch.tensor([[5, 9, 14, 7, 22, 31] * 4])
    config = lookahead.LookaheadConfig(method="classic")
    kwargs = dict(max_new_tokens=40, eos_token_id=None, pad_token_id=0, cache_implementation=cache_implementation)
    expected = model.generate(ids, do_sample=False, **kwargs)
    reads = Reads(monkeypatch)
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(model, ids, lookahead_config=config, lookahead_stats=stats, **kwargs)
    assert got.tolist() == expected.tolist()
    assert reads.steps == stats.steps > 5 and stats.tokens_per_forward > 1.5
    assert reads.fetches == reads.steps and reads.other == 0 and reads.copies == 0, reads.where[:5]
    assert reads.steps <= reads.uploads <= 2 * reads.steps  # the inputs, and a moved path's index


@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_a_batch_step_reads_its_logits_once(monkeypatch, cache_implementation):
    model = tiny_model("llama", "sdpa")
    ids, mask = left_pad([[5, 9, 14, 7, 22, 31] * 4, [3, 4, 5, 6, 7] * 3, [10, 11, 12] * 4])
    kwargs = dict(
        attention_mask=mask,
        max_new_tokens=24,
        eos_token_id=None,
        pad_token_id=0,
        cache_implementation=cache_implementation,
    )
    expected = model.generate(ids, do_sample=False, **kwargs)
    reads = Reads(monkeypatch)
    got = lookahead.generate(model, ids, lookahead_config=lookahead.LookaheadConfig(method="classic"), **kwargs)
    assert got.tolist() == expected.tolist()
    assert reads.steps > 3 and reads.fetches == reads.steps
    assert reads.other == 0 and reads.copies == 0, reads.where[:5]
    assert reads.uploads == 2 * reads.steps  # the inputs, and the commit's counts with its index


def test_wait_synchronises_the_logits_cuda_device_only(monkeypatch):
    """The forward's clock stops after its kernels: on CUDA ``wait`` synchronises the logits'
    device (the last of a device_map); a CPU tensor passes through without a call. (No GPU
    here: the CUDA tensor is a stand-in with the two attributes ``wait`` reads.)"""
    from types import SimpleNamespace

    from lookahead.step.host import wait

    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    cpu = torch.zeros(2)
    assert wait(cpu) is cpu and calls == []
    fake = SimpleNamespace(is_cuda=True, device=torch.device("cuda", 1))
    assert wait(fake) is fake and calls == [torch.device("cuda", 1)]


@settings(max_examples=200)
@given(
    rows=st.integers(1, 5),
    vocab=st.integers(2, 12),
    k=st.integers(0, 3),
    levels=st.integers(1, 3),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    nan=st.booleans(),
    path=st.sampled_from([host._fetch_host, host._fetch_device]),
)
def test_fetch_is_argmax_and_topk_even_where_the_top_logits_tie(rows, vocab, k, levels, seed, dtype, nan, path):
    """Both ways of ``fetch`` (numpy in place on the CPU, top-k and a transfer on a device)
    give ``argmax`` itself: the first maximum where the best logits tie, as ``generate``
    takes it, and the first NaN where a row has one; their top-k are the k best ids, best
    first, with their logits as float32; the logits are left as they were. Few distinct
    values make ties common."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randint(0, levels, (rows, vocab), generator=gen).to(dtype)
    if nan:
        logits[0, torch.randint(0, vocab, (2,), generator=gen)] = float("nan")
    before = logits.clone()
    k = min(k, vocab)
    preds, top, scores = path(logits, k)
    assert torch.equal(logits.isnan(), before.isnan()) and torch.equal(logits.nan_to_num(), before.nan_to_num())
    assert preds.tolist() == logits.argmax(-1).tolist()
    if not k:
        assert top is None and scores is None
        return
    assert top.shape == scores.shape == (rows, k) and scores.dtype == np.float32 and top.dtype == np.int64
    top, scores = torch.from_numpy(top), torch.from_numpy(scores)
    clean = slice(1, None) if nan else slice(None)  # the order of NaNs among the top-k is no contract
    best = logits[clean].topk(k, dim=-1).values
    assert torch.equal(logits[clean].gather(-1, top[clean]), best)
    assert torch.equal(logits.float().gather(-1, top).nan_to_num(), scores.nan_to_num())


@settings(max_examples=300)
@given(
    rows=st.integers(1, 4),
    vocab=st.integers(2, 1500),
    k=st.integers(1, 6),
    levels=st.sampled_from([2, 5, 1000]),
    seed=st.integers(0, 2**16),
    nans=st.integers(0, 3),
)
def test_top_k_rows_is_a_sort_by_logit_then_id(rows, vocab, k, levels, seed, nans):
    """The top-k kernel over vocabularies wider than its strided sets (``kernels.SETS``): per
    row the k first of the ids sorted by logit (highest first), then id, NaNs last in id
    order, and as the argmax the first maximum or the row's first NaN."""
    from lookahead.step import kernels

    rng = np.random.default_rng(seed)
    values = rng.integers(0, levels, (1, rows, vocab)).astype(np.float32)
    values[0, 0, rng.integers(0, vocab, nans)] = np.nan
    preds, ids, best = kernels.top_k_rows(values, k)
    for r, row in enumerate(values[0]):
        order = sorted(np.flatnonzero(~np.isnan(row)), key=lambda j: (-row[j], j)) + list(np.flatnonzero(np.isnan(row)))
        assert ids[0, r, : len(order)].tolist() == order[:k]
        assert np.array_equal(best[0, r, : len(order)], row[order[:k]], equal_nan=True)
        assert preds[0, r] == torch.from_numpy(row).argmax().item()
