"""No numba compile inside a decode: the warm-up gives every kernel its one signature, no
path adds a second, and a fresh install's stall is all in ``LookaheadStats.warmup_s``.

(The whole suite's count is checked too: conftest.py fails the session when any kernel ends
it with more than one signature.)
"""

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import lookahead
from lookahead import warmup

from tiny_models import tiny_model

ROOT = Path(__file__).resolve().parents[2]
PROMPT = torch.tensor([[1, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 9, 10, 5, 6]])


def signatures() -> dict[str, int]:
    return {name: len(kernel.signatures) for name, kernel in warmup.all_kernels().items()}


def test_the_warm_up_compiles_each_kernel_once():
    warmup.warm_kernels()
    counts = signatures()
    assert counts, "no kernels found"
    assert max(counts.values()) <= 1, {k: v for k, v in counts.items() if v > 1}
    # the kernels the decoder calls from Python all ran (the rest run inside them)
    for name in ("kernels.pool_insert_text", "kernels.merge_trie", "suffix_kernels.text_draft", "budget.choose"):
        assert counts[name] == 1, name


def _static(model, ids, **kw):
    return lookahead.generate(model, ids, cache_implementation="static", **kw)


PATHS = {
    "kept pool with history": lambda model, pool, index: [
        lookahead.generate(model, PROMPT, max_new_tokens=24, lookahead_pool=pool) for _ in range(2)
    ],
    "index": lambda model, pool, index: lookahead.generate(model, PROMPT, max_new_tokens=24, lookahead_index=index),
    "batch": lambda model, pool, index: lookahead.generate(
        model, torch.cat([PROMPT, PROMPT.flip(-1)]), max_new_tokens=16, lookahead_pool=pool
    ),
    "static": lambda model, pool, index: _static(model, PROMPT, max_new_tokens=16),
    "sampling": lambda model, pool, index: lookahead.generate(
        model, PROMPT, max_new_tokens=24, do_sample=True, top_k=8, generator=torch.Generator().manual_seed(3)
    ),
    "adaptive=False": lambda model, pool, index: lookahead.generate(
        model, PROMPT, max_new_tokens=24, lookahead_config=lookahead.LookaheadConfig(adaptive=False)
    ),
    "bfloat16": lambda model, pool, index: lookahead.generate(
        copy.deepcopy(model).to(torch.bfloat16), PROMPT, max_new_tokens=16, lookahead_pool=pool, lookahead_index=index
    ),
}


@pytest.mark.parametrize("path", list(PATHS))
def test_no_path_adds_a_signature_after_the_warm_up(path):
    warmup.warm_kernels()
    model = tiny_model("llama", "eager")
    pool = lookahead.NgramPool(lookahead.LookaheadConfig().ngram, lookahead.LookaheadConfig().guesses)
    index = lookahead.SuffixIndex.from_texts([np.tile(np.arange(5, 20), 4)])
    before = signatures()
    with torch.no_grad():
        PATHS[path](model, pool, index)
    after = signatures()
    assert after == before, {k: (before[k], after[k]) for k in after if after[k] != before[k]}


FIRST_CALLS = textwrap.dedent(
    """
    import json, sys, time
    import numba.core.caching as caching

    def read_only(self):  # what numba meets in a read-only site-packages
        raise PermissionError(f"read-only: {self._cache_path}")

    caching.InTreeCacheLocator.ensure_cache_path = read_only
    sys.path.insert(0, sys.argv[1] + "/tests/helpers")
    import torch
    import lookahead
    from lookahead import warmup
    from tiny_models import tiny_model

    model = tiny_model("llama", "eager")
    ids = torch.tensor([[1, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 9, 10, 5, 6]])
    calls = []
    for _ in range(2):
        stats = lookahead.LookaheadStats()
        curve = lookahead.CostCurve.linear(0.35)  # no calibration: the decode is all the call times
        lookahead.generate(model, ids, max_new_tokens=32, lookahead_stats=stats, lookahead_costs=curve)
        calls.append({"warmup_s": stats.warmup_s, "total_s": stats.total_s, "forward_s": stats.forward_s})
    where = {warmup.all_kernels()["kernels.merge_trie"]._cache._cache_path}
    print(json.dumps({"calls": calls, "cache": sorted(where)}))
    """
)


def _first_calls(env) -> tuple[dict, str]:
    run = subprocess.run(
        [sys.executable, "-c", FIRST_CALLS, str(ROOT)], env=env, capture_output=True, text=True, timeout=240
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1]), run.stderr


def test_a_fresh_install_stalls_only_in_the_warm_up_and_caches_outside_a_read_only_tree(tmp_path):
    """An empty numba cache and a package folder numba may not write (as in a read-only
    site-packages): the first call compiles before its prefill, says so once on stderr, and
    its decode runs as fast as the second call's; numba keeps the kernels in its user-wide
    cache, from which a second process loads them without compiling."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    first, stderr = _first_calls(env)
    cold, warm = first["calls"]
    assert first["cache"][0].startswith(str(tmp_path / "cache" / "numba")), first["cache"]
    assert stderr.count("compiling numba kernels") == 1
    assert cold["warmup_s"] > 2.0  # compiled from scratch
    assert warm["warmup_s"] == 0.0
    decode_cold = cold["total_s"] - cold["warmup_s"]
    decode_warm = warm["total_s"] - warm["warmup_s"]
    assert decode_cold < decode_warm + 0.5, (cold, warm)  # no compile left inside the decode
    again, stderr = _first_calls(env)
    assert "compiling" not in stderr
    assert again["calls"][0]["warmup_s"] < cold["warmup_s"] / 3
