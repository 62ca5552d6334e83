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
(a preempted request keeps what its budget learnt), older ones are dropped.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)  # states compare by identity
class RequestState:
    """One request as the proposer knows it: its text at the last call (int32 ``[n]``, a copy),
    its planner (its sources and draft budget, ``lookahead.drafts.planner``; None until its
    first draft), the length of the text its last plan continued (-1: none to learn from) and
    how many tokens that plan drafted, and how many of its tokens went to the history
    (``remembered``: a preempted request files its text when it leaves, and what it adds
    after it comes back when it leaves again)."""

    text: np.ndarray
    planner: object = None
    start: int = -1
    drafted: int = 0
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

        Returns ``(states, left)``: row -> state (its ``text`` not yet updated), in the order of
        the states' keys (the order of their requests' arrival, whatever rows they hold), and
        the states that were live at the last call and are absent now.
        """
        states: dict[int, RequestState] = {}
        claimed: set[int] = set()
        for row, text in texts.items():  # rows that kept their request
            state = self._live.get(row)
            if state is not None and _starts(text, state.text):
                states[row] = state
                claimed.add(id(state))
        live = {id(s): s for s in self._live.values()}
        # moved rows, returning requests, new requests; new states are keyed in the order of
        # their texts, not of their rows, so that keys do not depend on the batch's layout
        for row, text in sorted(texts.items(), key=lambda item: (item[1].shape[0], item[1].tobytes())):
            if row in states:
                continue
            state = self._longest_prefix(text, claimed)
            if state is None:
                state = RequestState(text=np.zeros(0, dtype=np.int32), key=self._new_key())
            elif id(state) not in live:
                del self._absent[state.key]
            states[row] = state
            claimed.add(id(state))
        left = sorted((s for s in live.values() if id(s) not in claimed), key=lambda state: state.key)
        for state in left:
            self._absent[state.key] = state
        while len(self._absent) > self.max_absent:
            self._absent.popitem(last=False)
        self._live = states
        return dict(sorted(states.items(), key=lambda item: item[1].key)), left

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
