"""The proposer's work at each of vLLM's steps: every batch row matched to its request, the
request's planner learning from the tokens that came, then planning its next draft.

A request's planner is the one ``lookahead.generate`` plans with (``drafts.planner``): the
copy guess over its text and the history of finished requests, the n-gram pool, one draft
budget over both; vLLM verifies one chain a request, so the budget feeds a prefix of the
likeliest chain (``DraftBudget(chain=True)``). What the requests teach is kept in one
``KeptState`` per engine: the n-grams, the finished texts, the budget's counts (a new
request's budget starts from the last one's).
"""

from __future__ import annotations

import numpy as np

from lookahead.config import LookaheadConfig
from lookahead.drafts.kept import KeptState
from lookahead.drafts.planner import Planner, sources_for
from lookahead.drafts.source import Context, Outcome
from lookahead.stats import LookaheadStats
from lookahead.step.costmodel import CostCurve
from lookahead.vllm.options import EngineLimits, ProposerOptions
from lookahead.vllm.requests import RequestState, RequestTable

# the copy tree's size per draft token: room for the chain and the siblings that compete with it
TREE_NODES_PER_TOKEN = 4


class Drafting:
    """What ``LookaheadProposer`` does, per call (see the module's docstring)."""

    def __init__(self, limits: EngineLimits, options: ProposerOptions):
        self.limits, self.options = limits, options
        self.kept = KeptState(history=options.history_tokens)
        self.config = LookaheadConfig(
            window=0,
            successors=0,  # they need the logits, which a proposer does not see
            guesses=options.guesses,
            copy_length=min(TREE_NODES_PER_TOKEN * (limits.k + 1), 256),
            copy_match=options.max_match,
            copy_min_prob=options.min_share,
        )
        self.stats = LookaheadStats()  # the pool's lookups and hits
        self.requests = RequestTable(options.max_absent)
        self.counts = {"steps": 0, "rows": 0, "drafted": 0, "held": 0}

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu) -> list[list[int]]:
        """One draft per batch row (``LookaheadProposer.propose``)."""
        texts = self._texts(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)
        states, left = self.requests.match(texts)
        for state in left:
            self._remember(state)
        curve = self._curve(len(texts))
        drafts: list[list[int]] = [[] for _ in sampled_token_ids]
        for row, state in states.items():  # in the requests' order: what they share (the pool,
            text = texts[row]  # the budgets' counts) learns alike however vLLM lays out its batch
            self._learn(state, text, len(sampled_token_ids[row]))
            state.text = text.copy()
            drafts[row] = self._draft(state, text, curve)
        self.counts["steps"] += 1
        self.counts["rows"] += len(texts)
        return drafts

    def _texts(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu) -> dict[int, np.ndarray]:
        """row -> its text (int32 view ``[n]``), for the rows that sampled tokens and have room."""
        if token_ids_cpu.ndim != 2 or token_ids_cpu.shape[0] < len(sampled_token_ids):
            raise ValueError(
                f"token_ids_cpu must be [rows >= {len(sampled_token_ids)}, max_model_len], got {token_ids_cpu.shape}"
            )
        texts = {}
        for row, sampled in enumerate(sampled_token_ids):
            n = int(num_tokens_no_spec[row])
            if not sampled or n >= self.limits.max_model_len or min(sampled) < 0:
                continue  # nothing sampled, no room, or placeholders (async scheduling): no draft
            texts[row] = np.asarray(token_ids_cpu[row, :n], dtype=np.int32)
        return texts

    def _curve(self, rows: int) -> CostCurve:
        """One row's price of a forward over its tokens, in a step of ``rows`` rows that costs
        ``1 + token_cost x tokens``: the row's share of the fixed cost, then ``token_cost`` a
        token, relative to a row that feeds its sampled token alone."""
        c = self.options.token_cost
        return CostCurve.linear(c * rows / (1.0 + c * rows))

    def _learn(self, state: RequestState, text: np.ndarray, sampled: int) -> None:
        """Learn from the last plan where the text grew by just this step's tokens (not after a
        new turn's prompt or a preemption): every node it had, drafted or withheld, is scored
        against the tokens that came (``DraftBudget.learn``)."""
        if state.planner is None or state.start < 0 or text.shape[0] - state.start != sampled:
            return
        state.planner.learn(Outcome(text, sampled))
        self.counts["held"] += min(sampled - 1, state.drafted)

    def _draft(self, state: RequestState, text: np.ndarray, curve: CostCurve) -> list[int]:
        """The row's draft: the budget's choice, a prefix of the likeliest chain, cut to
        ``num_speculative_tokens`` and to the room left before ``max_model_len``."""
        if state.planner is None:
            state.planner = self._planner(text)
        state.planner.price(curve, 0.0)
        rows, _ = state.planner.plan(Context(text))
        room = max(min(self.limits.k, self.limits.max_model_len - text.shape[0] - 1), 0)
        draft = [t for t in rows[0].tolist() if t >= 0][:room] if rows.shape[0] else []
        state.start, state.drafted = text.shape[0], len(draft)
        self.counts["drafted"] += len(draft)
        return draft

    def _planner(self, text: np.ndarray) -> Planner:
        """A new request's planner (its text's n-grams filed in the kept pool first), its
        budget starting from what earlier requests' budgets learnt."""
        config = self.config
        sources = sources_for(config, self.kept, self.stats, 0)
        if config.uses_pool:
            self.kept.pool.insert_text(text)
        return Planner(sources, self.limits.k, config.ngram - 1, CostCurve.linear(), 0.0, self.kept, chain=True)

    def _remember(self, state: RequestState) -> None:
        """A request left the batch (finished, or preempted): its text joins the history. One
        that left before (preempted, then resumed) files what it added since, after the
        ``max_match`` tokens before it, which a later text's end may match across the seam."""
        done, length = state.remembered, state.text.shape[0]
        if length > done:
            self.kept.remember(state.text[max(done - self.options.max_match, 0) :] if done else state.text)
            state.remembered = length
