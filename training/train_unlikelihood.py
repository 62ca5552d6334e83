"""Sequence-level unlikelihood against greedy loops (Welleck et al. 2019, "Neural Text
Generation with Unlikelihood Training", section 5.2), for ``train_default_model.py``.

Data shaped like functions raised the share of completions that compile but left the repeated
4-grams where they were: greedy decoding of the small model still falls into loops
(``'name', 'name', ...``) that run to the token limit and dominate the measure.  So, next to the
usual next-token loss, every step greedily continues a few request prompts (signature and
docstring of documented *training* functions, never the validation packages) and lowers the
probability of each token that completes a 4-gram the continuation already contained:
``-log(1 - p(token))``, the same 4-grams that ``train_eval.repeated_4gram_counts`` counts.
"""

from __future__ import annotations

import ast


def request_prompts(requests) -> list[str]:
    """Signature + docstring (with the import header) of each request document."""
    out = []
    for _, text in requests:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError):
            continue
        func = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
        if func is None or len(func.body) < 2:
            continue
        out.append("\n".join(text.split("\n")[: func.body[0].end_lineno]) + "\n")
    return out


def repeated_positions(ids: list[int], n: int = 4) -> list[int]:
    """Indices of tokens that complete an n-gram already seen earlier in ``ids``."""
    seen, out = set(), []
    for i in range(len(ids) - n + 1):
        g = tuple(ids[i : i + n])
        if g in seen:
            out.append(i + n - 1)
        seen.add(g)
    return out


def unlikelihood_loss(model, tokenizer, prompts: list[str], gen_len: int, bf16: bool):
    """Mean ``-log(1 - p)`` over the repeating tokens of greedy continuations; (loss, count)."""
    import torch

    seqs, marks = [], []
    model.eval()
    with torch.no_grad():
        for p in prompts:
            enc = tokenizer(p, return_tensors="pt")
            out = model.generate(**enc, do_sample=False, max_new_tokens=gen_len, pad_token_id=tokenizer.pad_token_id)
            n0 = enc.input_ids.shape[1]
            rep = repeated_positions(out[0, n0:].tolist())
            if rep:
                seqs.append(out[0])
                marks.append([n0 + r for r in rep])
    model.train()
    if not seqs:
        return None, 0
    width = max(len(s) for s in seqs)
    x = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        x[i, : len(s)], mask[i, : len(s)] = s, 1
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=x, attention_mask=mask).logits
    logp = torch.log_softmax(logits.float(), dim=-1)
    rows = torch.tensor([i for i, m in enumerate(marks) for _ in m])
    cols = torch.tensor([c for m in marks for c in m])
    # the logits at position c - 1 predict token c
    p = logp[rows, cols - 1, x[rows, cols]].exp()
    loss = -torch.log((1 - p).clamp(min=1e-5)).mean()
    return loss, len(cols)
