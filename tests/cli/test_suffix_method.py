"""The ``suffix`` / ``suffix-global`` benchmark methods: SuffixDecoding's tree through a bare verify loop.

The verify loop and the method wiring are tested without arctic-inference's extension (a list
drafter, a fake cache); with the extension missing the methods must be reported unavailable,
naming the build script; with it built, ``suffix`` must reproduce greedy on the embedded model.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch

import lookahead
from lookahead.bench import methods, runner, suffix
from lookahead.bench.prompts import Prompt
from lookahead.cli import bench as bench_cli

from tiny_models import tiny_model

EXTENSION_MISSING = methods.suffix_unavailable()
PROMPT = [1, 5, 9, 14, 5, 9, 22, 7, 5, 9, 14, 30, 3]


def greedy(model, ids: torch.Tensor, max_new_tokens: int, **kwargs) -> torch.Tensor:
    kwargs = {"attention_mask": torch.ones_like(ids), "pad_token_id": 0, **kwargs}
    return model.generate(ids, do_sample=False, max_new_tokens=max_new_tokens, **kwargs)


class ListDrafter:
    """Drafts the known continuation ``reference`` with planted errors, lengths cycling through ``lengths``.

    A draft made at output length ``n`` copies ``reference[n:]`` and flips its ``wrong_at``-th token
    (when it has one), so steps accept all, part or none of their draft.
    """

    def __init__(self, reference: list[int], lengths=(3, 0, 5, 1, 8, 2), wrong_at=(None, None, 2, 0, None, 1)):
        self.reference, self.lengths, self.wrong_at = reference, lengths, wrong_at
        self.calls, self.updates, self.prompt_len = 0, [], None

    def speculate(self, context, max_tokens):
        assert max_tokens >= 1
        i = self.calls % len(self.lengths)
        self.calls += 1
        draft = list(self.reference[len(context) : len(context) + min(self.lengths[i], max_tokens)])
        if self.wrong_at[i] is not None and self.wrong_at[i] < len(draft):
            draft[self.wrong_at[i]] = (draft[self.wrong_at[i]] + 1) % 40 + 3
        return draft

    def update(self, tokens):
        self.updates.extend(tokens)


@pytest.mark.parametrize("family", ["llama", "mistral", "gpt2"])  # mistral: a sliding window shorter than the text
def test_verify_loop_equals_generate(family):
    model = tiny_model(family, "eager" if family == "gpt2" else "sdpa")
    ids = torch.tensor([PROMPT])
    reference = greedy(model, ids, 40)
    drafter = ListDrafter(reference[0].tolist())
    stats = lookahead.LookaheadStats()
    eos = suffix.eos_ids(model.generation_config)
    out = suffix.greedy_chain_decode(model, ids, drafter, 40, eos, stats)
    assert torch.equal(out, reference)
    new = out.shape[1] - ids.shape[1]
    assert drafter.updates == out[0, ids.shape[1] :].tolist()  # every appended token, once, in order
    assert stats.new_tokens == new == sum(k * n for k, n in enumerate(stats.accepted)) + 1  # + the prefill's
    assert stats.forwards == stats.steps + 1 < new  # drafts that held saved forwards
    assert stats.accepted[1] > 0 and len(stats.accepted) > 4  # steps that kept nothing, and long runs
    assert stats.steps - 1 <= stats.pool_lookups <= stats.steps  # the last step may have had no room to draft
    assert stats.pool_hits <= stats.pool_lookups and stats.guess_tokens > 0
    assert 0 < stats.forward_s <= stats.total_s


def test_verify_loop_stops_at_eos_inside_a_draft():
    model = tiny_model("llama", "sdpa")
    ids = torch.tensor([PROMPT])
    reference = greedy(model, ids, 30)[0].tolist()
    stop = reference[len(PROMPT) + 9]  # a token greedy emits; as EOS, greedy stops at its first occurrence
    expected = greedy(model, ids, 30, eos_token_id=stop)
    drafter = ListDrafter(reference, lengths=(24,), wrong_at=(None,))  # one perfect draft runs past it
    out = suffix.greedy_chain_decode(model, ids, drafter, 30, frozenset([stop]))
    assert torch.equal(out, expected) and out[0, -1].item() == stop


def test_verify_loop_keeps_to_the_token_budget():
    model = tiny_model("llama", "sdpa")
    ids = torch.tensor([PROMPT])
    reference = greedy(model, ids, 7)
    out = suffix.greedy_chain_decode(model, ids, ListDrafter(reference[0].tolist(), (24,), (None,)), 7)
    assert torch.equal(out, reference)
    assert torch.equal(suffix.greedy_chain_decode(model, ids, ListDrafter([], (0,), (None,)), 1), reference[:, :-6])


def test_helpers():
    assert suffix.accepted_length([4, 5, 6], [4, 5, 7, 1]) == 2
    assert suffix.accepted_length([], [3]) == 0 and suffix.accepted_length([1], [2, 0]) == 0
    assert suffix.eos_ids(SimpleNamespace(eos_token_id=[2, 7])) == {2, 7}
    assert suffix.eos_ids(SimpleNamespace(eos_token_id=0)) == {0} and suffix.eos_ids(SimpleNamespace()) == set()
    suffix.check_plain_greedy(tiny_model("llama", "sdpa").generation_config)
    with pytest.raises(NotImplementedError, match="repetition_penalty"):
        suffix.check_plain_greedy(SimpleNamespace(repetition_penalty=1.2))


class FakeSuffixCache:
    """Stands in for ``SuffixDecodingCache``: drafts what followed the last earlier match of two tokens
    in the request's prompt and output or in cached responses, and records the calls."""

    made = []

    def __init__(self, max_tree_depth, max_cached_requests):
        self.depth, self.max_cached = max_tree_depth, max_cached_requests
        self.active, self.responses, self.stopped = {}, {}, []
        FakeSuffixCache.made.append(self)

    def start_request(self, req_id, prompt):
        assert req_id not in self.active
        self.active[req_id], self.responses[req_id] = list(prompt), []

    def add_active_response(self, req_id, tokens):
        self.active[req_id].extend(tokens)
        self.responses[req_id].extend(tokens)

    def stop_request(self, req_id):
        del self.active[req_id]
        self.stopped.append(req_id)

    def speculate(self, req_id, context, *, max_spec_tokens, **params):
        assert len(context) <= self.depth and max_spec_tokens >= 1 and not params["use_tree_spec"]
        others = [r for k, r in self.responses.items() if k != req_id] if self.max_cached else []
        texts = [self.active[req_id], *others]
        for text in texts:
            for i in range(len(text) - 2, 1, -1):
                if text[i - 2 : i] == list(context[-2:]):
                    return SimpleNamespace(token_ids=text[i : i + max_spec_tokens])
        return SimpleNamespace(token_ids=[])


def test_methods_wiring_with_a_fake_cache(monkeypatch):
    monkeypatch.setattr(suffix, "cache_class", lambda: FakeSuffixCache)
    FakeSuffixCache.made.clear()
    model = tiny_model("llama", "sdpa")
    assert methods.available("suffix") and methods.available("suffix-global")
    kept = methods.Settings(max_new_tokens=24)
    for prompt in (PROMPT, PROMPT[3:] + PROMPT[:3]):
        ids = torch.tensor([prompt])
        expected = greedy(model, ids, 24)[0, len(prompt) :].tolist()
        for name, settings in (("suffix", methods.Settings(max_new_tokens=24)), ("suffix-global", kept)):
            result = methods.measure(name, model, ids, settings)
            assert result.tokens == expected, name
            assert result.forwards == result.steps + 1 and "accepted_hist" in result.extra
    per_request = [c for c in FakeSuffixCache.made if not c.max_cached]
    assert len(per_request) == 2 and all(c.stopped == [0] for c in per_request)  # a fresh cache per prompt
    (global_cache,) = [c for c in FakeSuffixCache.made if c.max_cached]
    assert kept.state["suffix_cache"] is global_cache and global_cache.stopped == [1, 2]  # one kept cache
    assert global_cache.max_cached == suffix.MAX_CACHED_REQUESTS and global_cache.depth == suffix.MAX_TREE_DEPTH
    with pytest.raises(methods.MethodUnavailable, match="^suffix: greedy only"):
        methods.run_suffix(model, torch.tensor([PROMPT]), methods.Settings(do_sample=True))


@pytest.fixture
def without_extension(monkeypatch):
    """Hides arctic-inference's suffix tree (built or not), so the missing-extension path runs on every machine."""
    monkeypatch.setitem(sys.modules, "arctic_inference.suffix_decoding", None)


def test_without_the_extension_the_methods_are_unavailable(without_extension):
    reason = methods.suffix_unavailable()
    assert "tools/build_suffix_decoding.sh" in reason and "\n" not in reason
    assert not methods.available("suffix") and not methods.available("suffix-global")
    for name, run in (("suffix", methods.run_suffix), ("suffix-global", methods.run_suffix_global)):
        with pytest.raises(methods.MethodUnavailable, match=f"^{name}: .*build_suffix_decoding.sh"):
            run(None, None, methods.Settings())
    assert not set(bench_cli.select_methods("all")) & set(methods.SUFFIX_METHODS)  # `--methods all` leaves them out
    model = tiny_model("llama", "sdpa")
    variants = [runner.Variant(m, m, methods.Settings(max_new_tokens=4)) for m in ("greedy", "suffix")]
    records, skipped = runner.run(model, [Prompt("p", token_ids=PROMPT)], [PROMPT], variants, progress=False)
    assert [r.label for r in records] == ["greedy"] and "build_suffix_decoding.sh" in skipped["suffix"]


@pytest.mark.skipif(EXTENSION_MISSING is not None, reason="arctic-inference's suffix tree is not built here")
def test_suffix_equals_greedy_on_the_embedded_model():
    pytest.importorskip("arctic_inference.suffix_decoding")
    model, tokenizer = lookahead.load_default_model()
    texts = ["def fibonacci(n):\n    if n < 2:\n        return n\n", "class Stack:\n    def __init__(self):\n"]
    kept = methods.Settings(max_new_tokens=16)
    for text in texts:
        ids = tokenizer(text, return_tensors="pt").input_ids
        expected = methods.measure("greedy", model, ids, methods.Settings(max_new_tokens=16)).tokens
        for name, settings in (("suffix", methods.Settings(max_new_tokens=16)), ("suffix-global", kept)):
            result = methods.measure(name, model, ids, settings)
            assert result.tokens == expected, name
            assert result.forwards == result.steps + 1 <= len(expected)
    assert list(kept.state["suffix_cache"].cached_requests) == [1, 2]  # both responses kept in the global tree
