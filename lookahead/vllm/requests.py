"""Per-request state without request ids: each batch row is matched to a state by its text.

vLLM calls the proposer with the batch's rows (``token_ids_cpu[row, :num_tokens]``: prompt
and output so far, the tokens just sampled included) and no request ids. Rows move: a request
that finishes frees its row and a later one is moved in, rows swap to keep the batch dense,
a preempted request leaves and comes back later with the same text. A request's text only
grows, so a row belongs to the state whose text its text starts with:

- first the state its row held at the last call, if its text still starts the row's (the
  common case: nothing moved, a few tokens appended);
- else the state, live or absent, whose text is the longest that the row's text starts with
  (moved rows, preempted requests coming back, the next turn of a conversation, whose prompt
  holds the last turn's whole text);
- else a new state.

Two requests with the same text are interchangeable here: their drafts come from that text.
A state not seen in a call is absent; the ``max_absent`` most recent absent states are kept
(a preempted request keeps its learnt ratio), older ones are dropped.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from lookahead.vllm.chain import EMPTY, Chain
from lookahead.vllm.chances import GROUPS


@dataclass
class Pending:
    """The chain drafted (or withheld) at the last call: scored against the tokens that came.

    ``start``: the text's length it continues; ``chain``: its nodes; ``bins``, ``promised``:
    each node's bin and its bin's chance then (before the request's ratio); ``drafted``: how
    many of its nodes were proposed.
    """

    start: int
    chain: Chain
    bins: np.ndarray
    promised: np.ndarray
    drafted: int


@dataclass(eq=False)  # states compare by identity
class RequestState:
    """One request as the proposer knows it: its text at the last call (int32 ``[n]``, a copy),
    its own ratios' counts per context group (``held`` tokens against the ``promised``
    chances, ``chances.request_ratios``), the last call's chain, and how many of its tokens
    went to the history (``remembered``: a preempted request files its text when it leaves,
    and what it adds after it comes back when it leaves again)."""

    text: np.ndarray
    held: np.ndarray = field(default_factory=lambda: np.zeros(GROUPS))
    promised: np.ndarray = field(default_factory=lambda: np.zeros(GROUPS))
    pending: Pending | None = None
    remembered: int = 0
    key: int = field(default=0, compare=False)


def _starts(text: np.ndarray, prefix: np.ndarray) -> bool:
    """``text`` starts with ``prefix`` (a non-empty one)."""
    n = prefix.shape[0]
    return 0 < n <= text.shape[0] and text[n - 1] == prefix[n - 1] and np.array_equal(text[:n], prefix)


class RequestTable:
    """Matches each call's rows to request states (see the module's docstring).

    Args:
        max_absent: how many states not seen in the last call are kept.
    """

    def __init__(self, max_absent: int):
        self.max_absent = max_absent
        self._live: dict[int, RequestState] = {}  # row -> state, as at the last call
        self._absent: OrderedDict[int, RequestState] = OrderedDict()  # key -> state, oldest first
        self._next_key = 0

    def __len__(self) -> int:
        """States kept, live and absent."""
        return len(self._live) + len(self._absent)

    def state(self, row: int) -> RequestState | None:
        """The state row ``row`` was matched to at the last call (None: no draft was asked)."""
        return self._live.get(row)

    def match(self, texts: dict[int, np.ndarray]) -> tuple[dict[int, RequestState], list[RequestState]]:
        """This call's rows (row -> int32 text ``[n]``) matched to states.

        Returns ``(states, left)``: row -> state (its ``text`` not yet updated), and the states
        that were live at the last call and are absent now.
        """
        states: dict[int, RequestState] = {}
        claimed: set[int] = set()
        for row, text in texts.items():  # rows that kept their request
            state = self._live.get(row)
            if state is not None and _starts(text, state.text):
                states[row] = state
                claimed.add(id(state))
        live = {id(s): s for s in self._live.values()}
        for row, text in texts.items():  # moved rows, returning requests, new requests
            if row in states:
                continue
            state = self._longest_prefix(text, claimed)
            if state is None:
                state = RequestState(text=np.zeros(0, dtype=np.int32), key=self._new_key())
            elif id(state) not in live:
                del self._absent[state.key]
            states[row] = state
            claimed.add(id(state))
        left = [s for s in live.values() if id(s) not in claimed]
        for state in left:
            self._absent[state.key] = state
        while len(self._absent) > self.max_absent:
            self._absent.popitem(last=False)
        self._live = states
        return states, left

    def _longest_prefix(self, text: np.ndarray, claimed: set[int]) -> RequestState | None:
        best = None
        for state in [*self._live.values(), *self._absent.values()]:
            if id(state) in claimed or not _starts(text, state.text):
                continue
            if best is None or state.text.shape[0] > best.text.shape[0]:
                best = state
        return best

    def _new_key(self) -> int:
        self._next_key += 1
        return self._next_key


def score(pending: Pending, text: np.ndarray) -> tuple[int, int]:
    """``(held, fed)``: how many of the pending chain's nodes held, and how many were scored,
    against the tokens the text gained since (``text[pending.start:]``). A node is scored once
    its parent held and a token came at its place: drafted or withheld alike (the model's
    token there is what verification would have compared it with)."""
    came = text[pending.start :]
    tokens = pending.chain.tokens
    depth = min(came.shape[0], tokens.shape[0])
    held = 0
    while held < depth and came[held] == tokens[held]:
        held += 1
    fed = held + 1 if held < depth else held
    return held, fed


__all__ = ["EMPTY", "Pending", "RequestState", "RequestTable", "score"]
