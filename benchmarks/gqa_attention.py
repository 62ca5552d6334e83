#!/usr/bin/env python
"""Does attending without ``repeat_kv`` pay on masked lookahead steps of a GQA model?

With a 4D mask, transformers' sdpa path turns its GQA support off and ``repeat_kv`` copies every
layer's keys and values to the query heads' count on every step. This times one masked step
(q tokens after a ctx-token cache) of a random-weight GQA Llama (8 query heads, 2 KV heads, 8
layers, hidden 512) both ways, interleaved, fastest of 15: transformers' ``sdpa`` and
lookahead's opt-in backend (``lookahead.register_attention()``, ``lookahead/runtime/attention.py``),
which calls ``scaled_dot_product_attention(..., enable_gqa=True)`` under the same mask. The
logits must be identical. Then whole ``lookahead.generate`` calls on the same model, both
backends interleaved (the same tokens each), for the time a decode saves.

    python benchmarks/gqa_attention.py --threads 2
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
import transformers as tf
from transformers.cache_utils import DynamicCache

import lookahead


def step_mask(ctx: int, q: int) -> torch.Tensor:
    mask = torch.zeros(1, 1, q, ctx + q)
    mask[..., ctx:] = torch.triu(torch.full((q, q), torch.finfo(torch.float32).min), 1)
    return mask


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gqa = lookahead.register_attention()
    config = tf.LlamaConfig(
        vocab_size=8192,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=4096,
    )
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(config).eval()
    for ctx in (256, 1024, 2048):
        for q in (4, 16, 32):
            ids = (torch.arange(ctx + q) * 7919 % 8192)[None]
            model.config._attn_implementation = "sdpa"
            cache = DynamicCache(config=config)
            with torch.no_grad():
                model(input_ids=ids[:, :ctx], cache=cache, use_cache=True)
            best, logits = {}, {}
            for _ in range(15):
                for impl in ("sdpa", gqa):
                    model.config._attn_implementation = impl
                    step = copy.deepcopy(cache)
                    started = time.perf_counter()
                    with torch.no_grad():
                        logits[impl] = model(
                            input_ids=ids[:, ctx:],
                            attention_mask=step_mask(ctx, q),
                            position_ids=torch.arange(ctx, ctx + q)[None],
                            cache=step,
                            use_cache=True,
                        ).logits
                    best[impl] = min(best.get(impl, 1e9), time.perf_counter() - started)
            assert torch.equal(logits["sdpa"], logits[gqa])
            print(
                f"ctx {ctx:5d} q {q:3d}: repeat_kv {best['sdpa'] * 1e3:6.2f} ms, enable_gqa "
                f"{best[gqa] * 1e3:6.2f} ms, {best['sdpa'] / best[gqa]:.3f}x"
            )
    decode(model, gqa)


def decode(model, gqa: str, rounds: int = 3) -> None:
    """Whole lookahead decodes after prompts that repeat a random text (so drafts are fed),
    under each backend in turn: the same tokens, and the time each took."""
    gen = torch.Generator().manual_seed(0)
    for ctx in (256, 1024):
        part = torch.randint(3, 8192, (1, 64), generator=gen)
        prompt = part.repeat(1, ctx // 64)
        seconds, outs = {}, {}
        for round_ in range(rounds + 1):  # the first round warms up
            for impl in ("sdpa", gqa):
                model.set_attn_implementation(impl)
                started = time.perf_counter()
                outs[impl] = lookahead.generate(model, prompt, max_new_tokens=64, do_sample=False)
                if round_:
                    seconds[impl] = seconds.get(impl, 0.0) + time.perf_counter() - started
        assert torch.equal(outs["sdpa"], outs[gqa])
        print(
            f"decode, ctx {ctx:5d}, 64 tokens: sdpa {seconds['sdpa'] / rounds * 1e3:7.1f} ms, "
            f"{gqa} {seconds[gqa] / rounds * 1e3:7.1f} ms, {seconds['sdpa'] / seconds[gqa]:.3f}x"
        )
    model.set_attn_implementation("sdpa")


if __name__ == "__main__":
    main()
