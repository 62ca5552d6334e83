"""Measure what a lookahead step costs besides the model's forward pass.

Reports, on one model and prompt:
  - the n-gram pool's insert and lookup cost (microseconds per call, realistic sizes);
  - per-step time outside the forward (mask, tree, verification, cache commit, pool) and its
    share of the step, from ``LookaheadStats``.

    python benchmarks/overhead.py                      # the embedded model, a HumanEval prompt
    python benchmarks/overhead.py --random-llama       # a random Llama of the same shape
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import lookahead
from lookahead.drafts.pool import NgramPool


def pool_costs(ngram: int, guesses: int, vocab: int, calls: int = 20000) -> tuple[float, float]:
    """Microseconds per insert of one step's window n-grams, and per lookup."""
    rng = np.random.default_rng(0)
    pool = NgramPool(ngram, guesses, context_tokens=2)
    rows = rng.integers(0, vocab, (calls, 8, ngram))
    before = rng.integers(0, vocab, (calls, 8))
    pool.insert(rows[0], before[0])
    pool.lookup(int(rows[0, 0, 0]), int(before[0, 0]))
    started = time.perf_counter()
    for i in range(calls):
        pool.insert(rows[i], before[i])
    insert = (time.perf_counter() - started) / calls
    started = time.perf_counter()
    for i in range(calls):
        pool.lookup(int(rows[i, 0, 0]), int(before[i, 0]))
    lookup = (time.perf_counter() - started) / calls
    return insert * 1e6, lookup * 1e6


def load(args):
    if args.random_llama:
        from transformers import LlamaConfig, LlamaForCausalLM

        model, tok = lookahead.load_default_model()
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(**{**model.config.to_dict(), "architectures": None})).eval()
        return model, tok
    return lookahead.load_default_model()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--random-llama", action="store_true", help="random weights of the embedded model's shape")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = lookahead.LookaheadConfig()
    insert_us, lookup_us = pool_costs(config.ngram, config.guesses, vocab=8192)
    print(f"pool: insert of 8 n-grams {insert_us:.2f} us/call, lookup {lookup_us:.2f} us/call")

    model, tok = load(args)
    from lookahead.bench.prompts import encode, load_prompts

    ids = torch.tensor([encode(load_prompts("humaneval", tok, 1)[0], tok)])
    kwargs = dict(max_new_tokens=args.max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
    lookahead.generate(model, ids, **kwargs)
    total = lookahead.LookaheadStats()
    for _ in range(args.repeats):
        lookahead.generate(model, ids, lookahead_stats=total, **kwargs)
    per_step = 1e3 * total.overhead_s / total.steps
    print(
        f"steps {total.steps}, tokens/forward {total.tokens_per_forward:.2f}, "
        f"overhead {per_step:.2f} ms/step = {100 * total.overhead_share:.1f}% of the time"
    )


if __name__ == "__main__":
    main()
