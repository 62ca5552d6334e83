"""``lookahead generate``: one prompt through ``lookahead.generate``, streamed to stdout as tokens
are accepted, measured, and optionally compared with plain ``model.generate`` on the same settings."""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from dataclasses import asdict, dataclass, replace

import torch

import lookahead
import lookahead.cli.options as options
from lookahead.checking import loading
from lookahead.checking.exactness import first_difference, full_precision
from lookahead.checking.request import Request
from lookahead.checking.verdict import is_flip, race_verdict
from lookahead.cli.options import EXIT_CODES, EXIT_MISMATCH, EXIT_OK, UsageError
from lookahead.drafts.suffix import SuffixIndex
from lookahead.runtime.sdpa import without_cudnn

DEFAULT_PROMPT = "def fibonacci(n):\n"
WARMUP_TOKENS = 2  # a short first call loads the numba kernels and warms torch, outside the timing

EPILOG = f"""\
examples:
  lookahead generate "def quicksort(xs):"                 # embedded model, streamed
  lookahead generate --model ./my-model --compare "Once upon a time"
  echo "import numpy as np" | lookahead generate - --json -

{EXIT_CODES} (--compare: greedy float32/float64 only)"""


def register(sub) -> None:
    p = sub.add_parser(
        "generate",
        help="stream one continuation with lookahead decoding",
        description=textwrap.fill(
            "Generate a continuation of PROMPT with lookahead.generate, streamed to stdout as tokens are "
            "accepted, then one line of statistics on stderr.",
            88,
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "prompt",
        nargs="?",
        default=DEFAULT_PROMPT,
        metavar="PROMPT",
        help=f"text to continue; - reads it from stdin (default: {DEFAULT_PROMPT!r})",
    )
    options.model_options(p)
    options.max_new_tokens_option(p, 128, help="tokens to generate")
    options.sampling_options(p, sample_help="sample instead of greedy decoding", seed_help="torch seed for sampling")
    options.shape_options(p, method=True)
    p.add_argument(
        "--index",
        default=None,
        metavar="PATH.npz",
        help="a corpus index (lookahead index build) that the copy guess also drafts from",
    )
    g = p.add_argument_group("output")
    g.add_argument(
        "--compare",
        action="store_true",
        help="also run plain model.generate: wall-clock speed-up and whether the token ids are identical",
    )
    options.json_option(
        g, "write one JSON record (text, token ids, stats, timings) instead of streaming", optional_path=True
    )
    p.set_defaults(func=run_command, validate=options.validate)


Settings = Request  # what both decodings are asked to do


def run_command(args) -> int:
    config = options.config_from_args(args)  # bad --set fails before the model loads
    prompt = _read_prompt(args.prompt)
    model, tokenizer = options.load_model(args)
    settings = Settings.from_args(args, loading.pad_token_id(model, tokenizer))
    index = options.load_index(args.index, model, tokenizer)
    to_stdout = args.json == options.STDOUT
    try:
        with without_cudnn(model, config.cudnn_attention):  # --compare's generate on lookahead's kernels
            outcome = run(
                model, tokenizer, prompt, settings, config, stream=not to_stdout, compare=args.compare, index=index
            )
    except lookahead.Unsupported as err:
        raise UsageError(f"lookahead cannot serve this model: {err}") from err
    if not to_stdout:
        print(stats_line(outcome), file=sys.stderr)
        if outcome.compare is not None:
            print(compare_line(outcome, args.sample), file=sys.stderr)
    if args.json:
        options.write_json(
            record(outcome, prompt, settings, config, options.model_meta(args, model)), args.json, sys.stderr
        )
    return exit_status(outcome, settings, loading.model_dtype(model))


def _read_prompt(prompt: str) -> str:
    if prompt != "-":
        return prompt
    text = sys.stdin.read()
    if not text:
        raise UsageError("PROMPT - read an empty prompt from stdin")
    return text


@dataclass
class Outcome:
    """One ``lookahead generate`` run. ``compare`` is ``None`` unless plain decoding ran too:
    then ``{"plain_new_tokens", "plain_wall_s", "plain_tokens_per_s", "speedup", "identical",
    "first_difference", "race_gap", "flip"}`` (``speedup``: plain wall time / lookahead wall time;
    sampling: ``flip`` is ``lookahead.checking.verdict``'s verdict where they part, as a dict)."""

    prompt_tokens: int
    token_ids: list[int]
    text: str
    stats: lookahead.LookaheadStats
    wall_s: float
    compare: dict | None = None

    @property
    def tokens_per_s(self) -> float:
        return len(self.token_ids) / self.wall_s if self.wall_s else 0.0


def run(
    model,
    tokenizer,
    prompt: str,
    settings: Settings,
    config: lookahead.LookaheadConfig,
    *,
    stream: bool = True,
    compare: bool = False,
    index: SuffixIndex | None = None,
) -> Outcome:
    """Generate a continuation of ``prompt``; with ``stream`` print it to stdout as tokens are
    accepted (prompt skipped); with ``compare`` also run plain ``model.generate`` and time both;
    ``index``: a corpus the copy guess drafts from."""
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
    ids = torch.tensor(
        [_encode(tokenizer, prompt, loading.max_prompt_len(model, settings.max_new_tokens))],
        device=next(model.parameters()).device,
    )
    config_kwargs = {"lookahead_config": config, "lookahead_index": index}
    _warm_up(model, ids, settings, config_kwargs, plain=compare)
    streamer = _streamer(tokenizer) if stream else None
    stats = lookahead.LookaheadStats()
    out, wall = _timed(
        settings.seed,
        lambda: lookahead.generate(
            model,
            ids,
            lookahead_stats=stats,
            streamer=streamer,
            **config_kwargs,
            **settings.generate_kwargs(ids),
        ),
    )
    new = out[0, ids.shape[1] :].tolist()
    text = tokenizer.decode(new, skip_special_tokens=True)
    outcome = Outcome(ids.shape[1], new, text, stats, wall)
    if compare:
        outcome.compare = _compare(model, ids, settings, new, wall)
    return outcome


def exit_status(outcome: Outcome, settings: Settings, dtype: torch.dtype) -> int:
    """1 when a comparison in float32/float64 found different token ids (seeded sampling too,
    unless it is a rounding flip, of the race or at a boundary), else 0."""
    c = outcome.compare
    if c is not None and not c["identical"] and not is_flip(c.get("flip")) and full_precision(dtype):
        return EXIT_MISMATCH
    return EXIT_OK


def stats_line(outcome: Outcome) -> str:
    """One line: new tokens, tokens/s, tokens per forward, accepted-length histogram."""
    s = outcome.stats
    hist = " ".join(f"{k}:{n}" for k, n in enumerate(s.accepted) if n)
    return (
        f"lookahead: {len(outcome.token_ids)} new tokens in {outcome.wall_s:.2f} s, "
        f"{outcome.tokens_per_s:.1f} tokens/s, {s.tokens_per_forward:.2f} tokens/forward "
        f"({s.forwards} forwards), accepted per step {{{hist or '-'}}}"
        + (" (fell back to plain decoding)" if s.fallback else "")
    )


def compare_line(outcome: Outcome, sample: bool) -> str:
    c = outcome.compare
    if c["identical"]:
        same = "token ids identical"
    elif sample and is_flip(c.get("flip")):
        same = f"token ids differ from new token {c['first_difference']}, {c['flip']['reason']}"
    else:
        same = f"token ids DIFFER from new token {c['first_difference']}"
        if sample and c.get("flip"):
            same += f", {c['flip']['reason']}"
    return (
        f"model.generate: {c['plain_new_tokens']} new tokens in {c['plain_wall_s']:.2f} s, "
        f"{c['plain_tokens_per_s']:.1f} tokens/s; speed-up {c['speedup']:.2f}x; {same}"
    )


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
        "sample": {
            "do_sample": settings.do_sample,
            "temperature": settings.temperature,
            "top_p": settings.top_p,
            "seed": settings.seed,
        },
        "lookahead_config": asdict(config),
        "stats": outcome.stats.as_dict(),
        "timings": {"wall_s": outcome.wall_s, "tokens_per_s": outcome.tokens_per_s},
        "compare": outcome.compare,
    }


def _encode(tokenizer, prompt: str, max_len: int | None) -> list[int]:
    """The prompt's token ids, cut from the left to at most ``max_len``."""
    ids = list(tokenizer(prompt)["input_ids"])
    if max_len is not None and len(ids) > max_len:
        ids = ids[len(ids) - max_len :]
    if not ids:
        raise ValueError("the prompt is empty after tokenization")
    return ids


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


def _warm_up(model, ids, settings: Settings, config_kwargs: dict, plain: bool) -> None:
    kwargs = replace(settings, max_new_tokens=min(WARMUP_TOKENS, settings.max_new_tokens)).generate_kwargs(ids)
    _timed(settings.seed, lambda: lookahead.generate(model, ids, **config_kwargs, **kwargs))
    if plain:
        _timed(settings.seed, lambda: model.generate(ids, **kwargs))


def _compare(model, ids, settings: Settings, new: list[int], wall: float) -> dict:
    out, plain_wall = _timed(settings.seed, lambda: model.generate(ids, **settings.generate_kwargs(ids)))
    plain = out[0, ids.shape[1] :].tolist()
    differ = first_difference(plain, new)
    judged = None
    if settings.do_sample and differ is not None and differ < min(len(plain), len(new)):
        prefix = torch.cat([ids[0], ids.new_tensor(plain[:differ])])
        tokens = (plain[differ], new[differ])
        judged = race_verdict(model, prefix, tokens, settings.seed, differ, processors=settings.warpers())
    return {
        "plain_new_tokens": len(plain),
        "plain_wall_s": plain_wall,
        "plain_tokens_per_s": len(plain) / plain_wall if plain_wall else 0.0,
        "speedup": plain_wall / wall if wall else 0.0,
        "identical": differ is None,
        "first_difference": differ,
        "race_gap": judged.race_gap if judged else None,  # sampling: the two tokens' race gap where they part
        "flip": judged.as_dict() if judged else None,  # sampling: lookahead.checking.verdict's verdict there
    }
