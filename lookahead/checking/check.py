"""``lookahead check``: a property check of ``lookahead.generate`` against plain greedy decoding
on the user's own model.

Hypothesis draws random and repetitive prompts from the model's ordinary token ids, random
``LookaheadConfig``s, EOS lists and logits processors (``lookahead.checking.examples.cases``); each example
compares ``lookahead.generate`` with ``model.generate(do_sample=False)``. A mismatch is shrunk to
a minimal example, reported with the first differing position and plain decoding's top-2 score
margin there, so that a reduced-precision near-tie can be told from a bug.

Needs ``hypothesis`` (``pip install hypothesis``). The command is ``lookahead.cli.check``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, fields

import torch

import lookahead
from lookahead.checking import loading
from lookahead.checking.exactness import EXIT_MISMATCH, EXIT_OK, first_difference, full_precision
from lookahead.checking.exactness import dtype_name as _dtype_name
from lookahead.checking.verdict import Verdict, generate_processors, replay_noise, verdict
from lookahead.config import LookaheadConfig

NEAR_TIE_STEPS = 8.0  # margins within this many rounding steps of the score are reported as near-ties


@dataclass
class Mismatch:
    """The (shrunk) failing example and where the two decodings part.

    ``position`` indexes the new tokens; ``expected``/``got`` are plain decoding's and
    lookahead's tokens there (``None``: that one had already stopped). ``margin`` is plain
    decoding's top-2 margin of the processed scores at ``position`` and ``top_score`` its
    largest score there (``None`` when plain decoding had stopped). ``error`` is set instead
    when ``lookahead.generate`` raised where plain decoding did not.
    """

    prompt: list[int]
    config: LookaheadConfig
    kwargs: dict
    expected_ids: list[int] = field(default_factory=list)
    got_ids: list[int] = field(default_factory=list)
    position: int | None = None
    expected: int | None = None
    got: int | None = None
    margin: float | None = None
    top_score: float | None = None
    error: str | None = None
    seed: int | None = None  # sampling: the torch seed both decodings ran under
    race_gap: float | None = None  # sampling: the two tokens' gap in the seeded race (lookahead.checking.verdict)
    verdict: Verdict | None = None  # sampling: a rounding flip (of the race, at a boundary) or a bug


@dataclass
class CheckResult:
    """What ``run_check`` found.

    ``examples``: examples checked up to and including the first failing one (all of them when
    none failed); ``runs``: property runs in all, shrinking included; ``mismatch``: the minimal
    failing example, or ``None``.
    """

    examples: int
    runs: int
    seconds: float
    dtype: torch.dtype
    mismatch: Mismatch | None = None
    sample: bool = False

    @property
    def flip(self) -> bool:
        """A sampled mismatch that rounding explains (of the race, or at a boundary): not a bug."""
        m = self.mismatch
        return m is not None and m.verdict is not None and m.verdict.flip

    @property
    def ok(self) -> bool:
        return self.mismatch is None

    @property
    def full_precision(self) -> bool:
        return full_precision(self.dtype)

    def exit_status(self, strict: bool = False) -> int:
        """0 when every example matched; 1 for a crash, or a mismatch in float32/float64 (in
        bfloat16/float16 only with ``strict``: near-ties there can flip under rounding)."""
        if self.ok:
            return EXIT_OK
        fatal = self.mismatch.error is not None or strict or (self.full_precision and not self.flip)
        return EXIT_MISMATCH if fatal else EXIT_OK

    def lines(self) -> list[str]:
        """The human-readable report."""
        dtype = _dtype_name(self.dtype)
        if self.ok:
            plain = "seeded model.generate(do_sample=True)" if self.sample else "model.generate(do_sample=False)"
            return [
                f"ok: {self.examples} examples ({dtype}, {self.seconds:.1f} s): lookahead.generate "
                f"matched {plain} token for token on every one"
            ]
        extra = self.runs - self.examples
        head = "ERROR" if self.mismatch.error else "MISMATCH"
        return [
            f"{head} at example {self.examples} ({dtype}); minimal example after {extra} shrinking runs:",
            *_example_lines(self.mismatch, self.dtype),
        ]


class _Found(Exception):
    """Raised inside the property to hand the failing example to hypothesis (and back)."""

    def __init__(self, mismatch: Mismatch):
        super().__init__(f"first differing position {mismatch.position}")
        self.mismatch = mismatch


def run_check(
    model,
    tokenizer,
    *,
    examples: int = 30,
    seed: int = 0,
    max_new_tokens: int = 32,
    progress=None,
    sample: bool = False,
) -> CheckResult:
    """Compare ``lookahead.generate`` with ``model.generate(do_sample=False)`` on ``examples``
    hypothesis-drawn cases (seeded by ``seed``, up to ``max_new_tokens`` new tokens each).

    With ``sample`` each case also draws sampling settings (temperature, top-k, top-p, min-p,
    typical-p) and a torch seed, and compares with ``model.generate(do_sample=True)`` under that
    seed; a mismatch then reports the two tokens' gap in the seeded race (``lookahead.checking.verdict``).

    ``progress``, when given, is called with the number of runs so far after each run.
    Raises ``lookahead.Unsupported`` up front when lookahead cannot serve the model at all,
    and ``ImportError`` when hypothesis is missing.
    """
    _check_args(model, examples, seed, max_new_tokens)
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as fixed_seed

    strategy = _cases(model, tokenizer, max_new_tokens, sample)
    pad = _pad_token_id(model, tokenizer)
    _smoke(model, pad)  # an unsupported model fails here, once, not in every example
    state = {"runs": 0, "examples": 0, "failed": False}

    @fixed_seed(seed)
    @settings(
        settings.get_profile("default"),
        max_examples=examples,
        derandomize=False,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        phases=(Phase.generate, Phase.target, Phase.shrink),
        report_multiple_bugs=False,
        print_blob=False,
    )
    @given(case=strategy)
    def prop(case):
        state["runs"] += 1
        state["examples"] += not state["failed"]
        if progress is not None:
            progress(state["runs"])
        found = compare(model, case, pad)
        if found is not None:
            state["failed"] = True
            raise _Found(found)

    started = time.perf_counter()
    mismatch = None
    try:
        prop()
    except Exception as err:  # noqa: BLE001 - anything but our own failure is re-raised
        found = _unwrap(err)
        if found is None:
            raise
        mismatch = found.mismatch
        _add_margin(model, mismatch)
    dtype = next(model.parameters()).dtype
    return CheckResult(state["examples"], state["runs"], time.perf_counter() - started, dtype, mismatch, sample)


def report(result: CheckResult, strict: bool = False, out=None) -> int:
    """Print ``result`` (to ``out``, default stdout) and return the exit status."""
    out = out if out is not None else sys.stdout
    for line in result.lines():
        print(line, file=out)
    status = result.exit_status(strict)
    if not result.ok and status == EXIT_OK and result.flip:
        kind = "of the sampling race" if result.mismatch.verdict.kind == "race" else "at a sampling boundary"
        print(f"note: a rounding flip {kind}, not a bug; fatal only with --strict", file=out)
    elif not result.ok and status == EXIT_OK:
        print(
            f"note: in {_dtype_name(result.dtype)} a forward over many tokens rounds differently from one "
            "over a single token, so near-ties can flip; not fatal without --strict",
            file=out,
        )
    return status


def compare(model, case: dict, pad_token_id: int | None) -> Mismatch | None:
    """Run one case both ways; ``None`` when the new tokens are identical. A case with a
    ``seed`` samples, each decoding under ``torch.manual_seed(seed)``."""
    device = next(model.parameters()).device
    ids = torch.tensor([case["prompt"]], device=device)
    kwargs = _generate_kwargs(case, pad_token_id)
    seed = case.get("seed")
    with torch.inference_mode():
        _reseed(seed)
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
        try:
            _reseed(seed)
            got = lookahead.generate(
                model, ids, attention_mask=torch.ones_like(ids), lookahead_config=case["config"], **kwargs
            )
        except Exception as err:  # noqa: BLE001 - a crash where plain decoding works is a failure
            return Mismatch(case["prompt"], case["config"], kwargs, error=f"{type(err).__name__}: {err}", seed=seed)
    n = ids.shape[1]
    want, have = expected[0, n:].tolist(), got[0, n:].tolist()
    if want == have:
        return None
    position = first_difference(want, have)
    return Mismatch(
        case["prompt"],
        case["config"],
        kwargs,
        want,
        have,
        position,
        expected=want[position] if position < len(want) else None,
        got=have[position] if position < len(have) else None,
        seed=seed,
    )


def _reseed(seed: int | None) -> None:
    if seed is not None:
        torch.manual_seed(seed)


def _check_args(model, examples, seed, max_new_tokens) -> None:
    for name, value, low in (("examples", examples, 1), ("max_new_tokens", max_new_tokens, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
        if value < low:
            raise ValueError(f"{name} must be >= {low}, got {value}")
    if getattr(model, "training", False):
        raise ValueError("model is in training mode (dropout makes decoding random); call model.eval() first")


def _cases(model, tokenizer, max_new_tokens: int, sample: bool = False):
    from hypothesis import strategies as st

    from lookahead.checking import examples as testing

    tokens = testing.model_token_ids(model, tokenizer)
    eos = testing.eos_ids(tokens)
    model_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if model_eos is not None:  # the model's own EOS is special, so tokens never draws it
        eos = st.one_of(eos, st.just(model_eos))
    cases = testing.cases(tokens, max_new_tokens, eos=eos)
    if not sample:
        return cases
    sampled = st.tuples(cases, testing.sampling_options(), st.integers(0, 2**31 - 1))
    return sampled.map(lambda p: {**p[0], "options": {**p[0]["options"], **p[1]}, "seed": p[2]})


def _pad_token_id(model, tokenizer) -> int | None:
    return loading.pad_token_id(model, tokenizer)


def _smoke(model, pad: int | None) -> None:
    """One short lookahead call outside hypothesis, so that ``Unsupported`` surfaces as itself."""
    ids = torch.zeros((1, 2), dtype=torch.long, device=next(model.parameters()).device)
    with torch.inference_mode():
        lookahead.generate(
            model, ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=2, pad_token_id=pad
        )


def _generate_kwargs(case: dict, pad_token_id: int | None) -> dict:
    kwargs = {
        "max_new_tokens": case["max_new_tokens"],
        "eos_token_id": case["eos_token_id"],
        "do_sample": case.get("seed") is not None,
        **case["options"],
    }
    if pad_token_id is not None:
        kwargs["pad_token_id"] = pad_token_id
    return kwargs


def _unwrap(err: BaseException) -> _Found | None:
    """Our failure, also when hypothesis wrapped it (a flaky failure is an exception group)."""
    if isinstance(err, _Found):
        return err
    for inner in getattr(err, "exceptions", ()):
        found = _unwrap(inner)
        if found is not None:
            return found
    return None


def _add_margin(model, mismatch: Mismatch) -> None:
    """Plain decoding's top-2 margin of the processed scores at the first differing position
    (sampling: the verdict of ``lookahead.checking.verdict`` on generate's own logits, processors and
    noise there, and the two tokens' race gap)."""
    if mismatch.position is None or mismatch.expected is None:
        return
    device = next(model.parameters()).device
    ids = torch.tensor([mismatch.prompt], device=device)
    with torch.inference_mode():
        _reseed(mismatch.seed)
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            output_scores=True,
            output_logits=True,
            return_dict_in_generate=True,
            **mismatch.kwargs,
        )
        scores = out.scores[mismatch.position][0].float()
        top = torch.topk(scores, 2).values.tolist()
        mismatch.top_score, mismatch.margin = top[0], top[0] - top[1]
        if mismatch.seed is not None and mismatch.got is not None:
            processors = generate_processors(model, ids, attention_mask=torch.ones_like(ids), **mismatch.kwargs)
            prefix = ids.new_tensor([mismatch.prompt + mismatch.expected_ids[: mismatch.position]])
            logits = out.logits[mismatch.position][0].float()
            noise = replay_noise(mismatch.seed, mismatch.position, 1, 0, logits.shape[-1], logits.device).log()
            tokens = (mismatch.expected, mismatch.got)
            mismatch.verdict = verdict(prefix, logits, processors, tokens, noise, next(model.parameters()).dtype)
            mismatch.race_gap = mismatch.verdict.race_gap


def _example_lines(m: Mismatch, dtype: torch.dtype) -> list[str]:
    kwargs = ", ".join(f"{k}={v!r}" for k, v in m.kwargs.items())
    lines = [
        f"  prompt ids: {m.prompt}",
        f"  config:     {config_repr(m.config)}",
        f"  generate:   {kwargs}",
    ]
    if m.error is not None:
        lines.append(f"  lookahead.generate raised {m.error} (model.generate did not)")
    else:
        lines += [
            f"  first differing position: {m.position} (of the new tokens; plain decoding {_tok(m.expected)}, "
            f"lookahead {_tok(m.got)})",
            f"  {_margin_line(m, dtype)}",
            f"  plain:     {m.expected_ids}",
            f"  lookahead: {m.got_ids}",
        ]
    lines.append(
        f"  reproduce: {'' if m.seed is None else f'torch.manual_seed({m.seed}); '}"
        f"lookahead.generate(model, torch.tensor([{m.prompt}]), "
        f"lookahead_config=lookahead.{config_repr(m.config)}, {kwargs})"
    )
    return lines


def _margin_line(m: Mismatch, dtype: torch.dtype) -> str:
    if m.verdict is not None:
        return f"the seeded sampling race there (gap {m.race_gap:.4g}): {m.verdict.reason}"
    if m.margin is None:
        return "top-2 margin: none (plain decoding had stopped there)"
    steps = m.margin / (torch.finfo(dtype).eps * max(abs(m.top_score), 1.0))
    text = (
        f"plain decoding's top-2 score margin there: {m.margin:.4g} ({steps:.3g} {_dtype_name(dtype)} rounding steps)"
    )
    call = "a near-tie, likely rounding" if steps <= NEAR_TIE_STEPS else "not a near-tie, likely a bug"
    return f"{text}: {call}"


def _tok(token: int | None) -> str:
    return "had stopped" if token is None else str(token)


def config_repr(config: LookaheadConfig) -> str:
    """``LookaheadConfig(...)`` naming only the fields that differ from the defaults."""
    default = LookaheadConfig()
    changed = [
        f"{f.name}={getattr(config, f.name)!r}"
        for f in fields(config)
        if getattr(config, f.name) != getattr(default, f.name)
    ]
    return f"LookaheadConfig({', '.join(changed)})"
