"""No numba compile inside a decode: the warm-up gives every kernel its one signature, no
path adds a second, a fresh install's stall is all in ``LookaheadStats.warmup_s`` and shared
with the helper process, and numba caches outside a package folder it may not write.

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


def test_the_table_holds_every_kernel():
    assert set(warmup.SIGNATURES) == set(warmup.all_kernels())


def test_the_warm_up_compiles_each_kernel_once():
    warmup.warm_kernels()
    counts = signatures()
    assert counts, "no kernels found"
    assert max(counts.values()) <= 1, {k: v for k, v in counts.items() if v > 1}
    # the kernels the decoder calls from Python all ran (the rest run inside them)
    for name in (
        "kernels.pool_insert_text",
        "kernels.merge_trie",
        "suffix_kernels.text_draft",
        "budget_kernels.choose",
    ):
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
    "classic": lambda model, pool, index: lookahead.generate(
        model, PROMPT, max_new_tokens=24, lookahead_config=lookahead.LookaheadConfig(method="classic")
    ),
    "bfloat16": lambda model, pool, index: lookahead.generate(
        copy.deepcopy(model).to(torch.bfloat16), PROMPT, max_new_tokens=16, lookahead_pool=pool, lookahead_index=index
    ),
}


@pytest.mark.parametrize("path", list(PATHS))
def test_no_path_adds_a_signature_after_the_warm_up(path):
    warmup.warm_kernels()
    model = tiny_model("llama", "eager")
    pool = lookahead.KeptState()
    index = lookahead.SuffixIndex.from_texts([np.tile(np.arange(5, 20), 4)])
    before = signatures()
    with torch.no_grad():
        PATHS[path](model, pool, index)
    after = signatures()
    assert after == before, {k: (before[k], after[k]) for k in after if after[k] != before[k]}


FIRST_CALLS = textwrap.dedent(
    """
    import json, sys
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
        calls.append({"warmup_s": stats.warmup_s, "total_s": stats.total_s})
    kernels = warmup.all_kernels().values()
    loaded = sum(sum(k._cache_hits.values()) for k in kernels)
    compiled = sum(sum(k._cache_misses.values()) for k in kernels)
    print(json.dumps({"calls": calls, "loaded": loaded, "compiled": compiled, "helper": warmup._helper is None}))
    """
)


def _first_calls(env) -> tuple[dict, str]:
    run = subprocess.run(
        [sys.executable, "-c", FIRST_CALLS, str(ROOT)], env=env, capture_output=True, text=True, timeout=240
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1]), run.stderr


def test_a_fresh_install_stalls_only_in_the_warm_up_which_a_helper_process_shares(tmp_path):
    """An empty numba cache: the first call compiles before its prefill, says so once on
    stderr, and its decode runs as fast as the second call's. With a second core, the helper
    process compiled part of the table, which this process loaded from the cache, and it is
    gone when the warm-up ends. A second process loads everything without compiling."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    first, stderr = _first_calls(env)
    cold, warm = first["calls"]
    assert stderr.count("compiling numba kernels") == 1
    assert cold["warmup_s"] > 2.0  # compiled from scratch
    assert warm["warmup_s"] == 0.0
    decode_cold = cold["total_s"] - cold["warmup_s"]
    decode_warm = warm["total_s"] - warm["warmup_s"]
    assert decode_cold < decode_warm + 0.5, (cold, warm)  # no compile left inside the decode
    assert first["helper"], "the helper outlived the warm-up"
    assert first["compiled"] >= 3
    if len(os.sched_getaffinity(0)) >= 2:
        assert first["loaded"] >= 3, first  # what the helper wrote meanwhile
    again, stderr = _first_calls(env)
    assert "compiling" not in stderr
    assert again["compiled"] == 0
    assert again["calls"][0]["warmup_s"] < cold["warmup_s"] / 3


READ_ONLY_TREE = textwrap.dedent(
    """
    import sys
    import numba.core.caching as caching

    def read_only(self):  # what numba meets in a read-only site-packages
        raise PermissionError(f"read-only: {self._cache_path}")

    caching.InTreeCacheLocator.ensure_cache_path = read_only
    from lookahead import warmup

    warmup.compile_kernels(["kernels.pair_key"])
    print(warmup.all_kernels()["kernels.pair_key"]._cache._cache_path)
    """
)


def test_numba_caches_in_the_user_dir_when_the_package_folder_is_read_only(tmp_path):
    """We run as root, so chmod cannot make the tree read-only: numba's in-tree locator is made
    to refuse, which is what it meets in a read-only site-packages."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-c", READ_ONLY_TREE], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    where = Path(run.stdout.strip().splitlines()[-1])
    assert where.is_relative_to(tmp_path / "cache" / "numba"), where
    assert list(where.glob("*pair_key*.nbi")), sorted(where.iterdir())


def test_the_helper_process_imports_the_kernels_without_torch():
    """What lets the helper start compiling at once, before the command imports torch."""
    code = "import sys, lookahead, lookahead.warmup; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    run = subprocess.run(
        [sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True
    )
    assert run.stdout.strip() == "[]", run.stdout + run.stderr[-2000:]


def test_the_package_names_load_on_first_use():
    assert sorted(lookahead.__all__) == sorted(lookahead._HOMES)
    for name in lookahead.__all__:
        assert getattr(lookahead, name) is not None, name
