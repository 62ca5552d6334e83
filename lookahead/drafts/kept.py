"""What lookahead keeps across requests, as one object: ``KeptState``.

A request teaches the next ones four things, each bounded in memory:

    pool         n-grams of the texts and of the window's trajectories  (drafts.pool.NgramPool)
    history      the finished texts, for the copy guess                 (drafts.history.History)
    successors   every fed token's top-k predictions                    (drafts.successors.SuccessorTable)
    budgets      what the draft budget learnt of each source's chances  (drafts.budget.DraftBudget.carry)

plus the fingerprint of the tokenizer its ids come from. ``lookahead.generate(...,
lookahead_pool=state)``, ``lookahead serve`` and the vLLM proposer all keep one and save it
the same way: one ``.npz`` file of plain arrays (no pickle), the format of the pool files of
lookahead 0.1 (which load as they are) plus a ``format`` mark.
"""

from __future__ import annotations

import numpy as np

from lookahead import files
from lookahead.drafts.history import History
from lookahead.drafts.learnt import learnt_arrays, read_learnt
from lookahead.drafts.pool import POOL_ARRAYS, NgramPool
from lookahead.drafts.successors import SuccessorTable

FORMAT = 2  # pool files of lookahead 0.1 carry no mark and are format 1; both load
HISTORY_TOKENS = 1 << 16  # the default history: 64k tokens, 1.5 MiB with its indexes


class KeptState:
    """What requests teach later ones (see the module's docstring).

    Args:
        pool: the n-gram pool to keep, or None: one is made at first use, shaped as that
            call's config asks (``lookahead.LookaheadConfig``: ``ngram``, ``guesses``,
            ``pool_capacity``, ``context_tokens``).
        history: the most tokens of finished texts kept (0 keeps none).
    """

    def __init__(self, pool: NgramPool | None = None, history: int = HISTORY_TOKENS):
        if pool is not None and not isinstance(pool, NgramPool):
            raise TypeError(f"KeptState(pool=) must be a lookahead.NgramPool, got {type(pool).__name__}")
        self.pool = pool
        self.history = History(history)
        self.successors: SuccessorTable | None = None
        self.budgets: dict = {}
        # the fingerprint of the tokenizer its ids come from ("" while unknown): read from a
        # loaded file, else taken from the first lookahead.generate(..., tokenizer=) that uses it
        self.vocabulary = ""

    def ngrams(self, ngram: int, guesses: int, capacity: int, context_tokens: int) -> NgramPool:
        """The kept pool, made with these settings at first use; ``ValueError`` where the kept
        one holds n-grams of another shape."""
        if self.pool is None:
            self.pool = NgramPool(ngram, guesses, capacity, context_tokens)
        elif (self.pool.ngram, self.pool.guesses) != (ngram, guesses):
            raise ValueError(
                f"lookahead_pool holds ngram={self.pool.ngram}, guesses={self.pool.guesses}, but lookahead_config "
                f"has ngram={ngram}, guesses={guesses}: pass a config of that shape or a new KeptState"
            )
        return self.pool

    def successor_table(self, vocab: int, k: int, length: int) -> SuccessorTable:
        """The kept successor table when it has these sizes, else a new one, kept for the next
        request. Earlier requests' predictions are guesses like any other: verified."""
        table = self.successors
        if table is None or table.shape != (vocab, k, length):
            table = self.successors = SuccessorTable(vocab, k, length)
        return table

    def remember(self, text: np.ndarray) -> None:
        """Keep a finished text (prompt and output, int ``[n]``) for later copy guesses."""
        self.history.remember(text)

    def nbytes_bound(self, vocab: int, successors: int) -> int:
        """The most bytes it can hold whatever the requests: the pool's table, the history and
        its indexes, and a successor table of ``vocab x successors`` (the budgets' counts are
        a few small arrays per decoding mode)."""
        pool = self.pool.nbytes if self.pool is not None else 0
        return pool + self.history.nbytes_bound + vocab * successors * (4 + 4)

    def check_vocabulary(self, vocab_size: int) -> None:
        """``ValueError`` where a kept token id is not an id of a model with ``vocab_size`` ids
        (a state filled, or a file written, for another vocabulary)."""
        if self.pool is not None:
            self.pool.check_vocabulary(vocab_size)
        table = self.successors.arrays()[0] if self.successors is not None else np.zeros(0, dtype=np.int32)
        for name, array in (("history", self.history.tokens), ("successors", table)):
            if array.size and int(array.max()) >= vocab_size:
                raise ValueError(
                    f"lookahead_pool holds {name} token id {int(array.max())}, but the model has "
                    f"{vocab_size} ids: a pool made for another vocabulary"
                )

    def save(self, path, tokenizer=None) -> None:
        """Write everything to ``path`` as a numpy ``.npz`` archive (plain arrays, no pickle),
        marked with ``tokenizer``'s fingerprint where given (else the one it knows), so that a
        load with another tokenizer is refused."""
        np.savez(
            path,
            **(self.pool.arrays() if self.pool is not None else {}),
            history=self.history.tokens,
            history_capacity=np.array(self.history.capacity),
            **learnt_arrays(self.successors, self.budgets),
            **files.marks("pool", tokenizer, self.vocabulary),
            format=np.array(FORMAT),
        )

    @classmethod
    def load(cls, path, tokenizer=None) -> KeptState:
        """Read a file :meth:`save` wrote, or a pool file of lookahead 0.1 (arrays only, never a
        pickle). A file is input: anything else (made for another ``tokenizer`` where both
        name one, of a newer format, or with arrays out of their bounds) raises ``ValueError``
        naming what it is not."""
        data = files.read(path, "pool", (), tokenizer)
        version = files.read_ints(path, "format", data.get("format", np.array(1)), None, 1)
        if version > FORMAT:
            raise ValueError(
                f"{path}: a pool file of format {version}, from a newer lookahead; this one reads 1-{FORMAT}"
            )
        missing = [name for name in POOL_ARRAYS if name not in data]
        if 0 < len(missing) < len(POOL_ARRAYS) or (missing and "history" not in data):
            raise ValueError(f"{path}: not a lookahead pool file (KeptState.save): no array {missing[0]!r}")
        pool = NgramPool.from_arrays(path, data) if not missing else None
        capacity = files.read_ints(
            path, "history_capacity", data.get("history_capacity", np.array(HISTORY_TOKENS)), None, 0
        )
        state = cls(pool, capacity)
        if "history" in data:  # files of lookahead 0.1's first weeks kept none
            history = np.asarray(data["history"], dtype=np.int64)
            files.check_bounds(path, "history", history, -1)
            state.history.restore(history)
        state.successors, state.budgets = read_learnt(path, data)
        state.vocabulary = files.stored_fingerprint(data)
        return state
