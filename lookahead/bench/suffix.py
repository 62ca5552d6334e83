"""SuffixDecoding as a benchmark peer: Arctic Inference's own suffix tree drafts, a bare greedy loop verifies.

SuffixDecoding (Arctic Inference; NeurIPS 2025) drafts from suffix trees over the prompt, the
output and, optionally, earlier responses, scored by frequency, with the draft length adapted to
the length of the match. arctic-inference is a vLLM plugin, so it is not installed whole:
``tools/build_suffix_decoding.sh`` builds only its C++ suffix tree (``csrc/suffix_decoding``)
and its Python wrapper, ``arctic_inference.suffix_decoding.SuffixDecodingCache``.

The verify loop is the plainest exact one, with no ``generate`` machinery: prefill a
``DynamicCache``, then each step feed ``[last token, draft...]`` as one chain under the model's
ordinary causal mask, keep the longest draft prefix that matches the model's argmax plus the
model's own next token, crop the rejected entries off the cache. Greedy, batch 1.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

import torch

BUILD_SCRIPT = "tools/build_suffix_decoding.sh"

# vLLM's defaults for speculative_config={"method": "suffix"} (vllm/config/speculative.py):
MAX_TREE_DEPTH = 24  # suffix_decoding_max_tree_depth: bounds match length + draft length
MAX_SPEC_TOKENS = 24  # num_speculative_tokens defaults to the tree depth
MAX_SPEC_FACTOR = 1.0  # suffix_decoding_max_spec_factor: draft <= factor * match + offset
MAX_SPEC_OFFSET = 0.0  # vLLM's proposer does not pass it: the wrapper's default
MIN_TOKEN_PROB = 0.1  # suffix_decoding_min_token_prob
MAX_CACHED_REQUESTS = 10000  # suffix_decoding_max_cached_requests: responses in the global tree

# generate() settings that would change greedy's choices; the bare loop applies none of them
_PROCESSOR_DEFAULTS = {
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "min_length": 0,
    "min_new_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "sequence_bias": None,
    "encoder_repetition_penalty": 1.0,
    "renormalize_logits": False,
    "stop_strings": None,
}


class DraftSource(Protocol):
    """Where the drafts come from; one object serves one request."""

    def speculate(self, context: Sequence[int], max_tokens: int) -> list[int]:
        """A chain of at most ``max_tokens`` (>= 1) guessed next tokens after ``context`` (prompt + output)."""

    def update(self, tokens: Sequence[int]) -> None:
        """``tokens`` were appended to the output."""


def cache_class():
    """arctic-inference's ``SuffixDecodingCache``; ``ImportError`` naming the build script when missing."""
    try:
        from arctic_inference.suffix_decoding import SuffixDecodingCache
    except ImportError as err:
        raise ImportError(
            f"arctic-inference's suffix tree is not importable ({err}); build it with {BUILD_SCRIPT}"
        ) from err
    return SuffixDecodingCache


def new_cache(global_tree: bool):
    """A suffix cache; ``global_tree`` keeps finished responses for later requests (else prompt + own output only)."""
    return cache_class()(max_tree_depth=MAX_TREE_DEPTH, max_cached_requests=MAX_CACHED_REQUESTS if global_tree else 0)


class SuffixDrafter:
    """One request in a ``SuffixDecodingCache``: its prompt tree, and its response fed to the trees.

    Use as a context manager, so the request is stopped (its prompt tree freed; its response stays
    in the global tree, if the cache has one) however decoding ends.
    """

    def __init__(self, cache, request_id, prompt: Sequence[int]):
        self.cache = cache
        self.request_id = request_id
        cache.start_request(request_id, list(prompt))

    def speculate(self, context: Sequence[int], max_tokens: int) -> list[int]:
        draft = self.cache.speculate(
            self.request_id,
            list(context[-MAX_TREE_DEPTH:]),  # vLLM's pattern: the last max-depth tokens
            max_spec_tokens=min(MAX_SPEC_TOKENS, max_tokens),  # explicit: the wrapper's default path is broken
            max_spec_factor=MAX_SPEC_FACTOR,
            max_spec_offset=MAX_SPEC_OFFSET,
            min_token_prob=MIN_TOKEN_PROB,
            use_tree_spec=False,  # vLLM verifies a chain
        )
        return list(draft.token_ids)

    def update(self, tokens: Sequence[int]) -> None:
        self.cache.add_active_response(self.request_id, list(tokens))

    def __enter__(self) -> SuffixDrafter:
        return self

    def __exit__(self, *exc) -> None:
        self.cache.stop_request(self.request_id)


def check_plain_greedy(generation_config) -> None:
    """Raise ``NotImplementedError`` if ``generate`` would apply logits processors this loop does not."""
    for name, default in _PROCESSOR_DEFAULTS.items():
        value = getattr(generation_config, name, default)
        if value not in (default, None):
            raise NotImplementedError(f"the bare verify loop applies no logits processors ({name}={value!r})")


def eos_ids(generation_config) -> frozenset[int]:
    """The EOS ids greedy stops at (``eos_token_id`` may be an int, a list or ``None``)."""
    eos = getattr(generation_config, "eos_token_id", None)
    if eos is None:
        return frozenset()
    return frozenset([eos] if isinstance(eos, int) else eos)


def accepted_length(draft: Sequence[int], choices: Sequence[int]) -> int:
    """How many leading draft tokens the model chose itself: ``choices[i]`` is its pick after ``draft[:i]``."""
    k = 0
    while k < len(draft) and draft[k] == choices[k]:
        k += 1
    return k


def _until_eos(tokens: list[int], eos: frozenset[int]) -> list[int]:
    """``tokens`` cut just after the first EOS (greedy stops there)."""
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1]
    return tokens


class _Forward:
    """The model's forward over the cache, timed into ``stats``; returns logits ``[q, vocab]``."""

    def __init__(self, model, cache, stats):
        self.model, self.cache, self.stats = model, cache, stats
        self.cuda = next(model.parameters()).device.type == "cuda"
        supports = getattr(model, "_supports_logits_to_keep", lambda: False)
        self.keep_last = {"logits_to_keep": 1} if supports() else {}

    def __call__(self, ids: torch.Tensor, past: int, last_only: bool = False) -> torch.Tensor:
        positions = torch.arange(past, past + ids.shape[1], device=ids.device)[None]
        if self.cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        extra = self.keep_last if last_only else {}
        out = self.model(input_ids=ids, position_ids=positions, cache=self.cache, use_cache=True, **extra)
        if self.cuda:
            torch.cuda.synchronize()
        self.stats.forward_s += time.perf_counter() - started
        self.stats.forwards += 1
        return out.logits[0]


def greedy_chain_decode(
    model,
    input_ids: torch.Tensor,
    drafter: DraftSource,
    max_new_tokens: int,
    eos_token_ids: frozenset[int] = frozenset(),
    stats=None,
) -> torch.Tensor:
    """Greedy decoding with chain drafts verified in one forward each; exact vs ``generate(do_sample=False)``.

    Args:
        input_ids: long ``[1, P]``, no padding.
        drafter: proposes chains and is told every appended token (the prefill's first one included).
        max_new_tokens: most tokens appended; decoding also stops after an EOS token, which is kept.
        stats: a ``lookahead.LookaheadStats`` to add to (forwards, steps, accepted histogram,
            drafts asked for / non-empty / draft tokens fed as pool_lookups / pool_hits / guess_tokens,
            forward_s, total_s, new_tokens).

    Returns:
        long ``[1, P + n]``: the prompt and the ``n <= max_new_tokens`` new tokens.
    """
    from lookahead.stats import LookaheadStats

    if input_ids.shape[0] != 1:
        raise ValueError(f"the suffix verify loop decodes one sequence, got a batch of {input_ids.shape[0]}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    stats = stats if stats is not None else LookaheadStats()
    started = time.perf_counter()
    with torch.inference_mode():
        new = _decode(model, input_ids, drafter, max_new_tokens, eos_token_ids, stats)
    stats.new_tokens += len(new)
    stats.total_s += time.perf_counter() - started
    return torch.cat([input_ids, torch.tensor([new], dtype=input_ids.dtype, device=input_ids.device)], dim=1)


def _decode(model, input_ids, drafter, max_new_tokens: int, eos: frozenset[int], stats) -> list[int]:
    """The loop itself; returns the new tokens. Each stage's time goes to ``stats.stages`` (as
    lookahead's decode loop times its own: ``lookahead.stats.STAGES``)."""
    from transformers.cache_utils import DynamicCache

    from lookahead.stats import Laps

    laps = Laps(stats.stages)
    cache = DynamicCache(config=model.config)
    cache.activate_past_recording()  # sliding-window layers keep a step's entries until crop trims them
    forward = _Forward(model, cache, stats)
    text = input_ids[0].tolist()
    prompt_len = len(text)
    text.append(int(forward(input_ids, 0, last_only=True)[-1].argmax()))
    cache.crop(0)  # sliding-window layers: back to their window after the prompt
    drafter.update(text[-1:])
    laps.mark("prefill")
    while len(text) - prompt_len < max_new_tokens and text[-1] not in eos:
        budget = max_new_tokens - (len(text) - prompt_len) - 1  # a longer draft could never be kept
        draft = drafter.speculate(text, budget)[:budget] if budget > 0 else []
        laps.mark("plan")
        step = torch.tensor([text[-1:] + draft], dtype=input_ids.dtype, device=input_ids.device)
        forwarded = stats.forward_s
        logits = forward(step, len(text) - 1)
        laps.mark("inputs")
        laps.move(stats.forward_s - forwarded, "inputs", "forward")
        choices = logits.argmax(-1).tolist()
        laps.mark("fetch")
        k = accepted_length(draft, choices)
        appended = _until_eos(draft[:k] + [choices[k]], eos)
        laps.mark("verify")
        cache.crop(-(len(draft) - k))  # drop the rejected drafts; crop(0) still trims sliding layers
        laps.mark("commit")
        text.extend(appended)
        drafter.update(appended)
        stats.steps += 1
        stats.record_step(len(appended))
        stats.pool_lookups += int(budget > 0)
        stats.pool_hits += int(bool(draft))
        stats.guess_tokens += len(draft)
        laps.mark("learn")
    return text[prompt_len:]
