#!/usr/bin/env python
"""Train the small Python code LM that ships inside the ``lookahead`` package.

Reproducible from a fixed seed on CPU.  The script

1. builds the corpus (``train_corpus.py``): the running interpreter's standard library
   (``*.py``, without its ``test``/``tests``/``idle_test`` folders, held out for a loss) plus
   the pure-Python sources of a few permissively licensed installed packages
   (``--extra-packages``), as three kinds of document, each ended by EOS: whole files
   (weighted by how much of them is short documented functions, x ``--file-weight``),
   *functions* (top-level functions and methods, dedented; ``--function-weight`` with a
   docstring, x ``--undocumented-weight`` without) and *requests* (a documented top-level
   function with a short body after the imports it uses, shaped like a HumanEval prompt and
   its answer; ``--request-weight``),
2. trains a byte-level BPE tokenizer with the newline as its own token, or reuses one
   (``--tokenizer``, ``--init-from``: a continued model must keep its own, byte for byte),
3. trains a ``LlamaForCausalLM`` (``train_data.py`` draws the windows) with AdamW, linear
   warmup then cosine decay, for a fixed number of steps, under bf16 autocast where the CPU
   computes bf16 natively (``avx512_bf16``/``amx_bf16``; elsewhere bf16 is ~3x slower, so fp32),
4. every ``--score-every`` steps saves a checkpoint and scores it on ~100 held-out function
   prompts (``train_validation.py``: packages no model here was trained on) with the HumanEval
   measures of ``train_eval.py`` (share that compiles, repeated 4-grams); OUT receives the
   best-scoring checkpoint.  HumanEval itself is never used to choose, only reported,
5. evaluates the result (losses, validation prompts, HumanEval) and writes the model card
   (``train_card.py``).

Run it pinned to a core of its own with one thread (``taskset -c 1``, ``OMP_NUM_THREADS=1``,
``OMP_WAIT_POLICY=PASSIVE``, ``--threads 1``, the default): two CPU-bound processes sharing
cores slow each other ~10x under OpenMP.  The commands that made the shipped model are in
docs/default_model.md ("How to rerun").

Examples::

    P="taskset -c 1 env OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE python training/train_default_model.py"
    # a run from scratch (trains the tokenizer); a 6.9M model
    $P --hidden 256 --layers 6 --heads 4 --inter 704 --steps 360 --warmup 30 --lr 2e-3
    # continue the shipped weights on functions and requests only, choosing on validation
    $P --init-from lookahead/models/pycoder-tiny --init-steps 1230 --steps 200 --warmup 10 --lr 3e-4 \
        --file-weight 0 --request-weight 1 --score-every 50 --skip-eval --work-dir /tmp/w/R --out /tmp/w/R/R
    # evaluate a model folder only (validation prompts, losses, first 40 HumanEval prompts)
    $P --eval-only lookahead/models/pycoder-tiny --humaneval-limit 40
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_args import parse_args  # noqa: E402
from train_card import run_info, write_card, write_card_only  # noqa: E402
from train_corpus import build_corpus  # noqa: E402
from train_data import encode_docs, encode_docs_with_offsets, train_tokenizer, window_sampler  # noqa: E402
from train_eval import batch_losses, evaluate, score_prompts, selection_score  # noqa: E402
from train_unlikelihood import request_prompts, unlikelihood_loss  # noqa: E402
from train_validation import load_validation_prompts  # noqa: E402


def make_model(tokenizer, hidden: int, layers: int, heads: int, inter: int, max_pos: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_pos,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        attn_implementation="sdpa",
    )
    return LlamaForCausalLM(cfg)


def cpu_has_native_bf16() -> bool:
    """True where /proc/cpuinfo lists avx512_bf16 or amx_bf16 (Linux; False elsewhere)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def lr_at(step: int, total: int, warmup: int, peak: float, floor_frac: float) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    prog = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor_frac + (1 - floor_frac) * 0.5 * (1 + math.cos(math.pi * prog)))


def save_model(model, tokenizer, out: Path):
    import torch

    out.mkdir(parents=True, exist_ok=True)
    # a bf16 COPY is saved; the fp32 master weights being trained stay untouched
    m = copy.deepcopy(model).to(torch.bfloat16)
    m.generation_config.pad_token_id = tokenizer.pad_token_id
    m.generation_config.bos_token_id = tokenizer.bos_token_id
    m.generation_config.eos_token_id = tokenizer.eos_token_id
    m.save_pretrained(out, safe_serialization=True)
    del m
    tokenizer.save_pretrained(out)


def copy_tokenizer_files(src: Path, out: Path):
    """Put the init model's tokenizer files back byte for byte (save_pretrained may reformat them)."""
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (src / name).is_file():
            shutil.copyfile(src / name, out / name)
        elif (out / name).is_file() and name == "special_tokens_map.json":
            (out / name).unlink()


class Scorer:
    """Saves a checkpoint, reloads it as it would ship (bf16 weights, run in fp32) and scores it on
    the validation prompts; remembers the best folder by :func:`selection_score`."""

    def __init__(self, args, tokenizer, prompts):
        self.args, self.tokenizer, self.prompts = args, tokenizer, prompts
        self.work = Path(args.work_dir)
        self.rows, self.best, self.seconds = [], None, 0.0
        self.log = open(self.work / "val_scores.tsv", "w")
        self.log.write("step\ttokens_seen_run\tcompile_share\trepeated_4gram_share\tscore\tseconds\n")

    def __call__(self, step: int, model=None, folder: Path | None = None):
        import torch
        from transformers import AutoModelForCausalLM

        t0 = time.time()
        folder = folder or self.work / f"step_{step}"
        if model is not None:
            save_model(model, self.tokenizer, folder)
        m = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
        res = score_prompts(m, self.tokenizer, self.prompts)
        (self.work / f"valscore_step_{step}.json").write_text(json.dumps(res, indent=1))
        del m
        dt = time.time() - t0
        self.seconds += dt
        row = {
            "step": step,
            "tokens_seen_run": step * self.args.batch * self.args.seq_len,
            "compile_share": res["compile_share"],
            "repeated_4gram_share": res["repeated_4gram_share"],
            "score": selection_score(res),
            "folder": str(folder),
            "seconds": round(dt, 1),
        }
        self.rows.append(row)
        if self.best is None or row["score"] > self.best["score"]:
            self.best = row
        self.log.write("\t".join(str(row[k]) for k in ("step", "tokens_seen_run")) + "\t")
        self.log.write(f"{row['compile_share']:.3f}\t{row['repeated_4gram_share']:.3f}\t{row['score']:.3f}\t{dt:.0f}\n")
        self.log.flush()
        print(f"validation step {step}: {json.dumps({k: v for k, v in row.items() if k != 'folder'})}", flush=True)
        if model is not None:
            model.train()
        return row


def load_data(args):
    """Corpus, tokenizer, the flat token stream and each document's sampling weight."""
    t0 = time.time()
    train_files, val_docs, funcs, requests, manifest = build_corpus(
        args.extra_packages,
        args.val_every,
        args.function_weight > 0 or args.request_weight > 0 or args.ul_weight > 0,
        args.request_max_body,
    )
    args.ul_pool = request_prompts(requests) if args.ul_weight > 0 else []
    funcs = funcs if args.function_weight > 0 else []
    requests = requests if args.request_weight > 0 else []
    print(
        f"corpus: {len(train_files)} train files, {len(val_docs)} val files, {len(funcs)} functions "
        f"({sum(f[2] for f in funcs)} documented), {len(requests)} requests",
        flush=True,
    )
    if args.init_from or args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or args.init_from, local_files_only=True)
    else:
        tokenizer = train_tokenizer([d[1] for d in train_files], args.vocab)
    docs = [(label, text, w * args.file_weight) for label, text, w in train_files]
    docs += [
        (label, text, args.function_weight * (1.0 if doc else args.undocumented_weight)) for label, text, doc in funcs
    ]
    docs += [(label, text, args.request_weight) for label, text in requests]
    data, starts = encode_docs_with_offsets(tokenizer, docs)
    bounds = starts + [len(data)]
    toks = [b - a for a, b in zip(bounds[:-1], bounds[1:])]
    nf, nfn = len(train_files), len(train_files) + len(funcs)
    mass = [t * d[2] for t, d in zip(toks, docs)]
    stats = {
        "train_tokens": len(data),
        "file_tokens": sum(toks[:nf]),
        "function_tokens": sum(toks[nf:nfn]),
        "request_tokens": sum(toks[nfn:]),
        "functions": len(funcs),
        "functions_documented": sum(f[2] for f in funcs),
        "requests": len(requests),
        "function_window_share": sum(mass[nf:nfn]) / sum(mass),
        "request_window_share": sum(mass[nfn:]) / sum(mass),
    }
    val_data = encode_docs(tokenizer, val_docs)
    print(f"tokens: {json.dumps(stats)} val {len(val_data):,} ({time.time() - t0:.0f}s)", flush=True)
    return tokenizer, data, starts, [d[2] for d in docs], val_data, stats, manifest


def train(args, model, tokenizer, data, starts, weights, scorer):
    import torch
    from tqdm import tqdm

    work = Path(args.work_dir)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    gen = torch.Generator().manual_seed(args.seed)
    draw_starts = window_sampler(starts, len(data), weights, args.seq_len, gen)
    baseline_step = max(1, int(args.steps * args.baseline_frac))
    losses, ul_losses, paused = [], [], 0.0
    # a generator of its own, so that the windows drawn match a run without unlikelihood
    ul_gen = torch.Generator().manual_seed(args.seed + 1)
    log = open(work / "train_log.tsv", "w")
    log.write("step\ttokens_seen\tloss50\tlr\telapsed_s\ttok_s_last50\ttok_s_mean\tul50\n")
    model.train()
    t_train = t_last = time.time()
    bar = tqdm(range(args.steps), desc="train", mininterval=10, file=sys.stdout)
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.warmup, args.lr, args.floor)
        s = draw_starts(args.batch)
        x = torch.stack([data[i : i + args.seq_len] for i in s]).long()
        y = torch.stack([data[i + 1 : i + args.seq_len + 1] for i in s]).long()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        total = loss
        if args.ul_pool:
            pick = torch.randint(len(args.ul_pool), (args.ul_prompts,), generator=ul_gen).tolist()
            ul, _ = unlikelihood_loss(model, tokenizer, [args.ul_pool[i] for i in pick], args.ul_len, args.bf16)
            ul_losses.append(0.0 if ul is None else ul.item())
            total = loss if ul is None else loss + args.ul_weight * ul
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        el = time.time() - t_train - paused
        bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}", refresh=False)
        if (step + 1) % 50 == 0:
            seen, now = (step + 1) * args.batch * args.seq_len, time.time()
            rate = 50 * args.batch * args.seq_len / (now - t_last)
            t_last = now
            lr = opt.param_groups[0]["lr"]
            ul50 = sum(ul_losses[-50:]) / max(1, len(ul_losses[-50:]))
            msg = f"{sum(losses[-50:]) / 50:.4f}\t{lr:.3e}\t{el:.1f}\t{rate:.0f}\t{seen / el:.0f}\t{ul50:.4f}"
            print(f"step {step + 1} {msg}", flush=True)
            log.write(f"{step + 1}\t{seen}\t{msg}\n")
            log.flush()
        if step + 1 == baseline_step and not scorer:
            save_model(model, tokenizer, work / "baseline")
        if scorer and (step + 1) % args.score_every == 0 and step + 1 < args.steps:
            t0 = time.time()
            scorer(step + 1, model)
            paused += time.time() - t0
            t_last += time.time() - t0  # the scoring pause is not training time
    log.close()
    return losses, time.time() - t_train - paused, baseline_step


def main(argv=None):
    args = parse_args(argv, __doc__)
    if args.bf16 is None:
        args.bf16 = cpu_has_native_bf16()

    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("RAYON_NUM_THREADS", str(args.threads))
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    if args.write_card:
        return write_card_only(args, work)
    if args.eval_only:
        prompts, _ = load_validation_prompts(Path(args.val_prompts))
        evaluate(Path(args.eval_only), args, val_prompts=prompts)
        return

    torch.manual_seed(args.seed)
    tokenizer, data, starts, weights, val_data, stats, manifest = load_data(args)
    if args.init_from:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(args.init_from, local_files_only=True, dtype=torch.float32)
        args.hidden, args.layers = model.config.hidden_size, model.config.num_hidden_layers
        args.heads, args.inter = model.config.num_attention_heads, model.config.intermediate_size
    else:
        model = make_model(tokenizer, args.hidden, args.layers, args.heads, args.inter, args.max_pos)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params: {n_params:,}", flush=True)
    scorer = None
    if args.score_every:
        prompts, val_sources = load_validation_prompts(Path(args.val_prompts))
        scorer = Scorer(args, tokenizer, prompts)
        if args.score_init and args.init_from:
            scorer(0, folder=Path(args.init_from))
    losses, train_seconds, baseline_step = train(args, model, tokenizer, data, starts, weights, scorer)
    model.eval()
    val_loss = batch_losses(model, val_data, args.seq_len, args.eval_tokens)
    print(f"done: {train_seconds:.0f}s of training, final val loss {val_loss:.4f}", flush=True)

    out = Path(args.out)
    save_model(model, tokenizer, work / "final")
    chosen = work / "final"
    if scorer:
        scorer(args.steps, folder=work / "final")
        chosen = Path(scorer.best["folder"])
    if chosen.resolve() != out.resolve():
        out.mkdir(parents=True, exist_ok=True)
        for f in chosen.iterdir():
            if f.is_file() and f.suffix in {".json", ".safetensors"}:
                shutil.copyfile(f, out / f.name)
    if args.init_from:
        copy_tokenizer_files(Path(args.init_from), out)
    manifest_out = {"sources": [dict(s) for s in manifest["sources"]]}
    (out / "corpus_manifest.json").write_text(json.dumps(manifest_out, indent=0))
    info = run_info(args, n_params, tokenizer, stats, val_data, losses, train_seconds, baseline_step, manifest, out)
    info["final_val_loss_quick"] = val_loss
    if scorer:
        info.update(validation=scorer.rows, validation_sources=val_sources, chosen_step=scorer.best["step"])
        info["validation_seconds"] = scorer.seconds
    write_card(out, info)
    (work / "train_info.json").write_text(json.dumps(info, indent=1))
    print(f"saved model to {out} (from {chosen})", flush=True)
    if args.skip_eval:
        return
    info["final_eval"] = evaluate(out, args, val_data)
    write_card(out, info)
    (work / "train_info.json").write_text(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
