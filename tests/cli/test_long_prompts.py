"""Long prompts in the benchmark: the code-* sets and a model stretched to take them."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
import torch
import transformers as tf

import lookahead
from lookahead.bench import prompts
from lookahead.checking.loading import stretch_positions
from lookahead.default_model import default_model_path
from tests.helpers.tiny_models import CONFIGS


@pytest.fixture(scope="module")
def tokenizer():
    return tf.AutoTokenizer.from_pretrained(default_model_path())


def test_code_sets_are_real_files_cut_at_a_function_within_their_size(tokenizer):
    items = prompts.load_prompts("code-1k", tokenizer, limit=3)
    assert len(items) == 3 and len({p.id for p in items}) == 3
    folder = Path(sysconfig.get_paths()["stdlib"]) / "test"
    for item in items:
        name = item.id.split("/")[1]
        source = (folder / name).read_text(encoding="utf-8")
        assert source.startswith(item.text) and item.text.endswith("\n")
        size = len(tokenizer(item.text, add_special_tokens=False)["input_ids"])
        assert 800 <= size <= 1001, (name, size)
        # the cut falls inside a function: its def line is among the last lines
        assert any(line.lstrip().startswith("def ") for line in item.text.splitlines()[-40:])


def test_code_sets_need_a_tokenizer():
    with pytest.raises(ValueError, match="tokenizer"):
        prompts.load_prompts("code-4k", None, limit=1)


def _llama(positions: int):
    config = CONFIGS["llama"]()
    config.max_position_embeddings = positions
    torch.manual_seed(0)
    return tf.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


def test_stretched_model_decodes_past_its_positions_exactly():
    model = _llama(64)
    stretch_positions(model, None, 256)
    assert model.config.max_position_embeddings == 256
    assert model.config.rope_parameters["rope_type"] == "linear"
    assert model.config.rope_parameters["factor"] == 4
    ids = torch.tensor([[1] + [3 + (i * 7) % 40 for i in range(150)]])
    with torch.no_grad():
        want = model.generate(ids, do_sample=False, max_new_tokens=24)
    got = lookahead.generate(model, ids, max_new_tokens=24)
    assert torch.equal(got, want)
    # the stretch changed the positions: the plain model predicts otherwise on the same text
    plain = _llama(64)
    with torch.no_grad():
        assert not torch.equal(plain(ids[:, :60]).logits, model(ids[:, :60]).logits)


def test_stretch_refuses_fewer_positions_and_models_without_rotary():
    with pytest.raises(ValueError, match="positions must be >= the model's own 64, got 32"):
        stretch_positions(_llama(64), None, 32)
    gpt2 = tf.AutoModelForCausalLM.from_config(CONFIGS["gpt2"]())
    with pytest.raises(ValueError, match="no rotary positions"):
        stretch_positions(gpt2, None, 512)
