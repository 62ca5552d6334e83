"""Every answer of ``lookahead serve`` is plain ``transformers serve``'s, text and finish reason:
completions and chat, streamed and not, greedy and seeded sampling, ``max_tokens``, ``stop``,
``temperature``, ``top_p``; with a pool full of other requests' texts; under 8 concurrent clients.

Both servers run the embedded model (fp32) in this process behind the same transformers app
(``conftest.servers``); the plain one is the reference. Requests go through the real ``openai``
client over loopback HTTP.
"""

from __future__ import annotations

import json
import threading

import pytest

SAMPLE = {"generation_config": json.dumps({"do_sample": True})}  # the embedded model's own config is greedy
CASES = {
    "greedy": dict(max_tokens=24),
    "greedy-stop": dict(max_tokens=24, stop=["\n\n", "return"]),
    "temperature-0": dict(max_tokens=16, temperature=0),
    "seeded": dict(max_tokens=20, seed=11, temperature=0.8, extra_body=SAMPLE),
    "seeded-top-p": dict(max_tokens=20, seed=5, temperature=1.0, top_p=0.9, extra_body=SAMPLE),
}
PROMPT = "def fibonacci(n):\n"
MESSAGES = [{"role": "system", "content": "Small, clear functions."}, {"role": "user", "content": "def mean(xs):\n"}]


def complete(live, stream: bool, prompt: str = PROMPT, **kwargs) -> tuple[str, str]:
    """``(text, finish_reason)`` of a completion, joined from its chunks when streamed."""
    if not stream:
        choice = live.client.completions.create(model=live.model, prompt=prompt, **kwargs).choices[0]
        return choice.text, choice.finish_reason
    parts, finish = [], None
    for chunk in live.client.completions.create(model=live.model, prompt=prompt, stream=True, **kwargs):
        for choice in chunk.choices:
            parts.append(choice.text or "")
            finish = choice.finish_reason or finish
    return "".join(parts), finish


def chat(live, stream: bool, messages=MESSAGES, **kwargs) -> tuple[str, str]:
    """``(content, finish_reason)`` of a chat completion, joined from its deltas when streamed."""
    if not stream:
        choice = live.client.chat.completions.create(model=live.model, messages=messages, **kwargs).choices[0]
        return choice.message.content, choice.finish_reason
    parts, finish = [], None
    for chunk in live.client.chat.completions.create(model=live.model, messages=messages, stream=True, **kwargs):
        for choice in chunk.choices:
            parts.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    return "".join(parts), finish


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("endpoint", [complete, chat], ids=["completions", "chat"])
@pytest.mark.parametrize("case", list(CASES))
def test_each_answer_is_plain_transformers_serves(servers, case, endpoint, stream):
    got = endpoint(servers.look, stream, **CASES[case])
    want = endpoint(servers.plain, stream, **CASES[case])
    assert got == want
    assert got[0], "an empty answer proves little"


def test_streamed_and_whole_answers_agree(servers):
    assert complete(servers.look, True, max_tokens=24) == complete(servers.look, False, max_tokens=24)


def test_a_pool_full_of_other_texts_changes_no_output(servers):
    """Fill the kept pool (n-grams and history) with texts that start as the prompt does and go
    on otherwise: its guesses are tried, fail, and the answer is still plain serve's."""
    runner = servers.look.served.runner
    models = servers.look.served.model_manager
    _, tokenizer = models.load_model_and_processor(models.process_model_name(servers.look.model))
    others = [PROMPT + "    return 'this is not what the model writes'\n" * 3, PROMPT + "    pass\n" * 8]
    with runner.store.lease() as pool:
        for text in others:
            ids = tokenizer(text, return_tensors="np").input_ids[0]
            pool.pool.insert_text(ids)
            pool.remember(ids)
    before = runner.stats.as_dict()["accepted_by_source"]
    assert complete(servers.look, False, max_tokens=32) == complete(servers.plain, False, max_tokens=32)
    assert runner.stats.as_dict()["accepted_by_source"] != before  # guesses were verified, some held


def test_eight_concurrent_clients_get_exact_answers(servers):
    """8 clients x 5 requests at once, greedy: each answer equals plain serve's for its prompt."""
    import openai

    prompts = [f"def f{i}(x):\n" if i % 2 else f"# step {i}\nimport os\n" for i in range(10)]
    want = {p: complete(servers.plain, False, prompt=p, max_tokens=12) for p in prompts}
    got, errors = [], []

    def client(k: int) -> None:
        live = servers.look
        own = openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", timeout=60, max_retries=0)
        try:
            for j in range(5):
                prompt = prompts[(k + j) % len(prompts)]
                text = own.completions.create(model=live.model, prompt=prompt, max_tokens=12).choices[0]
                got.append((prompt, (text.text, text.finish_reason)))
        except Exception as err:  # collected: an assert in a thread would be lost
            errors.append(err)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(got) == 40
    assert all(answer == want[prompt] for prompt, answer in got)


def test_the_responses_endpoint_is_exact_too(servers):
    def answer(live):  # transformers streams /v1/responses unless told not to
        kwargs = dict(model=live.model, input="def mean(xs):\n", max_output_tokens=16, stream=False)
        return live.client.responses.create(**kwargs).output_text

    assert answer(servers.look) == answer(servers.plain) != ""
