#!/usr/bin/env python
"""What each guess source could earn under seeded sampling: hit rates against the sample itself.

Under one seed the noise of every future position is known before the model sees it
(``lookahead.sampling.noise``): the token sampled at step t is the argmax over x of
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
the share of positions where at least one source's race winner is the sample, ``fed`` where
the sample is anywhere in what the sources hold (every stored successor, every copy
continuation, the Jacobi race winner and argmax), and ``check`` the race over the true
distribution, which must give the sample but for rounding.

``oracle_speedup`` turns those hits into the most any decoder drafting from these sources
could gain on a cost curve (``benchmarks/curves.py``): an oracle that knows which source is
right feeds exactly the sample's next tokens, one node per position, for as long as a run of
hits lasts, and splits runs wherever that is cheaper (``oracle_cost``, from the library's
``lookahead.bench.ceilings``). It pays no step overhead and never feeds a wrong node, so a real
decoder stays below it. Hits are teacher-forced: a position's sources saw the true text
before it, as they would after a run of right guesses (the Jacobi guess is the
one-iteration-late kind at every depth).

    python benchmarks/ceilings.py --limit 20 --temperature 0.7 --top-p 0.95 --dtype bfloat16
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict

import torch
from curves import CURVES  # benchmarks/curves.py, beside this script

import lookahead
from lookahead.bench.ceilings import oracle_cost
from lookahead.bench.prompts import humaneval_prompts
from lookahead.checking.verdict import warpers

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


MARGINS = (0.5, 1.0, 2.0, 4.0)  # bin edges of a guess's margin, in nats; the last bin is open


def margin_bin(scores: torch.Tensor) -> int:
    """The bin of the gap between the best and the second-best of a race's (or a
    distribution's) scores: how far the guess's source would have to be off to change it."""
    top = scores.topk(2).values if scores.numel() > 1 else torch.tensor([0.0, -float("inf")])
    gap = float(top[0] - top[1])
    return sum(gap >= edge for edge in MARGINS)


def copy_continuations(text: list[int], end: int) -> list[int]:
    """The tokens that followed earlier occurrences of the longest suffix of ``text[:end + 1]``
    (up to ``MAX_MATCH`` tokens), latest first; empty where even one token never occurred."""
    for m in range(min(MAX_MATCH, end + 1), 0, -1):
        tail = text[end - m + 1 : end + 1]
        found = [text[j + 1] for j in range(end - 1, m - 2, -1) if text[j - m + 1 : j + 1] == tail]
        if found:
            return found
    return []


def measure(model, tok, prompt_ids, seed: int, args, processors, hits: Counter, margins, batch: int = 32) -> dict:
    """Counts each source's hits into ``hits`` and, by the guess's margin bin, into
    ``margins[(source_how, bin)]`` (a list of hits); returns, per kind (``race``, ``fed``),
    whether each new position from the second on was a hit, in order."""
    sample = seeded_sample(model, tok, prompt_ids, seed, args)
    runs = {"race": [], "fed": []}
    if len(sample) < 2:
        return runs
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
        held = {raced["jacobi"], int(missed[t - 1].argmax())}
        hits["jacobi_argmax"] += int(missed[t - 1].argmax()) == target
        margins[("jacobi_race", margin_bin(missed[t - 1] - q.log()))].append(raced["jacobi"] == target)
        margins[("jacobi_argmax", margin_bin(missed[t - 1]))].append(int(missed[t - 1].argmax()) == target)
        if tokens[j] in successors:
            ids, values = successors[tokens[j]]
            hits["successors_argmax"] += int(ids[0]) == target
            raced["successors"] = int(ids[(values - q[ids].log()).argmax()])
            held.update(ids.tolist())
            margins[("successors_race", margin_bin(values - q[ids].log()))].append(raced["successors"] == target)
            margins[("successors_argmax", margin_bin(values))].append(int(ids[0]) == target)
        conts = copy_continuations(tokens, j)
        held.update(conts)
        if conts:
            counts = Counter(conts)
            hits["copy_latest"] += conts[0] == target
            ids = torch.tensor(list(counts))
            values = torch.tensor([float(c) for c in counts.values()]).log()
            raced["copy"] = int(ids[(values - q[ids].log()).argmax()])
        for source, token in raced.items():
            hits[f"{source}_race"] += token == target
        hits["any_race"] += target in raced.values()
        hits["any_fed"] += target in held
        runs["race"].append(target in raced.values())
        runs["fed"].append(target in held)
    return runs


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
    hits, margins, runs = Counter(), defaultdict(list), []
    with torch.no_grad():
        for seed, prompt in enumerate(humaneval_prompts(args.limit)):
            ids = tok(prompt.text, return_tensors="pt").input_ids
            runs.append(measure(model, tok, ids, seed, args, processors, hits, margins))
    positions = sum(len(r["race"]) for r in runs)
    rates = defaultdict(dict)
    for key, count in sorted(hits.items()):
        source, how = key.rsplit("_", 1)
        rates[source][how] = round(count / max(positions, 1), 4)
    names = [n for n in CURVES if n.endswith(args.dtype)]
    oracle = {
        name: {kind: round(positions / sum(oracle_cost(r[kind], CURVES[name]) for r in runs), 3) for kind in runs[0]}
        for name in names
    }
    edges = ("0", *(str(e) for e in MARGINS))
    by_margin = defaultdict(dict)
    for (source, b), held in sorted(margins.items()):
        share, hit = len(held) / positions, sum(held) / len(held)
        by_margin[source][f">={edges[b]}"] = {"share": round(share, 4), "hit": round(hit, 4)}
    doc = {
        "settings": vars(args),
        "positions": positions,
        "hit_rates": rates,
        "by_margin": by_margin,
        "oracle_speedup": oracle,
    }
    print(json.dumps(doc, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
