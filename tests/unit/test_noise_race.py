"""The guesses' noise race (``sampling.guess``): it picks the token the exact race
(``generate``'s processors over the whole vocabulary, then ``argmax(softmax / q)``) picks,
the tokens past each row's top scores included."""

import numpy as np
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

from lookahead.sampling.guess import NoiseRace
from lookahead.sampling.guess_kernels import TOP, row_lse
from lookahead.sampling.rule import SamplingRule


@st.composite
def races(draw):
    """Logits ``[k, V]``, noise ``[k, V]``, and a warper list in ``generate``'s order."""
    vocab = draw(st.sampled_from([50, 300, 4096]))
    rows = draw(st.integers(1, 4))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    logits = torch.randn(rows, vocab, generator=gen) * draw(st.sampled_from([1.0, 3.0, 8.0]))
    noise = torch.empty(rows, vocab).exponential_(generator=gen)
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
    return (probs / noise).argmax(-1).tolist(), torch.isfinite(scores)


def picks(logits, processors, noise, nodes=None):
    nodes = list(range(logits.shape[0])) if nodes is None else nodes
    return NoiseRace.of(processors).picks(logits, nodes, noise).tolist()


@given(races())
def test_the_race_picks_the_exact_winner(race):
    logits, noise, processors = race
    want, support = exact(logits, noise, processors)
    got = picks(logits, processors, noise)
    for k in range(logits.shape[0]):
        assert support[k, got[k]], "a guess outside the support"
        assert got[k] == want[k], (k, int(support[k].sum()))


def test_winners_past_the_top_scores_are_found():
    """At T=1 with no top-k over flat rows (a small model's at T=1), many winners lie past the
    slice of top scores the race sorts; the race finds them, with and without a top-p or a
    min-p that keeps some of them."""
    gen = torch.Generator().manual_seed(11)
    logits = torch.randn(300, 8192, generator=gen) * 1.5
    noise = torch.empty(300, 8192).exponential_(generator=gen)
    for extra in ([], [TopPLogitsWarper(0.9)], [MinPLogitsWarper(0.01)]):
        processors = LogitsProcessorList([TemperatureLogitsWarper(1.0), *extra])
        want = exact(logits, noise, processors)[0]
        ranks = (logits > logits.gather(1, torch.tensor(want)[:, None])).sum(1)
        assert int((ranks >= TOP).sum()) >= 30, "too few winners past the slice to test"
        assert picks(logits, processors, noise) == want


@given(st.integers(0, 2**31 - 1), st.sampled_from([0.1, 1.0, 4.0, 30.0]), st.sampled_from([0.5, 1.0, 1.5]))
def test_the_row_s_log_sum_exp_holds_to_1e_5(seed, scale, temperature):
    """The race's whole-row normaliser (a polynomial exp in vector lanes) against torch's in
    float64, over plain, bfloat16 and partly -inf rows."""
    gen = torch.Generator().manual_seed(seed)
    row = torch.randn(8192, generator=gen) * scale
    if seed % 2:
        row = row.bfloat16().float()
    if seed % 3 == 0:
        row[torch.randint(0, 8192, (4000,), generator=gen)] = float("-inf")
    got = row_lse(row.numpy(), 1.0 / temperature, np.float32(row.max().item()))
    want = torch.logsumexp(row.double() / temperature, 0).item()
    assert abs(got - want) <= 1e-5


def test_generate_s_default_top_k_keeps_the_race_exact():
    """``generate`` adds top_k=50 unless told otherwise: every support fits in the slice, so
    the race agrees with the exact one on every row, flat logits included."""
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(400, 8192, generator=gen) * 0.5
    noise = torch.empty(400, 8192).exponential_(generator=gen)
    processors = LogitsProcessorList([TemperatureLogitsWarper(1.5), TopKLogitsWarper(50), TopPLogitsWarper(0.95)])
    assert picks(logits, processors, noise) == exact(logits, noise, processors)[0]


def test_nodes_pick_their_rows_and_noise_rows_go_in_order_bfloat16_included():
    """Node i of the list races with noise row i, whatever row of the logits it reads; rows
    past the noise's get their likeliest token; bfloat16 logits race as their float32 values."""
    gen = torch.Generator().manual_seed(5)
    logits = torch.randn(6, 300, generator=gen) * 2
    noise = torch.empty(2, 300).exponential_(generator=gen)
    processors = LogitsProcessorList([TemperatureLogitsWarper(0.8), TopKLogitsWarper(50)])
    nodes = [4, 1, 3]
    want = exact(logits[nodes[:2]], noise, processors)[0] + [int(logits[3].argmax())]
    assert picks(logits, processors, noise, nodes) == want
    half = logits.bfloat16()
    assert picks(half, processors, noise, nodes) == picks(half.float(), processors, noise, nodes)


def test_without_noise_a_guess_is_the_likeliest_token_and_processors_are_checked():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    assert picks(logits, LogitsProcessorList([TemperatureLogitsWarper(0.7)]), None) == [1]
    penalty = LogitsProcessorList([TemperatureLogitsWarper(0.7), RepetitionPenaltyLogitsProcessor(1.3)])
    assert NoiseRace.of(penalty) is None
    reordered = LogitsProcessorList([TopPLogitsWarper(0.9), TopKLogitsWarper(5)])
    assert NoiseRace.of(reordered) is None
    assert NoiseRace.of(LogitsProcessorList([TopKLogitsWarper(5), TopKLogitsWarper(3)])) is None
    assert NoiseRace.of(LogitsProcessorList()) == NoiseRace()


def test_a_guess_with_the_rule_s_known_noise_is_the_token_the_rule_then_emits():
    """Raced with ``SamplingRule.noise_ahead``, a guess for the k-th token from now is the
    token the seeded rule emits there; so is ``SamplingRule.guesses``' exact race, which runs
    where the processors are not the race's (a repetition penalty)."""
    torch.manual_seed(0)
    logits = torch.randn(3, 500) * 2
    sequence = torch.arange(6)[None]
    fast = LogitsProcessorList([TemperatureLogitsWarper(0.7), TopKLogitsWarper(50), TopPLogitsWarper(0.9)])
    slow = LogitsProcessorList([TemperatureLogitsWarper(0.7), RepetitionPenaltyLogitsProcessor(1.3)])
    for processors in (fast, slow):
        for ahead in range(3):
            rule = SamplingRule(processors, torch.Generator().manual_seed(7))
            rule.start(logits)
            nodes = [2] * ahead + [1]
            if processors is fast:
                guess = NoiseRace.of(processors).picks(logits, nodes, rule.noise_ahead(len(nodes)))[ahead]
            else:
                guess = rule.guesses(nodes, sequence)[ahead]
            for _ in range(ahead):
                rule(0, sequence, [])
            assert rule(1, sequence, []).token == guess
