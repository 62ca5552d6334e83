"""The decoding methods the benchmark compares, and how one run of each is measured.

A method is a function ``(model, input_ids, settings) -> (output, stats)``: ``output`` is what
``model.generate`` returns, ``stats`` a :class:`lookahead.LookaheadStats` when the method fills
one (then its counts are used), else ``None`` (then forward hooks measure it). New methods are
added to :data:`METHODS`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from lookahead.bench import probes
from lookahead.checking.request import Request
from lookahead.config import ENGINE_METHODS
from lookahead.runtime.sdpa import without_cudnn


class MethodUnavailable(RuntimeError):
    """The method cannot run in this installation (e.g. the engine is missing)."""


def _compile_config():
    """generate's own compile settings, also on CPU (where generate compiles only when told)."""
    from transformers import CompileConfig

    config = CompileConfig()
    config._compile_all_devices = True
    return config


COMPILE = _compile_config()  # one object: generate recompiles when its compile config changes


@dataclass
class Settings(Request):
    """What every method is asked to do for one prompt (the same for all of them)."""

    config_fields: dict = field(default_factory=dict)  # LookaheadConfig fields given on the command line
    keep_pool: bool = False  # one n-gram pool per variant, carried from prompt to prompt
    state: dict = field(default_factory=dict)  # per-variant state shared by its copies (the kept pool)
    prompt_lookup_num_tokens: int = 10
    max_matching_ngram_size: int = 2
    compile: bool = False  # static cache and a compiled forward (generate's fast path) for every method
    max_cache_len: int | None = None  # with compile: one cache length for all prompts, so no recompiling
    index: object = None  # a lookahead.SuffixIndex over a corpus, for lookahead's copy guess

    def generate_kwargs(self, input_ids: torch.Tensor) -> dict:
        kwargs = super().generate_kwargs(input_ids)
        if self.compile:
            kwargs.update(cache_implementation="static", compile_config=COMPILE, max_cache_len=self.max_cache_len)
        return kwargs

    def lookahead_config(self, method: str):
        import lookahead

        return lookahead.LookaheadConfig(method=method, **self.config_fields)


@dataclass
class RunResult:
    """One method on one prompt."""

    tokens: list[int]
    forwards: int
    forward_s: float
    wall_s: float
    steps: int | None  # decoding steps after the prefill
    accepted_steps: int | None  # of those, steps that accepted a guessed token (appended > 1)
    peak_mem_mb: float
    extra: dict = field(default_factory=dict)
    prefill_s: float | None = None  # the first forward's seconds, when the hooks saw every forward
    warmup_s: float = 0.0  # of wall_s, what lookahead spent before its prefill (compiles: none after the warm-up)

    @property
    def new_tokens(self) -> int:
        return len(self.tokens)


def run_greedy(model, input_ids, settings: Settings):
    return model.generate(input_ids, **settings.generate_kwargs(input_ids)), None


def _single(name: str, input_ids: torch.Tensor) -> None:
    if input_ids.shape[0] != 1:
        raise MethodUnavailable(f"{name}: batch size 1 only, got batches of {input_ids.shape[0]}")


def run_prompt_lookup(model, input_ids, settings: Settings):
    _single("prompt-lookup", input_ids)
    if settings.compile:
        raise MethodUnavailable("prompt-lookup: transformers' assisted generation has no static-cache path")
    kwargs = settings.generate_kwargs(input_ids)
    kwargs["prompt_lookup_num_tokens"] = settings.prompt_lookup_num_tokens
    kwargs["max_matching_ngram_size"] = settings.max_matching_ngram_size
    return model.generate(input_ids, **kwargs), None


def _engine():
    import lookahead

    generate = getattr(lookahead, "generate", None)
    if generate is None:
        raise MethodUnavailable("lookahead.generate is not available in this build of the package")
    return lookahead, generate


def _kept_pool(lookahead, settings: Settings, config):
    """The variant's kept state when ``keep_pool`` is set (made on first use), else ``None``."""
    if not settings.keep_pool:
        return None
    if "pool" not in settings.state:
        settings.state["pool"] = lookahead.KeptState()
    return settings.state["pool"]


def _run_engine(model, input_ids, settings: Settings, method: str):
    lookahead, generate = _engine()
    stats = lookahead.LookaheadStats()
    config = settings.lookahead_config(method)
    pool = _kept_pool(lookahead, settings, config)
    try:
        out = generate(
            model,
            input_ids,
            lookahead_config=config,
            lookahead_stats=stats,
            **({"lookahead_pool": pool} if pool is not None else {}),
            **({"lookahead_index": settings.index} if settings.index is not None and method == "lookahead" else {}),
            **settings.generate_kwargs(input_ids),
        )
    except NotImplementedError as err:  # the engine's Unsupported: this model or request
        raise MethodUnavailable(f"{method}: {err}") from err
    return out, stats


def run_lookahead(model, input_ids, settings: Settings):
    return _run_engine(model, input_ids, settings, "lookahead")


def run_classic(model, input_ids, settings: Settings):
    return _run_engine(model, input_ids, settings, "classic")


def run_jacobi(model, input_ids, settings: Settings):
    return _run_engine(model, input_ids, settings, "jacobi")


def suffix_unavailable() -> str | None:
    """Why the suffix methods cannot run here (arctic-inference's suffix tree is not built), or ``None``."""
    from lookahead.bench import suffix

    try:
        suffix.cache_class()
    except ImportError as err:
        return str(err)
    return None


def _suffix_request(suffix, settings: Settings, name: str):
    """``(cache, request id)``: a fresh cache per prompt, or for suffix-global the variant's kept one."""
    if name == "suffix":
        return suffix.new_cache(global_tree=False), 0
    if "suffix_cache" not in settings.state:  # the warm-up's cache is dropped with the rest of state
        settings.state["suffix_cache"] = suffix.new_cache(global_tree=True)
        settings.state["suffix_requests"] = 0
    settings.state["suffix_requests"] += 1  # each prompt is a new request; earlier responses stay in the tree
    return settings.state["suffix_cache"], settings.state["suffix_requests"]


def _run_suffix(model, input_ids, settings: Settings, name: str):
    """SuffixDecoding's drafts through a bare greedy chain-verify loop (lookahead/bench/suffix.py)."""
    import lookahead
    from lookahead.bench import suffix

    reason = suffix_unavailable()  # first: without the extension nothing else about the call matters
    if reason is not None:
        raise MethodUnavailable(f"{name}: {reason}")
    _single(name, input_ids)
    if settings.compile:
        raise MethodUnavailable(f"{name}: its bare verify loop runs on a DynamicCache, uncompiled")
    if settings.do_sample:
        raise MethodUnavailable(f"{name}: greedy only (its chain verify keeps the model's argmax)")
    try:
        suffix.check_plain_greedy(model.generation_config)
    except NotImplementedError as err:
        raise MethodUnavailable(f"{name}: {err}") from err
    stats = lookahead.LookaheadStats()
    cache, request = _suffix_request(suffix, settings, name)
    eos = suffix.eos_ids(model.generation_config)
    with suffix.SuffixDrafter(cache, request, input_ids[0].tolist()) as drafter:
        out = suffix.greedy_chain_decode(model, input_ids, drafter, settings.max_new_tokens, eos, stats)
    return out, stats


def run_suffix(model, input_ids, settings: Settings):
    return _run_suffix(model, input_ids, settings, "suffix")


def run_suffix_global(model, input_ids, settings: Settings):
    return _run_suffix(model, input_ids, settings, "suffix-global")


METHODS = {
    "greedy": run_greedy,
    "lookahead": run_lookahead,
    "classic": run_classic,
    "jacobi": run_jacobi,
    "prompt-lookup": run_prompt_lookup,
    "suffix": run_suffix,
    "suffix-global": run_suffix_global,
}
# seeded, these sample model.generate's own tokens (prompt lookup's speculative sampling does not)
SEED_EXACT = ("greedy", "lookahead", "classic", "jacobi")
SUFFIX_METHODS = ("suffix", "suffix-global")  # need tools/build_suffix_decoding.sh
BASELINE = "greedy"


def available(name: str) -> bool:
    """Whether a method can run here (the engine methods need ``lookahead.generate``, suffix ones the built tree)."""
    if name not in METHODS:
        return False
    if name in SUFFIX_METHODS and METHODS[name] in (run_suffix, run_suffix_global):
        return suffix_unavailable() is None
    if name in ENGINE_METHODS and METHODS[name] in (run_lookahead, run_classic, run_jacobi):
        try:
            _engine()
        except MethodUnavailable:
            return False
    return True


def _sequences(out) -> torch.Tensor:
    return out if isinstance(out, torch.Tensor) else out.sequences


def measure(name: str, model, input_ids: torch.Tensor, settings: Settings) -> RunResult:
    """Run one method on one prompt: seeded, timed end to end, forwards and memory recorded."""
    fn = METHODS[name]
    prompt_len = input_ids.shape[1]
    torch.manual_seed(settings.seed)
    probes.reset_peak_memory(model)
    probes.synchronize(model)
    # every method on the kernels lookahead's forwards run on: the speed-ups compare decoding alone
    allow_cudnn = bool(settings.config_fields.get("cudnn_attention", False))
    with probes.ForwardProbe(model) as probe, torch.inference_mode(), without_cudnn(model, allow_cudnn):
        t0 = time.perf_counter()
        out, stats = fn(model, input_ids, settings)
        probes.synchronize(model)
        wall = time.perf_counter() - t0
    rows = input_ids.shape[0]
    tokens = _sequences(out)[:, prompt_len:].reshape(-1).tolist()  # a batch's rows end to end
    peak = probes.peak_memory_mb(model)
    if stats is not None and stats.forwards > 0:
        result = _from_stats(tokens, stats, wall, peak)
        result.prefill_s = probe.first_s if probe.forwards == stats.forwards else None
        return result
    if rows > 1:  # forwards counted once per row they ran, so tokens per forward stays per row
        return RunResult(
            tokens, probe.forwards * rows, probe.forward_s, wall, None, None, peak, prefill_s=probe.first_s
        )
    return _from_probe(tokens, probe, prompt_len, wall, peak)


def _from_stats(tokens, stats, wall: float, peak: float) -> RunResult:
    accepted = sum(stats.accepted[2:]) if stats.accepted else None
    extra = {
        "accepted_hist": list(stats.accepted),
        "pool_hits": stats.pool_hits,
        "pool_lookups": stats.pool_lookups,
        "guess_tokens": stats.guess_tokens,
        "window_steps": getattr(stats, "window_steps", 0),
        "source_tokens": dict(getattr(stats, "source_tokens", {})),
        "fallback": stats.fallback,
        "stages": dict(stats.stages),
    }
    forwards = stats.row_forwards or stats.forwards
    return RunResult(
        tokens, forwards, stats.forward_s, wall, stats.steps, accepted, peak, extra, warmup_s=stats.warmup_s
    )


def _from_probe(tokens, probe: probes.ForwardProbe, prompt_len: int, wall: float, peak: float) -> RunResult:
    appended = probe.appended_per_forward(prompt_len, prompt_len + len(tokens))
    steps = accepted = None
    if appended is not None:
        steps = len(appended) - 1
        accepted = sum(1 for a in appended[1:] if a > 1)
    return RunResult(tokens, probe.forwards, probe.forward_s, wall, steps, accepted, peak, prefill_s=probe.first_s)
