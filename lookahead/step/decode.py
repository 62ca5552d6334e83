"""The decode loop of one sequence: each step plans, runs one forward, verifies, commits, learns."""

from __future__ import annotations

import numpy as np
import torch
from transformers.cache_utils import DynamicCache

from lookahead.config import LookaheadConfig
from lookahead.drafts.pool import NgramPool
from lookahead.drafts.suffix import SuffixIndex
from lookahead.stats import LookaheadStats
from lookahead.step import kernels
from lookahead.step.cache import check_cache, commit, held_from, prepare_cache
from lookahead.step.classic import ClassicProposer
from lookahead.step.costmodel import GUESS_OVERHEAD_S, CostCurve
from lookahead.step.host import fetch, upload, views, widen
from lookahead.step.inputs import ROOT_ONLY, StepInputs, timed
from lookahead.step.mask import attention_groups
from lookahead.step.proposer import Proposer
from lookahead.step.sequence import TokenSequence
from lookahead.step.static import StaticSteps

_BLOCKED = torch.finfo(torch.float32).min  # what a float32 StepMask blocks with


class Decoder:
    """State of one lookahead generation over a batch of one sequence."""

    def __init__(
        self,
        model,
        config: LookaheadConfig,
        rule,
        cache,
        stats: LookaheadStats,
        pool: NgramPool | None = None,
        costs: CostCurve | None = None,
        static: StaticSteps | None = None,
        index: SuffixIndex | None = None,
    ):
        self.model = model
        self.static = static  # steps on a StaticCache (``cache`` is then ``static.cache``)
        self.config = config
        self.cache = cache
        self.stats = stats
        self.proposer = new_proposer(config, rule, stats, pool, costs, index, model.dtype)

    def forward(self, **inputs) -> torch.Tensor:
        run = lambda: self.model(cache=self.cache, use_cache=True, return_dict=True, **inputs).logits[0]  # noqa: E731
        return timed(self.stats, run)

    def prefill(self, seq: TokenSequence, attention_mask, position_ids) -> None:
        """Run the prompt, pick the first token, and seed the window and the pool. A cache that
        already holds the prompt's first tokens (a prefix kept from an earlier request) is
        extended by the rest only."""
        last_only = {"logits_to_keep": 1} if self.model._supports_logits_to_keep() else {}
        held = 0
        if self.static is None:
            check_cache(self.cache)  # before the prefill's work: a cache it cannot roll back is refused at once
            held = self.cache.get_seq_length()
        logits = self.forward(
            input_ids=seq.ids[:, held:], attention_mask=attention_mask, position_ids=position_ids[:, held:], **last_only
        )
        if self.static is None:
            check_cache(self.cache)  # the layers a lazily built cache made in the prefill
            self._sliding = prepare_cache(self.cache)
        real = attention_mask[0].bool() if attention_mask is not None else torch.ones_like(seq.ids[0], dtype=torch.bool)
        self._visible = torch.zeros(0, dtype=torch.bool, device=real.device)
        self._grow_visible(2 * real.shape[0] + 64)
        self._visible[: real.shape[0]] = real
        self._visible_len = real.shape[0]
        prompt = np.asarray(seq.tokens, dtype=np.int64)[real.cpu().numpy()]
        self.position = int(position_ids[0, -1]) + 1  # the first token's, fed by the first step
        # static layers are all full length: the windows come from the config (see static.py)
        windows, self.layer_index = attention_groups(
            self.model, self.cache if self.static is None else DynamicCache(config=self.model.config)
        )
        # a lone root over an unpadded cache with full attention needs no mask of ours: the
        # model's own causal mask is the same, and building ours costs more than plain decoding
        self._maskless_plain = bool(real.all()) and all(w is None for w in windows.values()) and self.static is None
        # CPU, float32, full attention: the whole step (ids, offsets, mask) is made on the
        # host in one kernel and handed to the model as views, without a torch op
        self._host_masks = host_masks(windows, self.static, seq.ids.device, self.model.dtype)
        self.proposer.start(seq, logits[-1:], prompt, windows, seq.ids.device)

    def step(self, seq: TokenSequence) -> None:
        """One forward: plan the guesses, run them, verify and learn, commit what holds."""
        proposer, past_len = self.proposer, len(seq.tokens) - 1
        step = self._inputs(seq, past_len)
        if self.static is not None:
            logits = timed(self.stats, lambda: self.static.forward(step.ids, step.positions, step.mask, past_len))
        else:
            logits = self.forward(input_ids=step.ids, attention_mask=step.mask, position_ids=step.positions)
        logits = widen(logits)
        table = proposer.successors
        preds, top, scores = fetch(logits, table.k if table is not None else 0)
        if top is not None:
            table.record(step.host_ids, top.numpy(), scores.numpy())
        self._commit(past_len, step, proposer.verify(seq, step, logits, preds))

    def _commit(self, past_len: int, step: StepInputs, path: list[int]) -> None:
        """Keep the accepted nodes' cache entries behind the committed ones, drop the rest."""
        if self.static is not None:
            self.static.commit(past_len, path)
        else:
            commit(self.cache, past_len, step.ids.shape[1], path, self._sliding)
        self._visible_len += len(path)
        if self._visible_len > self._visible.shape[0]:
            self._grow_visible(2 * self._visible.shape[0])
        self.position += len(path)

    def _grow_visible(self, size: int) -> None:
        """Grow the flags of which cache entries are real tokens to ``size``, the new ones
        True: on the CPU one memory that numpy (``_visible_host``) and torch both view, on a
        device made and grown there (no host copy inside a step)."""
        old = self._visible
        if old.device.type == "cpu":
            self._visible_host = np.ones(size, dtype=bool)
            self._visible = torch.from_numpy(self._visible_host)
        else:
            self._visible = torch.ones(size, dtype=torch.bool, device=old.device)
        self._visible[: old.shape[0]] = old

    def _inputs(self, seq: TokenSequence, past_len: int) -> StepInputs:
        """Input ids ``[1, q]``, positions ``[1, q]``, the guess tree and mask(s) of one step."""
        proposer = self.proposer
        tree, tokens, cands, origins = proposer.plan(seq)
        windowed = proposer.windowed
        if not windowed and not tree.size and self._maskless_plain:
            ids = seq.ids[:, -1:]
            host = np.array(seq.tokens[-1:], dtype=np.int64)
            positions = torch.full((1, 1), self.position, dtype=torch.long, device=ids.device)
            return StepInputs(ROOT_ONLY, ids, positions, None, None, (), False, host)
        host = np.asarray(tokens, dtype=np.int64)
        if self._host_masks:
            # shaped as the model takes them on the host: numpy's views cost less than torch's
            offsets, allowed = proposer.mask.layout(tree)
            mask = np.empty((1, 1, allowed.shape[0], past_len + allowed.shape[0]), dtype=np.float32)
            kernels.additive_mask(self._visible_host[:past_len], allowed, _BLOCKED, mask[0, 0])
            ids, positions, mask = views(host[None], (offsets + self.position)[None], mask)
            return StepInputs(tree, ids, positions, mask, cands, origins, windowed, host)
        sizes = {
            name: (0 if self.static is not None else held_from(self.cache.layers[i], past_len), past_len)
            for name, i in self.layer_index.items()
        }
        ids, *parts = upload(proposer.mask.device, host, *proposer.mask.layout(tree))  # one copy
        offsets, mask = proposer.mask.build(tree, sizes, self._visible[:past_len], parts)
        return StepInputs(tree, ids[None], (self.position + offsets)[None], mask, cands, origins, windowed, host)


def new_proposer(config, rule, stats, pool, costs: CostCurve | None, index, dtype) -> Proposer:
    """A row's proposer: the classic shape's, or one whose draft budget prices nodes by
    ``costs`` (proportional when None) plus one row's planning work."""
    if config.classic:
        return ClassicProposer(config, rule, stats, pool, None, 0.0, index, dtype)
    costs = costs if costs is not None else CostCurve.linear()
    return Proposer(config, rule, stats, pool, costs, costs.seconds_in_units(GUESS_OVERHEAD_S), index, dtype)


def host_masks(windows: dict, static: StaticSteps | None, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether a single row's steps are made whole on the host (ids, offsets and a float32
    mask, handed over as views): on the CPU, in float32, with every layer attending the
    whole past on a DynamicCache. Elsewhere the mask is built where the model runs."""
    full = list(windows) == [None] and windows[None] is None
    return full and static is None and device.type == "cpu" and dtype == torch.float32


def lookahead_decode(
    model,
    input_ids,
    *,
    rule,
    stopping_criteria,
    config,
    stats,
    pool=None,
    streamer=None,
    attention_mask=None,
    position_ids=None,
    cache=None,
    keep_scores=False,
    keep_logits=False,
    costs: CostCurve | None = None,
    static: StaticSteps | None = None,
    index: SuffixIndex | None = None,
) -> TokenSequence:
    """Generate after ``input_ids`` (``[1, n]``) until ``stopping_criteria`` says stop.

    ``costs`` prices the draft budget's nodes (proportional when None);
    ``static`` runs the steps on its ``StaticCache`` (then ``cache`` is ``static.cache``);
    ``index`` is a corpus the copy guess also drafts from.
    """
    if position_ids is None:
        position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
    seq = TokenSequence(input_ids, stopping_criteria, streamer, stats, keep_scores, keep_logits)
    decoder = Decoder(model, config, rule, cache, stats, pool, costs, static, index)
    decoder.prefill(seq, attention_mask, position_ids)
    while not seq.done:
        decoder.step(seq)
    if decoder.proposer.pool is not None:  # the text, without left padding, for later requests
        decoder.proposer.pool.remember(seq.array()[int(decoder._visible.long().argmax()) :])
    return seq
