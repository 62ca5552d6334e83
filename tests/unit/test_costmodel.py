"""The cost curve: measured once per model and machine, cached, reused, validated."""

from __future__ import annotations

import json

import pytest
import torch

import lookahead
from lookahead.runtime import calibration as costmodel
from lookahead.runtime.calibration import cost_curve
from lookahead.step.costmodel import CostCurve

from tiny_models import tiny_model


def test_calibration_is_cached_on_disk_and_reused(tmp_path, monkeypatch):
    # kept whatever else runs: a busy machine's curve not being kept is the next tests' subject
    monkeypatch.setattr(costmodel, "BUSY_CORES", float("inf"))
    model = tiny_model("qwen2", "sdpa")  # sliding layers: calibration must not crop them
    curve = cost_curve(model, cache_dir=tmp_path)
    assert curve.sizes[0] == 1 and curve.costs[0] == 1.0 and curve.unit_s > 0
    assert list(curve.costs[1:]) == sorted(curve.costs[1:])  # the one-token forward is no floor
    stored = json.loads((tmp_path / "costs.json").read_text())
    assert CostCurve.from_dict(stored[costmodel.curve_key(model)]) == curve
    costmodel._MEMO.clear()
    monkeypatch.setattr(costmodel, "calibrate", lambda *a, **k: pytest.fail("measured again"))
    assert cost_curve(model, cache_dir=tmp_path) == curve


def test_the_decoder_s_own_work_is_measured_with_the_curve(monkeypatch):
    """A calibrated curve carries the decoder's own work per guessing step on this machine (a
    guessing decode against a plain one, outside the forwards): a few hundred microseconds
    here, priced in one-token forwards; a given curve without it prices the default."""
    monkeypatch.setattr(costmodel, "REPEATS", 2)
    model = tiny_model("llama", "sdpa")
    curve = costmodel.calibrate(model)
    assert 0 < curve.overhead_s < 0.05 and curve.overhead == pytest.approx(curve.overhead_s / curve.unit_s)
    assert CostCurve.from_dict(curve.as_dict()) == curve
    assert CostCurve.linear(0.1).overhead == 0.0  # no unit known: nothing to price it in
    with pytest.raises(ValueError, match="overhead_s"):
        CostCurve((1, 2), (1.0, 2.0), 0.01, -1.0)


def test_key_tells_dtypes_and_architectures_apart():
    a, b = tiny_model("llama", "sdpa"), tiny_model("mistral", "sdpa")
    assert costmodel.curve_key(a) != costmodel.curve_key(b)
    assert costmodel.curve_key(a) != costmodel.curve_key(tiny_model("llama", "eager"))


@pytest.mark.parametrize(
    "sizes,costs", [((1,), (1.0,)), ((2, 4), (1.0, 2.0)), ((1, 1), (1.0, 1.0)), ((1, 2), (1.0, 0.0))]
)
def test_bad_curves_are_refused(sizes, costs):
    with pytest.raises(ValueError, match="CostCurve"):
        CostCurve(sizes, costs)


def test_generate_takes_a_given_curve_and_refuses_other_types():
    model = tiny_model("llama", "sdpa")
    ids = torch.tensor([[5, 6, 7, 5, 6, 7, 5, 6]])
    kwargs = dict(max_new_tokens=12, eos_token_id=None, pad_token_id=0)
    got = lookahead.generate(model, ids, lookahead_costs=CostCurve.linear(0.05), **kwargs)
    assert got.tolist() == model.generate(ids, do_sample=False, **kwargs).tolist()
    with pytest.raises(TypeError, match="lookahead_costs"):
        lookahead.generate(model, ids, lookahead_costs={"sizes": [1, 2]}, **kwargs)


def test_a_batch_has_its_own_curve(tmp_path, monkeypatch):
    """Batches of B rows are priced by forwards over ``[B, k]``: their own key, measured
    with B rows, cached beside the single-row curve."""
    model = tiny_model("llama", "sdpa")
    assert costmodel.curve_key(model, 4) != costmodel.curve_key(model)
    shapes = []
    real = costmodel.calibrate

    def spy(model, rows=1, **kwargs):
        shapes.append(rows)
        return real(model, sizes=(1, 2, 4), repeats=1, rows=rows)

    monkeypatch.setattr(costmodel, "calibrate", spy)
    monkeypatch.setattr(costmodel, "BUSY_CORES", float("inf"))  # kept however busy the machine is
    single, batch = cost_curve(model, tmp_path), cost_curve(model, tmp_path, rows=4)
    assert shapes == [1, 4]
    assert cost_curve(model, tmp_path, rows=4) is batch and shapes == [1, 4]
    stored = json.loads((tmp_path / "costs.json").read_text())
    assert set(stored) == {costmodel.curve_key(model), costmodel.curve_key(model, 4)}
    assert single.sizes == batch.sizes == (1, 2, 4)


def test_a_curve_timed_beside_a_busy_neighbour_is_used_but_not_kept(tmp_path, capsys):
    """A process spinning on a core while the curve is timed: the curve prices this process's
    steps and is not written (a later process measures again); timed alone it is kept."""
    import subprocess
    import sys
    import time

    model = tiny_model("llama", "sdpa")
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        curve = cost_curve(model, cache_dir=tmp_path / "busy")
    finally:
        neighbour.kill()
        neighbour.wait()
    assert curve.costs[0] == 1.0 and curve.unit_s > 0
    assert not (tmp_path / "busy" / "costs.json").exists()
    assert "not kept" in capsys.readouterr().err
    cost_curve(model, cache_dir=tmp_path / "idle")
    assert costmodel.curve_key(model) in json.loads((tmp_path / "idle" / "costs.json").read_text())
