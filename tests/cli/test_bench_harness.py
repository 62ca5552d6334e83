"""The benchmark's pieces without a model: prompt sets, exactness bookkeeping, aggregates, grid parsing."""

from __future__ import annotations

import json

import pytest

from lookahead.bench import prompts, report, sweep
from lookahead.bench.methods import RunResult
from lookahead.bench.probes import ForwardProbe
from lookahead.bench.runner import Record, first_difference


class FakeTokenizer:
    all_special_ids = [0, 1, 2]

    def __len__(self):
        return 50

    def __call__(self, text):
        return {"input_ids": [ord(c) % 50 for c in text]}


def test_humaneval_set():
    items = prompts.load_prompts("humaneval", limit=3)
    assert [p.id for p in items] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert items[0].text.startswith("from typing import List")
    assert len(prompts.humaneval_prompts()) == 164


def test_grounded_set_is_deterministic_and_grounded():
    first, again = prompts.grounded_prompts(), prompts.grounded_prompts()
    assert [p.text for p in first] == [p.text for p in again]
    assert len(first) >= 40 and len({p.id for p in first}) == len(first)
    for p in first:
        body = p.meta["expected"].strip()
        assert body and body in p.text  # the answer repeats the prompt
    files = {p.id.split(":")[0] for p in prompts.grounded_prompts(limit=8)}
    assert len(files) == 8  # a small limit still mixes source files


def test_adversarial_set():
    tok = FakeTokenizer()
    a, b = prompts.load_prompts("adversarial", tok, limit=5), prompts.adversarial_prompts(tok, 5)
    assert len(a) == 5 and [p.token_ids for p in a] == [p.token_ids for p in b]
    assert all(len(p.token_ids) == prompts.ADVERSARIAL_LEN for p in a)
    assert not {t for p in a for t in p.token_ids} & set(tok.all_special_ids)
    with pytest.raises(ValueError):
        prompts.load_prompts("adversarial", None)


def test_jsonl_prompts(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(
        json.dumps({"prompt": "a", "task_id": "t1", "lang": "py"}) + "\n\n" + json.dumps({"prompt": "b"}) + "\n"
    )
    items = prompts.load_prompts(str(path))
    assert [(p.id, p.text, p.meta) for p in items] == [("t1", "a", {"task_id": "t1", "lang": "py"}), ("p/3", "b", {})]
    path.write_text(json.dumps({"text": "a"}) + "\n")
    with pytest.raises(ValueError, match="string 'prompt'"):
        prompts.load_prompts(str(path))
    with pytest.raises(ValueError, match="neither"):
        prompts.load_prompts(str(tmp_path / "missing.jsonl"))


def test_encode_cuts_from_the_left():
    p = prompts.Prompt("x", token_ids=list(range(10)))
    assert prompts.encode(p, None, max_len=4) == [6, 7, 8, 9]
    assert prompts.encode(prompts.Prompt("y", text="abc"), FakeTokenizer()) == [47, 48, 49]


@pytest.mark.parametrize(
    "a, b, expected",
    [([1, 2, 3], [1, 2, 3], None), ([1, 2, 3], [1, 5, 3], 1), ([1, 2], [1, 2, 3], 2), ([], [], None), ([4], [], 0)],
)
def test_first_difference(a, b, expected):
    assert first_difference(a, b) == expected


def _record(pid, label, n, forwards, wall, mismatch=None, steps=None, accepted=None):
    result = RunResult([7] * n, forwards, wall * 0.8, wall, steps, accepted, 100.0, prefill_s=0.1)
    return Record(pid, label, 5, result, mismatch)


def test_a_flip_that_changes_an_output_s_length_is_compared_per_token():
    """Where a sampled rounding flip makes one output longer, speed is tokens per second: a
    method that made 20 tokens in the time greedy made 10 is twice as fast, not as fast."""
    records = [
        _record("a", "greedy", 10, 10, 1.0),
        _record("a", "fast", 20, 20, 1.0, mismatch=4),
        _record("b", "greedy", 10, 10, 1.0),
        _record("b", "fast", 10, 5, 0.5),
    ]
    doc = report.document({"dtype": "bfloat16"}, records, ["greedy", "fast"], "greedy", exactness=True)
    assert doc["methods"]["fast"]["speedup"] == pytest.approx((30 / 1.5) / (20 / 2.0))
    assert [p["speedup"] for p in doc["prompts"] if p["method"] == "fast"] == pytest.approx([2.0, 2.0])
    assert doc["methods"]["fast"]["median_speedup"] == pytest.approx(2.0)


def test_summaries_and_table():
    records = [
        _record("a", "greedy", 10, 10, 1.0, steps=9, accepted=0),
        _record("a", "fast", 10, 4, 0.5, steps=3, accepted=2),
        _record("b", "greedy", 10, 10, 3.0, steps=9, accepted=0),
        _record("b", "fast", 10, 5, 1.0, mismatch=4),
    ]
    doc = report.document({"dtype": "float32"}, records, ["greedy", "fast"], "greedy", exactness=True)
    fast = doc["methods"]["fast"]
    assert fast["speedup"] == pytest.approx(4.0 / 1.5)
    assert fast["median_speedup"] == pytest.approx((2.0 + 3.0) / 2)
    assert fast["tokens_per_forward"] == pytest.approx(20 / 9)
    assert fast["acceptance_rate"] == pytest.approx(2 / 3)  # prompt b's steps are unknown
    assert fast["overhead_share"] == pytest.approx(0.2)
    # mean seconds of a forward after the prefill, relative to greedy's
    assert fast["forward_cost"] == pytest.approx(((1.2 - 0.2) / 7) / ((3.2 - 0.2) / 18))
    assert fast["mismatches"] == 1 and doc["methods"]["greedy"]["mismatches"] == 0
    assert list(fast)[: len(report.METHOD_KEYS)] == list(report.METHOD_KEYS)
    doc["config"]["baseline"] = "greedy"
    assert report.explain(doc)[0].startswith("fast: 2.22 tokens/forward / 0.86 forward cost = 2.59x")
    text = report.table(doc)
    assert "NO 1/2" in text and text.splitlines()[0].startswith("method")
    assert report.mismatch_lines(doc) == ["MISMATCH: fast differs from greedy on 1/2 prompts: b@4"]
    sampled = report.document({}, records, ["greedy", "fast"], "greedy", exactness=False)
    assert sampled["methods"]["fast"]["mismatches"] is None


def test_probe_appended_per_forward():
    probe = ForwardProbe.__new__(ForwardProbe)
    probe.starts = [0, 5, 8, 9]  # prompt of 5; the steps commit 1, 3, 1, then 2 to reach 12
    assert probe.appended_per_forward(5, 12) == [1, 3, 1, 2]
    probe.starts = [0, None]
    assert probe.appended_per_forward(5, 7) is None


def test_parse_grid_and_best():
    assert sweep.parse_grid("1,2,4", (9,), "window") == (1, 2, 4)
    assert sweep.parse_grid("2-4,4", (9,), "window") == (2, 3, 4)
    assert sweep.parse_grid(None, (9,), "window") == (9,)
    with pytest.raises(ValueError):
        sweep.parse_grid("a", (9,), "window")
    cells = [{"speedup": 2.0, "mismatches": 1}, {"speedup": 1.5, "mismatches": 0}, {"speedup": None, "mismatches": 0}]
    assert sweep.best(cells)["speedup"] == 1.5


def test_rounding_ties_are_told_apart_from_mismatches():
    """A mismatch where greedy's two best logits were a rounding step apart is a tie; one
    real mismatch among ties keeps the run a mismatch."""
    records = [
        _record("a", "greedy", 10, 10, 1.0),
        _record("a", "fast", 10, 4, 0.5, mismatch=3),
        _record("b", "greedy", 10, 10, 1.0),
        _record("b", "fast", 10, 4, 0.5),
    ]
    records[1].tie_margin = 2e-6
    doc = report.document({"dtype": "float32"}, records, ["greedy", "fast"], "greedy", exactness=True)
    assert doc["methods"]["fast"]["ties"] == 1 and report.only_ties(doc)
    assert "tie 1/2" in report.table(doc)
    assert "rounding tie" in report.mismatch_lines(doc)[1] and "logit gap 2.0e-06" in report.mismatch_lines(doc)[0]
    records[3].first_mismatch, records[3].tie_margin = 5, 0.5
    doc = report.document({"dtype": "float32"}, records, ["greedy", "fast"], "greedy", exactness=True)
    assert not report.only_ties(doc) and "NO 2/2" in report.table(doc)


def test_sampled_flips_are_told_apart_from_bugs_by_the_verdict():
    """Sampled mismatches count as ties by their verdict, not by ``tie_margin`` (inf when a
    token lies outside the support): a boundary flip is named as one, a bug keeps the run NO."""
    boundary = {
        "kind": "boundary",
        "race_gap": None,
        "tolerance": 1.3,
        "token": 201,
        "edge": "top-p",
        "edge_gap": 0.089,
        "shortfall": -1.6,
        "reason": "a rounding flip at the top-p boundary: ...",
    }
    bug = {
        "kind": "bug",
        "race_gap": None,
        "tolerance": 1.3,
        "token": 9,
        "edge": "top-p",
        "edge_gap": 3.9,
        "shortfall": None,
        "reason": "likely a bug: lookahead's token 9 lies ...",
    }
    records = [
        _record("a", "greedy", 10, 10, 1.0),
        _record("a", "fast", 10, 4, 0.5, mismatch=3),
        _record("b", "greedy", 10, 10, 1.0),
        _record("b", "fast", 10, 4, 0.5),
    ]
    records[1].tie_margin, records[1].flip = float("inf"), boundary
    config = {"dtype": "bfloat16", "sample": {"do_sample": True}}
    doc = report.document(config, records, ["greedy", "fast"], "greedy", exactness=True)
    fast = doc["methods"]["fast"]
    assert fast["ties"] == 1 and fast["boundary_flips"] == 1 and report.only_ties(doc)
    assert doc["prompts"][1]["flip"] == boundary
    lines = report.mismatch_lines(doc)
    assert "a@3 (top-p boundary flip: token 201 8.9e-02 from its edge <= 1.3e+00)" in lines[0]
    assert (
        "logit gap" not in lines[0]
        and "1 at a support boundary (top-k, top-p, min-p, typical-p, epsilon, eta)" in lines[1]
    )
    assert lines[2] == "  a@3: a rounding flip at the top-p boundary: ..."
    records[3].first_mismatch, records[3].tie_margin, records[3].flip = 5, float("inf"), bug
    doc = report.document(config, records, ["greedy", "fast"], "greedy", exactness=True)
    assert not report.only_ties(doc) and "NO 2/2" in report.table(doc)
    lines = report.mismatch_lines(doc)
    assert "b@5 (likely a bug: token 9 3.9e+00 outside top-p > 1.3e+00)" in lines[0]
    assert "  b@5: likely a bug: lookahead's token 9 lies ..." in lines


def test_batches_are_left_padded_groups():
    from lookahead.bench.prompts import Prompt
    from lookahead.bench.runner import batches

    prompts = [Prompt(f"p{i}", "x") for i in range(5)]
    groups = batches(prompts, [[5, 6, 7], [8], [9, 10], [11, 12, 13, 14], [15]], 2, 0, "cpu")
    assert [g[0] for g in groups] == ["p0+1", "p2+1", "p4"]
    ids, mask = groups[0][1], groups[0][2]
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert groups[2][1].tolist() == [[15]] and groups[2][2] is None


def test_multiturn_turns_carry_the_earlier_turns():
    """Sessions of 3, 4, 5 turns in turn; turn t's prompt is turn t-1's, its answer, then the task."""
    items = prompts.load_prompts("multiturn", limit=12)
    sessions = [p.meta["session"] for p in items]
    assert [sessions.count(s) for s in dict.fromkeys(sessions)] == [3, 4, 5]
    rows = prompts._humaneval_rows(12)
    for at, (prev, cur) in enumerate(zip(items, items[1:])):
        if cur.meta["turn"]:
            answer = rows[at]["canonical_solution"]
            assert cur.text.startswith(prev.text + answer + "\n\n# Task")
            assert cur.text.endswith(rows[at + 1]["prompt"])
        else:
            assert cur.text == "# Task 1\n" + rows[at + 1]["prompt"]


def test_stdlib_test_prompts_are_held_out_code():
    items = prompts.load_prompts("stdlib-tests", limit=5)
    files = [p.id.split("/")[1].split(":")[0] for p in items]
    assert len(set(files)) == 5 and all(f.startswith("test_") for f in files)
    assert all(p.meta["expected"] and "def " in p.text for p in items)
