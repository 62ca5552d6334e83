"""The decode loop: one forward per step over ``[last token | window | guesses]``."""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
import torch
from transformers.cache_utils import DynamicCache

from lookahead.cache import check_cache, commit, held_from, prepare_cache
from lookahead.config import LookaheadConfig
from lookahead.controller import COPY, FULL, LEAN, PLAIN, ShapeController
from lookahead.costmodel import CostCurve
from lookahead.drafts import CopyDrafter
from lookahead.host import fetch, upload
from lookahead.mask import StepMask, attention_groups
from lookahead.pool import NgramPool
from lookahead.sequence import TokenSequence
from lookahead.static import StaticSteps
from lookahead.stats import LookaheadStats
from lookahead.successors import SuccessorTable
from lookahead.suffix import SuffixIndex
from lookahead.tree import GuessTree
from lookahead.verify import walk
from lookahead.window import JacobiWindow

_NO_CHAIN = np.zeros(0, dtype=np.int64)
ROOT_ONLY = GuessTree(_NO_CHAIN, 1, _NO_CHAIN, _NO_CHAIN, _NO_CHAIN, _NO_CHAIN, np.zeros((0, 0), dtype=bool))


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
        self.rule = rule
        self.cache = cache
        self.stats = stats
        self.pool = None
        if config.uses_pool:
            self.pool = (
                pool
                if pool is not None
                else NgramPool(config.ngram, config.guesses, config.pool_capacity, config.context_tokens)
            )
        self.successors: SuccessorTable | None = None
        self.window: JacobiWindow | None = None
        self.controller = ShapeController(
            costs, adaptive=config.adaptive and config.method == "lookahead", copy_shape=config.copy_shape
        )
        self.drafter = None
        if config.uses_copy:
            pool = self.pool
            adaptive = self.controller.adaptive  # a fixed shape feeds the whole draft
            self.drafter = CopyDrafter(
                config.copy_length,
                config.copy_match,
                config.copy_min_prob,
                self.controller.costs if adaptive else None,
                self.controller.overhead,
                history=(lambda: pool.history_index) if pool is not None else None,
                corpus=index,
            )
        self.step_mask: StepMask | None = None  # root + window + guesses
        self.lean_mask: StepMask | None = None  # root + guesses

    def forward(self, **inputs) -> torch.Tensor:
        return self._timed(lambda: self.model(cache=self.cache, use_cache=True, return_dict=True, **inputs).logits[0])

    def _timed(self, fn, *args) -> torch.Tensor:
        """``fn(*args)`` (a forward's logits), counted and timed in the stats."""
        started = time.perf_counter()
        logits = fn(*args)
        self.stats.forward_s += time.perf_counter() - started
        self.stats.forwards += 1
        self.stats.row_forwards += 1
        return logits

    def prefill(self, seq: TokenSequence, attention_mask, position_ids) -> None:
        """Run the prompt, pick the first token, and seed the window and the pool."""
        last_only = {"logits_to_keep": 1} if self.model._supports_logits_to_keep() else {}
        if self.static is None:
            check_cache(self.cache)  # before the prefill's work: a cache it cannot roll back is refused at once
        logits = self.forward(input_ids=seq.ids, attention_mask=attention_mask, position_ids=position_ids, **last_only)
        if self.static is None:
            check_cache(self.cache)  # the layers a lazily built cache made in the prefill
            prepare_cache(self.cache)
        real = attention_mask[0].bool() if attention_mask is not None else torch.ones_like(seq.ids[0], dtype=torch.bool)
        self.past_keep = real
        prompt = np.asarray(seq.tokens, dtype=np.int64)[real.cpu().numpy()]
        self.rule.start(logits[-1:])
        seq.append(next(walk(None, self.rule, lambda: seq.ids))[1])
        self.position = int(position_ids[0, -1]) + 1
        # static layers are all full length: the windows come from the config (see static.py)
        windows, self.layer_index = attention_groups(
            self.model, self.cache if self.static is None else DynamicCache(config=self.model.config)
        )
        # a lone root over an unpadded cache with full attention needs no mask of ours: the
        # model's own causal mask is the same, and building ours costs more than plain decoding
        self._maskless_plain = bool(real.all()) and all(w is None for w in windows.values()) and self.static is None
        # masks, offsets and ids live where the inputs do (the first device under a device_map)
        self.seed(prompt, windows, logits.shape[-1], seq.ids.device)
        self.learn_text(seq, 1)

    def seed(
        self, prompt: np.ndarray, windows: dict, vocab: int, device, successors: SuccessorTable | None = None
    ) -> None:
        """Start the window, the step masks, the pool and the successor table from the
        prompt's real tokens (int64 ``[n]``); ``successors`` shares a table between decoders."""
        cfg = self.config
        self.window = JacobiWindow(cfg.levels, cfg.window, prompt)
        self._zero_offset = torch.zeros(1, dtype=torch.long, device=device)  # a plain step's offsets, kept there
        self.step_mask = StepMask(cfg.levels, cfg.window, windows, self.model.dtype, device)
        self.lean_mask = StepMask(0, 0, windows, self.model.dtype, device)
        if self.pool is not None and cfg.prompt_ngrams:
            self.pool.insert_text(prompt)
        if successors is not None:
            self.successors = successors
        elif cfg.uses_successors:
            self.successors = SuccessorTable(vocab, cfg.successors, cfg.ngram - 1)

    def step(self, seq: TokenSequence) -> None:
        """One forward: propose, verify, append what holds, commit its cache entries."""
        shape = self.controller.choose()
        if shape == PLAIN and self.drafter is not None:
            # the copy guess's own budget decides whether a draft pays this step (where it is
            # the only source, a lean step feeds it alone)
            shape = COPY if COPY in self.controller.shapes else LEAN
        window = self.window if shape == FULL else None
        last, past_len = seq.tokens[-1], len(seq.tokens) - 1
        step = self._layout(seq, window, past_len, guess=shape != PLAIN, copy_only=shape == COPY)
        positions = (self.position + step.offsets)[None]
        if self.static is not None:
            logits = self._timed(self.static.forward, step.ids, positions, step.mask, past_len)
        else:
            logits = self.forward(input_ids=step.ids, attention_mask=step.mask, position_ids=positions)
        preds, top = fetch(logits, self.successors.k if self.successors is not None else 0)
        if top is not None:
            self.successors.record(step.host_ids, top.numpy())
        path = self.accept(seq, step.tree, logits, preds.tolist())
        accepted = len(path)
        self._record(shape, step, seq.tokens[-accepted:])
        if self.static is not None:
            self.static.commit(past_len, path)
        else:
            commit(self.cache, past_len, step.ids.shape[1], path)
        self.past_keep = torch.cat([self.past_keep, self.past_keep.new_ones(accepted)])
        self.position += accepted
        self.learn(seq, preds, window is not None, accepted, last)

    def learn(self, seq: TokenSequence, preds: torch.Tensor, windowed: bool, accepted: int, root: int) -> None:
        """After a step that appended ``accepted`` tokens to ``seq`` from the root ``root``:
        move the window on (by its newest level's predictions, from ``preds``, the host argmax
        ``[q]`` of the step's logits, when it was fed), file the new n-grams and score the
        copy guess's nodes."""
        if windowed:
            self._advance_window(preds, accepted, root)
        else:
            self.window.slide(accepted)
        self.learn_text(seq, accepted)
        if self.drafter is not None:
            self.drafter.learn(seq.tokens[-accepted:])

    def _layout(
        self, seq: TokenSequence, window: JacobiWindow | None, past_len: int, guess: bool, copy_only: bool = False
    ) -> Layout:
        """Input ids ``[1, q]``, the guess tree, offsets and mask(s) of one step."""
        tree, tokens, cands, origins = self.plan(seq, window, guess, copy_only)
        if window is None and not tree.size and self._maskless_plain:
            ids = seq.ids[:, -1:]
            host = np.array(seq.tokens[-1:], dtype=np.int64)
            return Layout(ROOT_ONLY, ids, self._zero_offset, None, None, (), False, host)
        sizes = {
            name: (0 if self.static is not None else held_from(self.cache.layers[i], past_len), past_len)
            for name, i in self.layer_index.items()
        }
        step_mask = self.step_mask if window is not None else self.lean_mask
        host = np.asarray(tokens, dtype=np.int64)
        ids, *parts = upload(step_mask.device, host, tree.depths, tree.anchors, tree.attend)  # one copy
        offsets, mask = step_mask.build(tree, sizes, self.past_keep[:past_len], parts)
        return Layout(tree, ids[None], offsets, mask, cands, origins, window is not None, host)

    def plan(self, seq: TokenSequence, window: JacobiWindow | None, guess: bool, copy_only: bool = False):
        """The step's guess tree, its input tokens ``[root | window | draft]`` as a list, the
        guess rows merged into it (or None) and each row's source (``copy_only``: the copy
        guess alone)."""
        chain = window.chain if window is not None else _NO_CHAIN
        head = [seq.tokens[-1]] + (window.tokens.reshape(-1).tolist() if window is not None else [])
        cands, origins = self._guesses(seq, copy_only) if guess else (None, ())
        tree = GuessTree.build(chain, len(head), cands)
        return tree, head + tree.tokens.tolist(), cands, origins

    def _record(self, shape: str, step: Layout, appended: list[int]) -> None:
        """Count the step, credit the source of its accepted guesses, inform the controller
        (a step that fed its root alone counts as plain; the controller learns what the shape
        it chose gave, so a copy step whose draft did not pay teaches it as a copy step)."""
        fed = step.ids.shape[1]
        self.count(shape, step, fed, appended)
        self.controller.record(shape, len(appended), fed)

    def count(self, shape: str, step: Layout, fed: int, appended: list[int]) -> None:
        """Add a step that fed ``fed`` tokens and appended ``appended`` to the stats (one that
        fed its root alone is a plain step, whatever shape found nothing to guess)."""
        stats, accepted = self.stats, len(appended)
        stats.steps += 1
        stats.guess_tokens += fed - 1
        stats.lean_steps += int(not step.windowed)
        stats.plain_steps += int(shape == PLAIN or fed == 1)
        stats.copy_steps += int(shape == COPY and fed > 1)
        stats.record_step(accepted)
        if accepted > 1:
            stats.credit(step.source_of(appended[:-1]), accepted - 1)

    def accept(
        self, seq: TokenSequence, tree: GuessTree, logits: torch.Tensor, preds: list[int] | None = None
    ) -> list[int]:
        """Walk the tree appending the model's own choices; return the nodes whose entries stay
        (``preds``: the logits' argmax on the host, when already fetched)."""
        self.rule.start(logits, preds)
        path = []
        for node, pick in walk(tree, self.rule, lambda: seq.ids):
            path.append(node)
            seq.append(pick)
            if seq.done:
                break
        return path

    def _guesses(self, seq: TokenSequence, copy_only: bool) -> tuple[np.ndarray | None, tuple[str, ...]]:
        """Rows of guessed continuations (shorter rows end in -1): the copy guess, then (unless
        ``copy_only``) the pool's, then the recycled successors'; and the source of each row."""
        parts = {}
        if self.drafter is not None:
            parts["copy"] = self.drafter.propose(seq.array())
        if self.pool is not None and not copy_only:
            # a step follows the prefill: the prompt's last token precedes its first token
            parts["pool"] = pooled = self.pool.lookup(seq.tokens[-1], seq.tokens[-2])
            self.stats.pool_lookups += 1
            self.stats.pool_hits += int(pooled.shape[0] > 0)
        if self.successors is not None and not copy_only:
            parts["successors"] = self.successors.guesses(seq.tokens[-1])
        parts = {name: rows for name, rows in parts.items() if rows.size}
        origins = tuple(name for name, rows in parts.items() for _ in range(rows.shape[0]))
        return _stack_rows(list(parts.values())), origins

    def _advance_window(self, preds: torch.Tensor, accepted: int, root: int) -> None:
        """The newest level's predictions (rows of the host argmax ``preds`` ``[q]``) become a
        level; full columns go to the pool."""
        width = self.window.width
        if not width:
            return
        first = 1 + (self.window.levels - 1) * width
        newest = preds[first : first + width].numpy()
        # in its Jacobi context, column i of level 0 follows the root (i = 0) or column i - 1
        before = np.concatenate([[root], self.window.chain[:-1]])
        ngrams = self.window.advance(newest, accepted)
        if self.pool is not None:
            self.pool.insert(ngrams, before)

    def learn_text(self, seq: TokenSequence, accepted: int) -> None:
        """File the n-grams that end in the ``accepted`` newest tokens (after the prefill: 1)."""
        if self.pool is not None and self.config.prompt_ngrams:
            text = seq.array()
            self.pool.insert_text(text, text.shape[0] - accepted - self.config.ngram + 1)


class Layout(NamedTuple):
    """One step's input: ids long ``[1, q]``, positions as offsets from the root ``[q]``,
    the mask(s), the guess tree, the guess rows merged into it and each row's source."""

    tree: GuessTree
    ids: torch.Tensor
    offsets: torch.Tensor
    mask: object
    cands: np.ndarray | None
    origins: tuple[str, ...]
    windowed: bool
    host_ids: np.ndarray | None = None  # ids as int64 [q] on the host (no transfer back needed)

    def source_of(self, held: list[int]) -> str:
        """The source whose guess matched the most of ``held`` (the guessed tokens the step
        accepted): ``"window"`` for level 0, else the first row's among the longest."""
        chain = self.tree.chain if self.windowed else _NO_CHAIN
        best, best_len = "window", _common(chain, held)
        for name, row in zip(self.origins, self.cands if self.cands is not None else ()):
            n = _common(row, held)
            if n > best_len:
                best, best_len = name, n
        return best


def _common(row, held: list[int]) -> int:
    """Length of the common prefix of a guess row and ``held``."""
    n = 0
    while n < len(held) and n < len(row) and int(row[n]) == held[n]:
        n += 1
    return n


def _stack_rows(parts: list[np.ndarray]) -> np.ndarray | None:
    """One ``[rows, width]`` int64 array of the non-empty parts' rows, padded with -1."""
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    cands = np.full((sum(p.shape[0] for p in parts), max(p.shape[1] for p in parts)), -1, dtype=np.int64)
    row = 0
    for part in parts:
        cands[row : row + part.shape[0], : part.shape[1]] = part
        row += part.shape[0]
    return cands


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

    ``costs`` prices the step shapes for the adaptive controller (proportional when None);
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
    if decoder.pool is not None:  # the text, without left padding, for later requests
        decoder.pool.remember(seq.array()[int(decoder.past_keep.long().argmax()) :])
    return seq
