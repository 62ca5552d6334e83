"""Nothing on stderr a user did not ask for: the whole API surface, outputs included, raises no
Python warning and logs nothing through transformers' logger (deprecations among them).

transformers logs most deprecations once per process (``warning_once``); the test clears
that memory first, so an earlier test cannot hide one.
"""

import logging
import warnings

import numpy as np
import pytest
import torch
import transformers
from transformers import TextStreamer
from transformers.utils import logging as hf_logging

import lookahead
from lookahead import warmup
from lookahead.compat import output_cache_field

from tiny_models import tiny_model, tiny_tokenizer

PROMPT = torch.tensor([[1, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 9]])


class _Raise(logging.Handler):
    def emit(self, record):
        raise AssertionError(f"transformers logged {record.levelname}: {record.getMessage()}")


@pytest.fixture
def strict():
    """Python warnings as errors, and any transformers record at WARNING or above too."""
    hf_logging.warning_once.cache_clear()
    hf_logging.info_once.cache_clear()
    root = logging.getLogger("transformers")
    handler, level = _Raise(logging.WARNING), root.level
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _calls(model, tok):
    pool = lookahead.KeptState()
    index = lookahead.SuffixIndex.from_texts([np.tile(np.arange(5, 20), 3)])
    full = dict(return_dict_in_generate=True, output_scores=True, output_logits=True)
    batch = torch.cat([PROMPT, PROMPT.flip(-1)])
    yield lookahead.generate(model, PROMPT, max_new_tokens=12, **full)
    yield model.generate(PROMPT, custom_generate=lookahead.custom_generate, max_new_tokens=12, **full)
    yield lookahead.generate(model, batch, attention_mask=torch.ones_like(batch), max_new_tokens=12, **full)
    yield lookahead.generate(model, PROMPT, max_new_tokens=12, lookahead_pool=pool, lookahead_index=index, **full)
    yield lookahead.generate(
        model, PROMPT, max_new_tokens=12, do_sample=True, top_p=0.9, generator=torch.Generator().manual_seed(0), **full
    )
    yield lookahead.generate(model, PROMPT, max_new_tokens=12, cache_implementation="static", **full)
    config = transformers.GenerationConfig(max_new_tokens=12, do_sample=False, return_dict_in_generate=True)
    yield lookahead.generate(model, PROMPT, generation_config=config)
    streamer = TextStreamer(tok)
    yield lookahead.generate(model, PROMPT, max_new_tokens=8, streamer=streamer, stop_strings=["x"], tokenizer=tok)


def test_no_call_warns_or_logs(strict, capsys):
    model, tok = tiny_model("llama", "sdpa"), tiny_tokenizer()
    warmup.warm_kernels()  # its stderr line (a fresh cache) is asked for, and not this test's subject
    with torch.no_grad():
        for out in _calls(model, tok):
            if not isinstance(out, torch.Tensor):
                # every field the output object has, read as a user reads it
                for name in ("sequences", "scores", "logits", output_cache_field(type(out)), "lookahead_stats"):
                    getattr(out, name)
    capsys.readouterr()  # the streamer's own text
