"""The ``lookahead`` command run for real on a tiny random Llama and a few prompts."""

from __future__ import annotations

import json

import pytest
import torch

import lookahead
from lookahead import cli
from lookahead.bench import methods, report

TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = tmp_path_factory.mktemp("tiny-llama")
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(TEXTS * 10, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(path)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def prompt_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    rows = [{"prompt": t * 2, "id": f"p{i}", "source": "test"} for i, t in enumerate(TEXTS)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def bench(model_dir, prompts, *extra):
    return [
        "bench",
        "--model",
        model_dir,
        "--prompts",
        prompts,
        "--max-new-tokens",
        "12",
        "--threads",
        "1",
        "--no-progress",
        *extra,
    ]


def fake_engine(model, input_ids, *, lookahead_config, lookahead_stats, **kwargs):
    """Stands in for the engine: greedy tokens, stats filled the way the engine fills them."""
    out = model.generate(input_ids, **kwargs)
    new = out.shape[1] - input_ids.shape[1]
    stats = lookahead_stats
    stats.new_tokens, stats.forwards, stats.steps = new, max(new // 2, 1) + 1, max(new // 2, 1)
    stats.accepted = [0, stats.steps // 2, stats.steps - stats.steps // 2]
    stats.forward_s, stats.total_s = 0.001, 0.002
    return out


def test_help_exits_zero(capsys):
    for argv in (["--help"], ["bench", "--help"], ["sweep", "--help"]):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 0
    assert "--max-new-tokens" in capsys.readouterr().out


def test_no_command_prints_usage(capsys):
    assert cli.main([]) == cli.EXIT_USAGE
    assert "bench" in capsys.readouterr().out


def test_bench_json_schema_and_exactness(tiny_model_dir, prompt_file, tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = bench(tiny_model_dir, prompt_file, "--methods", "greedy,prompt-lookup", "--json", str(out))
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "prompt-lookup" in printed and "exactly greedy's tokens" in printed
    doc = json.loads(out.read_text())
    assert set(doc) == {"config", "methods", "prompts"}
    assert set(doc["methods"]) == {"greedy", "prompt-lookup"}
    for summary in doc["methods"].values():
        assert set(report.METHOD_KEYS) <= set(summary)
        assert summary["mismatches"] == 0
        assert summary["new_tokens"] == 3 * 12 or summary["new_tokens"] > 0
        assert summary["forwards"] >= 3
        assert 0.0 <= summary["overhead_share"] <= 1.0
    assert doc["methods"]["greedy"]["speedup"] == pytest.approx(1.0)
    assert doc["methods"]["greedy"]["tokens_per_forward"] == pytest.approx(1.0)
    assert doc["methods"]["greedy"]["acceptance_rate"] == 0.0
    assert len(doc["prompts"]) == 3 * 2
    for entry in doc["prompts"]:
        assert set(report.PROMPT_KEYS) <= set(entry)
        assert entry["first_mismatch"] is None
    assert [e["id"] for e in doc["prompts"][:2]] == ["p0", "p0"]  # interleaved per prompt
    cfg = doc["config"]
    assert cfg["dtype"] == "float32" and cfg["threads"] == 1 and cfg["n_prompts"] == 3
    assert cfg["methods"] == ["greedy", "prompt-lookup"] and "torch" in cfg["versions"]


def tampered(model, input_ids, settings):
    """Greedy with the 3rd new token changed: a planted mismatch."""
    out = model.generate(input_ids, **settings.generate_kwargs(input_ids)).clone()
    pos = input_ids.shape[1] + 2
    out[0, pos] = (out[0, pos] + 1) % model.config.vocab_size
    return out, None


def test_planted_mismatch_fails_in_float32(tiny_model_dir, prompt_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(methods.METHODS, "tampered", tampered)
    out = tmp_path / "bad.json"
    argv = bench(tiny_model_dir, prompt_file, "--methods", "tampered", "--json", str(out))
    assert cli.main(argv) == cli.EXIT_MISMATCH
    assert "MISMATCH" in capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["methods"]["tampered"]["mismatches"] == 3
    firsts = [e["first_mismatch"] for e in doc["prompts"] if e["method"] == "tampered"]
    assert firsts == [2, 2, 2]


def test_reduced_precision_mismatch_needs_strict(tiny_model_dir, prompt_file, monkeypatch, capsys):
    monkeypatch.setitem(methods.METHODS, "tampered", tampered)
    argv = bench(tiny_model_dir, prompt_file, "--methods", "tampered", "--dtype", "bfloat16", "--limit", "1")
    assert cli.main(argv) == 0
    assert "--strict" in capsys.readouterr().err
    assert cli.main(argv + ["--strict"]) == cli.EXIT_MISMATCH


def test_engine_adapter_uses_stats(tiny_model_dir, prompt_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(lookahead, "generate", fake_engine, raising=False)
    out = tmp_path / "la.json"
    argv = bench(tiny_model_dir, prompt_file, "--methods", "all", "--window", "3", "--json", str(out))
    assert cli.main(argv + ["--plot", str(tmp_path / "bench.png")]) == 0
    doc = json.loads(out.read_text())
    from lookahead.bench import methods

    # `all` is every method that can run here (the suffix peers only where their extension is built)
    assert list(doc["methods"]) == [m for m in methods.METHODS if methods.available(m)]
    assert list(doc["methods"])[:5] == ["greedy", "lookahead", "classic", "jacobi", "prompt-lookup"]
    la = doc["methods"]["lookahead"]
    assert la["mismatches"] == 0 and la["tokens_per_forward"] > 1.0
    assert la["acceptance_rate"] == pytest.approx(0.5, abs=0.2)
    assert la["accepted_hist"][0] == 0 and la["fallbacks"] == 0 and {"pool_hit_rate", "window_share"} <= set(la)
    assert doc["config"]["lookahead"]["window"] == 3
    assert (tmp_path / "bench.png").stat().st_size > 0
    # the curve the adaptive steps are priced by is reported with where it is kept
    curve = doc["config"]["cost_curve"]
    assert curve["sizes"][0] == 1 and curve["costs"][0] == 1.0 and curve["file"].endswith("costs.json")
    assert "cost curve" in capsys.readouterr().out


def test_sample_mode_leaves_prompt_lookup_unchecked(tiny_model_dir, prompt_file, tmp_path):
    """Prompt lookup's speculative sampling does not replay generate's random stream: not compared."""
    out = tmp_path / "s.json"
    argv = bench(
        tiny_model_dir,
        prompt_file,
        "--methods",
        "prompt-lookup",
        "--sample",
        "--temperature",
        "1.5",
        "--limit",
        "2",
        "--repeats",
        "2",
        "--json",
        str(out),
    )
    assert cli.main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["methods"]["prompt-lookup"]["mismatches"] is None
    assert len(doc["prompts"]) == 2 * 2 and doc["config"]["repeats"] == 2  # one record per prompt and method
    assert doc["config"]["sample"]["temperature"] == 1.5


def test_sweep_writes_heatmap_and_best(tiny_model_dir, prompt_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(lookahead, "generate", fake_engine, raising=False)
    png, out = tmp_path / "sweep.png", tmp_path / "sweep.json"
    argv = [
        "sweep",
        "--model",
        tiny_model_dir,
        "--prompts",
        prompt_file,
        "--max-new-tokens",
        "8",
        "--limit",
        "2",
        "--window",
        "1-2",
        "--ngram",
        "3",
        "--guesses",
        "2,4",
        "--no-progress",
        "--plot",
        str(png),
        "--json",
        str(out),
    ]
    assert cli.main(argv) == 0
    assert "best: --window" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert len(doc["grid"]) == 4 and doc["best"]["label"] in doc["methods"]
    assert png.stat().st_size > 0


def test_usage_errors(tiny_model_dir, prompt_file, capsys):
    assert cli.main(bench(tiny_model_dir, prompt_file, "--methods", "nope")) == cli.EXIT_USAGE
    assert cli.main(bench(tiny_model_dir, "no-such-set")) == cli.EXIT_USAGE
    assert cli.main(bench("/no/such/model", prompt_file)) == cli.EXIT_USAGE
    assert cli.main(bench(tiny_model_dir, prompt_file, "--batch-size", "0")) == cli.EXIT_USAGE
    assert "error" in capsys.readouterr().err


def test_batched_bench_checks_every_row(tiny_model_dir, prompt_file, tmp_path):
    """--batch-size 2: greedy and lookahead on the same left-padded batches, every row's
    tokens compared; prompt lookup (one prompt at a time) is skipped with its reason."""
    out = tmp_path / "b.json"
    argv = bench(
        tiny_model_dir, prompt_file, "--methods", "lookahead", "--batch-size", "2", "--limit", "3", "--json", str(out)
    )
    assert cli.main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["config"]["batch_size"] == 2 and [p["id"] for p in doc["prompts"]][::2] == ["p0+1", "p2"]
    la = doc["methods"]["lookahead"]
    assert la["mismatches"] == 0 and la["new_tokens"] == 3 * 12
    argv = bench(tiny_model_dir, prompt_file, "--methods", "prompt-lookup", "--batch-size", "2", "--limit", "2")
    assert cli.main(argv) == cli.EXIT_USAGE  # asked for and skipped


@pytest.mark.skipif(not hasattr(lookahead, "generate"), reason="engine not built yet")
def test_real_engine_is_exact(tiny_model_dir, prompt_file, monkeypatch):
    argv = bench(tiny_model_dir, prompt_file, "--methods", "lookahead,jacobi", "--max-new-tokens", "16")
    assert cli.main(argv) == 0


def test_engine_refusal_drops_the_method(tiny_model_dir, prompt_file, tmp_path, monkeypatch, capsys):
    def refusing(model, input_ids, **kwargs):
        raise NotImplementedError("do_sample=True is not supported")

    monkeypatch.setattr(lookahead, "generate", refusing, raising=False)
    out = tmp_path / "skip.json"
    argv = bench(tiny_model_dir, prompt_file, "--sample", "--limit", "1", "--json", str(out))
    assert cli.main(argv) == 0  # default methods: the refusal is reported, not fatal
    assert "SKIPPED: lookahead" in capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert "lookahead" not in doc["methods"] and "lookahead" in doc["config"]["skipped"]
    assert cli.main(argv + ["--methods", "lookahead"]) == cli.EXIT_USAGE  # asked for explicitly


def test_set_and_keep_pool_reach_the_engine(tiny_model_dir, prompt_file, tmp_path, monkeypatch):
    seen = []

    def recording(model, input_ids, *, lookahead_config, lookahead_stats, lookahead_pool=None, **kwargs):
        seen.append((lookahead_config, lookahead_pool))
        return fake_engine(
            model, input_ids, lookahead_config=lookahead_config, lookahead_stats=lookahead_stats, **kwargs
        )

    monkeypatch.setattr(lookahead, "generate", recording, raising=False)
    out = tmp_path / "set.json"
    argv = bench(
        tiny_model_dir,
        prompt_file,
        "--methods",
        "lookahead",
        "--set",
        "copy_length=0",
        "--set",
        "successors=0",
        "--keep-pool",
        "--json",
        str(out),
    )
    assert cli.main(argv) == 0
    configs = {c for c, _ in seen}
    assert len(configs) == 1 and next(iter(configs)).successors == 0 and next(iter(configs)).copy_length == 0
    pools = [p for _, p in seen]
    # the warm-up runs twice on one kept pool (the second run drafts from the first's request);
    # that pool is dropped, and one new pool is kept across the measured prompts
    warm, again, measured = pools[0], pools[1], pools[2:]
    assert warm is not None and again is warm and len(measured) > 1
    assert all(p is measured[0] for p in measured) and measured[0] is not warm
    doc = json.loads(out.read_text())
    assert doc["config"]["lookahead"]["copy_length"] == 0 and doc["config"]["keep_pool"] is True
    assert cli.main(bench(tiny_model_dir, prompt_file, "--methods", "lookahead", "--set", "nope=1")) == cli.EXIT_USAGE
    assert cli.main(bench(tiny_model_dir, prompt_file, "--set", "window=3")) == cli.EXIT_USAGE


def _default_model_shipped() -> bool:
    try:
        from lookahead.default_model import default_model_path
    except ImportError:
        return False
    return (default_model_path() / "model.safetensors").is_file()


@pytest.mark.skipif(not _default_model_shipped(), reason="embedded model not shipped in this checkout")
@pytest.mark.parametrize("prompt_set", ["humaneval", "grounded", "adversarial"])
def test_embedded_model_without_model_option(prompt_set, tmp_path):
    out = tmp_path / "d.json"
    argv = [
        "bench",
        "--prompts",
        prompt_set,
        "--limit",
        "1",
        "--max-new-tokens",
        "6",
        "--methods",
        "greedy",
        "--threads",
        "1",
        "--no-progress",
        "--no-warmup",
        "--json",
        str(out),
    ]
    assert cli.main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["config"]["model"] == "default" and doc["config"]["n_prompts"] == 1
    assert doc["methods"]["greedy"]["new_tokens"] > 0


def test_bench_json_dash_writes_the_document_to_stdout(tiny_model_dir, prompt_file, monkeypatch, capsys):
    monkeypatch.setattr(lookahead, "generate", fake_engine, raising=False)
    argv = bench(tiny_model_dir, prompt_file, "--limit", "1", "--methods", "lookahead", "--json", "-")
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)  # stdout holds the document alone; the table went to stderr
    assert doc["config"]["command"] == "bench" and set(doc["methods"]) == {"greedy", "lookahead"}
    assert "exactness: every method produced exactly greedy's tokens" in err


def test_bench_sample_checks_lookahead_against_seeded_generate(tiny_model_dir, prompt_file, tmp_path):
    """With ``--sample`` the seed-exact methods are compared token for token: 0 mismatches, not null."""
    out = tmp_path / "sampled.json"
    argv = bench(tiny_model_dir, prompt_file, "--methods", "lookahead", "--sample", "--limit", "2", "--json", str(out))
    assert cli.main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["methods"]["lookahead"]["mismatches"] == 0 and doc["methods"]["greedy"]["mismatches"] == 0
