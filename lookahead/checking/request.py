"""What a command asks of every decoding it compares: the ``generate`` keywords they share."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Request:
    """New tokens, sampling settings, seed and pad id, the same for plain ``generate`` and
    ``lookahead.generate`` (``lookahead generate --compare``, the benchmark's methods)."""

    max_new_tokens: int = 128
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    pad_token_id: int | None = None
    attention_mask: torch.Tensor | None = None  # a left-padded batch's (else all ones)

    @classmethod
    def from_args(cls, args, pad_token_id: int | None, **fields):
        """From the command line's ``--max-new-tokens`` and sampling options (``fields``: the
        rest of a subclass's fields)."""
        return cls(
            max_new_tokens=args.max_new_tokens,
            do_sample=args.sample,
            temperature=args.temperature,
            top_p=args.top_p,
            seed=args.seed,
            pad_token_id=pad_token_id,
            **fields,
        )

    def generate_kwargs(self, input_ids: torch.Tensor) -> dict:
        mask = self.attention_mask if self.attention_mask is not None else torch.ones_like(input_ids)
        kwargs = {"attention_mask": mask, "max_new_tokens": self.max_new_tokens, "do_sample": self.do_sample}
        if self.do_sample:
            kwargs.update(temperature=self.temperature, top_p=self.top_p, top_k=0)
        if self.pad_token_id is not None:
            kwargs["pad_token_id"] = self.pad_token_id
        return kwargs

    def warpers(self):
        """The processors ``generate`` builds for this sampling request."""
        from lookahead.checking.verdict import warpers

        return warpers(self.temperature, self.top_p)
