"""Exact lookahead on tensor-parallel models: two CPU ranks under torchrun (gloo).

One ``torchrun --nproc-per-node 2`` launch runs tests/helpers/tp_worker.py over tiny llama, qwen2 and
mistral models sharded with transformers' own plan (4 query heads and 2 KV heads: one KV head
per rank; qwen2 and mistral with sliding windows) and a tiny ``lookahead bench --tp``; the
tests below read what each rank wrote. Under tensor parallelism every forward is collective,
so any per-rank difference in a step's shape would crash or hang the run; the tests check
that the tokens and the shapes agree, and that the adaptive default really varied shapes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers as tf

import lookahead
from lookahead import cli, distributed
from lookahead.checking import loading

from tp_worker import NEW_TOKENS  # tests/helpers, on the path by conftest.py

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
REPO = HELPERS.parents[1]
RANKS = 2
TIMEOUT_S = 150  # a hang fails the test; the whole launch takes ~30-50 s on two busy cores
COMMON = dict(
    vocab_size=64,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=0,
)
CONFIGS = {
    "llama": lambda: tf.LlamaConfig(**COMMON),
    "mistral": lambda: tf.MistralConfig(**COMMON, sliding_window=9),
    "qwen2": lambda: tf.Qwen2Config(**COMMON, use_sliding_window=True, sliding_window=9, max_window_layers=1),
}
FAMILIES = tuple(CONFIGS)


def _save_models(root: Path) -> None:
    for family, make in CONFIGS.items():
        torch.manual_seed(0)
        tf.AutoModelForCausalLM.from_config(make()).save_pretrained(root / family)
    from tiny_models import tiny_tokenizer

    bench = root / "bench"
    torch.manual_seed(0)
    tf.AutoModelForCausalLM.from_config(CONFIGS["llama"]()).save_pretrained(bench)
    tiny_tokenizer().save_pretrained(bench)
    (bench / "prompts.jsonl").write_text(json.dumps({"id": "loop", "prompt": "abcdefg" * 6}) + "\n")


def _launch(models: Path, out: Path, cache: Path) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        XDG_CACHE_HOME=str(cache),
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    )
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={RANKS}",
        str(HELPERS / "tp_worker.py"),
        str(models),
        str(out),
    ]
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"torchrun did not finish in {TIMEOUT_S} s (a rank hung?):\n{_tail(err.stderr)}")


def _tail(text, n: int = 3000) -> str:
    text = text.decode(errors="replace") if isinstance(text, bytes) else (text or "")
    return text[-n:]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    """What every rank wrote (a list indexed by rank), from one torchrun launch."""
    pytest.importorskip("accelerate", reason="tensor-parallel loading needs accelerate (pip install accelerate)")
    dist = torch.distributed
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("this torch build has no gloo backend: torchrun cannot start CPU ranks")
    root = tmp_path_factory.mktemp("tp")
    models, out, cache = root / "models", root / "out", root / "cache"
    out.mkdir()
    _save_models(models)
    done = _launch(models, out, cache)
    started = sorted(out.glob("started.*"))
    if done.returncode != 0 and len(started) < RANKS:
        pytest.skip(f"torchrun could not start {RANKS} gloo ranks here:\n{_tail(done.stderr, 1500)}")
    assert done.returncode == 0, f"torchrun failed (exit {done.returncode}):\n{_tail(done.stderr)}"
    found = [json.loads((out / f"rank{r}.json").read_text()) for r in range(RANKS)]
    for data in found:
        data["out"], data["cache"] = out, cache
    return found


@pytest.mark.parametrize("family", FAMILIES)
def test_models_are_really_sharded(ranks, family):
    for data in ranks:
        assert data["families"][family]["tp_size"] == RANKS
        assert data["families"][family]["sharded"] is True


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_default_config_equals_generate_on_every_rank(ranks, family):
    for data in ranks:
        got = data["families"][family]
        assert len(got["reference"]) == NEW_TOKENS
        assert got["greedy"] == got["reference"]
    assert ranks[0]["families"][family]["reference"] == ranks[1]["families"][family]["reference"]


@pytest.mark.parametrize("family", FAMILIES)
def test_custom_generate_path_equals_generate_on_every_rank(ranks, family):
    for data in ranks:
        got = data["families"][family]
        assert got["custom"] == got["reference"]


@pytest.mark.parametrize("family", FAMILIES)
def test_adaptive_shapes_vary_and_are_the_same_on_every_rank(ranks, family):
    first, second = (data["families"][family] for data in ranks)
    assert first["query_lengths"] == second["query_lengths"]
    steps = first["query_lengths"][1:]  # after the prefill
    assert len(set(steps)) >= 3, f"the budget never changed the step's width: {sorted(set(steps))}"
    # the draft budget weighs the window's row with the other sources: fed in some steps, not all
    assert 0 < first["window_steps"] < first["steps"], "the window's row was fed always or never"
    assert first["tokens_per_forward"] > 1.2


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("path", ["sampled", "sampled_custom"])
def test_seeded_sampling_gives_the_same_tokens_on_every_rank(ranks, family, path):
    first, second = (data["families"][family] for data in ranks)
    assert len(first[path]) == NEW_TOKENS
    assert first[path] == second[path]
    assert first[path] != first["reference"], "sampling at temperature 1 should leave the greedy path"
    assert first["rng_after"] == second["rng_after"], "the ranks consumed the global RNG differently"


@pytest.mark.parametrize("family", FAMILIES)
def test_seeded_sampling_gives_seeded_generates_tokens_on_every_rank(ranks, family):
    for data in ranks:
        tokens = data["families"][family]
        assert tokens["sampled"] == tokens["sampled_reference"]


def test_every_rank_prices_shapes_with_the_stored_rank0_curve(ranks):
    stored = json.loads((ranks[0]["cache"] / "lookahead" / "costs.json").read_text())
    assert len(stored) == len(FAMILIES)  # measured once per model (the bench's llama reused it)
    for family in FAMILIES:
        first, second = (data["families"][family] for data in ranks)
        assert first["forward_ranks"] == second["forward_ranks"] == RANKS  # part of the curve's key
        assert first["curve"] == second["curve"] == stored[first["curve_key"]]


def test_bench_tp_prints_and_writes_on_rank0_only(ranks):
    main, other = ranks[0]["bench"], ranks[1]["bench"]
    assert main["status"] == 0 and other["status"] == 0
    assert "tensor parallel x2" in main["printed"]
    assert "exactness: every method produced exactly greedy's tokens" in main["printed"]
    assert other["printed"] == ""
    out = ranks[0]["out"]
    assert not (out / "bench.1.json").exists()
    doc = json.loads((out / "bench.0.json").read_text())
    assert doc["config"]["tp_size"] == RANKS
    assert doc["methods"]["lookahead"]["mismatches"] == 0


def test_bench_tp_outside_torchrun_is_a_clear_usage_error(monkeypatch, capsys):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["bench", "--tp", "--limit", "1", "--no-progress"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "--tp" in err and "torchrun --nproc-per-node" in err


def test_tp_refuses_heads_that_do_not_split_over_the_ranks():
    config = tf.LlamaConfig(hidden_size=320, num_attention_heads=10, num_key_value_heads=5)
    with pytest.raises(ValueError, match="num_key_value_heads=5 is not divisible by 2 ranks"):
        distributed.check_tp_shape(config, 2)
    distributed.check_tp_shape(config, 5)


def test_tp_refuses_a_device(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="drop --device 'cpu'"):
        loading.load(None, "float32", "cpu", tp=True)


def test_non_main_rank_runs_quietly(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "1")
    with distributed.quiet_unless_main():
        print("hidden")
        print("hidden too", file=sys.stderr)
    monkeypatch.setenv("RANK", "0")
    with distributed.quiet_unless_main():
        print("shown")
    assert tuple(capsys.readouterr()) == ("shown\n", "")


# llama's modules, the last decoder layer offloaded to disk (its weights come in for each forward)
OFFLOAD_MAP = {
    "model.embed_tokens": "cpu",
    "model.rotary_emb": "cpu",
    "model.layers.0": "cpu",
    "model.layers.1": "disk",
    "model.norm": "cpu",
    "lm_head": "cpu",
}


@pytest.mark.parametrize("placement", ["auto", "offload"])
def test_device_map_models_equal_generate(tmp_path, placement):
    """``device_map`` (accelerate's hooks move each layer's inputs; one CPU here, so a layer
    offloaded to disk stands in for a second device): lookahead still equals generate."""
    pytest.importorskip("accelerate", reason="device_map needs accelerate")
    torch.manual_seed(0)
    tf.AutoModelForCausalLM.from_config(CONFIGS["llama"]()).save_pretrained(tmp_path / "llama")
    device_map = "auto" if placement == "auto" else OFFLOAD_MAP
    model = tf.AutoModelForCausalLM.from_pretrained(
        tmp_path / "llama", device_map=device_map, offload_folder=str(tmp_path / "offload")
    ).eval()
    if placement == "offload":
        assert "disk" in set(model.hf_device_map.values())
    ids = torch.tensor([[5, 9, 14, 7, 22, 31] * 4])
    kwargs = dict(max_new_tokens=60, eos_token_id=None, pad_token_id=0)
    stats = lookahead.LookaheadStats()
    got = lookahead.generate(model, ids, lookahead_stats=stats, **kwargs)
    assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()
    assert stats.tokens_per_forward > 1.0
