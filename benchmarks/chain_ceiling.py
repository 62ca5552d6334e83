#!/usr/bin/env python
"""The ceiling of lookahead's vLLM proposer on the vLLM check's batch-1 set, clock-free.

vLLM verifies one draft chain per request and step; lookahead's own decoder verifies a tree.
This replays the greedy texts of ``benchmarks/vllm_check.py --prompts humaneval`` (its two
warm-up prompts, then HumanEval's first 20, one request at a time, 128 new tokens; the embedded
model's greedy tokens from transformers' ``generate``, which vLLM's equal) teacher-forced: each
policy walks each text step by step, a step taking the draft's tokens while they are the text's
and one more (the model's own), and the request's text joins the history once it ends, as in
the engine. Policies, all with ``k`` draft tokens at most and the same copy tree (the request's
own text and the history, a ``CopyDrafter`` as the proposer's planner has it):

    proposer    ``LookaheadProposer.propose`` itself: its draft budget's choice over the copy
                tree and the n-gram pool, cut to the likeliest chain (what vLLM verified)
    chain       that likeliest chain uncut, k deep: a chain verifier's best without the cut
    tree        the whole tree: the longest root path that is the text (a tree verifier)
    ngram       vLLM's ``ngram`` as the check configures it (the text's longest end of 2 to 5
                tokens that occurs earlier, its earliest occurrence's next k tokens)

and ``reachable``, the share of generated positions (after each request's first token) whose
token any occurrence in the tree's scopes continues with: the most a copy source could draft.
Reported: tokens per step for each policy, and the drafted tokens that held (proposer).

    python benchmarks/chain_ceiling.py [--run batch1|sessions] [--k 16] [--tokens 128] [--limit 20]

``--run sessions`` counts the check's multi-turn turns instead, after the batch-1 requests and
the batch of 8's in the history (the batch's requests walked one by one here).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
WARMUP = ["import os\n", "def main():\n"]  # vllm_check.py's warm-up requests, first in the history
MAX_MODEL_LEN = 1024


def check_prompts(which: str, limit: int, tokens: int, tokenizer) -> tuple[list[str], int]:
    """The check's requests in its order and the index of the first one counted: ``batch1``,
    the warm-up then ``limit`` HumanEval prompts; ``sessions``, those, the next ``limit``
    (the batch of 8's, in the history by then) and the ``multiturn`` turns that fit."""
    from lookahead.bench.prompts import load_prompts

    humaneval = [p.text for p in load_prompts("humaneval", limit=2 * limit)]
    first = WARMUP + humaneval[:limit]
    if which == "batch1":
        return first, len(WARMUP)
    turns = [p.text for p in load_prompts("multiturn", limit=12)]
    fits = [t for t in turns if len(tokenizer(t).input_ids) + tokens <= MAX_MODEL_LEN]
    return first + humaneval[limit:] + fits, len(first) + limit


def greedy_texts(prompts: list[str], tokens: int, tokenizer) -> list[tuple[np.ndarray, int]]:
    """``(prompt + greedy output ids, prompt length)`` per request, in the check's order."""
    import torch
    from transformers import AutoModelForCausalLM

    from lookahead.default_model import default_model_path

    model = AutoModelForCausalLM.from_pretrained(default_model_path(), dtype=torch.float32).eval()
    texts = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        out = model.generate(ids, max_new_tokens=tokens, do_sample=False)
        texts.append((out[0].numpy().astype(np.int32), ids.shape[1]))
    return texts


def tree_accepts(tokens: np.ndarray, parents: np.ndarray, truth: np.ndarray, k: int) -> int:
    """The deepest node (at most ``k``) of a best-first tree whose root path is ``truth``'s start."""
    depth = {-1: 0}  # nodes on the text's path -> their depth
    best = 0
    for i in range(tokens.shape[0]):
        d = depth.get(int(parents[i]))
        if d is not None and d < min(k, truth.shape[0]) and tokens[i] == truth[d]:
            depth[i] = d + 1
            best = max(best, d + 1)
    return best


def ngram_draft(text: np.ndarray, k: int, low: int = 2, high: int = 5) -> np.ndarray:
    """vLLM's ``NgramProposer`` draft (``prompt_lookup_min`` ``low``, ``_max`` ``high``)."""
    for n in range(min(high, text.shape[0] - 1), low - 1, -1):
        end = text[-n:]
        windows = np.lib.stride_tricks.sliding_window_view(text[:-1], n)
        found = np.flatnonzero((windows == end).all(axis=1))
        if found.shape[0]:
            start = int(found[0]) + n
            return text[start : start + k]
    return text[:0]


def likeliest_chain(tokens: np.ndarray, parents: np.ndarray, probs: np.ndarray, k: int) -> list[int]:
    """The path from the root through each node's likeliest child (the first on a tie), at most
    ``k`` deep: the chain ``DraftBudget(chain=True)`` cuts its choice to."""
    chain, cur = [], -1
    while len(chain) < k:
        kids = [i for i in range(tokens.shape[0]) if parents[i] == cur]
        if not kids:
            break
        cur = max(kids, key=lambda i: (probs[i], -i))
        chain.append(int(tokens[cur]))
    return chain


def copy_drafter(proposer, k: int):
    """A copy guess as a request's planner has it, over the proposer's history."""
    from lookahead.drafts.copy_drafter import CopyDrafter

    config = proposer.drafting.config
    return CopyDrafter(config.copy_length, config.copy_match, config.copy_min_prob, proposer.history.indexes)


def chain_accepts(draft, truth: np.ndarray) -> int:
    n = 0
    while n < len(draft) and n < truth.shape[0] and draft[n] == truth[n]:
        n += 1
    return n


def new_proposer(k: int):
    """``LookaheadProposer`` as vLLM builds it, for drafts of at most ``k`` tokens."""
    from lookahead.vllm import LookaheadProposer

    config = SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=k),
        model_config=SimpleNamespace(max_model_len=MAX_MODEL_LEN),
    )
    return LookaheadProposer(config)


def walk(texts, first: int, k: int, policy: str) -> dict:
    """Steps of one policy over every request in order: tokens per step, drafted and held."""
    proposer = new_proposer(k)  # its history serves every policy
    drafter = copy_drafter(proposer, k)
    steps = generated = drafted = held = 0
    buffer = np.zeros((1, MAX_MODEL_LEN), dtype=np.int64)
    for r, (text, start) in enumerate(texts):
        known, sampled = start + 1, [int(text[start])]  # the prefill's token
        while known < text.shape[0]:
            truth = text[known:]
            if policy == "proposer":
                buffer[0, :known] = text[:known]
                draft = proposer.propose([sampled], np.array([known]), buffer)[0]
                accepted = chain_accepts(draft, truth)
                if r >= first:
                    drafted, held = drafted + len(draft), held + accepted
            elif policy == "ngram":
                accepted = chain_accepts(ngram_draft(text[:known], k), truth)
            else:
                tokens, parents, probs, _ = drafter.tree(text[:known])
                if policy == "tree":
                    accepted = tree_accepts(tokens, parents, truth, k)
                else:
                    accepted = chain_accepts(likeliest_chain(tokens, parents, probs, k), truth)
            step = min(accepted + 1, truth.shape[0])
            sampled = [int(t) for t in text[known : known + step]]
            known = known + step
            if r >= first:
                steps, generated = steps + 1, generated + step
        if policy == "proposer":  # the request leaves the batch: the next call files its text
            continue
        proposer.history.remember(text)
    if policy == "proposer":  # the last request's text too (nothing else reads it)
        proposer.propose([], np.zeros(0, dtype=np.int64), buffer)
    out = {"steps": steps, "tokens": generated, "tokens_per_step": generated / steps}
    if policy == "proposer":
        out.update(drafted=drafted, held=held, held_share=held / drafted if drafted else 0.0)
    return out


def reachable(texts, first: int, k: int) -> float:
    """The share of the HumanEval requests' generated positions (after the first) whose token
    the copy tree over the text before it has as a child of its root."""

    proposer, hits, positions = new_proposer(k), 0, 0
    drafter = copy_drafter(proposer, k)
    for r, (text, start) in enumerate(texts):
        for known in range(start + 1, text.shape[0]) if r >= first else ():
            tokens, parents, _, _ = drafter.tree(text[:known])
            hits += bool(tree_accepts(tokens, parents, text[known:], 1))
            positions += 1
        proposer.history.remember(text)
    return hits / positions


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--k", type=int, default=16, help="num_speculative_tokens")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--limit", type=int, default=20, help="HumanEval prompts")
    p.add_argument(
        "--run", choices=("batch1", "sessions"), default="batch1", help="which of the check's runs is counted"
    )
    args = p.parse_args()
    from transformers import AutoTokenizer

    from lookahead.default_model import default_model_path

    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    prompts, first = check_prompts(args.run, args.limit, args.tokens, tokenizer)
    texts = greedy_texts(prompts, args.tokens, tokenizer)
    new = sum(t.shape[0] - s for t, s in texts[first:])
    print(f"{len(texts)} requests, {len(texts) - first} counted ({args.run}), {new} new tokens in them, k={args.k}")
    for policy in ("ngram", "proposer", "chain", "tree"):
        found = walk(texts, first, args.k, policy)
        extra = "".join(
            f", {key} {value:.1%}" if isinstance(value, float) else f", {key} {value}"
            for key, value in found.items()
            if key not in ("steps", "tokens", "tokens_per_step")
        )
        print(f"{policy:<9} {found['tokens_per_step']:.2f} tokens/step ({found['tokens']} in {found['steps']}){extra}")
    print(f"reachable: {reachable(texts, first, args.k):.1%} of the generated positions (after each request's first)")


if __name__ == "__main__":
    main()
