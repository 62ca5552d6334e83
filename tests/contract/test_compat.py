"""Everything model.generate accepts on the greedy path gives the same result."""

from __future__ import annotations

import threading

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
    StopStringCriteria,
    TextIteratorStreamer,
)
from transformers.generation.streamers import BaseStreamer
from transformers.generation.utils import GenerateDecoderOnlyOutput

import lookahead

from strategies import configs, prompts, tokens
from tiny_models import tiny_model, tiny_tokenizer, two_requests

REPEAT = torch.tensor([[5, 6, 7, 8, 9] * 5])


def both(model, ids, config=None, **kwargs):
    expected = model.generate(ids, do_sample=False, **kwargs)
    got = lookahead.generate(model, ids, lookahead_config=config, **kwargs)
    return expected, got


processor_kwargs = st.fixed_dictionaries(
    {},
    optional={
        "repetition_penalty": st.floats(0.5, 2.0),
        "no_repeat_ngram_size": st.integers(1, 4),
        "bad_words_ids": st.lists(st.lists(tokens, min_size=1, max_size=2), min_size=1, max_size=3),
        "suppress_tokens": st.lists(tokens, min_size=1, max_size=4),
        "begin_suppress_tokens": st.lists(tokens, min_size=1, max_size=3),
        "min_new_tokens": st.integers(1, 20),
        "forced_eos_token_id": st.just(2),
        "sequence_bias": st.dictionaries(st.tuples(tokens), st.floats(-5, 5), min_size=1, max_size=3),
    },
)


@pytest.mark.parametrize("family", ["llama", "gpt2", "qwen3"])
@given(ids=prompts, config=configs, extra=processor_kwargs, new=st.integers(1, 40))
def test_processors_from_generation_config(family, ids, config, extra, new):
    model = tiny_model(family, "sdpa")
    kwargs = dict(max_new_tokens=new, pad_token_id=0, eos_token_id=2, **extra)
    expected, got = both(model, ids, config, **kwargs)
    assert got.tolist() == expected.tolist()


class PenaliseSeen(LogitsProcessor):
    """Depends on the whole prefix, so it catches a processor fed the wrong one."""

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores.scatter_add_(1, input_ids, torch.full(input_ids.shape, -0.7))
        return scores


@pytest.mark.parametrize("family", ["llama", "mistral"])
def test_user_logits_processor(family):
    model = tiny_model(family, "eager")
    kwargs = dict(
        max_new_tokens=40, pad_token_id=0, eos_token_id=None, logits_processor=LogitsProcessorList([PenaliseSeen()])
    )
    expected, got = both(model, REPEAT, **kwargs)
    assert got.tolist() == expected.tolist()


class StopAfter(StoppingCriteria):
    def __init__(self, token):
        self.token = token

    def __call__(self, input_ids, scores, **kwargs):
        return input_ids[:, -1] == self.token


@given(ids=prompts, config=configs, stop=tokens)
def test_user_stopping_criteria_stop_mid_block(ids, config, stop):
    model = tiny_model("llama", "sdpa")
    kwargs = dict(
        max_new_tokens=40, pad_token_id=0, eos_token_id=None, stopping_criteria=StoppingCriteriaList([StopAfter(stop)])
    )
    expected, got = both(model, ids, config, **kwargs)
    assert got.tolist() == expected.tolist()


def test_stop_strings_with_tokenizer():
    model, tok = tiny_model("gpt2", "sdpa"), tiny_tokenizer()
    plain = model.generate(REPEAT, do_sample=False, max_new_tokens=40, pad_token_id=0, eos_token_id=None)
    text = tok.decode(plain[0, REPEAT.shape[1] :])
    stop = text[9:11]  # two characters produced mid-way: generation must stop right there
    kwargs = dict(max_new_tokens=40, pad_token_id=0, eos_token_id=None, stop_strings=[stop], tokenizer=tok)
    expected, got = both(model, REPEAT, **kwargs)
    assert got.tolist() == expected.tolist()
    assert got.shape[1] < plain.shape[1] and tok.decode(got[0]).endswith(stop)


class Recorder(BaseStreamer):
    def __init__(self):
        self.puts, self.ended = [], 0

    def put(self, value):
        self.puts.append(value.tolist())

    def end(self):
        self.ended += 1


def test_streamer_gets_prompt_then_each_final_token_once():
    model = tiny_model("llama", "sdpa")
    rec = Recorder()
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(
        model, REPEAT, max_new_tokens=30, pad_token_id=0, eos_token_id=None, streamer=rec, lookahead_stats=stats
    )
    assert rec.puts[0] == REPEAT.tolist()
    assert [p[0] for p in rec.puts[1:]] == got[0, REPEAT.shape[1] :].tolist()
    assert rec.ended == 1
    assert stats.tokens_per_forward > 1  # several tokens per step still arrive one by one


def test_text_iterator_streamer_from_another_thread():
    model, tok = tiny_model("gpt2", "sdpa"), tiny_tokenizer()
    streamer = TextIteratorStreamer(tok, skip_prompt=True, timeout=60)
    result = {}

    def run():
        result["ids"] = lookahead.generate(
            model, REPEAT, max_new_tokens=30, pad_token_id=0, eos_token_id=None, streamer=streamer
        )

    thread = threading.Thread(target=run)
    thread.start()
    text = "".join(streamer)
    thread.join()
    assert text == tok.decode(result["ids"][0, REPEAT.shape[1] :])


@pytest.mark.parametrize("family", ["llama", "phi3"])
def test_return_dict_with_scores_and_logits(family):
    model = tiny_model(family, "sdpa")
    kwargs = dict(
        max_new_tokens=25,
        pad_token_id=0,
        eos_token_id=None,
        return_dict_in_generate=True,
        output_scores=True,
        output_logits=True,
        repetition_penalty=1.3,
    )
    expected, got = both(model, REPEAT, **kwargs)
    assert isinstance(got, GenerateDecoderOnlyOutput)
    assert got.sequences.tolist() == expected.sequences.tolist()
    assert len(got.scores) == len(expected.scores) == len(got.logits) == 25
    for a, b in zip(got.scores + got.logits, expected.scores + expected.logits):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert got.lookahead_stats.new_tokens == 25


def test_generation_config_object_and_model_defaults():
    model = tiny_model("qwen2", "sdpa")
    config = GenerationConfig(max_new_tokens=20, no_repeat_ngram_size=3, pad_token_id=0, eos_token_id=None)
    expected, got = both(model, REPEAT, generation_config=config)
    assert got.tolist() == expected.tolist()


def test_custom_generate_entry_point():
    model = tiny_model("llama", "sdpa")
    rec = Recorder()
    stats = lookahead.LookaheadStats()
    kwargs = dict(max_new_tokens=30, pad_token_id=0, eos_token_id=None)
    got = model.generate(
        REPEAT,
        custom_generate=lookahead.custom_generate,
        lookahead_stats=stats,
        lookahead_config=lookahead.LookaheadConfig(window=3, guesses=3),
        lookahead_streamer=rec,
        **kwargs,
    )
    assert got.tolist() == model.generate(REPEAT, do_sample=False, **kwargs).tolist()
    assert stats.steps > 0 and rec.ended == 1 and rec.puts[0] == REPEAT.tolist()


def test_custom_generate_with_stop_string_criterion():
    model, tok = tiny_model("llama", "sdpa"), tiny_tokenizer()
    plain = model.generate(REPEAT, do_sample=False, max_new_tokens=30, pad_token_id=0, eos_token_id=None)
    stop = tok.decode(plain[0, REPEAT.shape[1] + 5 : REPEAT.shape[1] + 7])
    kwargs = dict(max_new_tokens=30, pad_token_id=0, eos_token_id=None)
    criteria = StoppingCriteriaList([StopStringCriteria(tokenizer=tok, stop_strings=[stop])])
    got = model.generate(REPEAT, custom_generate=lookahead.custom_generate, stopping_criteria=criteria, **kwargs)
    expected = model.generate(REPEAT, do_sample=False, stop_strings=[stop], tokenizer=tok, **kwargs)
    assert got.tolist() == expected.tolist()


def test_stop_strings_from_a_generation_config():
    model, tok = tiny_model("gpt2", "sdpa"), tiny_tokenizer()
    plain = model.generate(REPEAT, do_sample=False, max_new_tokens=40, pad_token_id=0, eos_token_id=None)
    stop = tok.decode(plain[0, REPEAT.shape[1] + 3 : REPEAT.shape[1] + 5])
    config = GenerationConfig(max_new_tokens=40, pad_token_id=0, eos_token_id=None, stop_strings=[stop])
    expected = model.generate(REPEAT, generation_config=config, tokenizer=tok)
    got = lookahead.generate(model, REPEAT, generation_config=config, tokenizer=tok)
    assert got.tolist() == expected.tolist() and config.stop_strings == [stop]


def test_stop_strings_without_tokenizer_is_a_clear_error():
    with pytest.raises(ValueError, match="tokenizer"):
        lookahead.generate(tiny_model("llama", "sdpa"), REPEAT, max_new_tokens=5, stop_strings=["ab"])


def test_pool_kept_across_requests_helps_the_next_one():
    model = tiny_model("llama", "sdpa")
    config = lookahead.LookaheadConfig(
        window=2, ngram=4, guesses=4, copy_length=0, prompt_ngrams=False, method="classic"
    )
    first, second = two_requests(model, REPEAT, config, lookahead.KeptState())
    assert second.forwards < first.forwards


def test_pool_shape_must_match_the_config():
    with pytest.raises(ValueError, match="lookahead_pool"):
        lookahead.generate(
            tiny_model("llama", "sdpa"),
            REPEAT,
            max_new_tokens=4,
            lookahead_pool=lookahead.KeptState(lookahead.NgramPool(3, 4)),
        )


def test_stats_add_up_over_calls():
    model = tiny_model("llama", "sdpa")
    one, both_calls = lookahead.LookaheadStats(), lookahead.LookaheadStats()
    kwargs = dict(max_new_tokens=20, pad_token_id=0, eos_token_id=None)
    lookahead.generate(model, REPEAT, lookahead_stats=one, **kwargs)
    for _ in range(2):
        lookahead.generate(model, REPEAT, lookahead_stats=both_calls, **kwargs)
    assert both_calls.new_tokens == 2 * one.new_tokens and both_calls.forwards == 2 * one.forwards
    assert both_calls.forward_s <= both_calls.total_s and 0 < both_calls.overhead_share < 1
