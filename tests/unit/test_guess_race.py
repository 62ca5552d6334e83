"""The guesses' cheap race (``verify.guess_race``): over each row's top scores it picks the
token the exact race (``generate``'s processors over the whole vocabulary, then
``argmax(softmax / q)``) picks, wherever the support lies within those scores."""

import torch
from hypothesis import given
from hypothesis import strategies as st
from transformers import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from lookahead.verify.guess_race import TOP, race_guesses, supported
from lookahead.verify.rules import SamplingRule


@st.composite
def races(draw):
    """Logits ``[k, V]``, noise rows, and a warper list in ``generate``'s order."""
    vocab = draw(st.sampled_from([50, 300, 4096]))
    rows = draw(st.integers(1, 4))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    logits = torch.randn(rows, vocab, generator=gen) * draw(st.sampled_from([1.0, 3.0, 8.0]))
    noise = [torch.empty(1, vocab).exponential_(generator=gen) for _ in range(rows)]
    warpers = [TemperatureLogitsWarper(draw(st.sampled_from([0.6, 1.0, 1.5])))]
    if draw(st.booleans()):
        warpers.append(TopKLogitsWarper(draw(st.integers(1, TOP))))
    if draw(st.booleans()):
        warpers.append(TopPLogitsWarper(draw(st.sampled_from([0.5, 0.8, 0.95]))))
    if draw(st.booleans()):
        warpers.append(MinPLogitsWarper(draw(st.sampled_from([0.05, 0.2]))))
    return logits, noise, LogitsProcessorList(warpers)


def exact(logits, noise, processors):
    """The race ``generate`` runs, and each row's support (the tokens its processors keep)."""
    ids = torch.zeros(logits.shape[0], 1, dtype=torch.long)
    scores = processors(ids, logits.clone())
    probs = torch.softmax(scores, dim=-1)
    return [int((probs[k] / q[0]).argmax()) for k, q in enumerate(noise)], torch.isfinite(scores)


@given(races())
def test_the_cheap_race_picks_the_exact_winner_where_the_support_fits(race):
    logits, noise, processors = race
    want, support = exact(logits, noise, processors)
    got = race_guesses(logits, processors, noise)
    for k in range(logits.shape[0]):
        assert support[k, got[k]], "a guess outside the support"
        if int(support[k].sum()) <= TOP:
            assert got[k] == want[k], (k, int(support[k].sum()))


def test_generate_s_default_top_k_keeps_the_race_exact():
    """``generate`` adds top_k=50 unless told otherwise: every support fits in the slice, so
    the cheap race agrees with the exact one on every row, flat logits included."""
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(400, 8192, generator=gen) * 0.5
    noise = [torch.empty(1, 8192).exponential_(generator=gen) for _ in range(400)]
    processors = LogitsProcessorList([TemperatureLogitsWarper(1.5), TopKLogitsWarper(50), TopPLogitsWarper(0.95)])
    assert race_guesses(logits, processors, noise) == exact(logits, noise, processors)[0]


def test_without_noise_a_guess_is_the_likeliest_token_and_processors_are_checked():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    assert race_guesses(logits, LogitsProcessorList([TemperatureLogitsWarper(0.7)]), [None]) == [1]
    penalty = LogitsProcessorList([TemperatureLogitsWarper(0.7), RepetitionPenaltyLogitsProcessor(1.3)])
    assert not supported(penalty)
    assert race_guesses(logits, penalty, [None]) is None


def test_a_rule_s_guess_is_the_token_its_race_emits_there_with_or_without_the_cheap_race():
    """``SamplingRule.guesses`` with warpers the cheap race re-states, and with a processor it
    does not (the exact race then), guesses the token the seeded rule emits at that position."""
    torch.manual_seed(0)
    logits = torch.randn(3, 500) * 2
    sequence = torch.arange(6)[None]
    for processors in (
        LogitsProcessorList([TemperatureLogitsWarper(0.7), TopKLogitsWarper(50), TopPLogitsWarper(0.9)]),
        LogitsProcessorList([TemperatureLogitsWarper(0.7), RepetitionPenaltyLogitsProcessor(1.3)]),
    ):
        for ahead in range(3):
            rule = SamplingRule(processors, torch.Generator().manual_seed(7))
            rule.start(logits)
            guess = rule.guesses([2] * ahead + [1], sequence)[ahead]
            for _ in range(ahead):
                rule(0, sequence, [])
            assert rule(1, sequence, []).token == guess
