"""``LookaheadProposer``: lookahead's copy/suffix drafts as a vLLM ``custom_class`` proposer.

    LLM(model=..., speculative_config={"method": "custom_class",
        "model": "lookahead.vllm.LookaheadProposer", "num_speculative_tokens": 16})

Each step vLLM's model runner calls :meth:`LookaheadProposer.propose` on the host with every
batch row's sampled tokens and text; the proposer answers one draft chain per row, which vLLM
verifies (its rejection sampler: greedy output is unchanged, sampled output keeps its
distribution). Per row:

1. match the row to its request's state by the text (``requests``: no request ids);
2. score the chain drafted or withheld there at the last call against the tokens that came,
   teaching the bins and the request's ratio (``chances``);
3. draft the likeliest chain of the copy tree over the request's own text and the history of
   finished requests (``lookahead.drafts.copy_drafter.CopyDrafter``, ``chain``, ``history``);
4. then, over all rows at once, keep the nodes whose chance pays for their verification.

Requests that left the batch go to the history (their texts, bounded in tokens).
Importing this module imports neither vLLM nor torch.
"""

from __future__ import annotations

import numpy as np

from lookahead.drafts.copy_drafter import CopyDrafter
from lookahead.drafts.suffix import SuffixIndex
from lookahead.vllm.chain import EMPTY, Chain, best_chain
from lookahead.vllm.chances import TOP_CHANCE, Acceptance, choose_lengths, learn_ratios, node_bins, request_ratios
from lookahead.vllm.history import History
from lookahead.vllm.options import EngineLimits, ProposerOptions
from lookahead.vllm.requests import Pending, RequestState, RequestTable, score

TREE_NODES_PER_TOKEN = 4  # the copy tree's size per chain token: room for the chain beside its siblings


class LookaheadProposer:
    """A ``custom_class`` speculative proposer for vLLM (see the module's docstring).

    Args:
        vllm_config: vLLM's ``VllmConfig`` (read: ``speculative_config.num_speculative_tokens``,
            ``model_config.max_model_len``).
    """

    options = ProposerOptions()

    def __init__(self, vllm_config):
        self.limits = EngineLimits.from_vllm_config(vllm_config)
        opts = self.options
        if not isinstance(opts, ProposerOptions):
            raise TypeError(f"{type(self).__name__}.options must be a ProposerOptions, got {type(opts).__name__}")
        self.history = History(opts.history_tokens)
        self.requests = RequestTable(opts.max_absent)
        self.acceptance = Acceptance()
        depth = self.limits.k + 1  # one node past the draft: scored when the whole draft holds
        self.drafter = CopyDrafter(
            min(TREE_NODES_PER_TOKEN * depth, 256), opts.max_match, float(opts.min_share), history=self.history.indexes
        )
        self.counts = {"steps": 0, "rows": 0, "drafted": 0, "held": 0}
        _warm(self.drafter, opts)

    def load_model(self, model) -> None:
        """Nothing: the drafts need no model (vLLM's CPU runner calls this)."""

    def propose(
        self,
        sampled_token_ids: list[list[int]],
        num_tokens_no_spec: np.ndarray,
        token_ids_cpu: np.ndarray,
        slot_mappings=None,
    ) -> list[list[int]]:
        """One draft per batch row (a list of at most ``num_speculative_tokens`` ids, empty
        for none).

        Args:
            sampled_token_ids: per row, the tokens this step appended (empty: the row sampled
                nothing, a prefill chunk).
            num_tokens_no_spec: int ``[>= rows]``: each row's text length, those tokens included.
            token_ids_cpu: int ``[>= rows, max_model_len]``: the rows' texts.
            slot_mappings: unused.
        """
        texts = self._texts(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)
        states, left = self.requests.match(texts)
        for state in left:
            self._remember(state)
        chains, paths = {}, {}
        for row, text in texts.items():
            state = states[row]
            self._score(state, text, len(sampled_token_ids[row]))
            state.text = text.copy()
            chains[row], paths[row] = self._chain(state, text)
        lengths = choose_lengths(list(paths.values()), len(texts), self.options.token_cost)
        drafts: list[list[int]] = [[] for _ in sampled_token_ids]
        for (row, text), n in zip(texts.items(), lengths):
            n = min(n, self.limits.k, self.limits.max_model_len - text.shape[0] - 1)
            drafts[row] = chains[row].tokens[: max(n, 0)].tolist()
            states[row].pending.drafted = len(drafts[row])
            self.counts["drafted"] += len(drafts[row])
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

    def _score(self, state: RequestState, text: np.ndarray, sampled: int) -> None:
        """Learn from the last call's chain when the text grew by just this step's tokens
        (not after a new turn's prompt or a preemption)."""
        pending = state.pending
        state.pending = None
        if pending is None or text.shape[0] - pending.start != sampled:
            return
        held, fed = score(pending, text)
        self.acceptance.learn(pending.bins, held, fed)
        learn_ratios(state.held, state.promised, pending.bins, pending.promised, held, fed)
        self.counts["held"] += min(held, pending.drafted)

    def _chain(self, state: RequestState, text: np.ndarray) -> tuple[Chain, np.ndarray]:
        """The row's chain and its path chances (float ``[d]``); kept as the state's pending."""
        tokens, parents, probs, match = self.drafter.tree(text)
        chain = best_chain(tokens, parents, probs, match, self.limits.k + 1) if tokens.shape[0] else EMPTY
        bins, rates = node_bins(chain.shares, chain.match)
        promised = self.acceptance.chances(bins, rates, 1.0)  # what the bins promise, for the ratio
        chances = np.minimum(promised * request_ratios(state.held, state.promised, bins), TOP_CHANCE)
        state.pending = Pending(text.shape[0], chain, bins, promised, 0)
        return chain, np.cumprod(chances)[: self.limits.k]

    def _remember(self, state: RequestState) -> None:
        """A request left the batch (finished, or preempted): its text joins the history. One
        that left before (preempted, then resumed) files what it added since, after the
        ``max_match`` tokens before it, which a later text's end may match across the seam."""
        done, length = state.remembered, state.text.shape[0]
        if length > done:
            self.history.add(state.text[max(done - self.options.max_match, 0) :] if done else state.text)
            state.remembered = length

    @property
    def acceptance_rate(self) -> float:
        """The share of drafted tokens that held so far."""
        return self.counts["held"] / self.counts["drafted"] if self.counts["drafted"] else 0.0


def _warm(drafter: CopyDrafter, options: ProposerOptions) -> None:
    """Compile (or load from numba's disk cache) the draft kernels now, not at the first step."""
    text = np.array([1, 2, 3, 1, 2], dtype=np.int32)
    tiny = SuffixIndex.from_texts([text])
    CopyDrafter(4, options.max_match, float(options.min_share), history=lambda: [tiny]).tree(text)
    drafter.tree(text)
