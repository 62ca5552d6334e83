"""Model card (``README.md`` next to the weights) for ``train_default_model.py``.

Everything comes from ``train_info.json`` (what the training run recorded), the ``eval_*.json``
files of ``--eval-only``, and an optional ``card_extra.json`` in the work folder with
``phases`` (earlier runs this one continued from: ``note`` and ``command``) and
``short_runs`` (the size-selection runs of issue 22: one row each, HumanEval on 40 prompts) and
``val_runs`` (the data-mix runs of issue 31: one row per scored checkpoint, chosen on the
held-out validation prompts).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BAR = (0.80, 0.30)  # HumanEval compile share at least, repeated 4-grams at most
MILESTONE = (0.65, 0.45)


def _fmt(d: dict, k: str, fmt: str = "{:.3f}") -> str:
    return fmt.format(d[k]) if d.get(k) is not None else "n/a"


def verdict(m: dict) -> str:
    if "humaneval_compile_share" not in m:
        return "Not evaluated yet."
    c, r = m["humaneval_compile_share"], m["humaneval_repeated_4gram_share"]
    if c >= BAR[0] and r <= BAR[1]:
        return "This model meets the bar."
    gap = []
    if c < BAR[0]:
        gap.append(f"compiles {c:.2f}, {BAR[0] - c:.2f} short of {BAR[0]:.2f}")
    if r > BAR[1]:
        gap.append(f"repeated 4-grams {r:.2f}, {r - BAR[1]:.2f} above {BAR[1]:.2f}")
    ms = "meets" if c >= MILESTONE[0] and r <= MILESTONE[1] else "does not meet"
    return f"This model misses the bar ({'; '.join(gap)}) and {ms} the milestone."


def short_run_table(rows: list[dict]) -> str:
    if not rows:
        return ""
    head = (
        "| run | params | init | steps | tokens seen | train min | tokens/s | stdlib-test loss "
        "| HumanEval compiles | repeated 4-grams |\n|---|---|---|---|---|---|---|---|---|---|\n"
    )
    body = "\n".join(
        f"| {r['name']} | {r['params'] / 1e6:.1f}M | {r['init']} | {r['steps']} | {r['tokens'] / 1e6:.2f}M "
        f"| {r['minutes']:.1f} | {r['tok_s']:,.0f} | {_fmt(r, 'stdlib_test_loss')} "
        f"| {_fmt(r, 'compile', '{:.2f}')} | {_fmt(r, 'rep4', '{:.2f}')} |"
        for r in rows
    )
    n = rows[0].get("prompts", 40)
    return (
        f"\n### Short runs that chose the model size (issue 22)\nSame corpus, same tokenizer, one thread each, HumanEval "
        f"on the first {n} prompts:\n\n{head}{body}\n"
    )


def val_run_table(rows: list[dict]) -> str:
    if not rows:
        return ""
    head = (
        "| run | init | mix (files / functions / requests) | lr | step | tokens this run | train min | tokens/s "
        "| train loss | validation compiles | repeated 4-grams | score |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    body = "\n".join(
        f"| {r['name']} | {r['init']} | {r['mix']} | {r['lr']} | {r['step']} | {r['tokens'] / 1e6:.2f}M | {r['minutes']:.1f} "
        f"| {r['tok_s']:,.0f} | {_fmt(r, 'loss')} | {r['compile']:.2f} | {r['rep4']:.2f} | {r['compile'] - r['rep4']:+.2f} |"
        for r in rows
    )
    return (
        "\n### Runs that chose the data mix (issue 31)\nEach row a checkpoint scored on the validation prompts "
        "(score = compiles - repeated 4-grams; the best one ships). Train loss: mean of the 50 steps before.\n\n"
        f"{head}{body}\n"
    )


def validation_text(info: dict) -> str:
    src = info.get("validation_sources") or []
    if not src:
        return ""
    parts = ", ".join(f"`{s['name']}` {s['version']} ({s['license']}, {s['prompts']} prompts)" for s in src)
    return (
        f"\n**Validation prompts** (choose the checkpoint; HumanEval only reports): "
        f"{sum(s['prompts'] for s in src)} signatures with their docstrings, top-level public "
        f"functions with 1-25 body lines, from {parts}: packages in no training split of any "
        "model here (`training/train_validation.py`). Scored like HumanEval below.\n"
    )


def ul_text(info: dict) -> str:
    if not info.get("ul_weight"):
        return ""
    return (
        f"\nNext to the next-token loss, every step adds {info['ul_weight']} x a sequence-level unlikelihood "
        f"loss (Welleck et al. 2019): {info['ul_prompts']} request prompts of the training split (signature and "
        f"docstring) are continued greedily for {info['ul_len']} tokens, and every token that completes a "
        "4-gram the continuation already held gets `-log(1 - p)` (`training/train_unlikelihood.py`). "
        "Tokens/s counts the window tokens only.\n"
    )


def write_card(out: Path, info: dict, extra: dict | None = None):
    extra = extra or {}
    m, b = info.get("final_eval", {}), info.get("baseline_eval", {})
    src_rows = "\n".join(
        f"| {s['name']} | {s['version']} | {s['files']} | {s['bytes'] / 1e6:.1f} MB | {s.get('weight', 1.0):.2f} "
        f"| {s.get('functions', 0):,} | {s['license']} |"
        for s in info["sources"]
    )
    phases = extra.get("phases", [])
    chosen = info.get("chosen_step", info["steps"])
    tokens_run = chosen * info["batch"] * info["seq_len"]
    seen = (info.get("init_steps", 0) + chosen) * info["batch"] * info["seq_len"]
    pick = (
        ""
        if chosen == info["steps"]
        else f" The shipped weights are its checkpoint at step {chosen}, the best on the validation prompts."
    )
    phase_text = "".join(f"- {p['note']}: `{p['command']}`\n" for p in phases)
    if phases:
        phase_text = (
            f"This run continued from an earlier one ({info.get('init_steps', 0)} steps, saved in bfloat16) "
            f"with a fresh warmup and cosine decay; {seen / 1e6:.2f}M tokens seen in all.\n\n"
            f"{phase_text}- this run: `{info['command']}`\n"
        )
    else:
        phase_text = f"Command: `{info['command']}`\n"
    baseline_row = (
        ""
        if not b
        else (
            f"| baseline (step {info['baseline_step']} of this run) | {_fmt(b, 'val_loss')} | {_fmt(b, 'stdlib_test_loss')} "
            f"| n/a | n/a | {_fmt(b, 'humaneval_compile_share', '{:.2f}')} | {_fmt(b, 'humaneval_repeated_4gram_share', '{:.2f}')} |\n"
        )
    )
    text = f"""---
license: other
license_name: psf-2.0-and-bsd-3-clause
language: [code]
library_name: transformers
pipeline_tag: text-generation
---

# pycoder-tiny

A small Python code model (`LlamaForCausalLM`, {info["params"] / 1e6:.1f}M parameters, tied
embeddings) trained from scratch on CPU by `training/train_default_model.py` in the
`lookahead-decoding` repository. It ships inside the package so that benchmarks of lookahead
decoding can run offline with a real, trained model. It is a *tiny* model: it writes
Python-looking code, not correct solutions.

## Architecture
hidden {info["hidden"]}, {info["layers"]} layers, {info["heads"]} heads, MLP {info["inter"]},
vocab {info["vocab"]}, context {info["max_pos"]} positions (trained on {info["seq_len"]}-token windows),
RoPE, RMSNorm, SwiGLU. Weights stored in bfloat16 ({info["weights_mb"]:.1f} MB); load in float32.

## Tokenizer
Byte-level BPE (`tokenizers`), vocab {info["vocab"]}, newline split off as its own token before
the byte-level step (so a prompt ending in `\\n` can be followed by indentation). Special
tokens: `<|bos|>` (prepended by the tokenizer), `<|endoftext|>` (EOS, ends every document), `<|pad|>`.

## Corpus
`*.py` files in sorted path order; the stdlib's `test`/`tests`/`idle_test` folders (and any
`test`/`tests`/`testing` folders of the extra packages) are excluded. Every {info["val_every"]}th file
is held out for validation. Files whose whitespace-normalised text was already seen are dropped.

Three kinds of training document, each ended by EOS: whole files; **functions as documents**:
every top-level function and method (3-80 lines, with decorators, dedented) of the training files,
extracted with `ast` and deduplicated by normalised text ({info.get("functions", 0):,} functions,
{info.get("functions_documented", 0):,} with a docstring); and **requests** ({info.get("requests", 0):,}): each
top-level undecorated function with a docstring and a body of 1-{info.get("request_max_body", 30)} lines, after the module's imports
it uses and two blank lines, the shape of a HumanEval prompt and its answer. A training window
starts in a document with probability proportional to its tokens times its weight: for a file,
{info.get("file_weight", 1.0)} x the share of its lines inside short (<= 40 lines) documented functions, floored
at 0.2; for a function, {info.get("function_weight", 0)} with a docstring and
{info.get("function_weight", 0) * info.get("undocumented_weight", 0):.2f} without; for a request,
{info.get("request_weight", 0)}. {info.get("function_window_share", 0):.0%} of the windows start in a function,
{info.get("request_window_share", 0):.0%} in a request. Full file list with each file's weight:
`corpus_manifest.json`.
{validation_text(info)}
| source | version | files | size | mean file weight | functions | licence |
|---|---|---|---|---|---|---|
{src_rows}

Training tokens: {info["train_tokens"]:,} ({info.get("file_tokens", info["train_tokens"]):,} in files,
{info.get("function_tokens", 0):,} in functions, {info.get("request_tokens", 0):,} in requests); validation
(loss) tokens: {info["val_tokens"]:,}.

## Training
Seed {info["seed"]}, {info["steps"]} steps x {info["batch"]} x {info["seq_len"]} tokens
({tokens_run / 1e6:.2f}M tokens this run up to the shipped checkpoint), AdamW (lr {info["lr"]}, betas 0.9/0.95, weight decay
{info["wd"]}), {info["warmup"]} warmup steps then cosine decay to {info["floor"]}x, grad-clip 1.0,
{"bf16 autocast" if info.get("bf16") else "fp32"} on CPU with {info["threads"]} thread(s) pinned to one core
of its own (`taskset -c 1`, `OMP_WAIT_POLICY=PASSIVE`; other work ran on the other core meanwhile).
Wall time: {info["train_seconds"] / 60:.1f} min of training, {info.get("train_tokens_per_s", 0):,.0f} tokens/s.
Final train loss (mean of last 50 steps): {info["final_train_loss"]:.3f} nats/token.{pick}
{ul_text(info)}
{phase_text}
## Evaluation
Losses are nats/token in fp32. HumanEval: first {m.get("humaneval_prompts", "n/a")} prompts,
greedy, 128 new tokens, completion cut at the first non-indented line; "compiles" =
`compile(prompt + completion)` succeeds with a non-empty completion; repeated 4-grams =
share of token 4-grams in a completion that already occurred earlier in it (summed over prompts).

| model | val loss | stdlib-test loss | validation compiles | validation repeated 4-grams | HumanEval compiles | repeated 4-grams |
|---|---|---|---|---|---|---|
| shipped | {_fmt(m, "val_loss")} | {_fmt(m, "stdlib_test_loss")} | {_fmt(m, "valprompt_compile_share", "{:.2f}")} | {_fmt(m, "valprompt_repeated_4gram_share", "{:.2f}")} | {_fmt(m, "humaneval_compile_share", "{:.2f}")} | {_fmt(m, "humaneval_repeated_4gram_share", "{:.2f}")} |
{"".join(extra.get("eval_rows", []))}{baseline_row}{val_run_table(extra.get("val_runs", []))}{short_run_table(extra.get("short_runs", []))}{extra.get("note", "")}
The project's bar (issues 4 and 22): at least {BAR[0]:.2f} compiling and at most {BAR[1]:.2f} repeated
4-grams on all 164 prompts; milestone {MILESTONE[0]:.2f} / {MILESTONE[1]:.2f}. {verdict(m)}

## Use
```python
from lookahead.default_model import load_default_model
model, tokenizer = load_default_model()  # local files only, float32, CPU
```

## Licence
The weights are derived from the sources above: Python standard library (PSF License
Agreement, PSF-2.0) and the listed packages under their own licences (see table). No other data.
"""
    (out / "README.md").write_text(text)


def run_info(args, n_params, tokenizer, stats, val_data, losses, train_seconds, baseline_step, manifest, out):
    return {
        "params": n_params,
        "hidden": args.hidden,
        "layers": args.layers,
        "heads": args.heads,
        "inter": args.inter,
        "vocab": len(tokenizer),
        "max_pos": args.max_pos,
        "seq_len": args.seq_len,
        "weights_mb": sum(p.stat().st_size for p in out.glob("*.safetensors")) / 1e6,
        "val_every": args.val_every,
        "val_tokens": len(val_data),
        **stats,
        "file_weight": args.file_weight,
        "function_weight": args.function_weight,
        "undocumented_weight": args.undocumented_weight,
        "request_weight": args.request_weight,
        "request_max_body": args.request_max_body,
        "ul_weight": args.ul_weight,
        "ul_prompts": args.ul_prompts,
        "ul_len": args.ul_len,
        "seed": args.seed,
        "bf16": args.bf16,
        "steps": args.steps,
        "batch": args.batch,
        "lr": args.lr,
        "wd": args.wd,
        "warmup": args.warmup,
        "floor": args.floor,
        "threads": args.threads,
        "train_seconds": train_seconds,
        "final_train_loss": sum(losses[-50:]) / len(losses[-50:]),
        "baseline_step": baseline_step,
        "train_tokens_per_s": args.steps * args.batch * args.seq_len / train_seconds,
        "loss_curve": losses[::10],
        "command": "python training/train_default_model.py " + " ".join(sys.argv[1:]),
        "init_from": args.init_from,
        "init_steps": args.init_steps,
        "sources": [
            {
                "name": s["name"],
                "version": s["version"],
                "license": s["license"],
                "files": len(s["files"]),
                "bytes": sum(f["bytes"] for f in s["files"]),
                "functions": s.get("functions", 0),
                "requests": s.get("requests", 0),
                "function_bytes": s.get("function_bytes", 0),
                "weight": sum(f["bytes"] * f["weight"] for f in s["files"])
                / max(1, sum(f["bytes"] for f in s["files"])),
            }
            for s in manifest["sources"]
        ],
    }


def write_card_only(args, work: Path):
    info = json.loads((work / "train_info.json").read_text())
    for key, name in (("final_eval", Path(args.out).name), ("baseline_eval", "baseline")):
        f = work / f"eval_{name}.json"
        if f.is_file():
            info[key] = {k: v for k, v in json.loads(f.read_text()).items() if not k.endswith("samples")}
    extra = work / "card_extra.json"
    write_card(Path(args.out), info, json.loads(extra.read_text()) if extra.is_file() else None)
