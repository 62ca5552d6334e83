"""Every numba kernel, compiled before the first prefill, on two cores when it is cold.

numba compiles a kernel at its first call, or loads it from its on-disk cache (``cache=True``:
``__pycache__`` beside the module; numba's user-wide cache directory where that folder is not
writable, as in a read-only site-packages; or ``NUMBA_CACHE_DIR``). A first call inside a
decode would stall one step for seconds: a server's second request, a benchmark's first
prompt. So before its prefill, the first ``lookahead.generate`` of a process runs
:func:`warm_kernels`, which gives every kernel the one signature in :data:`SIGNATURES`.

Each kernel is typed alike at every call site (int64 ids, int32 pool tables and indexed texts,
float64 chances, float32 logits, C-contiguous writable arrays), so that one signature is the
one every path calls; tests/unit/test_kernel_signatures.py checks that no path adds a second
and conftest.py that the whole suite adds none.

Loaded from the cache this takes under a second. Compiled from scratch it takes 10-20 s of
one core, once per install; one line on stderr says so, and a helper process
(``python -m lookahead.warmup``, which imports numba and the kernels but not torch) compiles
the table from its start while this process compiles it from its end. Each compile first looks
in the cache, so the two meet in the middle: whatever the helper wrote, this process loads. The
command line starts the helper as it starts (:func:`start_helper`), so that the compile overlaps
loading the model.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import time

from numba import types
from numba.core.registry import CPUDispatcher

from lookahead.drafts import budget_kernels, kernels, suffix_kernels
from lookahead.sampling import guess_kernels, sort_kernels
from lookahead.step import kernels as step_kernels
from lookahead.verify import kernels as tree_kernels

KERNEL_MODULES = (kernels, guess_kernels, suffix_kernels, budget_kernels, step_kernels, sort_kernels, tree_kernels)


def _array(dtype, ndim: int = 1):
    return types.Array(dtype, ndim, "C")


I64, F64, B = types.int64, types.float64, types.boolean
IDS, IDS32, REALS, FLAGS = _array(I64), _array(types.int32), _array(F64), _array(B)
POOL = (IDS, IDS, IDS32, _array(types.int32, 3), IDS)  # keys, stamps, counts, conts, clock
TREE = types.Tuple((IDS, IDS, REALS))  # tokens, parents, probs
LOGITS = _array(types.float32, 2)

# The one signature of every kernel that compiles on its own (inlined helpers compile into
# their callers), by ``module.name``; the helper compiles from the top, this process from the end.
SIGNATURES = {
    "kernels.pool_insert": (*POOL, IDS, _array(I64, 2)),
    "kernels.pool_lookup": (*POOL, I64, _array(I64, 2), I64),
    "kernels.text_ngrams": (IDS, I64, I64),
    "kernels.pair_key": (I64, I64),
    "kernels.pool_insert_ngrams": (*POOL, _array(I64, 2), IDS, B),
    "kernels.pool_insert_text": (*POOL, IDS, I64, I64, B),
    "kernels.successors_update": (_array(types.int32, 2), LOGITS, IDS, _array(I64, 2), LOGITS),
    "kernels.successor_rows": (_array(types.int32, 2), LOGITS, I64, I64, I64, LOGITS, F64, _array(I64, 2)),
    "kernels.merge_trie": (_array(I64, 2), I64),
    "guess_kernels.race_top": (LOGITS, IDS, LOGITS, F64, I64, F64, I64, F64, I64, IDS),
    "guess_kernels.row_lse": (_array(types.float32), F64, types.float32),
    "sort_kernels.sort_rows": (LOGITS, LOGITS),
    "sort_kernels.cut_values": (LOGITS, IDS, _array(types.float32)),
    "kernels.step_layout": (IDS, _array(B, 2)),
    "kernels.greedy_path": (IDS, IDS, IDS, IDS),
    "kernels.branches": (IDS, IDS, I64, _array(types.float32), I64, I64, IDS),
    "suffix_kernels._partition": (IDS32, I64, B, IDS, IDS, I64, I64, I64),
    "suffix_kernels.grow_tree": (IDS32, I64, B, IDS, I64, I64, F64, IDS, IDS, REALS),
    "suffix_kernels.match_lengths": (IDS32, I64, IDS),
    "suffix_kernels._scratch": (I64,),
    "suffix_kernels._grow_keep": (
        *(IDS32, I64, B, IDS, I64, I64, I64, F64, F64, F64),
        *(TREE, TREE, types.Tuple((I64, F64, I64))),
    ),
    "suffix_kernels.text_draft": (IDS32, I64, I64, I64, I64, I64, F64, F64, F64, IDS, IDS, REALS),
    "suffix_kernels.suffix_range": (IDS32, IDS32, IDS32, I64),
    "suffix_kernels.index_draft": (IDS32, IDS32, IDS32, I64, I64, I64, I64, I64, F64, F64, F64, IDS, IDS, REALS),
    "suffix_kernels.tree_rows": (IDS, IDS, I64, IDS, IDS),
    "budget_kernels.add_tree": (
        IDS,
        IDS,
        REALS,
        I64,
        I64,
        I64,
        REALS,
        REALS,
        F64,
        F64,
        I64,
        IDS,
        IDS,
        REALS,
        IDS,
        REALS,
        IDS,
        IDS,
    ),
    "budget_kernels.merge_rows": (_array(I64, 2), I64, I64, REALS, I64, IDS, IDS, REALS, IDS, REALS, IDS),
    "budget_kernels.choose": (IDS, REALS, I64, REALS, F64, I64, F64, FLAGS),
    "budget_kernels.compact": (FLAGS, I64, IDS, IDS, IDS, REALS, IDS, IDS, IDS, REALS),
    "budget_kernels.chances_of": (REALS, REALS, F64, REALS, F64, REALS),
    "budget_kernels.record": (IDS, IDS, IDS, IDS, REALS, I64, IDS, REALS, REALS, REALS),
    "budget_kernels.off_the_chain": (IDS, REALS, I64),
    "kernels.additive_mask": (FLAGS, _array(B, 2), _array(types.int16), _array(types.int16, 2)),
    "kernels.top_k_rows": (_array(types.float32, 3), I64),
}
SECONDS_PER_KERNEL = 0.4  # a cold compile, one core (29 kernels took ~11 s on AVX-512, 15-20 s on AVX2)
_done = False  # whether this process has warmed its kernels (numba keeps them per process)
_helper: subprocess.Popen | None = None


def all_kernels() -> dict[str, CPUDispatcher]:
    """Every kernel that compiles on its own, by ``module.name``, each once (``budget`` uses
    ``suffix_kernels.tree_rows``)."""
    found: dict[str, CPUDispatcher] = {}
    for module in KERNEL_MODULES:
        for name, value in vars(module).items():
            own = isinstance(value, CPUDispatcher) and value.targetoptions.get("inline", "never") == "never"
            if own and value not in found.values():
                found[f"{module.__name__.rsplit('.', 1)[-1]}.{name}"] = value
    return found


def on_disk(kernel: CPUDispatcher) -> bool:
    """Whether numba's cache holds an index for ``kernel`` (False: the next call compiles)."""
    try:
        return os.path.exists(kernel._cache._cache_file._index_path)
    except AttributeError:  # a numba without this layout: assume the worst
        return False


def cold_kernels() -> list[str]:
    """The kernels neither compiled in this process nor in numba's cache."""
    return [name for name, kernel in all_kernels().items() if not kernel.signatures and not on_disk(kernel)]


def compile_kernels(names) -> None:
    """Give each kernel in ``names`` its signature: from this process, numba's cache, or a compile."""
    found = all_kernels()
    for name in names:
        found[name].compile(SIGNATURES[name])


def warm_kernels() -> float:
    """Compile (or load) every kernel, once per process; the seconds it took (0.0 when done)."""
    global _done
    if _done:
        return 0.0
    started = time.perf_counter()
    cold = cold_kernels()
    if len(cold) >= 3:
        if start_helper(cold):
            estimate = len(cold) * SECONDS_PER_KERNEL / 2
        else:
            estimate = len(cold) * SECONDS_PER_KERNEL
        _announce(estimate)
    compile_kernels(reversed(SIGNATURES))
    stop_helper()
    _done = True
    return time.perf_counter() - started


def start_helper(cold: list[str] | None = None) -> bool:
    """Start the helper process that compiles the table from its start, if three or more
    kernels are cold and a second core is free to run it; whether one runs."""
    global _helper
    if _helper is not None:
        return _helper.poll() is None
    cold = cold_kernels() if cold is None else cold
    if len(cold) < 3 or len(os.sched_getaffinity(0)) < 2:
        return False
    try:
        _helper = subprocess.Popen(
            [sys.executable, "-m", "lookahead.warmup"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except OSError:  # no process to spare: this one compiles everything
        return False
    atexit.register(stop_helper)
    return True


def stop_helper() -> None:
    """End the helper: once this process holds every kernel, what it has left is duplicate work
    (numba writes a cache entry whole or not at all, so stopping it mid-compile is safe)."""
    global _helper
    if _helper is not None:
        _helper.kill()
        _helper.wait()
        _helper = None


def _announce(seconds: float) -> None:
    from lookahead import distributed  # imports torch, which the helper process goes without

    if distributed.is_main():
        print(
            f"lookahead: compiling numba kernels, once per install (about {seconds:.0f} s on idle cores; "
            "longer on a busy machine) ...",
            file=sys.stderr,
            flush=True,
        )


if __name__ == "__main__":  # the helper: the table from its start
    compile_kernels(SIGNATURES)
