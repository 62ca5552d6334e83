"""transformers' random stream for sampling, replayed for rows that advance at different rates.

``model.generate(do_sample=True)`` draws each step's tokens with
``torch.multinomial(softmax(scores), 1)`` over the whole batch. For one sample per row ATen
fills a tensor shaped like the probabilities, ``[B, V]`` float32, with ``Exp(1)`` draws from the
generator and returns ``argmax(p / q)`` per row (the exponential race: distributed exactly as
``p``). So step t of ``generate`` reads block t of a stream of ``[B, V]`` exponential blocks,
row b reading its row of it.

Lookahead rows emit several tokens per step and not in lockstep: row 0 may need its 7th token
while row 1 needs its 4th. The stream draws block t, whole, when the first row needs it (so the
generator is consumed block by block, exactly as ``generate`` consumes it) and drops it when
every row still decoding has read past it. Memory: ``(lead + 1) x B x V`` floats, ``lead``
being how many tokens the fastest row is ahead of the slowest live one::

    step t:      0   1   2   3   4   5
    row 0 reads  x   x   x   x   x   .     next = 5
    row 1 reads  x   x   x   .   .   .     next = 3
    kept blocks          3   4             (0..2 read by both: dropped)
"""

from __future__ import annotations

from collections import deque

import torch

MAX_LEAD = 64  # the most blocks a peek reads ahead of the real draws (memory: MAX_LEAD x rows x V floats)


def _default_generator(device: torch.device) -> torch.Generator:
    """The generator ``exponential_(generator=None)`` draws from on ``device``."""
    if device.type == "cuda":
        return torch.cuda.default_generators[device.index if device.index is not None else torch.cuda.current_device()]
    if device.type == "cpu":
        return torch.default_generator
    raise RuntimeError(f"peeking at the noise needs a generator= on {device.type}")


class NoiseStream:
    """Blocks of ``Exp(1)`` noise ``[rows, V]``, drawn in order from ``generator``.

    Args:
        rows: the batch size ``generate`` would sample for (finished rows included: its
            draws are always ``[B, V]``).
        generator: a ``torch.Generator``, or ``None`` for the device's default one (what
            ``torch.manual_seed`` seeds and ``generate`` uses).
    """

    def __init__(self, rows: int, generator: torch.Generator | None = None):
        if rows < 1:
            raise ValueError(f"rows must be >= 1, got {rows}")
        self.rows = rows
        self.generator = generator
        self._blocks: deque[torch.Tensor] = deque()
        self._first = 0  # the step of _blocks[0]
        self._next = [0] * rows  # the step each row reads next
        self._live = [True] * rows
        self._shadow: torch.Generator | None = None  # a copy of the generator, drawing ahead for peeks
        # peeked blocks from step _ahead_first on, each with the shadow's state before and after it
        self._ahead: deque[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = deque()
        self._ahead_first = 0

    @property
    def drawn(self) -> int:
        """How many blocks were drawn from the generator so far."""
        return self._first + len(self._blocks)

    @property
    def held(self) -> int:
        """How many blocks are kept now."""
        return len(self._blocks)

    def take(self, row: int, step: int, like: torch.Tensor) -> torch.Tensor:
        """Row ``row`` of block ``step`` as ``[1, V]``; ``like`` (``[1, V]`` scores) gives the
        vocabulary size, dtype and device of new blocks. Each row reads its steps in order."""
        if not self._live[row]:
            raise RuntimeError(f"row {row} of the noise stream was released")
        if step < self._next[row]:
            raise RuntimeError(f"row {row} asked for step {step} again (next unread: {self._next[row]})")
        while self.drawn <= step:
            self._blocks.append(self._next_block(like))
        noise = self._blocks[step - self._first][row : row + 1]
        self._next[row] = step + 1
        self._drop()
        return noise

    def peek(self, row: int, step: int, like: torch.Tensor) -> torch.Tensor | None:
        """Row ``row`` of block ``step`` as ``[1, V]``, as :meth:`take` will return it, without
        reading it: a block not drawn yet comes from a copy of the generator, so the user's
        generator advances exactly as ``generate``'s does, whatever is peeked. None past
        ``MAX_LEAD`` blocks ahead of the real draws."""
        if step < self._next[row]:
            raise RuntimeError(f"row {row} peeked at step {step}, already read (next unread: {self._next[row]})")
        if step < self.drawn:
            return self._blocks[step - self._first][row : row + 1]
        if step >= self.drawn + MAX_LEAD:
            return None
        if self._ahead_first != self.drawn or self._shadow is None:
            self._sync_shadow(like.device)
        while self._ahead_first + len(self._ahead) <= step:
            before = self._shadow.get_state()
            block = self._draw(like, self._shadow)
            self._ahead.append((block, before, self._shadow.get_state()))
        return self._ahead[step - self._ahead_first][0][row : row + 1]

    def _next_block(self, like: torch.Tensor) -> torch.Tensor:
        """The next block from the generator. A peeked one is the same draw: where the generator
        is in the state the peek drew it from, it is moved on to the state after that draw
        instead of drawing again (a ``[rows, V]`` exponential block costs about what a forward
        of a small model does); where anything else drew from it since, the peeks are dropped."""
        if self._ahead and self._ahead_first == self.drawn:
            block, before, after = self._ahead.popleft()
            self._ahead_first += 1
            real = self._real(like.device)
            same = block.shape[-1] == like.shape[-1] and block.dtype == like.dtype and block.device == like.device
            if same and torch.equal(real.get_state(), before):
                real.set_state(after)
                return block
            self._ahead.clear()
            self._shadow = None  # the next peek copies the generator afresh
        return self._draw(like, self.generator)

    def _real(self, device: torch.device) -> torch.Generator:
        return self.generator if self.generator is not None else _default_generator(device)

    def _draw(self, like: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """The next ``[rows, V]`` block of ``generator``, shaped and placed like ``like``."""
        block = torch.empty((self.rows, like.shape[-1]), dtype=like.dtype, device=like.device)
        return block.exponential_(generator=generator)

    def _sync_shadow(self, device: torch.device) -> None:
        """A copy of the generator at the next real draw (peeked blocks behind it are dropped)."""
        real = self._real(device)
        if self._shadow is None or self._shadow.device != real.device:
            self._shadow = torch.Generator(device=real.device)
        self._shadow.set_state(real.get_state())
        self._ahead.clear()
        self._ahead_first = self.drawn

    def release(self, row: int) -> None:
        """Row ``row`` reads no more: the blocks only it still needed can go."""
        self._live[row] = False
        self._drop()

    def _drop(self) -> None:
        live = [n for n, alive in zip(self._next, self._live, strict=True) if alive]
        low = min(live) if live else self.drawn
        while self._blocks and self._first < low:
            self._blocks.popleft()
            self._first += 1
