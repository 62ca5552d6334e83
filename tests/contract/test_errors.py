"""Bad input and unsupported models get clear errors (or the documented fallback)."""

from __future__ import annotations

import pytest
import torch
import transformers as tf

import lookahead
from lookahead import LookaheadConfig, Unsupported
from lookahead.compat import takes_cache_keyword


@pytest.mark.parametrize(
    "field,value,error",
    [
        ("window", -1, ValueError),
        ("window", 257, ValueError),
        ("window", 2.0, TypeError),
        ("ngram", 1, ValueError),
        ("ngram", 33, ValueError),
        ("ngram", "4", TypeError),
        ("guesses", -1, ValueError),
        ("guesses", True, TypeError),
        ("pool_capacity", 0, ValueError),
        ("method", "beam", ValueError),
        ("on_unsupported", "ignore", ValueError),
        ("prompt_ngrams", 1, TypeError),
        ("copy_length", -1, ValueError),
        ("copy_match", 0, ValueError),
        ("context_tokens", 3, ValueError),
        ("adaptive", "yes", TypeError),  # the deprecated alias of method="classic" is checked too
        ("cudnn_attention", 1, TypeError),
    ],
)
def test_invalid_config_names_the_field(field, value, error):
    with pytest.raises(error, match=field):
        LookaheadConfig(**{field: value})


def test_jacobi_needs_a_window():
    with pytest.raises(ValueError, match="window"):
        LookaheadConfig(method="jacobi", window=0)


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        LookaheadConfig().window = 3


@pytest.mark.parametrize(
    "ids,error,match",
    [
        (torch.zeros(1, 0, dtype=torch.long), ValueError, "at least one token"),
        (torch.tensor([5, 6, 7]), ValueError, "2-D"),
        (torch.tensor([[5.0, 6.0]]), TypeError, "dtype"),
        ([[5, 6]], TypeError, "torch.Tensor"),
    ],
)
def test_bad_input_ids(llama, ids, error, match):
    with pytest.raises(error, match=match):
        lookahead.generate(llama, ids, max_new_tokens=4)


def test_missing_input_ids(llama):
    with pytest.raises(ValueError, match="input_ids"):
        lookahead.generate(llama, max_new_tokens=4)


@pytest.mark.parametrize("new,error", [(0, ValueError), (-3, ValueError), (2.5, TypeError)])
def test_bad_max_new_tokens(llama, new, error):
    # our own message (transformers' later check of 0 names the parameter too)
    with pytest.raises(error, match=f"max_new_tokens must be (> 0|an int), got .*{new}"):
        lookahead.generate(llama, torch.tensor([[5, 6]]), max_new_tokens=new)


def test_bad_config_type(llama):
    with pytest.raises(TypeError, match="lookahead_config"):
        lookahead.generate(llama, torch.tensor([[5, 6]]), max_new_tokens=4, lookahead_config={"window": 3})


def test_beams_refused(llama):
    with pytest.raises(NotImplementedError, match="num_beams"):
        lookahead.generate(llama, torch.tensor([[5, 6]]), max_new_tokens=4, num_beams=2)


def test_several_return_sequences_refused(llama):
    with pytest.raises(NotImplementedError, match="num_return_sequences"):
        lookahead.generate(llama, torch.tensor([[5, 6]]), max_new_tokens=4, num_return_sequences=2, do_sample=True)


def test_flash_attention_refused():
    model = tf.LlamaForCausalLM(
        tf.LlamaConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4)
    ).eval()
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(Unsupported, match="flash_attention_2"):
        lookahead.generate(model, torch.tensor([[5, 6]]), max_new_tokens=4)


def _mpt():
    torch.manual_seed(0)
    config = tf.MptConfig(vocab_size=48, d_model=32, n_layers=2, n_heads=4)
    return tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()


def test_model_failing_the_mask_probe_is_refused():
    """MPT (ALiBi, no position ids) cannot place tokens at explicit positions."""
    with pytest.raises(Unsupported, match="mpt"):
        lookahead.generate(_mpt(), torch.tensor([[5, 6, 7]]), max_new_tokens=4, pad_token_id=0)


def test_fallback_warns_and_equals_generate():
    model = _mpt()
    ids = torch.tensor([[5, 6, 7, 5, 6, 7]])
    stats = lookahead.LookaheadStats()
    with pytest.warns(UserWarning, match="falling back"):
        got = lookahead.generate(
            model,
            ids,
            max_new_tokens=12,
            pad_token_id=0,
            lookahead_stats=stats,
            lookahead_config=LookaheadConfig(on_unsupported="fallback"),
        )
    assert got.tolist() == model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0).tolist()
    assert stats.fallback and stats.new_tokens == 12


def test_unverified_family_passing_the_probe_runs_exactly():
    torch.manual_seed(0)
    config = tf.Starcoder2Config(
        vocab_size=48,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    ids = torch.tensor([[5, 6, 7, 8] * 4])
    got = lookahead.generate(model, ids, max_new_tokens=20, pad_token_id=0)
    assert got.tolist() == model.generate(ids, max_new_tokens=20, do_sample=False, pad_token_id=0).tolist()


def test_encoder_decoder_refused():
    config = tf.T5Config(
        vocab_size=48, d_model=32, d_ff=64, num_layers=1, num_heads=4, d_kv=8, decoder_start_token_id=0
    )
    model = tf.T5ForConditionalGeneration(config).eval()
    with pytest.raises((Unsupported, ValueError, TypeError), match="(?i)encoder"):
        lookahead.generate(model, torch.tensor([[5, 6]]), max_new_tokens=4)


def test_assistant_model_refused(llama):
    with pytest.raises(NotImplementedError, match="assistant_model"):
        lookahead.generate(llama, torch.tensor([[5, 6]]), max_new_tokens=4, assistant_model=llama)


def test_guidance_scale_refused(llama):
    with pytest.raises(NotImplementedError, match="guidance_scale"):
        lookahead.generate(llama, torch.tensor([[5, 6]]), max_new_tokens=4, guidance_scale=1.5)


@pytest.mark.parametrize("held, prompt", [([5, 6, 7], [[5, 6, 7]]), ([5, 6], [[5, 6, 7], [5, 6, 8]])])
def test_a_cache_holding_the_whole_prompt_or_a_batchs_prefix_is_refused(llama, held, prompt):
    """A prefilled cache must leave the prefill a token of a single prompt to run."""
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache(config=llama.config)
    llama(input_ids=torch.tensor([held]), cache=cache, use_cache=True)
    keyword = "cache" if takes_cache_keyword(llama) else "past_key_values"  # generate's name for it (5.19: the old one)
    with pytest.raises(NotImplementedError, match="prefix of a single prompt"):
        lookahead.generate(llama, torch.tensor(prompt), max_new_tokens=4, **{keyword: cache})


def test_a_generator_on_another_device_than_the_logits_is_refused_before_the_prefill():
    """The noise is drawn on the logits' device: a CPU generator for a model elsewhere (here
    ``meta``, which runs nothing) is named before any forward, not at the first sampled token."""
    config = tf.LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    with torch.device("meta"):
        model = tf.LlamaForCausalLM(config).eval()
    ids = torch.tensor([[3, 4, 5]], device="meta")
    with pytest.raises(ValueError, match=r"generator is on cpu, but the model's logits are on meta"):
        lookahead.generate(model, ids, do_sample=True, max_new_tokens=2, generator=torch.Generator())
