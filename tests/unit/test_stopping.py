"""User stopping criteria together with stop strings, EOS lists and length limits.

``lookahead.generate`` turns ``stop_strings`` + ``tokenizer`` into a criterion itself
(transformers drops the tokenizer before calling a custom decoding method). That must add to
the caller's own ``stopping_criteria``, never replace them: whichever condition fires first
ends generation, exactly as in ``model.generate`` given the same arguments.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList, StopStringCriteria

import lookahead
from lookahead.arguments import stop_strings_to_criteria

from strategies import configs, eos_ids, prompts
from tiny_models import tiny_model, tiny_tokenizer

REPEAT = torch.tensor([[5, 6, 7, 8, 9] * 5])


class StopAfterNew(StoppingCriteria):
    """A user criterion: fires once ``n`` tokens were appended to a prompt of ``prompt_len``."""

    def __init__(self, prompt_len: int, n: int):
        self.prompt_len, self.n = prompt_len, n

    def __call__(self, input_ids, scores, **kwargs):
        done = input_ids.shape[1] >= self.prompt_len + self.n
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)


def user_stop(ids, n):
    return StoppingCriteriaList([StopAfterNew(ids.shape[1], n)])


def both(model, ids, config=None, **kwargs):
    expected = model.generate(ids, do_sample=False, **kwargs)
    got = lookahead.generate(model, ids, lookahead_config=config, **kwargs)
    return expected, got


def continuation(model, ids, new=40):
    """The tokens plain greedy decoding appends, with no stop condition but the length."""
    out = model.generate(ids, do_sample=False, max_new_tokens=new, pad_token_id=0, eos_token_id=None)
    return out[0, ids.shape[1] :].tolist()


def stop_string(tok, tokens, start, length=2):
    """Text of ordinary tokens (ids >= 3, letters) from ``tokens[start:]``: a stop string the
    plain continuation reaches (first at ``start + length`` new tokens or earlier)."""
    text = tok.decode([t for t in tokens[start : start + length] if t >= 3])
    return text or "ab"


def stop_string_firing_at(tok, prompt, cont, at):
    """A stop string made of the continuation's own text that first completes after exactly
    ``at`` new tokens (checked here, so "the stop string fires later" really holds)."""
    prompt = prompt[0].tolist()
    for length in (2, 3, 4, 1):
        piece = cont[at - length : at]
        if at - length < 0 or min(piece) < 3:
            continue
        stop = tok.decode(piece)
        fired = next(n for n in range(1, len(cont) + 1) if tok.decode(prompt + cont[:n]).endswith(stop))
        if fired == at:
            return stop
    raise AssertionError(f"no stop string first completes after {at} tokens of {cont}")


def new_tokens(out, ids):
    return out.shape[1] - ids.shape[1]


def test_user_criterion_fires_before_the_stop_string():
    """The user's criterion stops after one token; the stop string alone would stop at six."""
    model, tok = tiny_model("llama", "sdpa"), tiny_tokenizer()
    stop = stop_string_firing_at(tok, REPEAT, continuation(model, REPEAT), 6)
    common = dict(max_new_tokens=40, pad_token_id=0, eos_token_id=None, stop_strings=[stop], tokenizer=tok)
    assert new_tokens(model.generate(REPEAT, do_sample=False, **common), REPEAT) == 6
    expected, got = both(model, REPEAT, stopping_criteria=user_stop(REPEAT, 1), **common)
    assert new_tokens(expected, REPEAT) == 1
    assert got.tolist() == expected.tolist()


def test_stop_string_fires_before_the_user_criterion():
    model, tok = tiny_model("phi", "sdpa"), tiny_tokenizer()
    stop = stop_string_firing_at(tok, REPEAT, continuation(model, REPEAT), 5)
    common = dict(max_new_tokens=40, pad_token_id=0, eos_token_id=None, stop_strings=[stop], tokenizer=tok)
    expected, got = both(model, REPEAT, stopping_criteria=user_stop(REPEAT, 30), **common)
    assert new_tokens(expected, REPEAT) == 5 and tok.decode(expected[0]).endswith(stop)
    assert got.tolist() == expected.tolist()


def test_eos_list_fires_before_stop_string_and_user_criterion():
    model, tok = tiny_model("qwen3", "sdpa"), tiny_tokenizer()
    cont = continuation(model, REPEAT)
    eos = [cont[3], 47 if cont[3] != 47 else 46]
    stop = stop_string_firing_at(tok, REPEAT, cont, 12)
    common = dict(max_new_tokens=40, pad_token_id=0, eos_token_id=eos, stop_strings=[stop], tokenizer=tok)
    expected, got = both(model, REPEAT, stopping_criteria=user_stop(REPEAT, 35), **common)
    assert new_tokens(expected, REPEAT) <= 4 and expected[0, -1].item() in eos
    assert got.tolist() == expected.tolist()


def test_eos_list_alone_stops_at_the_first_eos():
    """EOS ids and a length limit only: the criteria ``generate`` builds by default, which the
    decoder answers from the newest token alone without running them."""
    model = tiny_model("qwen3", "sdpa")
    cont = continuation(model, REPEAT)
    eos = [cont[5], 47 if cont[5] != 47 else 46]
    expected, got = both(model, REPEAT, max_new_tokens=40, pad_token_id=0, eos_token_id=eos)
    assert new_tokens(expected, REPEAT) <= 6 and expected[0, -1].item() in eos
    assert got.tolist() == expected.tolist()


def test_max_length_fires_before_stop_string_and_user_criterion():
    model, tok = tiny_model("llama", "sdpa"), tiny_tokenizer()
    stop = stop_string_firing_at(tok, REPEAT, continuation(model, REPEAT), 9)
    common = dict(max_length=REPEAT.shape[1] + 3, pad_token_id=0, eos_token_id=None, stop_strings=[stop], tokenizer=tok)
    expected, got = both(model, REPEAT, stopping_criteria=user_stop(REPEAT, 35), **common)
    assert new_tokens(expected, REPEAT) == 3
    assert got.tolist() == expected.tolist()


def test_user_criterion_with_stop_strings_from_a_generation_config():
    model, tok = tiny_model("phi", "sdpa"), tiny_tokenizer()
    stop = stop_string_firing_at(tok, REPEAT, continuation(model, REPEAT), 8)
    config = GenerationConfig(max_new_tokens=40, pad_token_id=0, eos_token_id=None, stop_strings=[stop])
    expected, got = both(model, REPEAT, generation_config=config, tokenizer=tok, stopping_criteria=user_stop(REPEAT, 2))
    assert new_tokens(expected, REPEAT) == 2
    assert got.tolist() == expected.tolist()
    assert config.stop_strings == [stop]  # the caller's config is not changed


class RecordCalls(StoppingCriteria):
    """A user criterion that never fires and records what it is shown at each call."""

    def __init__(self):
        self.calls = []

    def __call__(self, input_ids, scores, **kwargs):
        self.calls.append((input_ids.tolist(), scores.clone() if isinstance(scores, torch.Tensor) else scores))
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


@pytest.mark.parametrize(
    "extra", [{}, dict(repetition_penalty=1.5, no_repeat_ngram_size=3)], ids=["raw scores", "processed scores"]
)
def test_user_criterion_sees_each_token_and_its_scores(extra):
    """A user criterion is called after every token, also when a step appends many at once,
    with the sequence ``generate`` shows it and, as ``StoppingCriteria`` documents, the
    ``[1, V]`` scores that chose the newest token: the processed ones when processors run
    (``generate``'s ``output_scores``). (transformers 5's own loop passes its ``scores``
    tuple instead, None unless ``output_scores=True``.)"""
    model = tiny_model("llama", "sdpa")
    kwargs = dict(max_new_tokens=24, pad_token_id=0, eos_token_id=None, **extra)
    plain, mine = RecordCalls(), RecordCalls()
    reference = model.generate(REPEAT, do_sample=False, return_dict_in_generate=True, output_scores=True, **kwargs)
    model.generate(REPEAT, do_sample=False, stopping_criteria=StoppingCriteriaList([plain]), **kwargs)
    stats = lookahead.LookaheadStats()
    full = lookahead.LookaheadConfig(method="classic")  # every step the full tree: some append several
    lookahead.generate(
        model,
        REPEAT,
        lookahead_config=full,
        lookahead_stats=stats,
        stopping_criteria=StoppingCriteriaList([mine]),
        **kwargs,
    )
    assert max(k for k, n in enumerate(stats.accepted) if n) > 1  # steps appended several tokens
    assert [ids for ids, _ in mine.calls] == [ids for ids, _ in plain.calls]
    assert len(mine.calls) == len(reference.scores) == 24
    for (_, scores), expected in zip(mine.calls, reference.scores):
        assert scores.shape == expected.shape
        torch.testing.assert_close(scores, expected, rtol=1e-4, atol=1e-4)


def test_stop_strings_are_added_to_the_user_criteria():
    """The kwargs handed on to ``model.generate``: the user's criteria, then the stop strings'."""
    tok = tiny_tokenizer()
    mine = StopAfterNew(3, 1)
    kwargs = dict(stop_strings=["ab"], tokenizer=tok, stopping_criteria=StoppingCriteriaList([mine]))
    stop_strings_to_criteria(kwargs)
    criteria = kwargs["stopping_criteria"]
    assert "stop_strings" not in kwargs and "tokenizer" not in kwargs
    assert len(criteria) == 2 and criteria[0] is mine and isinstance(criteria[1], StopStringCriteria)

    plain = dict(stop_strings=["ab"], tokenizer=tok)
    stop_strings_to_criteria(plain)
    assert [type(c) for c in plain["stopping_criteria"]] == [StopStringCriteria]

    untouched = dict(stopping_criteria=StoppingCriteriaList([mine]))
    stop_strings_to_criteria(untouched)
    assert list(untouched["stopping_criteria"]) == [mine]


@settings(max_examples=max(5, settings.default.max_examples // 2))
@given(
    family=st.sampled_from(["llama", "gpt2", "qwen2"]),
    ids=prompts,
    config=configs,
    eos=eos_ids,
    user_after=st.integers(1, 30),
    stop_at=st.integers(0, 30),
    stop_len=st.integers(1, 3),
    use_max_length=st.booleans(),
)
def test_all_stop_conditions_together_equal_generate(
    family, ids, config, eos, user_after, stop_at, stop_len, use_max_length
):
    """User criterion, stop string, EOS (none, one or a list) and a length limit at once, each
    able to fire first."""
    model, tok = tiny_model(family, "sdpa"), tiny_tokenizer()
    stop = stop_string(tok, continuation(model, ids, 34), stop_at, stop_len)
    limit = dict(max_length=ids.shape[1] + 32) if use_max_length else dict(max_new_tokens=32)
    kwargs = dict(pad_token_id=0, eos_token_id=eos, stop_strings=[stop], tokenizer=tok, **limit)
    expected, got = both(model, ids, config, stopping_criteria=user_stop(ids, user_after), **kwargs)
    assert got.tolist() == expected.tolist()
    assert new_tokens(expected, ids) <= user_after
