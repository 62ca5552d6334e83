"""The try-it commands run for real: ``generate`` on the embedded model, ``check`` on a tiny
model (and on one with a planted bug), and the exported ``custom_generate`` folder."""

from __future__ import annotations

import dataclasses
import io
import json
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import lookahead
from lookahead import cli
from lookahead.checking import check

from tiny_models import tiny_model, tiny_tokenizer

PROMPT = "def add(a, b):\n"
NEW = 12


def _embedded_shipped() -> bool:
    return (lookahead.default_model_path() / "model.safetensors").is_file()


needs_embedded = pytest.mark.skipif(not _embedded_shipped(), reason="embedded model not shipped in this checkout")


@pytest.fixture(scope="module")
def embedded():
    return lookahead.load_default_model()


def greedy_new_tokens(embedded, prompt: str, new: int = NEW) -> list[int]:
    model, tok = embedded
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new, pad_token_id=tok.pad_token_id
        )
    return out[0, ids.shape[1] :].tolist()


def generate_argv(*extra) -> list[str]:
    return ["generate", "--max-new-tokens", str(NEW), *extra]


@needs_embedded
def test_generate_streams_the_greedy_continuation(embedded, capsys):
    assert cli.main(generate_argv(PROMPT)) == 0
    out, err = capsys.readouterr()
    new = greedy_new_tokens(embedded, PROMPT)
    assert out == embedded[1].decode(new, skip_special_tokens=True) + "\n"
    stats = [line for line in err.splitlines() if line.startswith("lookahead:")]
    assert len(stats) == 1
    assert f"{len(new)} new tokens" in stats[0] and "tokens/forward" in stats[0] and "accepted per step {" in stats[0]


@needs_embedded
def test_generate_json_record_with_compare(embedded, capsys):
    assert cli.main(generate_argv(PROMPT, "--json", "--compare", "--window", "3")) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one record, nothing streamed
    rec = json.loads(out)
    new = greedy_new_tokens(embedded, PROMPT)
    assert rec["token_ids"] == new and rec["new_tokens"] == len(new)
    assert rec["text"] == embedded[1].decode(new, skip_special_tokens=True)
    assert rec["prompt"] == PROMPT and rec["prompt_tokens"] == len(embedded[1](PROMPT).input_ids)
    assert rec["model"] == "default" and rec["dtype"] == "float32" and rec["lookahead_config"]["window"] == 3
    assert rec["stats"]["new_tokens"] == len(new) and 1 <= rec["stats"]["forwards"] <= len(new)
    assert rec["timings"]["wall_s"] > 0 and rec["timings"]["tokens_per_s"] > 0
    cmp = rec["compare"]
    assert cmp["identical"] is True and cmp["first_difference"] is None
    assert cmp["plain_new_tokens"] == len(new) and cmp["speedup"] > 0


@needs_embedded
def test_generate_json_path_streams_and_writes_the_record(embedded, tmp_path, capsys):
    path = tmp_path / "record.json"
    assert cli.main(generate_argv(PROMPT, "--json", str(path))) == 0
    out, err = capsys.readouterr()
    new = greedy_new_tokens(embedded, PROMPT)
    assert out == embedded[1].decode(new, skip_special_tokens=True) + "\n"  # still streamed
    assert json.loads(path.read_text())["token_ids"] == new and f"wrote {path}" in err


@needs_embedded
def test_generate_compare_reports_identical(capsys):
    assert cli.main(generate_argv(PROMPT, "--compare")) == 0
    err = capsys.readouterr().err
    assert "token ids identical" in err and "speed-up" in err


@needs_embedded
def test_generate_reads_the_prompt_from_stdin(embedded, monkeypatch, capsys):
    text = "import os\nimport sys\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert cli.main(generate_argv("-", "--json")) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["prompt"] == text and rec["token_ids"] == greedy_new_tokens(embedded, text)


@needs_embedded
def test_generate_sampling_repeats_under_a_seed(capsys):
    runs = []
    for _ in range(2):
        assert cli.main(generate_argv(PROMPT, "--json", "--sample", "--temperature", "1.5", "--seed", "7")) == 0
        runs.append(json.loads(capsys.readouterr().out))
    assert runs[0]["token_ids"] == runs[1]["token_ids"] and runs[0]["sample"]["do_sample"] is True


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama-check")
    tiny_model("llama").save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


def test_check_passes_on_a_tiny_model(tiny_dir, capsys):
    argv = ["check", "--model", str(tiny_dir), "--examples", "6", "--max-new-tokens", "12", "--seed", "3"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "ok: 6 examples (float32" in out and "MISMATCH" not in out


def test_check_loads_the_gqa_backend_by_name(tiny_dir, capsys):
    """``--attn lookahead_sdpa`` registers the opt-in backend before loading (transformers
    refuses an unknown name) and the model's lookahead decoding stays exact under it."""
    argv = ["check", "--model", str(tiny_dir), "--attn", "lookahead_sdpa", "--examples", "4", "--max-new-tokens", "12"]
    assert cli.main(argv) == 0
    assert "ok: 4 examples (float32" in capsys.readouterr().out


BUMPED = 7


def bump_multi_token_rows(module, inputs, output):
    """A planted bug: token BUMPED gains 100 on forwards that return several rows of logits.
    Plain decoding never does (its prefill keeps the last row only); lookahead's steps do."""
    if output.shape[1] > 1:
        output = output.clone()
        output[..., BUMPED] += 100.0
        return output
    return None


def test_check_finds_and_shrinks_a_planted_bug(tiny_dir, capsys):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    model.lm_head.register_forward_hook(bump_multi_token_rows)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    result = check.run_check(model, tok, examples=10, seed=0, max_new_tokens=8)
    assert not result.ok
    m = result.mismatch
    assert m.error is None and m.got == BUMPED != m.expected
    assert m.got_ids[m.position] == BUMPED and m.expected_ids[: m.position] == m.got_ids[: m.position]
    assert len(m.prompt) <= 6 and m.kwargs["max_new_tokens"] <= 4  # shrunk
    assert m.margin is not None and m.margin >= 0
    assert check.report(result) == check.EXIT_MISMATCH
    out = capsys.readouterr().out
    assert (
        "MISMATCH" in out and f"first differing position: {m.position}" in out and "not a near-tie, likely a bug" in out
    )
    reduced = dataclasses.replace(result, dtype=torch.bfloat16)
    assert reduced.exit_status() == 0 and reduced.exit_status(strict=True) == check.EXIT_MISMATCH


@pytest.mark.parametrize(("kind", "status", "note"), [("boundary", 0, "at a sampling boundary"), ("bug", 1, None)])
def test_check_report_follows_the_sampled_verdict(kind, status, note):
    """In float32 a sampled mismatch exits by its verdict: a boundary flip is 0 with a note
    (1 with --strict), a bug is 1, and the verdict's reason is the margin line."""
    from lookahead.checking.verdict import Verdict

    judged = Verdict(kind, float("inf"), 1e-4, f"{kind}: the reason", token=3, edge="top-p", edge_gap=5e-5)
    m = check.Mismatch([5, 6], lookahead.LookaheadConfig(), {"do_sample": True}, [3], [4], 0, 3, 4, seed=1)
    m.race_gap, m.verdict = judged.race_gap, judged
    result = check.CheckResult(1, 1, 0.0, torch.float32, m, sample=True)
    out = io.StringIO()
    assert check.report(result, out=out) == status and result.exit_status(strict=True) == 1
    text = out.getvalue()
    assert f"the seeded sampling race there (gap inf): {kind}: the reason" in text
    assert (f"note: a rounding flip {note}, not a bug" in text) if note else ("note" not in text)


def test_check_without_hypothesis_says_what_to_install(tiny_dir, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # `import hypothesis` now fails
    assert cli.main(["check", "--model", str(tiny_dir)]) == cli.EXIT_USAGE
    assert "pip install hypothesis" in capsys.readouterr().err


@pytest.mark.parametrize("family", ["gpt2", "llama"])  # an empty tokenizer loads for gpt2, none for llama
def test_check_without_a_tokenizer_draws_ids_from_the_vocab_size(family, tmp_path, capsys):
    tiny_model(family).save_pretrained(tmp_path)
    argv = ["check", "--model", str(tmp_path), "--examples", "3", "--max-new-tokens", "6"]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert "ok: 3 examples (float32" in out and "drawing token ids from config.vocab_size (48)" in err


def test_generate_without_a_tokenizer_says_it_needs_one(tmp_path, capsys):
    tiny_model("llama").save_pretrained(tmp_path)
    assert cli.main(["generate", "x", "--model", str(tmp_path)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("lookahead generate: error: ") and "tokenizer cannot be loaded" in err
    assert err.count("\n") == 1


CUSTOM_FILES = ["README.md", "custom_generate/generate.py", "custom_generate/requirements.txt"]
KWARGS = dict(max_new_tokens=16, pad_token_id=0, eos_token_id=None)


def test_exported_folder_runs_lookahead_in_model_generate(tmp_path):
    repo = tmp_path / "lookahead-generate"
    written = lookahead.export_custom_generate(repo)
    assert sorted(p.relative_to(repo).as_posix() for p in written) == CUSTOM_FILES
    assert (repo / "custom_generate" / "requirements.txt").read_text().startswith("lookahead-decoding>=")
    model = tiny_model("llama")
    ids = torch.tensor([[5, 6, 7, 5, 6, 7, 5, 6]])
    stats = lookahead.LookaheadStats()
    out = model.generate(ids, custom_generate=str(repo), trust_remote_code=True, lookahead_stats=stats, **KWARGS)
    assert out.tolist() == model.generate(ids, do_sample=False, **KWARGS).tolist()
    assert stats.new_tokens == 16  # lookahead decoded it: plain generate never fills the stats
    with pytest.raises(ValueError, match="trust_remote_code"):  # the caller must opt in
        model.generate(ids, custom_generate=str(repo), trust_remote_code=False, **KWARGS)


def test_exported_into_a_model_folder_keeps_its_card(tmp_path):
    model = tiny_model("llama")
    model.save_pretrained(tmp_path)
    (tmp_path / "README.md").write_text("my model card\n")
    written = lookahead.export_custom_generate(tmp_path)
    assert len(written) == 2 and (tmp_path / "README.md").read_text() == "my model card\n"
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, trust_remote_code=True)  # binds generate.py
    ids = torch.tensor([[9, 4, 9, 4, 9]])
    stats = lookahead.LookaheadStats()
    out = loaded.generate(ids, lookahead_stats=stats, **KWARGS)
    assert out.tolist() == model.generate(ids, do_sample=False, **KWARGS).tolist()
    assert stats.new_tokens == 16


def test_export_command_refuses_to_clobber(tmp_path, capsys):
    target = tmp_path / "out"
    assert cli.main(["export-custom-generate", str(target)]) == 0
    assert all((target / name).is_file() for name in CUSTOM_FILES)
    assert cli.main(["export-custom-generate", str(target)]) == 0
    assert "already up to date" in capsys.readouterr().out
    script = target / "custom_generate" / "generate.py"
    original = script.read_text()
    script.write_text("# edited\n")
    assert cli.main(["export-custom-generate", str(target)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "exists with other contents" in err and err.count("\n") == 1
    assert cli.main(["export-custom-generate", str(target), "--force"]) == 0
    assert script.read_text() == original


@pytest.mark.parametrize("command", ["generate", "check", "export-custom-generate"])
def test_help_shows_an_example_and_exit_codes(command, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "example" in out and f"lookahead {command}" in out and "2 usage error" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["generate", "x", "--model", "/no/such/model"], "no such model directory"),
        (["check", "--model", "/no/such/model"], "no such model directory"),
        (["generate", "x", "--set", "window"], "FIELD=VALUE"),
        (["generate", "x", "--set", "nope=1"], "unknown LookaheadConfig field(s) nope"),
        (["generate", "x", "--set", "window=3"], "not --set"),
        (["generate", "x", "--dtype", "float13"], "unknown --dtype 'float13'"),
        (["check", "--dtype", "float13"], "unknown --dtype 'float13'"),
        (["generate", "x", "--max-new-tokens", "0"], "--max-new-tokens"),
        (["check", "--examples", "0"], "--examples"),
        (["generate", "x", "--device", "tpu9"], "unknown --device 'tpu9'"),
        (["generate", "x", "--device", "cuda:99"], "--device 'cuda:99': there"),
        (["generate", "x", "--json", "/no/such/folder/out.json"], "its folder does not exist"),
        (["bench", "--json", "/no/such/folder/out.json"], "its folder does not exist"),
        (["check", "--seed", "-1"], "--seed must be >= 0"),
    ],
)
def test_usage_errors_exit_2_with_one_line(argv, message, capsys):
    assert cli.main(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"lookahead {argv[0]}: error: ") and message in err and err.count("\n") == 1


def test_generate_compare_sampled_is_token_for_token_seeded_generate(tiny_dir, capsys):
    """``generate --compare --sample``: both decodings run under ``--seed``; seeded sampling is
    ``generate``'s, so the ids are identical and the exit status is 0."""
    argv = ["generate", "--model", str(tiny_dir), "--max-new-tokens", "24", "--compare", "--sample", "--seed", "5"]
    assert cli.main([*argv, "--temperature", "1.2", "--json", "-", "abcabcab"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["compare"]["identical"] is True and rec["compare"]["race_gap"] is None


def test_generate_compare_sampled_calls_a_planted_token_a_bug(tiny_dir, capsys, monkeypatch):
    """A lookahead that emits, at new token 2, the token the model likes least (outside the
    top-p nucleus, far from its edge) differs from seeded ``generate`` there, and the verdict
    says likely a bug, not a flip: exit 1 in float32, the reason in the JSON and the line."""
    real = lookahead.generate

    def planted(model, ids, **kwargs):
        out = real(model, ids, **kwargs)
        at = ids.shape[1] + 2
        if out.shape[1] > at:
            with torch.inference_mode():
                worst = int(model(input_ids=out[:, :at]).logits[0, -1].argmin())
            out = out.clone()
            out[0, at] = worst
        return out

    monkeypatch.setattr(lookahead, "generate", planted)
    argv = ["generate", "--model", str(tiny_dir), "--max-new-tokens", "8", "--compare", "--sample", "--seed", "5"]
    argv += ["--temperature", "0.7", "--top-p", "0.8"]
    assert cli.main([*argv, "--json", "-", "abcabcab"]) == 1
    flip = json.loads(capsys.readouterr().out)["compare"]["flip"]
    assert flip["kind"] == "bug" and flip["edge"] == "top-p" and flip["edge_gap"] > flip["tolerance"], flip
    assert cli.main([*argv, "abcabcab"]) == 1
    assert "token ids DIFFER from new token 2, likely a bug" in capsys.readouterr().err


def test_check_sample_passes_on_a_tiny_model(tiny_dir, capsys):
    argv = ["check", "--model", str(tiny_dir), "--examples", "5", "--max-new-tokens", "10", "--sample"]
    assert cli.main(argv) == 0
    assert "seeded model.generate(do_sample=True) token for token" in capsys.readouterr().out
