"""Every numba kernel a call can reach, compiled before its prefill.

numba compiles a kernel at its first call, or loads it from its on-disk cache (``cache=True``:
``__pycache__`` beside the module; numba's user-wide cache directory where that folder is not
writable, as in a read-only site-packages; or ``NUMBA_CACHE_DIR``). A first call inside a
decode would stall one step for seconds: a server's second request, a benchmark's first
prompt. So before the prefill, ``lookahead.generate`` runs :func:`warm_kernels` for the paths
the call can reach (``paths_of``): a tiny decode of a random two-layer model along each path
this process has not run yet (plain greedy; an index, which a kept pool's history also is; a
batch; seeded sampling; a fixed shape). Every kernel is typed alike at every call site (int64
ids, int32 pool tables and indexed texts, float32 logits, C-contiguous arrays), so the tiny
decodes give each the one signature the real calls use; tests/unit/test_kernel_signatures.py
checks that no later call adds one.

Loaded from the cache this takes a fraction of a second; compiled from scratch, about ten
seconds once per install, and one line on stderr says so."""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch
from numba.core.registry import CPUDispatcher

from lookahead import distributed
from lookahead.drafts import budget, kernels, suffix_kernels
from lookahead.step import kernels as step_kernels

KERNEL_MODULES = (kernels, suffix_kernels, budget, step_kernels)
# what a call can reach beyond the plain greedy path: an index (a corpus, or a kept pool's
# history of earlier requests), a batch, seeded sampling, a fixed shape (adaptive=False)
PATHS = ("greedy", "index", "batch", "sample", "fixed")
_warm: set[str] = set()  # the paths this process has warmed (numba keeps what it compiled per process)


def all_kernels() -> dict[str, CPUDispatcher]:
    """Every kernel that compiles on its own, by ``module.name`` (inlined helpers, compiled
    into their callers, are left out)."""
    found = {}
    for module in KERNEL_MODULES:
        for name, value in vars(module).items():
            if isinstance(value, CPUDispatcher) and value.targetoptions.get("inline", "never") == "never":
                found[f"{module.__name__.rsplit('.', 1)[-1]}.{name}"] = value
    return found


def on_disk(kernel: CPUDispatcher) -> bool:
    """Whether numba's cache holds an index for ``kernel`` (False: the next call compiles)."""
    try:
        return os.path.exists(kernel._cache._cache_file._index_path)
    except AttributeError:  # a numba without this layout: assume the worst
        return False


def paths_of(config, generation_config, rows: int, pool, index) -> tuple[str, ...]:
    """The paths a call can reach: a kept pool reaches its history index on a later call."""
    reach = ["greedy"]
    if pool is not None or index is not None:
        reach.append("index")
    if rows > 1:
        reach.append("batch")
    if generation_config.do_sample:
        reach.append("sample")
    if not config.adaptive:
        reach.append("fixed")
    return tuple(reach)


def warm_kernels(paths: tuple[str, ...] = PATHS) -> float:
    """Compile (or load) every kernel ``paths`` reach that this process has not run yet; the
    seconds it took (0.0 when nothing was left). Leaves torch's random state as it was."""
    todo = [path for path in paths if path not in _warm]
    if not todo:
        return 0.0
    _warm.update(todo)  # first: the decodes below re-enter generate, which must not warm again
    started = time.perf_counter()
    cold = [name for name, kernel in all_kernels().items() if not kernel.signatures and not on_disk(kernel)]
    if len(cold) >= 3 and distributed.is_main():  # about a third of a second each
        print(
            f"lookahead: compiling numba kernels, once per install (about {len(cold) // 3 + 1} s) ...",
            file=sys.stderr,
            flush=True,
        )
    with torch.random.fork_rng(devices=[]):
        _tiny_decodes(todo)
    return time.perf_counter() - started


def _tiny_decodes(paths: list[str]) -> None:
    """A tiny decode along each path, of a random two-layer model on the CPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from lookahead.api import generate
    from lookahead.config import LookaheadConfig
    from lookahead.drafts.pool import NgramPool
    from lookahead.drafts.suffix import SuffixIndex
    from lookahead.step.costmodel import CostCurve

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    model = LlamaForCausalLM(config).eval()
    text = np.tile(np.arange(3, 13, dtype=np.int64), 3)
    ids = torch.from_numpy(text[None, :20].copy())
    # a flat curve: every node pays, so each source and the budget run
    common = dict(max_new_tokens=12, lookahead_costs=CostCurve.linear(0.0), eos_token_id=None)
    pool = NgramPool(LookaheadConfig().ngram, LookaheadConfig().guesses)
    seeded = torch.Generator().manual_seed(0)
    decodes = {
        "greedy": lambda: generate(model, ids, **common),
        "index": lambda: generate(model, ids, lookahead_index=SuffixIndex.from_texts([text]), **common),
        "batch": lambda: generate(model, torch.cat([ids, ids.flip(-1)]), lookahead_pool=pool, **common),
        "sample": lambda: generate(model, ids, do_sample=True, top_p=0.9, generator=seeded, **common),
        "fixed": lambda: generate(model, ids, lookahead_config=LookaheadConfig(adaptive=False), **common),
    }
    with torch.no_grad():
        for path in paths:
            decodes[path]()
