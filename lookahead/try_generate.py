"""``lookahead generate``: one prompt through ``lookahead.generate``, streamed as tokens are
accepted, measured, and optionally compared with plain ``model.generate`` on the same settings."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

import torch

import lookahead
from lookahead.bench import loading
from lookahead.bench.methods import Settings
from lookahead.bench.prompts import Prompt, encode

EXIT_OK, EXIT_MISMATCH = 0, 1
FULL_PRECISION = (torch.float32, torch.float64)  # where greedy must match token for token
WARMUP_TOKENS = 2  # a short first call loads the numba kernels and warms torch, outside the timing


@dataclass
class Outcome:
    """One ``lookahead generate`` run. ``compare`` is ``None`` unless plain decoding ran too:
    then ``{"plain_new_tokens", "plain_wall_s", "plain_tokens_per_s", "speedup", "identical",
    "first_difference"}`` (``speedup``: plain wall time / lookahead wall time)."""

    prompt_tokens: int
    token_ids: list[int]
    text: str
    stats: lookahead.LookaheadStats
    wall_s: float
    compare: dict | None = None

    @property
    def tokens_per_s(self) -> float:
        return len(self.token_ids) / self.wall_s if self.wall_s else 0.0


def run(model, tokenizer, prompt: str, settings: Settings, config: lookahead.LookaheadConfig, *,
        stream: bool = True, compare: bool = False) -> Outcome:
    """Generate a continuation of ``prompt``; with ``stream`` print it to stdout as tokens are
    accepted (prompt skipped); with ``compare`` also run plain ``model.generate`` and time both."""
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
    max_len = loading.max_prompt_len(model, settings.max_new_tokens)
    ids = torch.tensor([encode(Prompt("prompt", text=prompt), tokenizer, max_len)],
                       device=next(model.parameters()).device)
    _warm_up(model, ids, settings, config, plain=compare)
    streamer = _streamer(tokenizer) if stream else None
    stats = lookahead.LookaheadStats()
    out, wall = _timed(settings.seed, lambda: lookahead.generate(
        model, ids, lookahead_config=config, lookahead_stats=stats, streamer=streamer,
        **settings.generate_kwargs(ids)))  # fmt: skip
    new = out[0, ids.shape[1]:].tolist()
    text = tokenizer.decode(new, skip_special_tokens=True)
    outcome = Outcome(ids.shape[1], new, text, stats, wall)
    if compare:
        outcome.compare = _compare(model, ids, settings, new, wall)
    return outcome


def exit_status(outcome: Outcome, settings: Settings, dtype: torch.dtype) -> int:
    """1 when a greedy comparison in float32/float64 found different token ids, else 0."""
    c = outcome.compare
    if c is not None and not c["identical"] and not settings.do_sample and dtype in FULL_PRECISION:
        return EXIT_MISMATCH
    return EXIT_OK


def stats_line(outcome: Outcome) -> str:
    """One line: new tokens, tokens/s, tokens per forward, accepted-length histogram."""
    s = outcome.stats
    hist = " ".join(f"{k}:{n}" for k, n in enumerate(s.accepted) if n)
    return (f"lookahead: {len(outcome.token_ids)} new tokens in {outcome.wall_s:.2f} s, "
            f"{outcome.tokens_per_s:.1f} tokens/s, {s.tokens_per_forward:.2f} tokens/forward "
            f"({s.forwards} forwards), accepted per step {{{hist or '-'}}}"
            + (" (fell back to plain decoding)" if s.fallback else ""))


def compare_line(outcome: Outcome, sample: bool) -> str:
    c = outcome.compare
    if c["identical"]:
        same = "token ids identical"
    elif sample:
        same = "token ids differ (expected when sampling: the random streams differ, the distribution does not)"
    else:
        same = f"token ids DIFFER from new token {c['first_difference']}"
    return (f"model.generate: {c['plain_new_tokens']} new tokens in {c['plain_wall_s']:.2f} s, "
            f"{c['plain_tokens_per_s']:.1f} tokens/s; speed-up {c['speedup']:.2f}x; {same}")


def record(outcome: Outcome, prompt: str, settings: Settings, config, meta: dict) -> dict:
    """The ``--json`` record: ``meta`` (model, dtype, device...) plus text, tokens, stats, timings."""
    return {
        **meta,
        "prompt": prompt,
        "prompt_tokens": outcome.prompt_tokens,
        "text": outcome.text,
        "token_ids": outcome.token_ids,
        "new_tokens": len(outcome.token_ids),
        "max_new_tokens": settings.max_new_tokens,
        "sample": {"do_sample": settings.do_sample, "temperature": settings.temperature,
                   "top_p": settings.top_p, "seed": settings.seed},
        "lookahead_config": asdict(config),
        "stats": outcome.stats.as_dict(),
        "timings": {"wall_s": outcome.wall_s, "tokens_per_s": outcome.tokens_per_s},
        "compare": outcome.compare,
    }  # fmt: skip


def _streamer(tokenizer):
    from transformers import TextStreamer

    return TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)


def _timed(seed: int, call):
    """``(call(), seconds)``, seeded so that sampling repeats."""
    torch.manual_seed(seed)
    with torch.inference_mode():
        started = time.perf_counter()
        out = call()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return out, time.perf_counter() - started


def _warm_up(model, ids, settings: Settings, config, plain: bool) -> None:
    kwargs = replace(settings, max_new_tokens=min(WARMUP_TOKENS, settings.max_new_tokens)).generate_kwargs(ids)
    _timed(settings.seed, lambda: lookahead.generate(model, ids, lookahead_config=config, **kwargs))
    if plain:
        _timed(settings.seed, lambda: model.generate(ids, **kwargs))


def _compare(model, ids, settings: Settings, new: list[int], wall: float) -> dict:
    out, plain_wall = _timed(settings.seed, lambda: model.generate(ids, **settings.generate_kwargs(ids)))
    plain = out[0, ids.shape[1]:].tolist()
    differ = next((i for i, (a, b) in enumerate(zip(plain, new)) if a != b), None)
    if differ is None and len(plain) != len(new):
        differ = min(len(plain), len(new))
    return {
        "plain_new_tokens": len(plain),
        "plain_wall_s": plain_wall,
        "plain_tokens_per_s": len(plain) / plain_wall if plain_wall else 0.0,
        "speedup": plain_wall / wall if wall else 0.0,
        "identical": differ is None,
        "first_difference": differ,
    }
