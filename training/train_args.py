"""Command line of ``train_default_model.py`` (its docstring is the help text)."""

from __future__ import annotations

import argparse
from pathlib import Path

from train_corpus import EXTRA_PACKAGES

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "lookahead" / "models" / "pycoder-tiny"


def parse_args(argv, description: str):
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
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
        "--file-weight",
        type=float,
        default=1.0,
        help="multiplier of every whole file's sampling weight (0: functions and requests only)",
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
    ap.add_argument(
        "--request-weight",
        type=float,
        default=0.0,
        help="sampling weight of request documents (imports, documented function, short body; 0: none)",
    )
    ap.add_argument("--request-max-body", type=int, default=30, help="longest request body, in lines")
    ap.add_argument(
        "--score-every",
        type=int,
        default=0,
        help="every N steps (and at the end) save a checkpoint and score it on the validation prompts; "
        "OUT then receives the best-scoring one, not the last (0: off)",
    )
    ap.add_argument(
        "--ul-weight",
        type=float,
        default=0.0,
        help="weight of the sequence-level unlikelihood loss on greedy loops (train_unlikelihood.py; 0: off)",
    )
    ap.add_argument("--ul-prompts", type=int, default=4, help="request prompts continued greedily per step")
    ap.add_argument("--ul-len", type=int, default=64, help="tokens of each greedy continuation")
    ap.add_argument("--score-init", action="store_true", help="score the --init-from weights too (step 0)")
    ap.add_argument(
        "--val-prompts",
        metavar="JSON",
        default=None,
        help="validation prompt cache (default WORK_DIR/validation_prompts.json; built if missing)",
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
    ap.add_argument("--skip-humaneval", action="store_true", help="--eval-only: losses and validation prompts only")
    ap.add_argument("--eval-only", metavar="MODEL_DIR", help="only evaluate an existing model folder")
    ap.add_argument(
        "--write-card",
        action="store_true",
        help="only rewrite OUT/README.md from WORK_DIR/train_info.json and eval_*.json",
    )
    args = ap.parse_args(argv)
    args.humaneval_limit = args.humaneval_limit or None
    if args.val_prompts is None:
        args.val_prompts = str(Path(args.work_dir) / "validation_prompts.json")
    return args
