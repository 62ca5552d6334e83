"""Hypothesis strategies for checking lookahead decoding against plain decoding: the examples
``lookahead check`` draws, and the project's property tests.

Needs ``hypothesis`` (``pip install hypothesis``; it is in the package's ``test`` extra). The
strategies are parameterised by the token ids to draw from, so the same ones serve the
project's tiny test models (ids 3..47) and ``lookahead check`` on a real model's vocabulary.

    from lookahead.checking import examples
    tokens = examples.token_ids(3, 47)
    @given(ids=examples.prompts(tokens), config=examples.configs(), eos=examples.eos_ids(tokens))
    def test_exact(ids, config, eos): ...
"""

from __future__ import annotations

try:
    from hypothesis import strategies as st
except ImportError as err:  # an optional dependency: say which package to install
    raise ImportError("lookahead.checking.examples needs hypothesis: pip install hypothesis") from err

from lookahead.config import LookaheadConfig

__all__ = [
    "cases",
    "configs",
    "cost_curves",
    "eos_ids",
    "max_new_tokens",
    "model_token_ids",
    "processor_options",
    "prompts",
    "random_prompts",
    "repetitive_prompts",
    "sampling_options",
    "token_ids",
    "vocabulary_ids",
]


def _check_range(name: str, low: int, high: int, floor: int = 0) -> None:
    for value in (low, high):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} bounds must be ints, got {value!r}")
    if low < floor or high < low:
        raise ValueError(f"{name} needs {floor} <= low <= high, got low={low}, high={high}")


def token_ids(low: int, high: int, exclude=()) -> st.SearchStrategy[int]:
    """Token ids in ``[low, high]``, leaving out the ids in ``exclude`` (e.g. special tokens).

    Shrinks towards ``low``.
    """
    _check_range("token_ids", low, high)
    excluded = frozenset(int(t) for t in exclude if low <= int(t) <= high)
    if len(excluded) > high - low:
        raise ValueError(f"token_ids: exclude={sorted(excluded)} leaves no id in [{low}, {high}]")
    # Trim excluded ids off both ends (special tokens usually sit there) so that few draws are
    # filtered away and shrinking lands on the first ordinary id.
    while low in excluded:
        low += 1
    while high in excluded:
        high -= 1
    inner = frozenset(t for t in excluded if low < t < high)
    ids = st.integers(min_value=low, max_value=high)
    return ids.filter(lambda t: t not in inner) if inner else ids


def vocabulary_ids(tokenizer, vocab_size: int | None = None) -> st.SearchStrategy[int]:
    """Ordinary token ids of ``tokenizer``: every id below ``len(tokenizer)`` (and below the
    model's ``vocab_size`` when given) except the special tokens."""
    size = len(tokenizer) if vocab_size is None else min(len(tokenizer), int(vocab_size))
    if size < 1:
        raise ValueError(
            f"vocabulary_ids: the vocabulary is empty (len(tokenizer)={len(tokenizer)}, vocab_size={vocab_size})"
        )
    return token_ids(0, size - 1, exclude=getattr(tokenizer, "all_special_ids", ()))


@st.composite
def repetitive_prompts(draw, tokens: st.SearchStrategy[int], min_len: int = 6, max_len: int = 40):
    """Lists of ``min_len..max_len`` ids: a short motif (2-6 tokens) repeated, with up to two
    random edits. The n-gram pool and the copy guess really hit on these."""
    _check_range("repetitive_prompts length", min_len, max_len, floor=1)
    motif = draw(st.lists(tokens, min_size=2, max_size=6))
    length = draw(st.integers(min_len, max_len))
    ids = (motif * (length // len(motif) + 1))[:length]
    for _ in range(draw(st.integers(0, 2))):
        ids[draw(st.integers(0, length - 1))] = draw(tokens)
    return ids


def random_prompts(tokens: st.SearchStrategy[int], min_len: int = 1, max_len: int = 30) -> st.SearchStrategy[list]:
    """Lists of ``min_len..max_len`` independent ids: guesses rarely hold on these."""
    _check_range("random_prompts length", min_len, max_len, floor=1)
    return st.lists(tokens, min_size=min_len, max_size=max_len)


def prompts(tokens: st.SearchStrategy[int], as_tensor: bool = True) -> st.SearchStrategy:
    """Repetitive or random prompts; ``as_tensor`` gives a ``LongTensor [1, length]``, else a list."""
    either = st.one_of(repetitive_prompts(tokens), random_prompts(tokens))
    if not as_tensor:
        return either
    import torch

    return either.map(lambda ids: torch.tensor([ids]))


def configs(max_window: int = 16, max_ngram: int = 7, max_guesses: int = 16) -> st.SearchStrategy[LookaheadConfig]:
    """``LookaheadConfig``s over every switch: each method (the budget's choice, the classic fixed
    shape, plain Jacobi), pool, copy guess, context keys (window 1..max_window, ngram
    2..max_ngram, guesses 0..max_guesses)."""
    _check_range("configs max_window", 1, max_window, floor=1)
    _check_range("configs max_ngram", 2, max_ngram, floor=2)
    _check_range("configs max_guesses", 0, max_guesses)
    return st.builds(
        LookaheadConfig,
        window=st.integers(1, max_window),
        ngram=st.integers(2, max_ngram),
        guesses=st.integers(0, max_guesses),
        method=st.sampled_from(["lookahead", "classic", "jacobi"]),
        prompt_ngrams=st.booleans(),
        copy_length=st.sampled_from([0, 1, 4, 8, 12]),
        copy_match=st.integers(1, 3),
        context_tokens=st.sampled_from([1, 2]),
    )


@st.composite
def cost_curves(draw):
    """``CostCurve`` objects to pass as ``lookahead_costs=``: a two-token forward costing 0.8 to
    1.5 one-token ones (below 1 the decoder never feeds one token alone, see
    ``CostCurve.from_times``), rising from there by 0 to 0.3 per token, no unit time (so no
    per-step overhead is priced)."""
    from lookahead.step.costmodel import CostCurve

    two = draw(st.sampled_from([0.8, 0.95, 1.0, 1.1, 1.5]))
    slope = draw(st.sampled_from([0.0, 0.02, 0.1, 0.3]))
    sizes = (1, 2, 4, 8, 16)
    return CostCurve(sizes, (1.0, *(two + slope * (k - 2) for k in sizes[1:])))


def max_new_tokens(low: int = 1, high: int = 48) -> st.SearchStrategy[int]:
    """Generation lengths in ``[low, high]``."""
    _check_range("max_new_tokens", low, high, floor=1)
    return st.integers(low, high)


def eos_ids(tokens: st.SearchStrategy[int]) -> st.SearchStrategy:
    """``eos_token_id`` values: ``None``, one id, or a list of 1-3 ids drawn from ``tokens``
    (ordinary ids, so generation really stops in the middle of text)."""
    return st.one_of(st.none(), tokens, st.lists(tokens, min_size=1, max_size=3))


def processor_options() -> st.SearchStrategy[dict]:
    """``generate`` keywords that add logits processors needing each position's exact prefix:
    none, ``repetition_penalty``, ``no_repeat_ngram_size``, or both."""
    return st.fixed_dictionaries(
        {},
        optional={
            "repetition_penalty": st.sampled_from([1.3, 0.8, 2.0]),
            "no_repeat_ngram_size": st.integers(2, 4),
        },
    )


def sampling_options() -> st.SearchStrategy[dict]:
    """``generate`` keywords for ``do_sample=True``: a temperature and any of top-k, top-p,
    min-p and typical-p (each a warper ``generate`` builds), with or without the processors
    of :func:`processor_options`."""
    warpers = st.fixed_dictionaries(
        {"temperature": st.sampled_from([0.6, 1.0, 1.5])},
        optional={
            "top_k": st.integers(2, 20),
            "top_p": st.sampled_from([0.5, 0.8, 0.95]),
            "min_p": st.sampled_from([0.05, 0.2]),
            "typical_p": st.sampled_from([0.5, 0.9]),
        },
    )
    return st.tuples(warpers, processor_options()).map(lambda parts: {**parts[0], **parts[1]})


def cases(
    tokens: st.SearchStrategy[int],
    max_new: int = 32,
    eos: st.SearchStrategy | None = None,
    config: st.SearchStrategy[LookaheadConfig] | None = None,
) -> st.SearchStrategy[dict]:
    """One comparison: ``{"prompt": [ids], "config", "max_new_tokens", "eos_token_id", "options"}``
    (``options``: extra ``generate`` keywords from :func:`processor_options`)."""
    return st.fixed_dictionaries(
        {
            "prompt": prompts(tokens, as_tensor=False),
            "config": config if config is not None else configs(),
            "max_new_tokens": max_new_tokens(1, max_new),
            "eos_token_id": eos if eos is not None else eos_ids(tokens),
            "options": processor_options(),
        }
    )


def _special_ids(model) -> set[int]:
    """The model's own bos/eos/pad ids (from its config and generation config)."""
    ids = set()
    for source in (model.config, getattr(model, "generation_config", None)):
        for attr in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = getattr(source, attr, None)
            ids.update(value if isinstance(value, (list, tuple)) else [] if value is None else [value])
    return {int(t) for t in ids}


def model_token_ids(model, tokenizer) -> st.SearchStrategy[int]:
    """The tokenizer's ordinary ids; without a usable tokenizer every id below ``config.vocab_size``
    except the model's special ones."""
    from lookahead.checking.loading import has_vocabulary

    vocab_size = getattr(model.config, "vocab_size", None)
    if has_vocabulary(tokenizer, vocab_size):
        return vocabulary_ids(tokenizer, vocab_size)
    if not vocab_size:
        raise ValueError("lookahead check needs a tokenizer or the model's config.vocab_size to draw token ids from")
    return token_ids(0, int(vocab_size) - 1, exclude=_special_ids(model))
