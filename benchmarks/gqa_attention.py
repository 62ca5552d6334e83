#!/usr/bin/env python
"""Does attending without ``repeat_kv`` pay on masked lookahead steps of a GQA model?

With a 4D mask, transformers' sdpa path turns its GQA support off and ``repeat_kv`` copies every
layer's keys and values to the query heads' count on every step. This times one masked step
(q tokens after a ctx-token cache) of a random-weight GQA Llama (8 query heads, 2 KV heads, 8
layers, hidden 512) both ways, interleaved, fastest of 15: transformers' ``sdpa`` and an
attention function that calls ``scaled_dot_product_attention(..., enable_gqa=True)`` under the
same mask, registered through ``AttentionInterface``. The logits must be identical.

    python benchmarks/gqa_attention.py --threads 2
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
import transformers as tf
from transformers import AttentionInterface
from transformers.cache_utils import DynamicCache


def gqa_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """sdpa with the KV heads shared by their query heads (no copy), under the given mask."""
    if attention_mask is not None:
        attention_mask = attention_mask[:, :, :, : key.shape[-2]]
    causal = attention_mask is None and query.shape[2] > 1
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True, is_causal=causal
    )
    return out.transpose(1, 2).contiguous(), None


def step_mask(ctx: int, q: int) -> torch.Tensor:
    mask = torch.zeros(1, 1, q, ctx + q)
    mask[..., ctx:] = torch.triu(torch.full((q, q), torch.finfo(torch.float32).min), 1)
    return mask


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    AttentionInterface.register("gqa_sdpa", gqa_sdpa)
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
                for impl in ("sdpa", "gqa_sdpa"):
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
            assert torch.equal(logits["sdpa"], logits["gqa_sdpa"])
            print(
                f"ctx {ctx:5d} q {q:3d}: repeat_kv {best['sdpa'] * 1e3:6.2f} ms, enable_gqa "
                f"{best['gqa_sdpa'] * 1e3:6.2f} ms, {best['sdpa'] / best['gqa_sdpa']:.3f}x"
            )
    model.config._attn_implementation = "sdpa"


if __name__ == "__main__":
    main()
