#!/usr/bin/env python
"""What each guess source could earn under seeded sampling: hit rates against the sample itself.

Under one seed the noise of every future position is known before the model sees it
(``lookahead.verify.noise``): the token sampled at step t is the argmax over x of
``log p_t(x) - log q_t(x)``, ``q_t`` being block t of the seeded Exp(1) stream. A source that
has a distribution for position t can propose that race's winner instead of its argmax. This
script measures, clock-free, on seeded ``model.generate`` output (teacher-forced; tokens are
counted at every new position t after the first):

    jacobi       the model's own race winner at t when token t-1 is wrong (the likeliest
                 token other than the sampled one): what a Jacobi window's next level is
                 worth right after a miss (by argmax / by the race with the known noise)
    successors   the top-k (``--top-k``, the decoder's ``successors``) tokens the model
                 predicted after the last earlier occurrence of token t-1, with their
                 processed probabilities: top-1 / the race over those k
    copy         what followed the longest earlier occurrence (up to 8 tokens) of the text's
                 end: the latest continuation / the race over the continuations' counts

Each rate is hits over all positions (a position where a source has nothing counts as a
miss), so the rates are the ceilings of one guessed token per source per step; ``any`` is
the share of positions where at least one source's race winner is the sample, and ``check``
the race over the true distribution, which must give the sample but for rounding.

    python benchmarks/ceilings.py --limit 20 --temperature 0.7 --top-p 0.95 --dtype bfloat16
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict

import torch

import lookahead
from lookahead.bench.prompts import humaneval_prompts
from lookahead.verify.race import warpers

MAX_MATCH = 8


def seeded_sample(model, tok, ids, seed: int, args) -> list[int]:
    torch.manual_seed(seed)
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=True,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=0,
        max_new_tokens=args.max_new_tokens,
        pad_token_id=tok.pad_token_id,
    )
    return out[0, ids.shape[1] :].tolist()


def noise_blocks(seed: int, steps: int, vocab: int) -> torch.Tensor:
    """``[steps, V]``: block t is what seeded ``generate`` divides by at its new token t."""
    generator = torch.Generator().manual_seed(seed)
    blocks = torch.empty((steps, vocab))
    for t in range(steps):
        blocks[t].exponential_(generator=generator)
    return blocks


def processed_logprobs(model, text: torch.Tensor, processors) -> torch.Tensor:
    """``[n, V]``: the processed log-distribution after each token of ``text`` (teacher-forced)."""
    logits = model(input_ids=text[None]).logits[0].float()
    return torch.log_softmax(processors(text[None], logits), dim=-1)


def after_a_miss(model, text: torch.Tensor, start: int, wrong: list[int], processors) -> torch.Tensor:
    """``[m, V]``: the processed log-distribution at each new position ``start + 1 + i`` when the
    token before it (``text[start + i]``) is replaced by ``wrong[i]``; one batched forward."""
    rows = []
    for i, token in enumerate(wrong):
        row = text[: start + i + 1].clone()
        row[-1] = token
        rows.append(row)
    width = max(len(r) for r in rows)
    batch = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros_like(batch)
    for i, row in enumerate(rows):  # left-padded, so every row's last logit is at the end
        batch[i, width - len(row) :] = row
        mask[i, width - len(row) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=batch, attention_mask=mask, position_ids=positions).logits[:, -1].float()
    return torch.log_softmax(processors(batch, logits), dim=-1)


def race_winner(logprobs: torch.Tensor, noise: torch.Tensor) -> int:
    return int((logprobs - noise.log()).argmax())


def copy_continuations(text: list[int], end: int) -> list[int]:
    """The tokens that followed earlier occurrences of the longest suffix of ``text[:end + 1]``
    (up to ``MAX_MATCH`` tokens), latest first; empty where even one token never occurred."""
    for m in range(min(MAX_MATCH, end + 1), 0, -1):
        tail = text[end - m + 1 : end + 1]
        found = [text[j + 1] for j in range(end - 1, m - 2, -1) if text[j - m + 1 : j + 1] == tail]
        if found:
            return found
    return []


def measure(model, tok, prompt_ids, seed: int, args, processors, hits: Counter, batch: int = 32) -> int:
    sample = seeded_sample(model, tok, prompt_ids, seed, args)
    if len(sample) < 2:
        return 0
    text = torch.cat([prompt_ids[0], torch.tensor(sample)])
    p = prompt_ids.shape[1]
    logprobs = processed_logprobs(model, text, processors)  # row j: the distribution after text[j]
    noise = noise_blocks(seed, len(sample), logprobs.shape[-1])
    tokens = text.tolist()
    successors: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for j in range(p - 1):  # the prompt's positions fill the table first
        top = logprobs[j].topk(args.top_k)
        successors[tokens[j]] = (top.indices, top.values)
    # the wrong token before each new position t >= 1: the likeliest other than the sampled one
    wrong = []
    for t in range(1, len(sample)):
        ranked = logprobs[p + t - 2].topk(2).indices.tolist()
        wrong.append(ranked[1] if ranked[0] == sample[t - 1] else ranked[0])
    missed = torch.cat(
        [
            after_a_miss(model, text, p + s - 1, wrong[s - 1 : s - 1 + batch], processors)
            for s in range(1, len(sample), batch)
        ]
    )
    for t in range(1, len(sample)):
        j = p + t - 1  # the distribution of new token t is row j (after text[j] = sample[t - 1])
        target, q = sample[t], noise[t]
        top = logprobs[j - 1].topk(args.top_k)  # the previous step's root, fed and recorded
        successors[tokens[j - 1]] = (top.indices, top.values)
        # the noise lines up: the race over the true distribution gives the sample (but rounding)
        hits["check_race"] += race_winner(logprobs[j], q) == target
        raced = {"jacobi": race_winner(missed[t - 1], q)}
        hits["jacobi_argmax"] += int(missed[t - 1].argmax()) == target
        if tokens[j] in successors:
            ids, values = successors[tokens[j]]
            hits["successors_argmax"] += int(ids[0]) == target
            raced["successors"] = int(ids[(values - q[ids].log()).argmax()])
        conts = copy_continuations(tokens, j)
        if conts:
            counts = Counter(conts)
            hits["copy_latest"] += conts[0] == target
            ids = torch.tensor(list(counts))
            values = torch.tensor([float(c) for c in counts.values()]).log()
            raced["copy"] = int(ids[(values - q[ids].log()).argmax()])
        for source, token in raced.items():
            hits[f"{source}_race"] += token == target
        hits["any_race"] += target in raced.values()
    return len(sample) - 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--top-k", type=int, default=8, help="successors kept per token (default: 8)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tok = lookahead.load_default_model(getattr(torch, args.dtype))
    processors = warpers(args.temperature, args.top_p)
    hits, positions = Counter(), 0
    with torch.no_grad():
        for seed, prompt in enumerate(humaneval_prompts(args.limit)):
            ids = tok(prompt.text, return_tensors="pt").input_ids
            positions += measure(model, tok, ids, seed, args, processors, hits)
    rates = defaultdict(dict)
    for key, count in sorted(hits.items()):
        source, how = key.rsplit("_", 1)
        rates[source][how] = round(count / max(positions, 1), 4)
    doc = {"settings": vars(args), "positions": positions, "hit_rates": rates}
    print(json.dumps(doc, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
