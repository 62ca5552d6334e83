"""Which sdpa kernels a decode runs on: cuDNN's attention off on CUDA, the flag restored after."""

from __future__ import annotations

import pytest
import torch

import lookahead
import lookahead.api
from lookahead.runtime.sdpa import cudnn_attention_off, without_cudnn

from tiny_models import tiny_model


@pytest.fixture
def cudnn_flag():
    """The process's flag as the test found it, put back whatever the test did."""
    was = torch.backends.cuda.cudnn_sdp_enabled()
    yield was
    torch.backends.cuda.enable_cudnn_sdp(was)


@pytest.mark.parametrize("before", [True, False])
def test_off_inside_and_the_earlier_value_back_after(cudnn_flag, before):
    torch.backends.cuda.enable_cudnn_sdp(before)
    with cudnn_attention_off():
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled() is before


def test_restored_when_the_decode_raises(cudnn_flag):
    torch.backends.cuda.enable_cudnn_sdp(True)
    with pytest.raises(RuntimeError, match="boom"), cudnn_attention_off():
        raise RuntimeError("boom")
    assert torch.backends.cuda.cudnn_sdp_enabled()


def test_a_cpu_model_leaves_the_flag_alone(cudnn_flag):
    torch.backends.cuda.enable_cudnn_sdp(True)
    with without_cudnn(tiny_model("llama")):
        assert torch.backends.cuda.cudnn_sdp_enabled()


@pytest.mark.parametrize("allow", [False, True])
def test_every_forward_of_a_decode_runs_under_the_configured_choice(cudnn_flag, monkeypatch, allow):
    """The decode (calibration, prefill, steps) runs inside the context the config asks for:
    here the CPU model is treated as a CUDA one, so the flag itself shows where forwards ran."""
    model = tiny_model("llama")
    seen: list[bool] = []
    handle = model.register_forward_pre_hook(lambda *_: seen.append(torch.backends.cuda.cudnn_sdp_enabled()))
    monkeypatch.setattr(
        lookahead.api, "without_cudnn", lambda m, a: cudnn_attention_off() if not a else without_cudnn(m, a)
    )
    torch.backends.cuda.enable_cudnn_sdp(True)
    ids = torch.tensor([[5, 6, 7, 5, 6, 7, 5, 6]])
    config = lookahead.LookaheadConfig(cudnn_attention=allow)
    try:
        out = lookahead.generate(model, ids, max_new_tokens=12, do_sample=False, lookahead_config=config)
    finally:
        handle.remove()
    assert seen and set(seen) == {allow}
    assert torch.backends.cuda.cudnn_sdp_enabled()
    assert torch.equal(out, model.generate(ids, max_new_tokens=12, do_sample=False))
