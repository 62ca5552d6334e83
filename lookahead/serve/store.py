"""The pool a server keeps across requests: loaded at start, saved atomically, bounded in memory.

A kept pool is the user's data. It is written to a temporary file beside the target, flushed to
disk, then renamed over the target (``os.replace`` is atomic on POSIX), so that a crash or a
``kill -9`` at any moment leaves at ``path`` either the previous file or the new one, each whole.
A process killed inside a save leaves its temporary file, named after the target and its pid
(``.pool.npz.1234.x8a2.tmp``); the next store for that target removes those of dead processes.
"""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
import threading
import time
from collections.abc import Iterator

from lookahead.config import LookaheadConfig
from lookahead.drafts.kept import KeptState

SAVE_LOCK_TIMEOUT_S = 60.0  # how long a final save waits for a request still decoding


def save_atomic(pool: KeptState, path: str, tokenizer=None) -> None:
    """Write ``pool`` to ``path`` so that ``path`` always holds a whole pool file: into a
    temporary file in the same folder (a rename across file systems is not atomic), flushed
    and synced, then renamed over ``path``; the folder is synced so the rename survives a power
    loss. On any error the temporary file is removed and ``path`` is left as it was."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f"{_temporary_prefix(path)}{os.getpid()}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            pool.save(fh, tokenizer)  # a file object: numpy adds no ".npz" to the name
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _sync_folder(folder)


def remove_stale_temporaries(path: str) -> list[str]:
    """Remove the temporary files that saves to ``path`` by processes no longer running left
    (a ``kill -9`` inside a save); a live process's, another server saving there now, stay.
    Returns the removed paths."""
    folder = os.path.dirname(os.path.abspath(path))
    prefix = _temporary_prefix(path)
    removed = []
    for tmp in glob.glob(os.path.join(glob.escape(folder), glob.escape(prefix) + "*.tmp")):
        pid = os.path.basename(tmp)[len(prefix) :].split(".", 1)[0]
        if pid.isdigit() and not _running(int(pid)):
            with contextlib.suppress(OSError):
                os.unlink(tmp)
                removed.append(tmp)
    return removed


def _temporary_prefix(path: str) -> str:
    return f".{os.path.basename(path)}."


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: no signal, only whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _sync_folder(folder: str) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a folder be opened and synced
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def load_pool(path: str, config: LookaheadConfig, tokenizer) -> KeptState:
    """The kept state at ``path``, checked against ``tokenizer`` and ``config``'s n-gram shape; a
    fresh one where no file is there yet. ``ValueError`` (naming the path, what the file is and what
    was expected) for anything else: the server says so and exits with status 2."""
    if not os.path.exists(path):
        if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise ValueError(f"--pool {path!r}: its folder does not exist")
        return new_pool(config)
    pool = KeptState.load(path, tokenizer=tokenizer)
    held = pool.pool
    if held is not None and (held.ngram, held.guesses) != (config.ngram, config.guesses):
        raise ValueError(
            f"--pool {path!r} holds n-grams of ngram={held.ngram}, guesses={held.guesses}, but this server "
            f"decodes with ngram={config.ngram}, guesses={config.guesses}: pass those (--ngram, --guesses) "
            "or start a new pool file"
        )
    return pool


def check_writable(path: str) -> None:
    """``ValueError`` naming ``path`` unless a pool can be saved there: its folder exists, it is
    no folder itself, and a trial temporary file (as :func:`save_atomic` writes one) can be
    created in the folder and removed. Checked at start, so that a server does not decode for
    hours and only then find it cannot save."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"--pool {path!r}: its folder does not exist")
    if os.path.isdir(path):
        raise ValueError(f"--pool {path!r} is a folder: name a file in it")
    try:
        fd, trial = tempfile.mkstemp(prefix=f"{_temporary_prefix(path)}{os.getpid()}.", suffix=".tmp", dir=folder)
        os.close(fd)
        os.unlink(trial)
    except OSError as err:
        raise ValueError(f"--pool {path!r}: cannot write in {folder} ({err.strerror or err})") from err


def new_pool(config: LookaheadConfig) -> KeptState:
    """An empty kept state with ``config``'s n-gram pool, as ``lookahead.generate`` makes per call."""
    state = KeptState()
    if config.uses_pool:
        state.ngrams(config.ngram, config.guesses, config.pool_capacity, config.context_tokens)
    return state


class PoolStore:
    """The server's kept pool (or none: ``keep=False`` gives each request a fresh one).

    ``lease()`` hands the pool to one request at a time under a lock; ``finished()`` counts
    requests and saves every ``save_every`` of them; ``close()`` makes the final save. Saves
    happen under the same lock, so a file is never written while a request fills the pool.
    """

    def __init__(self, pool: KeptState | None, path: str | None, tokenizer, save_every: int):
        self.pool, self.path, self.tokenizer, self.save_every = pool, path, tokenizer, save_every
        if pool is not None and path is not None:
            remove_stale_temporaries(path)
        self.saves = 0
        self.last_save: float | None = None
        self.save_error: str | None = None
        self._since_save = 0
        self._lock = threading.Lock()

    @property
    def kept(self) -> bool:
        return self.pool is not None

    @contextlib.contextmanager
    def lease(self) -> Iterator[KeptState | None]:
        """The kept pool for one request (None when pools are not kept), held under the lock."""
        with self._lock:
            yield self.pool

    def finished(self) -> None:
        """One more request done (the caller holds no lease): saves every ``save_every``."""
        if self.pool is None or self.path is None:
            return
        with self._lock:
            self._since_save += 1
            if self._since_save >= self.save_every:
                self._save_locked()

    def close(self, timeout: float = SAVE_LOCK_TIMEOUT_S) -> bool:
        """The final save (at shutdown, SIGTERM/SIGINT included), once no request holds the pool;
        False when a request still held it after ``timeout`` seconds (the last saved file stays)."""
        if self.pool is None or self.path is None:
            return True
        if not self._lock.acquire(timeout=timeout):
            return False
        try:
            if self._since_save or not os.path.exists(self.path):
                self._save_locked()
            return self.save_error is None
        finally:
            self._lock.release()

    def _save_locked(self) -> None:
        try:
            save_atomic(self.pool, self.path, self.tokenizer)
        except OSError as err:  # a full disk must not take the server down: said in the stats
            self.save_error = f"{os.path.basename(self.path)}: {err.strerror or err}"  # no server folder shown
            return
        self.saves, self.last_save, self._since_save, self.save_error = self.saves + 1, time.time(), 0, None

    def describe(self, vocab_size: int, successors: int) -> dict:
        """What ``GET /lookahead/stats`` says of the pool (read without the lock: counts only): its
        file's name (None: kept in memory only), never the server's folders."""
        if self.pool is None:
            return {"kept": False}
        return {
            "kept": True,
            "file": os.path.basename(self.path) if self.path is not None else None,
            "keys": len(self.pool.pool) if self.pool.pool is not None else 0,
            "capacity": self.pool.pool.capacity if self.pool.pool is not None else 0,
            "history_tokens": len(self.pool.history),
            "history_capacity": self.pool.history.capacity,
            "memory_bound_bytes": self.pool.nbytes_bound(vocab_size, successors),
            "saves": self.saves,
            "last_save": self.last_save,
            "save_error": self.save_error,
        }
