"""The verification rules on fixed, skewed logits: the sampling rule draws exactly from the
processed distribution, and the greedy rule picks its argmax.

The end-to-end sampling test (tests/contract/test_sampling.py) compares whole continuations of a tiny
model whose top-2 split is nearly even, where a biased rule can hide. Here the rule itself
meets a skewed distribution (0.6 / 0.25 / 0.1 / 0.05, the likeliest token not first) under
temperature, top-k, top-p, min-p, all four at once and a repetition penalty (which reads the
prefix), 20,000 seeded draws each, and a chi-square test compares the counts with the exact
processed softmax. The same check must reject a planted bias (the exponential-race noise used
without its log), so a pass means something.
"""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare
from transformers import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from lookahead.sampling.rule import Pick, SamplingRule
from lookahead.verify.rules import GreedyRule

PROBS = torch.tensor([0.05, 0.6, 0.1, 0.25])
# the rule reads row ``NODE`` of the step's logits; the rows around it are different laws
LOGITS = torch.stack([PROBS.flip(0).log(), PROBS.log(), torch.full((4,), 0.25).log()])
NODE = 1
SEQUENCE = torch.tensor([[0, 1, 1]])  # the prefix sequence-dependent processors see
DRAWS = 20_000

# name -> (processors, size of the support they leave)
COMBOS = {
    "plain": ([], 4),
    "temperature 0.7": ([TemperatureLogitsWarper(0.7)], 4),
    "top-k 2": ([TopKLogitsWarper(2)], 2),
    "top-p 0.7": ([TopPLogitsWarper(0.7)], 2),
    "min-p 0.15": ([MinPLogitsWarper(0.15)], 3),
    "temperature, top-k, top-p, min-p": (
        [TemperatureLogitsWarper(1.3), TopKLogitsWarper(3), TopPLogitsWarper(0.95), MinPLogitsWarper(0.05)],
        3,
    ),
    "repetition penalty (reads the prefix)": ([RepetitionPenaltyLogitsProcessor(3.0), TemperatureLogitsWarper(0.9)], 4),
}
# the planted bias is checked on a plain, a truncated and a fully processed law
BIAS_COMBOS = ["plain", "top-k 2", "temperature, top-k, top-p, min-p"]


class Processors(LogitsProcessorList):
    """transformers' processors applied in order, as ``LogitsProcessorList`` does, minus its
    per-call signature inspection (which would make 20,000 draws several times slower)."""

    def __call__(self, input_ids, scores, **kwargs):
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


class NoiseWithoutLog(SamplingRule):
    """Planted bias: ``log p - E`` instead of ``log p - log E``. Every token keeps its
    support and the likeliest is still likeliest, but the law is wrong."""

    def __call__(self, node, sequence, children):
        raw = self._logits[node : node + 1].float()
        scores = self.processors(sequence, raw.clone()) if self.processors else raw
        noise = torch.empty_like(scores).exponential_(generator=self.generator)
        token = int((torch.log_softmax(scores, dim=-1) - noise).argmax(-1))
        return Pick(token, raw, scores)


def target_law(processors) -> torch.Tensor:
    """The exact processed distribution at ``NODE``: what ``generate`` samples from."""
    return torch.softmax(LogitsProcessorList(processors)(SEQUENCE, LOGITS[NODE : NODE + 1].clone()), dim=-1)[0]


def draw_counts(rule_class, processors, draws=DRAWS, seed=0) -> torch.Tensor:
    rule = rule_class(Processors(processors), torch.Generator().manual_seed(seed))
    rule.start(LOGITS)
    counts = torch.zeros(LOGITS.shape[1], dtype=torch.long)
    for _ in range(draws):
        counts[rule(NODE, SEQUENCE, []).token] += 1
    return counts


def fit_p_value(counts: torch.Tensor, law: torch.Tensor) -> float:
    """Chi-square goodness of fit on the support; 0 when a token outside it was drawn."""
    support = law > 0
    if counts[~support].sum() > 0:
        return 0.0
    expected = law[support].double() * counts.sum() / law[support].double().sum()
    return float(chisquare(counts[support].double().numpy(), expected.numpy()).pvalue)


@pytest.mark.parametrize("name", list(COMBOS))
def test_sampling_rule_draws_the_processed_distribution(name):
    processors, support = COMBOS[name]
    law = target_law(processors)
    if support is not None:  # the warper does what its name says (else the test means little)
        assert int((law > 0).sum()) == support
    counts = draw_counts(SamplingRule, processors)
    assert counts.sum() == DRAWS
    assert fit_p_value(counts, law) > 1e-3, f"{name}: counts {counts.tolist()} vs law {law.tolist()}"


@pytest.mark.parametrize("name", BIAS_COMBOS)
def test_planted_bias_is_rejected(name):
    """The test of the test: the same check, the same seed, the noise transform wrong."""
    processors, _ = COMBOS[name]
    counts = draw_counts(NoiseWithoutLog, processors)
    assert fit_p_value(counts, target_law(processors)) < 1e-6


def test_sampling_pick_reports_raw_and_processed_rows():
    processors = LogitsProcessorList([TemperatureLogitsWarper(0.5), TopKLogitsWarper(2)])
    rule = SamplingRule(processors, torch.Generator().manual_seed(0))
    rule.start(LOGITS)
    pick = rule(NODE, SEQUENCE, [])
    torch.testing.assert_close(pick.logits, LOGITS[NODE : NODE + 1])
    torch.testing.assert_close(pick.scores, processors(SEQUENCE, LOGITS[NODE : NODE + 1].clone()))
    assert pick.token in (1, 3)


def test_sampling_noise_comes_from_the_given_generator():
    """Seeded by ``generator=``, draws repeat whatever the global RNG does in between, and
    without one they follow ``torch.manual_seed``."""

    def tokens(rule, reseed_global):
        rule.start(LOGITS)
        out = []
        for i in range(200):
            if reseed_global:
                torch.manual_seed(1000 + i)
            out.append(rule(NODE, SEQUENCE, []).token)
        return out

    a = tokens(SamplingRule(None, torch.Generator().manual_seed(5)), reseed_global=False)
    b = tokens(SamplingRule(None, torch.Generator().manual_seed(5)), reseed_global=True)
    c = tokens(SamplingRule(None, torch.Generator().manual_seed(6)), reseed_global=False)
    assert a == b and a != c
    torch.manual_seed(3)
    d = tokens(SamplingRule(None), reseed_global=False)
    torch.manual_seed(3)
    assert tokens(SamplingRule(None), reseed_global=False) == d


def test_sampling_ceiling_follows_the_roots_emitted_probability():
    """``ceiling`` starts at the first root draw's probability and tends to ``sum p^2`` (the
    chance that a guess drawn like the text holds): 0.435 for the skewed law, 0.25 for the
    flat one. Draws below the root (node > 0) leave it be; greedy's is 1."""
    flipped = PROBS.flip(0)  # row 0 of LOGITS: the skewed law, reordered
    rule = SamplingRule(None, torch.Generator().manual_seed(0))
    rule.start(LOGITS)
    first = rule(0, SEQUENCE, [])
    assert rule.ceiling == pytest.approx(float(flipped[first.token]))
    total = 0.0
    for _ in range(400):
        rule(0, SEQUENCE, [])
        total += rule.ceiling
    assert total / 400 == pytest.approx(float((PROBS**2).sum()), abs=0.05)
    before = rule.ceiling
    rule(NODE, SEQUENCE, [])
    assert rule.ceiling == before
    rule.start(LOGITS[2:])  # the flat law at the root
    for _ in range(200):
        rule(0, SEQUENCE, [])
    assert rule.ceiling == pytest.approx(0.25)
    assert GreedyRule(None, keep_rows=False).ceiling == 1.0


# --- the greedy rule ---------------------------------------------------------------------------


@pytest.mark.parametrize("processors", [None, LogitsProcessorList()], ids=["None", "empty list"])
@pytest.mark.parametrize("keep_rows", [False, True])
def test_greedy_rule_without_processors_is_the_row_argmax(keep_rows, processors):
    rule = GreedyRule(processors, keep_rows=keep_rows)
    rule.start(LOGITS)
    for node, token in enumerate([2, 1, 0]):
        pick = rule(node, SEQUENCE, [])
        assert pick.token == token == int(LOGITS[node].argmax())
        torch.testing.assert_close(pick.logits, LOGITS[node : node + 1])
        if keep_rows:  # what output_scores reports without processors: the raw row
            torch.testing.assert_close(pick.scores, LOGITS[node : node + 1])
        else:
            assert pick.scores is None


def test_greedy_rule_applies_processors_to_the_exact_prefix():
    """Repetition penalty on the tokens of the prefix moves the argmax: token 1 (p = 0.6) is
    in the prefix ``0 1 1``, so with a strong penalty token 3 (p = 0.25) wins; after the
    prefix ``2 0`` token 1 wins again."""
    processors = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(10.0)])
    rule = GreedyRule(processors, keep_rows=False)
    rule.start(LOGITS)
    pick = rule(NODE, SEQUENCE, [])
    assert pick.token == 3
    torch.testing.assert_close(pick.scores, processors(SEQUENCE, LOGITS[NODE : NODE + 1].clone()))
    torch.testing.assert_close(pick.logits, LOGITS[NODE : NODE + 1])
    assert rule(NODE, torch.tensor([[2, 0]]), []).token == 1
