"""lookahead's own files (a kept pool, a suffix index): numpy ``.npz`` archives of plain arrays,
never pickles, each marked with its kind and the vocabulary it was made for.

A file is input. Whatever it is (a truncated archive, a text file, the other kind, a file
made with another tokenizer), reading it either gives the arrays or raises a ``ValueError``
that names the path, says what the file is not and what was expected.
"""

from __future__ import annotations

import hashlib
import json
import weakref
import zipfile
import zlib

import numpy as np

_ZIP_MAGIC = b"PK\x03\x04"  # every .npz archive starts as a zip file does
MADE_BY = {"pool": "KeptState.save", "suffix index": "lookahead index build, or SuffixIndex.save"}


def fingerprint(tokenizer) -> str:
    """``"<size>:<hash>"`` of a tokenizer's vocabulary (each token and its id): two tokenizers
    with one vocabulary size but other tokens get different fingerprints."""
    vocab = tokenizer.get_vocab()
    text = json.dumps(sorted(vocab.items(), key=lambda item: item[1]), ensure_ascii=False)
    return f"{len(vocab)}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


_KNOWN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> (vocabulary size, fingerprint)


def fingerprint_of(tokenizer) -> str:
    """:func:`fingerprint` of ``tokenizer`` (or of a processor's ``.tokenizer``), remembered per
    tokenizer object and vocabulary size: hashing a large vocabulary takes milliseconds, and
    ``lookahead.generate(..., tokenizer=)`` asks on every call."""
    tokenizer = tokenizer if hasattr(tokenizer, "get_vocab") else getattr(tokenizer, "tokenizer", tokenizer)
    size = len(tokenizer)
    try:
        known = _KNOWN.get(tokenizer)
    except TypeError:  # an object that cannot be weakly referenced: hashed every time
        return fingerprint(tokenizer)
    if known is None or known[0] != size:
        known = (size, fingerprint(tokenizer))
        _KNOWN[tokenizer] = known
    return known[1]


def marks(kind: str, tokenizer=None, known: str = "") -> dict[str, np.ndarray]:
    """The arrays that mark a saved file: its kind and its tokenizer's fingerprint (``tokenizer``'s,
    else ``known``, the one the object was loaded or used with; empty when neither is known)."""
    return {"kind": np.array(kind), "vocabulary": np.array(fingerprint(tokenizer) if tokenizer is not None else known)}


def stored_fingerprint(arrays: dict) -> str:
    """The tokenizer fingerprint a file read by :func:`read` was marked with ("" when unmarked)."""
    return str(arrays["vocabulary"][()]) if "vocabulary" in arrays else ""


def read(path, kind: str, names: tuple[str, ...], tokenizer=None) -> dict[str, np.ndarray]:
    """Every array of the ``kind`` file at ``path``, read whole (a truncated archive fails here,
    not in a decode). Checks that it is an archive, of this kind, holding ``names``, and (with
    ``tokenizer``) made for that tokenizer; ``ValueError`` otherwise."""
    expected = f"a lookahead {kind} (a .npz archive written by {MADE_BY[kind]})"
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError as err:
        raise ValueError(f"{path}: cannot be read ({err.strerror}); expected {expected}") from err
    if head != _ZIP_MAGIC:
        raise ValueError(f"{path}: not {expected}: it starts with {head!r}, not as a .npz archive does")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as err:
        raise ValueError(f"{path}: a damaged or truncated archive, not {expected} ({err})") from err
    found = _kind_of(arrays)
    if found != f"a lookahead {kind}":
        raise ValueError(f"{path}: {found}, not {expected}")
    for name in names:
        if name not in arrays:
            raise ValueError(f"{path}: not {expected}: no array {name!r}")
    _check_vocabulary(arrays, path, kind, tokenizer)
    return arrays


def _kind_of(arrays: dict) -> str:
    """What a file is: its mark, or for files written before marks, its arrays' names."""
    if "kind" in arrays and arrays["kind"].dtype.kind == "U":
        return f"a lookahead {arrays['kind'][()]}"
    if "shape" in arrays and "conts" in arrays:
        return "a lookahead pool"
    if "sa" in arrays or "text" in arrays:
        return "a lookahead suffix index"
    return f"an archive of arrays {sorted(arrays)}"


def _check_vocabulary(arrays: dict, path, kind: str, tokenizer) -> None:
    stored = stored_fingerprint(arrays)
    if tokenizer is None or not stored:
        return
    mine = fingerprint(tokenizer)
    if stored != mine:
        raise ValueError(
            f"{path}: a {kind} made with another tokenizer (vocabulary {stored}; this model's is {mine}): "
            f"its drafts would be noise. Rebuild it with this model's tokenizer"
        )


def check_like(path, name: str, array: np.ndarray, held: np.ndarray) -> None:
    """``ValueError`` unless the file's ``array`` has the shape and dtype of ``held``, the
    array it is read into."""
    if array.shape != held.shape or array.dtype != held.dtype:
        raise ValueError(
            f"{path}: array {name!r} has shape {array.shape} {array.dtype}, expected {held.shape} {held.dtype}"
        )


def read_ints(path, name: str, array: np.ndarray | None, count: int | None, low: int | None = None, meaning: str = ""):
    """The ints a file's small ``array`` holds: ``count`` of them (a tuple), or with ``count``
    None one scalar (an int); each at least ``low`` where given. ``ValueError`` naming the array
    and what it must hold otherwise (``meaning``: what the ints are, for the message)."""
    shape = () if count is None else (count,)
    wanted = ("be one int" if count is None else f"hold {count} ints") + (f" >= {low}" if low is not None else "")
    wanted += f" ({meaning})" if meaning else ""
    integer = array is not None and array.shape == shape and np.issubdtype(array.dtype, np.integer)
    if not integer or (low is not None and array.size and int(array.min()) < low):
        shown = int(array) if integer and count is None else repr(array)
        raise ValueError(f"{path}: {name!r} must {wanted}, got {shown}")
    return int(array) if count is None else tuple(int(x) for x in array)


def check_bounds(path, name: str, array: np.ndarray, low: int, high: int | None = None) -> None:
    """A file is input: ``ValueError`` unless every value of ``array`` lies in ``[low, high]``
    (``high`` None: no upper bound), as the kernels that index with it need."""
    if not array.size:
        return
    lo, hi = int(array.min()), int(array.max())
    if lo < low or (high is not None and hi > high):
        allowed = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{path}: array {name!r} holds values in [{lo}, {hi}]; allowed: {allowed}")


def check_index(path, text: np.ndarray, sa: np.ndarray, vocab_size: int | None) -> None:
    """``ValueError`` unless ``text`` and ``sa`` are a suffix index's: int32 ``[N]`` each, the
    text's values -1 (a separator) or token ids below ``vocab_size``, ``sa`` a permutation of
    the text's positions."""
    for name, array in (("text", text), ("sa", sa)):
        if array.ndim != 1 or array.dtype != np.int32:
            raise ValueError(f"{path}: array {name!r} must be int32 [N], got {array.dtype} {array.shape}")
    if sa.shape != text.shape:
        raise ValueError(f"{path}: array 'sa' has {sa.shape[0]} rows, but 'text' holds {text.shape[0]} tokens")
    if not text.size:
        return
    lo, hi = int(text.min()), int(text.max())
    if lo < -1 or (vocab_size is not None and hi >= vocab_size):
        top = f"{vocab_size - 1}" if vocab_size is not None else "inf"
        allowed = f"-1 (separator) or token ids in [0, {top}]"
        raise ValueError(f"{path}: array 'text' holds values in [{lo}, {hi}]; allowed: {allowed}")
    if int(sa.min()) < 0 or int(sa.max()) >= text.shape[0]:
        raise ValueError(f"{path}: array 'sa' holds positions outside [0, {text.shape[0] - 1}]")
    if np.bincount(sa, minlength=text.shape[0]).max() != 1:
        raise ValueError(f"{path}: array 'sa' is not a permutation of the text's positions")
