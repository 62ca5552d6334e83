"""The seeded sampling rule: ``model.generate(do_sample=True)``'s race, replayed token by token."""

from __future__ import annotations

import torch

from lookahead.sampling.guess import NoiseRace
from lookahead.sampling.noise import NoiseStream
from lookahead.sampling.warpers import chain, temperature

_CEILING_ALPHA = 0.1  # weight of the newest root draw in SamplingRule.ceiling


class Pick:
    """A rule's decision at one node: the token, and the rows ``generate`` would report."""

    __slots__ = ("token", "logits", "scores")

    def __init__(self, token: int, logits: torch.Tensor | None, scores: torch.Tensor | None):
        self.token = token
        self.logits = logits
        self.scores = scores


class Processes:
    """``processors`` (``generate``'s list, or a batch row's view of it, set later) and
    ``_process``, what applies them: the same scores without the list's per-call costs
    (``sampling.warpers``)."""

    @property
    def processors(self):
        return self._processors

    @processors.setter
    def processors(self, value) -> None:
        self._processors = value
        self._process = chain(value)


class SamplingRule(Processes):
    """Exact sampling that replays ``model.generate(do_sample=True)``'s random stream.

    ``generate`` emits ``torch.multinomial(softmax(scores), 1)``, which for one sample is the
    exponential race ``argmax(p / q)`` over fresh ``q ~ Exp(1)`` per vocabulary entry, a draw
    distributed exactly as ``p`` (the processed distribution at that prefix). This rule runs
    the same race with the same ``q``: a row's t-th emitted token reads its row of block t of
    a :class:`~lookahead.sampling.noise.NoiseStream`, the block ``generate`` draws at its step t. So
    under one seed the tokens are ``generate``'s, up to fp32 rounding of a many-token forward
    moving a token across a near-tie of the race.

    A guessed child is accepted when it is the emitted token, so a draft x is accepted with
    probability p(x), as under speculative sampling with one-hot drafts. One noise row is read
    per emitted token, never per guess: the output is the same for every window, guess or
    shape setting.

    ``ceiling`` is a moving average of the probability of the token emitted at the root,
    ``sum p^2`` in expectation: the chance that a guess drawn like the text holds. Where
    sampling is nearly flat (a high temperature) it is low, and the draft budget scales its
    priors by it, so a fresh request does not pay to learn that greedy priors promise too much.
    """

    sampled = True
    picks_are_preds = False  # every emitted token runs the race

    def __init__(
        self, processors, generator: torch.Generator | None = None, noise: NoiseStream | None = None, row: int = 0
    ):
        self.processors = processors
        self.generator = generator
        self.noise = noise if noise is not None else NoiseStream(1, generator)
        self.row = row  # this rule's row of the noise stream (its batch slot)
        self.emitted = 0  # tokens emitted so far: the noise step of the next one
        self.ceiling = 1.0
        self.temperature = temperature(processors)  # what a guess's race divides logits by
        self._logits: torch.Tensor | None = None
        self._like: torch.Tensor | None = None  # a float32 [1, V] row: the noise blocks' shape

    def start(self, logits: torch.Tensor, preds: list[int] | None = None) -> None:
        self._logits = logits  # preds unused: every emitted token runs the race

    def report(self, node: int, sequence: torch.Tensor) -> Pick:
        """The raw and processed rows at ``node``, emitting nothing (no noise is read)."""
        raw = self._logits[node : node + 1].float()
        scores = self._process(sequence, raw.clone()) if self.processors else raw
        return Pick(-1, raw, scores)

    def __call__(self, node: int, sequence: torch.Tensor, children: list[int]) -> Pick:
        pick = self.report(node, sequence)
        noise = self.noise.take(self.row, self.emitted, pick.scores)
        self.emitted += 1
        # multinomial's own arithmetic: float32 softmax, divided by the noise, first argmax
        probs = torch.softmax(pick.scores, dim=-1)
        pick.token = token = int((probs / noise).argmax(-1))
        if node == 0:  # once a step (the root's draw) is enough, and costs one read more
            p = float(probs[0, token])
            self.ceiling = p if self.emitted == 1 else (1 - _CEILING_ALPHA) * self.ceiling + _CEILING_ALPHA * p
        return pick

    def guesses(self, nodes: list[int], sequence: torch.Tensor) -> list[int]:
        """The tokens the race would emit at ``nodes``, were the k-th of them the k-th token
        from now, each with that position's known noise and the processors seeing
        ``sequence``: guesses of the seeded sample there (the argmax beyond the stream's
        lead). The exact race, one processor call for all of them where the processors take
        stacked rows; ``sampling.guess`` races ``generate``'s sampling warpers for less.
        Reads no noise, so the output stays ``generate``'s whatever is guessed."""
        like = self._noise_like()
        noise = [self.noise.peek(self.row, self.emitted + k, like) for k in range(len(nodes))]
        raw = self._logits[nodes].float()
        scores = raw
        if self.processors:
            try:  # one call over the stacked rows: each call costs more than its rows here
                scores = self.processors(sequence.expand(len(nodes), -1), raw.clone())
            except (RuntimeError, ValueError, IndexError):
                scores = None
            if scores is None or scores.shape != raw.shape:  # processors that keep per-row state (a batch's)
                scores = torch.cat([self.report(v, sequence).scores for v in nodes])
        probs = torch.softmax(scores, dim=-1)
        rows = [probs[k : k + 1] if q is None else probs[k : k + 1] / q for k, q in enumerate(noise)]
        return [int(row.argmax(-1)) for row in rows]

    def picker(self, preds: torch.Tensor, logits: torch.Tensor | None, sequence_fn):
        """``picks(nodes)``: the races each node of a branch would run, were the k-th of them
        the k-th token from now (so the window follows the sampled text): on the step's
        ``logits`` ``[q, V]`` by the noise race where it re-states the processors, else by
        :meth:`guesses` on the sequence ``sequence_fn()`` gives."""
        race = NoiseRace.of(self.processors) if logits is not None else None
        if race is None:
            return lambda nodes: self.guesses(nodes, sequence_fn())
        return lambda nodes: race.picks(logits, nodes, self.noise_ahead(len(nodes)))

    def noise_ahead(self, n: int) -> torch.Tensor | None:
        """The known noise of the next ``n`` tokens this rule emits, float32 ``[m, V]`` on the
        host, row k for the k-th token from now (m < n where the stream's lead ends; None
        before the prefill's logits or past the lead). Peeked, not read: the stream and the
        user's generator stay as they were."""
        if self._logits is None:
            return None
        like = self._noise_like()
        rows = []
        for k in range(n):
            row = self.noise.peek(self.row, self.emitted + k, like)
            if row is None:
                break
            rows.append(row)
        return torch.cat(rows).cpu() if rows else None

    def _noise_like(self) -> torch.Tensor:
        """A float32 ``[1, V]`` row where the logits are: what new noise blocks are shaped as
        (the processed scores ``take`` is given are float32 rows too)."""
        if self._like is None:
            self._like = torch.empty((1, self._logits.shape[-1]), dtype=torch.float32, device=self._logits.device)
        return self._like

    def release(self) -> None:
        """This rule emits no more tokens."""
        self.noise.release(self.row)
