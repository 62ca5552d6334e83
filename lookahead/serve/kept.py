"""A pool kept per loaded model, for the zero-install path: the ``custom_generate`` folder that
``lookahead export-custom-generate`` writes, under plain ``transformers serve MODEL
--trust-remote-code`` (or any caller of ``model.generate`` on such a model).

transformers binds the folder's ``generate`` to the model instance, and calls it once per
request with no state of ours in between; the pool therefore lives on the model object itself,
one per pool shape, and goes when the model is unloaded. A call that finds the pool in use by
another thread decodes with a fresh pool instead of waiting: pools never change an output, and
concurrent calls are not serialised behind one another.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from lookahead.config import LookaheadConfig
from lookahead.drafts.kept import KeptState
from lookahead.serve.store import new_pool

ATTRIBUTE = "_lookahead_kept_pools"  # on the model: {(ngram, guesses, capacity, context tokens): (pool, lock)}
_CREATING = threading.Lock()


@contextlib.contextmanager
def kept_pool(model, config: LookaheadConfig | None) -> Iterator[KeptState | None]:
    """The state kept on ``model`` for ``config``'s pool shape (made on first use), held for one
    call; None (``lookahead.generate`` then makes a fresh one) while another call holds it."""
    config = config if config is not None else LookaheadConfig()
    key = (config.ngram, config.guesses, config.pool_capacity, config.context_tokens)
    with _CREATING:
        pools = model.__dict__.setdefault(ATTRIBUTE, {})
        if key not in pools:
            pools[key] = (new_pool(config), threading.Lock())
    pool, lock = pools[key]
    if not lock.acquire(blocking=False):
        yield None
        return
    try:
        yield pool
    finally:
        lock.release()


def generate(model, *args, **kwargs):
    """``lookahead.generate(model, ...)`` with the pool kept on ``model`` unless the caller passes
    ``lookahead_pool=`` (the exported ``custom_generate/generate.py`` calls this)."""
    import lookahead

    if "lookahead_pool" in kwargs:
        return lookahead.generate(model, *args, **kwargs)
    with kept_pool(model, kwargs.get("lookahead_config")) as pool:
        return lookahead.generate(model, *args, lookahead_pool=pool, **kwargs)
