"""Measuring what a forward over k tokens costs, relative to one, and what the decoder's own
work in a guessing step costs, once per model and machine.

The draft budget weighs each step's expected accepted tokens against the cost of its
forward and of its own work. Timing every step would make decisions depend on whatever else the machine does
(a busy neighbour process makes every step look slow at random) and differ between the
ranks of a distributed run, which must feed forwards of identical shapes. So the cost is a
curve measured once per (model, device, dtype, threads, torch version), kept in the user's
cache directory, and every decision depends only on token counts and that curve.

A model sharded over the ranks of ``torch.distributed`` (tensor parallelism) runs every
forward on all of them together: there the first rank of that group answers from its memory
or cache file and hands its curve to the others on each call, and when it has none every rank
runs the calibration forwards together (their collectives must match) and all keep the first
rank's measurement. So every rank prices shapes alike and makes the same decisions. A model
replicated whole on every rank (data parallel) decodes alone and keeps its own curve.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import statistics
import sys
import time
import weakref
from pathlib import Path

import torch

from lookahead import distributed
from lookahead.config import LookaheadConfig
from lookahead.drafts.kept import KeptState
from lookahead.stats import LookaheadStats
from lookahead.step.costmodel import CostCurve
from lookahead.step.host import synchronize
from lookahead.step.loop import decode
from lookahead.verify.rules import GreedyRule

SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
CONTEXTS = (64, 256)  # past lengths the steps are timed after (a short and a longer text)
REPEATS = 15  # timed rounds: 7 left a two-token cost moving by 0.02, and a 4-token one by 0.06
WARMUP_ROUNDS = 3  # untimed rounds first: a cold process times wide steps too cheap
BUSY_CORES = 0.5  # other processes' CPU use during a calibration (in cores) above which it is not kept
OVERHEAD_STEPS = 24  # steps of each kind timed for the decoder's own work (each run twice, the first a warm-up)
_MEMO: dict[str, CostCurve] = {}


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/lookahead`` or ``~/.cache/lookahead`` (the platform's convention)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "lookahead"


def curve_key(model, rows: int = 1) -> str:
    """What the curve depends on: the architecture's shape, dtype, device, threads, torch,
    and the batch size ``rows``. Kept per model object and those cheap facts, since reading
    the config's shape costs a copy of it (a millisecond) on every call."""
    device = next(model.parameters()).device
    facts = (rows, model.dtype, device, torch.get_num_threads(), getattr(model.config, "_attn_implementation", None))
    known = _KEYS.setdefault(model, {})
    if facts not in known:
        known[facts] = _curve_key(model, rows)
    return known[facts]


_KEYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _curve_key(model, rows: int) -> str:
    config = model.config.to_dict()
    shape = {
        k: config.get(k)
        for k in sorted(config)
        if isinstance(config.get(k), (int, float, str, bool))
        and k not in ("transformers_version", "_name_or_path", "torch_dtype", "dtype")
    }
    device = next(model.parameters()).device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    facts = [
        json.dumps(shape, sort_keys=True),
        str(model.dtype),
        name,
        str(torch.get_num_threads()),
        torch.__version__,
        str(getattr(model.config, "_attn_implementation", None)),
        # how calibrate measures and reads its times: older curves are not reused
        "masked steps at two contexts, median ratio to the round's one token after warm-up, one token no floor",
        "the decoder's own work per guessing step measured",
    ]
    ranks = distributed.forward_ranks(model)
    if ranks > 1:  # collectives change the cost; single-process keys stay as they were
        facts.append(f"sharded over {ranks} ranks")
    if rows > 1:
        facts.append(f"batches of {rows}")
    return hashlib.sha1("|".join(facts).encode()).hexdigest()[:20]


@torch.no_grad()
def calibrate(
    model, sizes=SIZES, contexts: tuple[int, ...] = CONTEXTS, repeats: int = REPEATS, rows: int = 1
) -> CostCurve:
    """Time forwards of each query length after caches of each of ``contexts`` tokens, in
    ``repeats`` rounds over all lengths after ``WARMUP_ROUNDS`` untimed ones. A length's cost
    at a context is the median over the rounds of its forward over the same round's one-token
    forward (a slow spell of the machine, which lasts longer than a round, then cancels out,
    where the medians of the times themselves moved by 0.1 between calibrations; the median,
    as what decoding meets: the fastest run flatters wide steps); its cost is the mean over the
    contexts. Steps of more than one token carry a 4D mask as the decoder's do (one token runs
    maskless, as plain steps do; sliding-window models run with their own masks). With
    ``rows`` > 1 every forward runs that many rows: a batch's curve (its unit is a
    ``[rows, 1]`` forward, which costs far less than ``rows`` one-token forwards)."""
    devices = {p.device for p in model.parameters()}  # a device_map spreads the forward over several
    longest = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    if longest:  # a model with few positions is timed within them
        contexts = sorted({max(1, min(c, int(longest) - max(sizes))) for c in contexts})
    masked = _full_attention(model.config)
    per_context = [_time_sizes(model, sizes, context, repeats, rows, devices, masked) for context in contexts]
    unit = statistics.mean(unit for unit, _ in per_context)
    relative = [statistics.mean(ratios[i] for _, ratios in per_context) for i in range(len(sizes))]
    curve = CostCurve.from_times(sizes, [unit * r for r in relative])
    return dataclasses.replace(curve, overhead_s=decoder_overhead(model, rows))


@torch.no_grad()
def decoder_overhead(model, rows: int = 1, steps: int = OVERHEAD_STEPS) -> float:
    """Seconds the decoder's own work in a guessing step takes beyond a plain step's, per row,
    on this machine and model: a decode of a repetitive text (so the copy guess drafts every
    step) timed with every step feeding its whole draft and with every step plain (the
    sources plan in both), outside the forwards; the faster of two runs each."""
    from transformers.cache_utils import DynamicCache
    from transformers.generation.stopping_criteria import MaxLengthCriteria, StoppingCriteriaList

    device = next(model.parameters()).device
    ids = (torch.arange(64, device=device) % min(16, model.config.vocab_size))[None].expand(rows, -1)
    stop = StoppingCriteriaList([MaxLengthCriteria(ids.shape[1] + steps)])
    per_step = []
    for per_token in (0.0, 1e6):  # every node free: all fed; every node dear: none
        spent = []
        for _ in range(2):
            stats, started = LookaheadStats(), time.perf_counter()
            decode(
                model,
                ids,
                rule=GreedyRule(None, keep_rows=False),
                stopping_criteria=stop,
                config=LookaheadConfig(),
                stats=stats,
                kept=KeptState(),
                costs=CostCurve.linear(per_token),
                cache=DynamicCache(config=model.config),
            )
            spent.append((time.perf_counter() - started - stats.forward_s) / max(stats.steps, 1))
        per_step.append(min(spent))
    return max(per_step[0] - per_step[1], 0.0) / rows


def _full_attention(config) -> bool:
    """Whether every layer attends to the whole past (a sliding layer's cache holds less, so
    one 4D mask would not fit it: such models are timed with their own masks)."""
    layer_types = getattr(config, "layer_types", None) or ()
    return getattr(config, "sliding_window", None) is None and not any("sliding" in t for t in layer_types)


def _time_sizes(
    model, sizes, context: int, repeats: int, rows: int, devices, masked: bool
) -> tuple[float, list[float]]:
    """``(unit, ratios)`` after a ``context``-token cache: the median one-token forward in
    seconds, and per size the median over the rounds of its forward over the same round's
    one-token forward (``masked``: with a step's 4D mask beyond one token). ``sizes[0]`` is 1."""
    from transformers.cache_utils import DynamicCache

    device = next(model.parameters()).device
    vocab = model.config.vocab_size
    ids = (torch.arange(context + max(sizes), device=device) % vocab).expand(rows, -1)
    prefilled = DynamicCache(config=model.config)
    model(input_ids=ids[:, :context], cache=prefilled, use_cache=True)
    rounds: list[list[float]] = []
    # rounds over all sizes, the first ones a warm-up: a slow spell of the machine then hits
    # every size alike instead of the few measured during it
    for round_ in range(repeats + WARMUP_ROUNDS):
        times = []
        for k in sizes:
            query = ids[:, context : context + k]
            positions = torch.arange(context, context + k, device=device)[None].expand(rows, -1)
            mask = _step_mask(rows, k, context, model.dtype, device) if masked and k > 1 else None
            cache = copy.deepcopy(prefilled)  # sliding layers cannot be cropped back
            synchronize(devices)
            started = time.perf_counter()
            model(input_ids=query, position_ids=positions, attention_mask=mask, cache=cache, use_cache=True)
            synchronize(devices)
            times.append(time.perf_counter() - started)
        if round_ >= WARMUP_ROUNDS:
            rounds.append(times)
    unit = statistics.median(times[0] for times in rounds)
    return unit, [statistics.median(times[i] / times[0] for times in rounds) for i in range(len(sizes))]


def _step_mask(rows: int, k: int, past: int, dtype, device) -> torch.Tensor:
    """An additive 4D mask ``[rows, 1, k, past + k]`` like a guessing step's: the whole past,
    then causal among the step's tokens (a chain: the densest a tree can be)."""
    mask = torch.zeros(k, past + k, dtype=dtype, device=device)
    mask[:, past:] = torch.triu(torch.full((k, k), torch.finfo(dtype).min, dtype=dtype, device=device), 1)
    return mask[None, None].expand(rows, 1, k, past + k)


def _load(path: Path, key: str) -> CostCurve | None:
    try:
        return CostCurve.from_dict(json.loads(path.read_text())[key])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save(path: Path, key: str, curve: CostCurve) -> None:
    """Add ``curve`` to the JSON file (best effort: a read-only home only loses the cache)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        data[key] = curve.as_dict()
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass


def cost_curve(model, cache_dir: Path | str | None = None, rows: int = 1) -> CostCurve:
    """The model's curve for batches of ``rows``: from this process' memory, else the cache
    file, else measured now.

    For a model sharded over ranks (see :func:`lookahead.distributed.is_sharded`) this is a
    collective call: every rank of its group must make it, and all get the first rank's curve.
    """
    key = curve_key(model, rows)
    path = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / "costs.json"
    memo = f"{path}:{key}"
    if distributed.is_sharded(model):
        return _agreed_curve(model, path, memo, key, rows)
    if memo not in _MEMO:
        curve = _load(path, key)
        if curve is None:
            with Neighbours() as others:
                curve = calibrate(model, rows=rows)
            if others.cores <= BUSY_CORES:
                _save(path, key, curve)
            else:  # a busy machine's curve would price every later process's steps wrong
                print(
                    f"lookahead: other processes used {others.cores:.1f} CPU cores while the cost curve "
                    "was timed; it prices this process's steps only and is not kept",
                    file=sys.stderr,
                )
        _MEMO[memo] = curve
    return _MEMO[memo]


class Neighbours:
    """What other processes took of the CPU while the block ran: ``cores``, the machine's busy
    time less this process's, per second of wall time (Linux ``/proc/stat``; 0.0 elsewhere).
    A calibration is timed on whatever else runs, and a curve timed beside a busy neighbour
    (a one-token forward twice as slow, relative costs off by a tenth) would be kept for good."""

    cores = 0.0

    def __enter__(self) -> Neighbours:
        self._start = self._sample()
        return self

    def __exit__(self, *exc) -> None:
        end = self._sample()
        if self._start is not None and end is not None:
            wall = end[0] - self._start[0]
            others = (end[1] - self._start[1]) - (end[2] - self._start[2])
            self.cores = max(others / wall, 0.0) if wall > 0 else 0.0

    @staticmethod
    def _sample() -> tuple[float, float, float] | None:
        """(wall s, the machine's busy CPU s, this process's CPU s), or None without /proc/stat."""
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
        mine = os.times()
        return time.perf_counter(), (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK"), mine.user + mine.system


def _agreed_curve(model, path: Path, memo: str, key: str, rows: int = 1) -> CostCurve:
    """The curve of the first rank of the model's forward group, on every rank of it.

    Only that rank's memory and file count, and it broadcasts on every call (even from
    memory), so ranks whose memories differ cannot fall out of step.
    """
    dist = torch.distributed
    group = distributed.forward_group(model)
    src = dist.get_global_rank(group, 0) if group is not None else 0
    first = dist.get_rank() == src
    box = [(_MEMO.get(memo) or _load(path, key)) if first else None]
    dist.broadcast_object_list(box, src=src, group=group)
    if box[0] is None:
        measured = calibrate(model, rows=rows)  # every rank: the forwards' collectives must match
        box = [measured if first else None]
        dist.broadcast_object_list(box, src=src, group=group)
        if first:
            _save(path, key, box[0])
    if first:
        _MEMO[memo] = box[0]
    return box[0]
