"""Tokenizer and token stream for ``train_default_model.py``.

The tokenizer is trained once (a run from scratch) or reused from a model folder; a run that
continues shipped weights must reuse theirs, since a retrained one would renumber the vocabulary
under the embeddings.  Documents become one flat int32 stream, ``[bos] doc [eos]`` each, and
training windows are drawn from it by :func:`window_sampler`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where training starts (the corpus steps do without it)
    import torch

SPECIAL = ["<|endoftext|>", "<|bos|>", "<|pad|>"]


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
