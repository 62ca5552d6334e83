"""Running under ``torch.distributed``: which rank this is, and whether forwards are shared.

Under tensor parallelism (``torchrun`` + ``from_pretrained(..., tp_plan="auto")``) every rank
runs every forward together with the others, so every decision that changes a forward's shape
or the tokens must come out the same on all of them. These helpers answer the questions that
takes; none of them starts a process group.
"""

from __future__ import annotations

import contextlib
import os

import torch

LAUNCH_HINT = "torchrun --nproc-per-node 2 -m lookahead bench --tp"


def _initialized() -> bool:
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process' global rank: from the process group, else torchrun's ``RANK``, else 0."""
    if _initialized():
        return torch.distributed.get_rank()
    return int(os.environ.get("RANK", "0") or 0)


def world_size() -> int:
    """Processes in the job: from the process group, else torchrun's ``WORLD_SIZE``, else 1."""
    if _initialized():
        return torch.distributed.get_world_size()
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def is_main() -> bool:
    """Whether this process prints and writes files (rank 0, or no distributed run at all)."""
    return rank() == 0


def under_launcher() -> bool:
    """Whether a launcher such as ``torchrun`` started this process (it sets ``WORLD_SIZE``)."""
    return "WORLD_SIZE" in os.environ or _initialized()


def is_sharded(model) -> bool:
    """Whether ``model``'s forwards are collective: a process group of more than one rank and
    parameters split across ranks (transformers' tensor parallelism, or any ``DTensor``).

    A model replicated whole on every rank (data parallel) is not: each rank decodes alone.
    """
    if not _initialized() or torch.distributed.get_world_size() < 2:
        return False
    if (getattr(model, "_tp_size", None) or 1) > 1:
        return True
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def forward_ranks(model) -> int:
    """How many ranks run ``model``'s forwards together (1 when it is not sharded)."""
    if not is_sharded(model):
        return 1
    return torch.distributed.get_world_size(forward_group(model))


def forward_group(model):
    """The process group whose ranks run ``model``'s forwards together: the tensor-parallel
    group of transformers' device mesh when it names one, else the whole job (``None``)."""
    mesh = getattr(model, "_device_mesh", None)
    names = getattr(mesh, "mesh_dim_names", None) or ()
    if "tp" in names:
        return mesh.get_group("tp")
    return None


def require_launcher(option: str) -> None:
    """Raise ``ValueError`` naming ``option`` unless a launcher started this process."""
    if not under_launcher():
        raise ValueError(
            f"{option} loads the model tensor-parallel across the ranks of a torchrun job; "
            f"run it under torchrun, e.g. `{LAUNCH_HINT}` (WORLD_SIZE is not set here)"
        )


def check_tp_shape(config, ranks: int) -> None:
    """Raise ``ValueError`` when ``config``'s attention heads cannot be split over ``ranks``."""
    for field in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(config, field, None)
        if isinstance(heads, int) and heads % ranks:
            raise ValueError(
                f"tensor parallelism splits attention heads over the ranks, but {field}={heads} "
                f"is not divisible by {ranks} ranks; use a rank count that divides it"
            )


def tp_load_kwargs() -> dict:
    """``from_pretrained`` keywords for transformers' own tensor-parallel plan."""
    try:
        from transformers import DistributedConfig
    except ImportError:  # transformers before DistributedConfig took the plan
        return {"tp_plan": "auto"}
    return {"distributed_config": DistributedConfig(tp_plan="auto")}


@contextlib.contextmanager
def quiet_unless_main():
    """On ranks other than 0, send ``sys.stdout`` and ``sys.stderr`` to the null device.

    Exceptions still propagate, so the caller can report errors on every rank.
    """
    if is_main():
        yield
        return
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
        yield
