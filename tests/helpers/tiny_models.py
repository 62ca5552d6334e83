"""Tiny random-weight models of every supported family, built from configs (no downloads)."""

from __future__ import annotations

from functools import cache

import torch
import transformers as tf

from lookahead.compat import accept_cache_keyword
from lookahead.runtime.attention import NAME as ATTENTION
from lookahead.runtime.attention import register_attention

VOCAB = 48
COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
SLIDING = 9  # shorter than the texts in the tests, so windows really slide
SLIDING_FAMILIES = ("mistral", "qwen2", "qwen3", "phi3", "gemma2")  # the families built with sliding layers

CONFIGS = {
    "llama": lambda: tf.LlamaConfig(**COMMON),
    "mistral": lambda: tf.MistralConfig(**COMMON, sliding_window=SLIDING),
    "qwen2": lambda: tf.Qwen2Config(**COMMON, use_sliding_window=True, sliding_window=SLIDING, max_window_layers=1),
    "qwen3": lambda: tf.Qwen3Config(
        **COMMON, head_dim=8, use_sliding_window=True, sliding_window=SLIDING, max_window_layers=1
    ),
    "gemma2": lambda: tf.Gemma2Config(**COMMON, head_dim=8, sliding_window=SLIDING),
    "phi3": lambda: tf.Phi3Config(**COMMON, sliding_window=SLIDING),
    "phi": lambda: tf.PhiConfig(**COMMON),
    "gpt_neox": lambda: tf.GPTNeoXConfig(**COMMON),
    "gpt2": lambda: tf.GPT2Config(
        vocab_size=VOCAB,
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=256,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    ),
}
FAMILIES = tuple(CONFIGS)
# gemma2's sdpa path is not verified (see lookahead.support); it is tested under eager only.
# lookahead's own backend (sdpa without repeat_kv on masked GQA steps) on a few GQA families,
# one with sliding layers and one with per-head norms
GQA_FAMILIES = ("llama", "mistral", "qwen3")
BACKENDS = {
    name: ("eager",) if name == "gemma2" else ("eager", "sdpa") + ((ATTENTION,) if name in GQA_FAMILIES else ())
    for name in FAMILIES
}
CASES = tuple((name, backend) for name in FAMILIES for backend in BACKENDS[name])


@cache
def tiny_model(family: str, backend: str = "sdpa", seed: int = 0):
    """A fp32 eval-mode model of ``family`` with random weights drawn from ``seed``."""
    if backend == ATTENTION:
        register_attention()
    config = CONFIGS[family]()
    config._attn_implementation = backend
    torch.manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation=backend)
    return accept_cache_keyword(model.eval())  # tests call it with cache= whatever the version


@cache
def tiny_tokenizer():
    """A character-level fast tokenizer over the tiny models' vocabulary (ids 3.. are letters)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS"[: VOCAB - 3]
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{ch: i + 3 for i, ch in enumerate(chars)}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    core.decoder = decoders.Fuse()
    return tf.PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


def fresh_cache(model, ids: list[int]):
    """The ``DynamicCache`` of one plain forward over ``ids``: what a committed cache must hold."""
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True)
    return cache


def assert_cache_matches_recompute(cache, model, committed: list[int]) -> None:
    """Every layer of ``cache`` equals a from-scratch forward over the ``committed`` tokens."""
    expected = fresh_cache(model, committed)
    assert cache.get_seq_length() == len(committed)
    for got, want in zip(cache.layers, expected.layers):
        assert got.keys.shape == want.keys.shape
        torch.testing.assert_close(got.keys, want.keys, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(got.values, want.values, rtol=1e-4, atol=1e-5)


def two_requests(model, ids, config, pool, max_new_tokens: int = 40):
    """Generate after ``ids`` twice with one kept ``pool`` (greedy, no EOS); the second
    output must equal ``model.generate``'s. Returns both calls' ``LookaheadStats``."""
    import lookahead

    kwargs = dict(max_new_tokens=max_new_tokens, pad_token_id=0, eos_token_id=None)
    first, second = lookahead.LookaheadStats(), lookahead.LookaheadStats()
    lookahead.generate(model, ids, lookahead_config=config, lookahead_pool=pool, lookahead_stats=first, **kwargs)
    got = lookahead.generate(model, ids, lookahead_config=config, lookahead_pool=pool, lookahead_stats=second, **kwargs)
    assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()
    return first, second


def left_pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` ``[B, n]`` with every row padded on the left."""
    n = max(len(r) for r in rows)
    ids = torch.tensor([[0] * (n - len(r)) + list(r) for r in rows])
    mask = torch.tensor([[0] * (n - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def recycle(table, fed: torch.Tensor, logits: torch.Tensor) -> None:
    """What a step does with a ``SuccessorTable``: keep the top-k of ``logits`` (``[q, V]``) as
    the successors of the ``fed`` tokens (``[q]``), as the decode loop fetches them."""
    top = logits.float().topk(table.k, dim=-1)
    table.record(fed.numpy(), top.indices.numpy(), top.values.numpy())
