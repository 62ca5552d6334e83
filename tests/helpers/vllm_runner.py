"""A stand-in for vLLM's model runner, as the ``custom_class`` proposer sees it.

vLLM keeps the batch in dense rows of ``token_ids_cpu`` (``[max_reqs, max_model_len]``) with
each row's length in ``num_tokens_no_spec``; after each step it writes the tokens each row
sampled into its row, then calls ``propose(sampled_token_ids, num_tokens_no_spec,
token_ids_cpu)``. New requests are appended, a finished or preempted request's row is filled
from the end of the batch (``InputBatch.condense``), a preempted request comes back later
with its whole text recomputed, and a request whose prefill is chunked samples nothing.

Here the model is an oracle: request r's text is ``targets[r]``; a step accepts the longest
draft prefix the target continues with, then appends the target's next token, as greedy
verification would.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)  # requests compare by identity
class FakeRequest:
    target: np.ndarray  # the whole text the model would write: prompt, then output
    prompt_len: int
    length: int = 0  # tokens written so far (prompt + output); 0 while waiting
    draft: list = field(default_factory=list)
    drafts: list = field(default_factory=list)  # every draft proposed for it, in order
    accepted: int = 0
    chunks_left: int = 0  # steps of prefill that sample nothing

    @property
    def done(self) -> bool:
        return self.length >= self.target.shape[0]


class FakeRunner:
    """Drives a proposer through steps of a batch (see the module's docstring)."""

    def __init__(self, proposer, max_reqs: int = 8, max_model_len: int = 4096):
        self.proposer = proposer
        self.ids = np.zeros((max_reqs, max_model_len), dtype=np.int32)
        self.lens = np.zeros(max_reqs, dtype=np.int32)
        self.rows: list[FakeRequest] = []
        self.steps = 0

    def add(self, request: FakeRequest, chunks: int = 0) -> None:
        """Admit a request (new, or preempted and now resumed) at the batch's end."""
        if request.length == 0:
            request.length = request.prompt_len
        request.chunks_left = chunks
        request.draft = []
        self.rows.append(request)

    def remove(self, request: FakeRequest) -> None:
        """Finish or preempt: its row is filled from the batch's end, as vLLM condenses."""
        row = self.rows.index(request)
        last = self.rows.pop()
        if last is not request:
            self.rows[row] = last

    def swap(self, i: int, j: int) -> None:
        self.rows[i], self.rows[j] = self.rows[j], self.rows[i]

    def step(self) -> None:
        """One engine step: verify each row's draft, append, write the rows, call propose."""
        sampled = []
        for row, req in enumerate(self.rows):
            if req.chunks_left:
                req.chunks_left -= 1
                sampled.append([])
            else:
                sampled.append(self._verify(req))
            self.ids[row, : req.length] = req.target[: req.length]
            self.lens[row] = req.length
        drafts = self.proposer.propose(sampled, self.lens.copy(), self.ids)
        assert len(drafts) == len(self.rows)
        for req, draft in zip(self.rows, drafts):
            req.draft = list(draft)
            req.drafts.append((req.length, list(draft)))
        self.steps += 1
        for req in [r for r in self.rows if r.done]:
            self.remove(req)

    @staticmethod
    def _verify(req: FakeRequest) -> list[int]:
        target = req.target
        held = 0
        while held < len(req.draft) and req.length + held < target.shape[0] - 1:
            if req.draft[held] != target[req.length + held]:
                break
            held += 1
        out = target[req.length : req.length + held + 1].tolist()
        req.length += len(out)
        req.accepted += held
        return out

    def run(self, max_steps: int = 10_000) -> None:
        while self.rows and max_steps:
            self.step()
            max_steps -= 1
