"""Sampling keeps the model's distribution exactly, and repeats under a seed."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from scipy.stats import chi2_contingency
from transformers import LogitsProcessorList, StoppingCriteriaList, TemperatureLogitsWarper, TopKLogitsWarper
from transformers.generation.stopping_criteria import MaxLengthCriteria

import lookahead
from lookahead.sampling.rule import Pick, SamplingRule
from lookahead.step.loop import decode

from tiny_models import tiny_model

PROMPT = torch.tensor([[5, 6, 7, 8] * 4])
NEW = 8
TAIL = 3  # the joint law of the last TAIL tokens is compared: by then drafts are accepted often
SAMPLES = 500
CONFIG = lookahead.LookaheadConfig(window=3, ngram=3, guesses=4)
# cheap guesses, no overhead: drafts are fed often (a tiny model's measured curve, whose forward
# costs about what the decoder's own work does, would rightly sample mostly plain steps)
CHEAP = lookahead.CostCurve.linear(0.01)
SAMPLING = dict(do_sample=True, temperature=1.0, top_k=2, max_new_tokens=NEW, pad_token_id=0, eos_token_id=None)


class AlwaysAcceptDraft(SamplingRule):
    """Planted bias: takes the first draft whenever the model gives it any probability."""

    def __call__(self, node, sequence, children):
        pick = super().__call__(node, sequence, [])
        probs = torch.softmax(pick.scores, dim=-1)[0]
        for token in children:
            if probs[token] > 0:
                return Pick(token, pick.logits, pick.scores)
        return pick


def plain_samples(model):
    torch.manual_seed(1)
    return Counter(tuple(model.generate(PROMPT, **SAMPLING)[0, -TAIL:].tolist()) for _ in range(SAMPLES))


def lookahead_samples(model, rule_class=None):
    torch.manual_seed(2)
    counts, hits = Counter(), 0
    for _ in range(SAMPLES):
        stats = lookahead.LookaheadStats()
        if rule_class is None:
            out = lookahead.generate(
                model, PROMPT, lookahead_config=CONFIG, lookahead_stats=stats, lookahead_costs=CHEAP, **SAMPLING
            )
        else:
            processors = LogitsProcessorList([TemperatureLogitsWarper(1.0), TopKLogitsWarper(2)])
            stop = StoppingCriteriaList([MaxLengthCriteria(PROMPT.shape[1] + NEW)])
            with torch.no_grad():  # as generate runs it
                out = decode(
                    model,
                    PROMPT,
                    rule=rule_class(processors),
                    stopping_criteria=stop,
                    config=CONFIG,
                    stats=stats,
                    kept=lookahead.KeptState(),
                    cache=_cache(model),
                    costs=CHEAP,
                )[0]
        hits += sum(stats.accepted[2:])
        counts[tuple(out[0, -TAIL:].tolist())] += 1
    return counts, hits


def _cache(model):
    from transformers.cache_utils import DynamicCache

    return DynamicCache(config=model.config)


def homogeneity_p(a: Counter, b: Counter) -> float:
    keys = sorted(set(a) | set(b))
    return chi2_contingency([[a[k] + 0.5 for k in keys], [b[k] + 0.5 for k in keys]])[1]


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", "sdpa", seed=3)


@pytest.fixture(scope="module")
def reference(model):
    return plain_samples(model)


def test_sampled_continuations_follow_the_model(model, reference):
    counts, multi = lookahead_samples(model)
    assert multi > SAMPLES // 10, "drafts must really be accepted for the test to mean anything"
    assert homogeneity_p(reference, counts) > 1e-3


def test_planted_bias_is_caught(model, reference):
    """The test of the test: always accepting the draft skews the distribution detectably."""
    counts, _ = lookahead_samples(model, AlwaysAcceptDraft)
    assert homogeneity_p(reference, counts) < 1e-6


def test_same_seed_same_output_whatever_the_shape(model):
    """The noise is drawn per emitted token, so window, guesses and the draft budget
    (which reacts to timing) cannot change a seeded sample."""
    kwargs = dict(SAMPLING, max_new_tokens=30)
    shapes = [
        CONFIG,
        lookahead.LookaheadConfig(),
        lookahead.LookaheadConfig(window=1, guesses=0, copy_length=0),
        lookahead.LookaheadConfig(method="jacobi", window=5),
    ]
    runs = []
    for config in shapes:
        torch.manual_seed(7)
        runs.append(lookahead.generate(model, PROMPT, lookahead_config=config, **kwargs).tolist())
    gen = [
        lookahead.generate(model, PROMPT, generator=torch.Generator().manual_seed(9), **kwargs).tolist()
        for _ in range(2)
    ]
    assert all(run == runs[0] for run in runs) and gen[0] == gen[1]


@pytest.mark.parametrize(
    "extra",
    [dict(top_p=0.8), dict(min_p=0.1), dict(typical_p=0.9), dict(repetition_penalty=1.2, no_repeat_ngram_size=2)],
)
def test_sampling_options_run_with_stats(model, extra):
    stats = lookahead.LookaheadStats()
    kwargs = dict(SAMPLING, max_new_tokens=20, **extra)
    out = lookahead.generate(model, PROMPT, lookahead_stats=stats, **kwargs)
    assert out.shape[1] == PROMPT.shape[1] + 20 and stats.new_tokens == 20 and sum(stats.accepted) == stats.steps
