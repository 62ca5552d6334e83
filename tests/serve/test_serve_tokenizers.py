"""A pool or index is another tokenizer's when its fingerprint (the vocabulary's tokens and ids)
differs: ``lookahead.generate(..., tokenizer=)`` refuses it, as ``lookahead serve --pool`` does
at start (exit 2), even when both vocabularies have the same size."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, PreTrainedTokenizerFast

import lookahead
from lookahead import cli, files

from serving import need_server_packages
from tiny_models import tiny_model, tiny_tokenizer

KWARGS = dict(max_new_tokens=8, pad_token_id=0, eos_token_id=None)
IDS = torch.tensor([[5, 6, 7, 5, 6, 7]])


def other_tokenizer():
    """The tiny tokenizer's size, two tokens' ids swapped: the same vocabulary size, another vocabulary."""
    from tokenizers import Tokenizer, models

    vocab = tiny_tokenizer().get_vocab()
    a, b = sorted((t for t in vocab if len(t) == 1), key=vocab.get)[:2]
    core = Tokenizer(models.WordLevel({**vocab, a: vocab[b], b: vocab[a]}, unk_token="<pad>"))
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


def test_a_loaded_pool_of_another_tokenizer_is_refused_by_generate(tmp_path):
    tok, other = tiny_tokenizer(), other_tokenizer()
    assert len(tok) == len(other) and files.fingerprint(tok) != files.fingerprint(other)
    model = tiny_model("llama")
    pool = lookahead.KeptState(lookahead.NgramPool(5, 2))
    pool.pool.insert_text(np.arange(3, 20))
    pool.save(tmp_path / "pool.npz", tokenizer=tok)
    loaded = lookahead.KeptState.load(tmp_path / "pool.npz")  # no tokenizer: the file's mark is kept
    assert loaded.vocabulary == files.fingerprint(tok)
    with pytest.raises(ValueError, match="lookahead_pool was made with another tokenizer"):
        lookahead.generate(model, IDS, lookahead_pool=loaded, tokenizer=other, **KWARGS)
    out = lookahead.generate(model, IDS, lookahead_pool=loaded, tokenizer=tok, **KWARGS)
    assert out.tolist() == model.generate(IDS, do_sample=False, **KWARGS).tolist()


def test_a_pool_used_with_one_tokenizer_is_refused_with_another():
    """A pool made in memory takes the fingerprint of the first tokenizer it is used with."""
    model, pool = tiny_model("llama"), lookahead.KeptState()
    lookahead.generate(model, IDS, lookahead_pool=pool, tokenizer=tiny_tokenizer(), **KWARGS)
    assert pool.vocabulary == files.fingerprint(tiny_tokenizer())
    with pytest.raises(ValueError, match="another tokenizer"):
        lookahead.generate(model, IDS, lookahead_pool=pool, tokenizer=other_tokenizer(), **KWARGS)


def test_an_index_of_another_tokenizer_is_refused_by_generate(tmp_path):
    model = tiny_model("llama")
    lookahead.SuffixIndex.from_texts([np.arange(3, 30)]).save(tmp_path / "index.npz", tokenizer=tiny_tokenizer())
    index = lookahead.SuffixIndex.load(tmp_path / "index.npz")
    with pytest.raises(ValueError, match="lookahead_index was made with another tokenizer"):
        lookahead.generate(model, IDS, lookahead_index=index, tokenizer=other_tokenizer(), **KWARGS)


def test_serve_refuses_a_pool_of_another_tokenizer(tmp_path, capsys):
    """The embedded model's server, handed a pool file marked with the tiny tokenizer: exit 2,
    one line naming the file and the mismatch, before the model loads."""
    need_server_packages()
    lookahead.KeptState().save(tmp_path / "foreign.npz", tokenizer=tiny_tokenizer())
    assert cli.main(["serve", "--pool", str(tmp_path / "foreign.npz"), "--port", "0"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("lookahead serve: error: ") and "made with another tokenizer" in err
    assert str(tmp_path / "foreign.npz") in err


def test_serve_reads_an_index_of_its_tokenizer_and_refuses_another(tmp_path):
    """``--index``: read with the served model's tokenizer before the model loads."""
    need_server_packages()
    from lookahead.default_model import default_model_path
    from lookahead.serve.app import ServeOptions, load_state

    model_dir = str(default_model_path())
    ours = AutoTokenizer.from_pretrained(model_dir)
    lookahead.SuffixIndex.from_texts([np.arange(3, 300)]).save(tmp_path / "ours.npz", tokenizer=ours)
    lookahead.SuffixIndex.from_texts([np.arange(3, 30)]).save(tmp_path / "theirs.npz", tokenizer=tiny_tokenizer())
    runner = load_state(ServeOptions(model_dir=model_dir, index_path=str(tmp_path / "ours.npz")))
    assert len(runner.index) == 298 and runner.index.vocabulary == files.fingerprint(ours)
    with pytest.raises(ValueError, match="made with another tokenizer"):
        load_state(ServeOptions(model_dir=model_dir, index_path=str(tmp_path / "theirs.npz")))
