"""The model shipped as package data loads offline and generates deterministically."""

import json

import pytest
import torch

from lookahead.default_model import DEFAULT_MODEL_DIR, default_model_path, load_default_model

PROMPT = 'def add(a, b):\n    """Return the sum of a and b."""\n'


@pytest.fixture(scope="module")
def shipped():
    return load_default_model()


def test_files_present_and_small():
    path = default_model_path()
    assert path == DEFAULT_MODEL_DIR
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md"):
        assert (path / name).is_file(), name
    assert not list(path.glob("*.bin")), "safetensors only"
    total = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    assert total < 60e6
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["model_type"] == "llama"
    assert "auto_map" not in cfg  # no remote code


def test_loads_offline(shipped, monkeypatch):
    model, tok = shipped
    assert model.dtype == torch.float32
    assert not model.training
    assert tok.bos_token_id is not None and tok.eos_token_id is not None and tok.pad_token_id is not None
    assert len(tok) == model.config.vocab_size
    # a second load with the hub forced offline works too
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    m2, _ = load_default_model(dtype=torch.float32)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), m2.parameters()))


def test_newline_is_its_own_token(shipped):
    _, tok = shipped
    ids = tok(PROMPT).input_ids
    assert ids[0] == tok.bos_token_id
    assert tok.decode(ids[-1:]) == "\n"
    assert tok.decode(ids, skip_special_tokens=True) == PROMPT


def test_greedy_generation_deterministic(shipped):
    model, tok = shipped
    ids = tok(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        a = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=24)
        b = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=24)
    assert a.shape[0] == 1 and ids.shape[1] < a.shape[1] <= ids.shape[1] + 24
    assert torch.equal(a[:, : ids.shape[1]], ids)
    assert torch.equal(a, b)
    text = tok.decode(a[0, ids.shape[1] :], skip_special_tokens=True)
    assert text.strip(), "the model should start a function body"


def test_lookahead_generate_equals_greedy(shipped):
    import lookahead

    model, tok = shipped
    ids = tok(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        ref = model.generate(ids, do_sample=False, max_new_tokens=32)
        out = lookahead.generate(model, ids, max_new_tokens=32)
    assert torch.equal(out, ref)
