"""The window's free Jacobi iteration: the deepest branch past the accepted node, picked greedily
or by the race with each position's known noise, and the noise peeked without reading it."""

import numpy as np
import torch

from lookahead.drafts.jacobi import free_iterations
from lookahead.sampling.noise import NoiseStream
from lookahead.sampling.rule import SamplingRule
from lookahead.verify.tree import GuessTree


def _tree():
    # a chain root 0 -> 1 -> 2 (tokens 3, 4; the classic window's level 0), then rows from the
    # root: [7, 8, 9] and [7, 5]
    return GuessTree.build(np.array([[3, 4, -1], [7, 8, 9], [7, 5, -1]], dtype=np.int64))


def test_the_deepest_branch_below_a_node():
    tree = _tree()
    kids = tree.children()
    seven = kids[(0, 7)]
    eight, five = kids[(seven, 8)], kids[(seven, 5)]
    nine = kids[(eight, 9)]
    assert tree.branches(0, 4).tolist() == [[seven, eight, nine]]  # deeper than the chain 1 -> 2
    assert tree.branches(1, 4).tolist() == [[2]]
    assert tree.branches(seven, 4).tolist() == [[eight, nine]]  # 8's branch is deeper than 5's
    assert tree.branches(nine, 4).shape == tree.branches(five, 4).shape == (0, 0)
    assert tree.branches(0, 2).tolist() == [[seven, eight]]
    picks = free_iterations(tree, seven, lambda nodes: [100 * v + k for k, v in enumerate(nodes)], depth=4)
    assert picks.tolist() == [[100 * eight, 100 * nine + 1]]
    assert free_iterations(tree, 0, lambda nodes: list(range(len(nodes))), depth=2).tolist() == [[0, 1]]
    assert free_iterations(tree, nine, lambda nodes: list(nodes), depth=2).shape == (0, 0)  # a leaf
    by_node = np.arange(100, 100 + 1 + tree.size)  # greedy's picks: an array by node
    assert free_iterations(tree, 0, by_node, depth=4).tolist() == [[100 + seven, 100 + eight, 100 + nine]]


def test_ranked_iterations_read_after_the_likeliest_children():
    """Where the step's scores at a node rank its children, up to ``most`` branches start at
    the likeliest (the tree's order among equal scores), the chain's child included, each
    the deepest below its child; rows shorter than the longest end in -1. Picks given by
    node (greedy) and by a branch (sampled) read alike."""
    tree = _tree()
    kids = tree.children()
    seven = kids[(0, 7)]
    eight, five = kids[(seven, 8)], kids[(seven, 5)]
    nine = kids[(eight, 9)]
    same = lambda nodes: list(nodes)  # noqa: E731
    by_node = np.arange(1 + tree.size)
    scores = np.zeros(10, dtype=np.float32)
    scores[[3, 7, 5]] = [1.0, 2.0, 3.0]
    for picks in (same, by_node):
        assert free_iterations(tree, 0, picks, 4, scores).tolist() == [[seven, eight, nine]]
        assert free_iterations(tree, 0, picks, 4, scores, most=2).tolist() == [[seven, eight, nine], [1, 2, -1]]
        assert free_iterations(tree, seven, picks, 4, scores, most=4).tolist() == [[five, -1], [eight, nine]]
    scores[3] = 5.0
    assert free_iterations(tree, 0, same, 2, scores, most=2).tolist() == [[1, 2], [seven, eight]]
    assert free_iterations(tree, 1, same, 4, scores, most=2).tolist() == [[2]]  # one child: no rank
    scores[3] = scores[7]  # a tie keeps the tree's order: the chain's child first
    assert free_iterations(tree, 0, same, 1, scores, most=2).tolist() == [[1], [seven]]


def test_peeked_noise_is_the_noise_later_read_and_leaves_the_generator_alone():
    like = torch.zeros(1, 11)
    plain, peeking = NoiseStream(2, torch.Generator().manual_seed(5)), NoiseStream(2, torch.Generator().manual_seed(5))
    seen = {s: peeking.peek(1, s, like).clone() for s in (3, 0, 6)}
    assert peeking.drawn == 0  # nothing read from the generator
    for step in range(8):
        for row in (0, 1):
            got, want = peeking.take(row, step, like), plain.take(row, step, like)
            assert torch.equal(got, want)
            if row == 1 and step in seen:
                assert torch.equal(seen[step], got)
    assert torch.equal(peeking.generator.get_state(), plain.generator.get_state())


def test_the_default_generator_is_peeked_on_a_copy():
    torch.manual_seed(11)
    stream = NoiseStream(1)
    stream.peek(0, 2, torch.zeros(1, 7))
    after = torch.get_rng_state()
    torch.manual_seed(11)
    assert torch.equal(after, torch.get_rng_state())
    assert torch.equal(stream.peek(0, 0, torch.zeros(1, 7)), torch.empty(1, 7).exponential_())


def test_a_guess_is_the_token_the_race_emits_at_that_position():
    """With the same distribution at a node, the guessed token for the k-th emission ahead is
    the token the seeded race emits there: the window's guesses follow the sampled text."""
    torch.manual_seed(0)
    logits = torch.randn(3, 50) * 2
    for ahead in range(3):
        rule = SamplingRule(None, torch.Generator().manual_seed(7))
        rule.start(logits)
        guess = rule.guesses([2] * ahead + [1], None)[ahead]
        for _ in range(ahead):  # emit the tokens before that position
            rule(0, None, [])
        assert rule(1, None, []).token == guess


def test_a_full_free_iteration_is_filed_under_its_root_alone(monkeypatch):
    """Each full first free iteration becomes the trajectory n-gram ``[root, guess...]`` of the pool,
    keyed by the root alone (its chances are not the text's context pairs'), and the output
    stays greedy's."""
    import lookahead
    from lookahead.drafts import jacobi

    from tiny_models import tiny_model

    grams, filed = [], []
    real = jacobi.free_iterations

    def spy(tree, node, picks, depth, scores=None, most=1):
        guesses = real(tree, node, picks, depth, scores, most)
        if guesses.size and guesses.shape[1] == depth and guesses[0, -1] >= 0:
            grams.append(guesses[0].tolist())
        return guesses

    class Recording(lookahead.NgramPool):
        def insert(self, ngrams, before=None):
            filed.extend((row, before) for row in np.asarray(ngrams).tolist())
            super().insert(ngrams, before)

    monkeypatch.setattr(jacobi, "free_iterations", spy)
    model = tiny_model("llama", "sdpa")
    ids = torch.tensor([[5, 9, 14, 7, 22, 31] * 3])
    kwargs = dict(max_new_tokens=32, eos_token_id=None, pad_token_id=0)
    config = lookahead.LookaheadConfig(window=4, ngram=4, context_tokens=2)
    pool = Recording(config.ngram, config.guesses, context_tokens=2)
    out = lookahead.generate(model, ids, lookahead_config=config, lookahead_pool=lookahead.KeptState(pool), **kwargs)
    assert out.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()
    trajectories = [row[1:] for row, before in filed if before is None]
    assert grams and trajectories == grams
