"""Run by tests/contract/test_tp.py under ``torchrun --nproc-per-node 2``: lookahead on tensor-parallel models.

    torchrun --standalone --nproc-per-node 2 tests/helpers/tp_worker.py MODELS_DIR OUT_DIR

Every rank loads each model directory under MODELS_DIR with transformers' tensor-parallel plan,
decodes with lookahead's default (adaptive) config, greedy and seeded sampling, through
``lookahead.generate`` and through ``model.generate(custom_generate=...)``, runs a tiny
``lookahead bench --tp`` over ``MODELS_DIR/bench`` if it exists, and writes what it saw to
``OUT_DIR/rank{R}.json``. The test compares the ranks' files; this script asserts nothing.
``OUT_DIR/started.{R}`` appears as soon as the process group is up (before any lookahead
import), so a run without it never got gloo going.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

NEW_TOKENS = 120  # past the sliding windows (9) many times over, and long enough for shapes to change
PROMPT = [5, 9, 14, 7, 22, 31] * 6  # repetitive: the pool and the copy guess hit, shapes change
COMMON = dict(max_new_tokens=NEW_TOKENS, eos_token_id=None, pad_token_id=0)


def _tokens(out, prompt_len: int) -> list[int]:
    seq = out if isinstance(out, torch.Tensor) else out.sequences
    return seq[0, prompt_len:].tolist()


def _query_lengths(model, run) -> tuple[object, list[int]]:
    """``run()``'s result and the query length of every forward it made."""
    lengths: list[int] = []

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        lengths.append(int(ids.shape[1]))

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        return run(), lengths
    finally:
        handle.remove()


def check_family(model) -> dict:
    import lookahead
    from lookahead import distributed
    from lookahead.runtime import calibration as costmodel
    from lookahead.runtime.calibration import cost_curve

    ids = torch.tensor([PROMPT])
    n = ids.shape[1]
    reference = _tokens(model.generate(ids, do_sample=False, **COMMON), n)
    stats = lookahead.LookaheadStats()
    # a nearly flat curve, so the budget feeds the window's row within this short decode; the
    # calls below run on the calibrated curve every rank takes from rank 0
    flat = lookahead.CostCurve.linear(0.01)
    greedy, lengths = _query_lengths(
        model, lambda: lookahead.generate(model, ids, lookahead_stats=stats, lookahead_costs=flat, **COMMON)
    )
    custom = model.generate(ids, do_sample=False, custom_generate=lookahead.custom_generate, **COMMON)
    torch.manual_seed(1234)
    sampled_reference = model.generate(ids, do_sample=True, top_k=0, **COMMON)
    torch.manual_seed(1234)
    sampled = lookahead.generate(model, ids, do_sample=True, top_k=0, **COMMON)
    generator = torch.Generator().manual_seed(99)
    sampled_custom = model.generate(
        ids, do_sample=True, top_k=0, custom_generate=lookahead.custom_generate, lookahead_generator=generator, **COMMON
    )
    rng_after = torch.rand(4).tolist()  # equal on every rank only if every rank drew alike
    return {
        "tp_size": getattr(model, "tp_size", None),
        "sharded": distributed.is_sharded(model),
        "reference": reference,
        "greedy": _tokens(greedy, n),
        "custom": _tokens(custom, n),
        "sampled": _tokens(sampled, n),
        "sampled_reference": _tokens(sampled_reference, n),
        "sampled_custom": _tokens(sampled_custom, n),
        "rng_after": rng_after,
        "query_lengths": lengths,
        "steps": stats.steps,
        "window_steps": stats.window_steps,
        "plain_steps": stats.plain_steps,
        "tokens_per_forward": stats.tokens_per_forward,
        "curve": cost_curve(model).as_dict(),
        "curve_key": costmodel.curve_key(model),
        "forward_ranks": distributed.forward_ranks(model),
    }


def run_bench(bench_dir: Path, out: Path, rank: int) -> dict:
    """``lookahead bench --tp`` in this process; what it printed and returned."""
    from lookahead import cli

    argv = [
        "bench",
        "--tp",
        "--model",
        str(bench_dir),
        "--prompts",
        str(bench_dir / "prompts.jsonl"),
        "--limit",
        "1",
        "--max-new-tokens",
        "24",
        "--methods",
        "greedy,lookahead",
        "--json",
        str(out / f"bench.{rank}.json"),
    ]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        status = cli.main(argv)
    return {"status": status, "printed": printed.getvalue()}


def main(models: Path, out: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    (out / f"started.{rank}").touch()

    import transformers
    from transformers import AutoModelForCausalLM

    from lookahead import distributed

    transformers.logging.set_verbosity_error()
    results: dict = {"families": {}}
    for family_dir in sorted(p for p in models.iterdir() if p.is_dir() and p.name != "bench"):
        model = AutoModelForCausalLM.from_pretrained(family_dir, dtype=torch.float32, **distributed.tp_load_kwargs())
        results["families"][family_dir.name] = check_family(model.eval())
    if (models / "bench").is_dir():
        results["bench"] = run_bench(models / "bench", out, rank)
    (out / f"rank{rank}.json").write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
