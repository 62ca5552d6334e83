"""lookahead's files are input: pools and suffix indexes load, or fail with a ValueError that
says what the file is not; every checked bound holds at its exact limit and fails one past it."""

import numpy as np
import pytest
from transformers import PreTrainedTokenizerFast

from lookahead import KeptState, NgramPool, SuffixIndex, files

from tiny_models import VOCAB, tiny_tokenizer


def _index(tmp_path, tokens: int = 4000, tokenizer=None):
    rng = np.random.default_rng(0)
    index = SuffixIndex.from_texts([rng.integers(3, VOCAB, size=tokens)])
    index.save(tmp_path / "index.npz", tokenizer=tokenizer)
    return tmp_path / "index.npz"


def _pool(tmp_path, tokenizer=None):
    pool = KeptState(NgramPool(4, 3, capacity=64))
    pool.pool.insert_text(np.arange(3, 40, dtype=np.int64) % 11 + 3)
    pool.remember(np.arange(3, 9))
    pool.save(tmp_path / "pool.npz", tokenizer=tokenizer)
    return pool, tmp_path / "pool.npz"


def test_a_truncated_index_is_a_clear_error(tmp_path):
    path = _index(tmp_path)
    cut = tmp_path / "cut.npz"
    cut.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(ValueError, match="cut.npz: a damaged or truncated archive, not a lookahead suffix index"):
        SuffixIndex.load(cut)


@pytest.mark.parametrize(
    "load,kind", [(SuffixIndex.load, "suffix index"), (KeptState.load, "pool"), (NgramPool.load, "pool")]
)
def test_a_text_file_is_not_an_archive(tmp_path, load, kind):
    path = tmp_path / "notes.txt"
    path.write_text("def f():\n    return 1\n")
    with pytest.raises(ValueError, match=f"not a lookahead {kind} .*starts with b'def '") as err:
        load(path)
    assert "pickle" not in str(err.value)


def test_each_kind_refuses_the_other(tmp_path):
    index = _index(tmp_path)
    _, pool = _pool(tmp_path)
    for load in (KeptState.load, NgramPool.load):
        with pytest.raises(ValueError, match="a lookahead suffix index, not a lookahead pool"):
            load(index)
    with pytest.raises(ValueError, match="a lookahead pool, not a lookahead suffix index"):
        SuffixIndex.load(pool)
    with pytest.raises(ValueError, match="cannot be read"):
        SuffixIndex.load(tmp_path / "missing.npz")


def _other_tokenizer():
    """The tiny tokenizer's vocabulary size, other tokens behind the ids."""
    tok = tiny_tokenizer()
    vocab = tok.get_vocab()
    letters = sorted((t for t in vocab if len(t) == 1), key=vocab.get)
    swapped = {**vocab, letters[0]: vocab[letters[1]], letters[1]: vocab[letters[0]]}
    from tokenizers import Tokenizer, models

    core = Tokenizer(models.WordLevel(swapped, unk_token="<pad>"))
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


def test_a_file_made_with_another_tokenizer_is_refused(tmp_path):
    tok, other = tiny_tokenizer(), _other_tokenizer()
    assert len(other) == len(tok) and files.fingerprint(other) != files.fingerprint(tok)
    index = _index(tmp_path, tokenizer=tok)
    assert SuffixIndex.load(index, VOCAB, tokenizer=tok).text.shape[0] == 4001
    with pytest.raises(ValueError, match="made with another tokenizer"):
        SuffixIndex.load(index, VOCAB, tokenizer=other)
    _, pool = _pool(tmp_path, tokenizer=tok)
    KeptState.load(pool, tokenizer=tok)
    with pytest.raises(ValueError, match="made with another tokenizer"):
        KeptState.load(pool, tokenizer=other)
    # an unmarked file (written without a tokenizer, or before marks) loads with any
    plain = tmp_path / "plain"
    plain.mkdir()
    SuffixIndex.load(_index(plain, tokenizer=None), VOCAB, tokenizer=other)


def _spoiled(tmp_path, name, edit):
    _, path = _pool(tmp_path)
    data = dict(np.load(path))
    data[name] = data[name].copy()
    edit(data)
    np.savez(tmp_path / "b.npz", **data)
    return tmp_path / "b.npz"


def _set_max(name, value):
    def edit(data):
        data[name].flat[int(np.argmax(data[name]))] = value

    return edit


@pytest.mark.parametrize("over", [False, True])
def test_pool_counts_at_their_bound(tmp_path, over):
    path = _spoiled(tmp_path, "counts", _set_max("counts", 3 + over))  # guesses = 3
    if over:
        with pytest.raises(ValueError, match=r"'counts' holds values in \[0, 4\]; allowed: \[0, 3\]"):
            KeptState.load(path)
    else:
        assert KeptState.load(path).pool.guesses == 3


@pytest.mark.parametrize("over", [False, True])
def test_pool_stamps_at_their_bound(tmp_path, over):
    def edit(data):
        data["stamps"].flat[0] = int(data["clock"][0]) + over

    path = _spoiled(tmp_path, "stamps", edit)
    if over:
        with pytest.raises(ValueError, match="'stamps' holds values"):
            KeptState.load(path)
    else:
        KeptState.load(path)


@pytest.mark.parametrize("over", [False, True])
def test_pool_history_at_its_lower_bound(tmp_path, over):
    def edit(data):
        data["history"][0] = -1 - over  # -1 separates texts; below it nothing is allowed

    path = _spoiled(tmp_path, "history", edit)
    if over:
        with pytest.raises(ValueError, match=r"'history' holds values in \[-2"):
            KeptState.load(path)
    else:
        assert KeptState.load(path).history.tokens[0] == -1


@pytest.mark.parametrize("over", [False, True])
def test_pool_tokens_at_the_vocabulary_bound(tmp_path, over):
    for name in ("conts", "history"):
        path = _spoiled(tmp_path, name, _set_max(name, VOCAB - 1 + over))
        pool = KeptState.load(path)  # the model's vocabulary is checked when it is known
        if over:
            with pytest.raises(ValueError, match=f"token id {VOCAB}, but the model has {VOCAB} ids"):
                pool.check_vocabulary(VOCAB)
        else:
            pool.check_vocabulary(VOCAB)


@pytest.mark.parametrize("over", [False, True])
def test_pool_history_capacity_at_its_bound(tmp_path, over):
    def edit(data):
        data["history_capacity"] = np.array(0 - over)

    path = _spoiled(tmp_path, "history_capacity", edit)
    if over:
        with pytest.raises(ValueError, match="'history_capacity' must be one int >= 0, got -1"):
            KeptState.load(path)
    else:
        assert KeptState.load(path).history.tokens.shape == (0,)


@pytest.mark.parametrize("over", [False, True])
def test_index_tokens_at_their_bounds(tmp_path, over):
    for value in (VOCAB - 1 + over, -1 - over):  # the highest id, and the separator
        text = np.array([3, value, 4], dtype=np.int32)
        np.savez(tmp_path / "i.npz", text=text, sa=SuffixIndex(text).sa)
        if over:
            with pytest.raises(ValueError, match="'text' holds values"):
                SuffixIndex.load(tmp_path / "i.npz", vocab_size=VOCAB)
        else:
            SuffixIndex.load(tmp_path / "i.npz", vocab_size=VOCAB)


@pytest.mark.parametrize("over", [False, True])
def test_index_positions_at_their_bound(tmp_path, over):
    text = np.array([3, 4, 5], dtype=np.int32)
    sa = np.array([0, 1, 2 + over], dtype=np.int32)  # 2 is the last position; 3 is past the text
    np.savez(tmp_path / "i.npz", text=text, sa=sa)
    if over:
        with pytest.raises(ValueError, match=r"'sa' holds positions outside \[0, 2\]"):
            SuffixIndex.load(tmp_path / "i.npz", vocab_size=VOCAB)
    else:
        SuffixIndex.load(tmp_path / "i.npz", vocab_size=VOCAB)
