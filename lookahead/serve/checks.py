"""A request's body checked before anything is tokenized or queued, and its length against the
model's positions once it is: each refusal an :class:`~lookahead.serve.errors.ApiError` naming the
field, the value and what is allowed.

- a field of the wrong JSON type (``max_tokens: 1.5``, ``max_tokens: true``, ``stream: "yes"``):
  422, as FastAPI answers a typed field;
- a value out of range (``max_tokens: 0``, ``top_p: 2``), a field no endpoint of the OpenAI API
  has: 400 and 422;
- a field whose value asks for what the answer cannot carry (``n: 2``, ``logprobs``, ``echo``,
  ``suffix``, ...): 400. transformers' server builds one choice of text without
  log-probabilities and ignores these fields with a log line; lookahead serve refuses them
  rather than answer something else than was asked;
- a prompt and ``max_tokens`` past the model's positions (:func:`fit_context`): 400 naming both
  numbers, as vLLM answers; with no count asked for, the default is cut to what is left.
"""

from __future__ import annotations

import json
import math

from lookahead.serve.errors import ApiError

PROMPT_FIELDS = {"completions": "prompt", "chat": "messages", "responses": "input"}
COUNT_FIELDS = {  # the fields that ask for a number of new tokens, in the order transformers reads them
    "completions": ("max_tokens",),
    "chat": ("max_completion_tokens", "max_tokens"),
    "responses": ("max_output_tokens",),
}
SEED_RANGE = (-(1 << 63), (1 << 64) - 1)  # what torch.manual_seed takes


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _strings(value) -> bool:
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))


# field -> (test of its JSON type, the type in words): a wrong type is a 422
TYPES = {
    "model": (lambda v: isinstance(v, str), "a string"),
    "stream": (lambda v: isinstance(v, bool), "true or false"),
    "max_tokens": (_integer, "an integer"),
    "max_completion_tokens": (_integer, "an integer"),
    "max_output_tokens": (_integer, "an integer"),
    "n": (_integer, "an integer"),
    "best_of": (_integer, "an integer"),
    "top_logprobs": (_integer, "an integer"),
    "seed": (_integer, "an integer"),
    "temperature": (_number, "a number"),
    "top_p": (_number, "a number"),
    "frequency_penalty": (_number, "a number"),
    "presence_penalty": (_number, "a number"),
    "echo": (lambda v: isinstance(v, bool), "true or false"),
    "suffix": (lambda v: isinstance(v, str), "a string"),
    "stop": (_strings, "a string or a list of strings"),
    "generation_config": (lambda v: isinstance(v, str), "a string holding a JSON object"),
    "chat_template_kwargs": (lambda v: isinstance(v, dict), "an object"),
    "tools": (lambda v: isinstance(v, list) and all(isinstance(t, dict) for t in v), "a list of objects"),
    "messages": (lambda v: isinstance(v, list), "a list of messages"),
    "input": (lambda v: isinstance(v, (str, list)), "a string or a list of input items"),
    "instructions": (lambda v: isinstance(v, str), "a string"),
}

ONE_TEXT = "lookahead serve answers one choice of text"
# field -> (the values that ask for something the answer cannot carry, why): a 400 unless left out
UNSERVED = {
    "n": (lambda v: v != 1, f"{ONE_TEXT}: n must be 1"),
    "best_of": (lambda v: v != 1, f"{ONE_TEXT}: best_of must be 1"),
    "logprobs": (lambda v: v is not False, f"{ONE_TEXT}, without log-probabilities"),
    "top_logprobs": (lambda v: v != 0, f"{ONE_TEXT}, without log-probabilities"),
    "echo": (lambda v: v is not False, f"{ONE_TEXT}, without the prompt echoed"),
    "suffix": (lambda v: v != "", "a suffix (text to insert before) is not decoded towards"),
    "presence_penalty": (lambda v: v != 0, "no presence penalty is applied"),
    "response_format": (lambda v: not (isinstance(v, dict) and v.get("type") == "text"), "no format is enforced"),
    "tool_choice": (lambda v: v != "auto", "the model chooses whether to call a tool: only 'auto'"),
    "functions": (bool, "legacy functions are not passed to the model: use tools"),
    "function_call": (bool, "legacy functions are not passed to the model: use tools"),
    "audio": (lambda v: True, "no audio is produced"),
    "modalities": (lambda v: v != ["text"], "text only"),
    "web_search_options": (lambda v: True, "no web search is run"),
    "reasoning_effort": (lambda v: True, "no reasoning effort is set"),
    "previous_response_id": (lambda v: True, "no response is stored: send the whole input"),
    "background": (lambda v: v is not False, "requests run in the foreground"),
    "truncation": (lambda v: v != "disabled", "the input is never truncated (a long one is refused)"),
    "text": (lambda v: not (isinstance(v, dict) and v.get("format", {}).get("type", "text") == "text"), "text only"),
}
UNSERVED_PER_ENDPOINT = {"completions": {"logit_bias": (bool, "no logit bias is applied to completions")}}


def check_body(endpoint: str, body: dict, known: set[str]) -> None:
    """Refuse ``body`` for ``endpoint`` (``completions``, ``chat``, ``responses``) unless every
    field is one the endpoint's OpenAI parameters (``known``) have, of its JSON type, in range,
    and asks for nothing the answer cannot carry. JSON ``null`` is a field left out."""
    fields = {name: value for name, value in body.items() if value is not None}
    for name in fields:
        if known and name not in known:
            message = f"unknown field {name!r}: it is no parameter of this endpoint"
            raise ApiError(422, message, name, "unknown_parameter")
    for name, value in fields.items():
        test, words = TYPES.get(name, (None, None))
        if test is not None and not test(value):
            raise ApiError(422, f"{name} must be {words}, got {_shown(value)}", name, "invalid_type")
    _check_ranges(endpoint, fields)
    unserved = {**UNSERVED, **UNSERVED_PER_ENDPOINT.get(endpoint, {})}
    for name, value in fields.items():
        asks, why = unserved.get(name, (None, None))
        if asks is not None and asks(value):
            message = f"{name}={_shown(value)} is not served: {why}; leave it out"
            raise ApiError(400, message, name, "unsupported_parameter")
    _check_prompt(endpoint, fields)


def _check_ranges(endpoint: str, fields: dict) -> None:
    for name in COUNT_FIELDS[endpoint]:
        if name in fields and fields[name] < 1:
            raise ApiError(400, f"{name} must be an integer >= 1, got {fields[name]}", name, "invalid_value")
    temperature, top_p, seed = fields.get("temperature"), fields.get("top_p"), fields.get("seed")
    if temperature is not None and not (math.isfinite(temperature) and temperature >= 0):
        raise ApiError(400, f"temperature must be >= 0 (0: greedy), got {temperature}", "temperature", "invalid_value")
    if top_p is not None and not 0 < top_p <= 1:
        raise ApiError(400, f"top_p must be in (0, 1], got {top_p}", "top_p", "invalid_value")
    if seed is not None and not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise ApiError(400, f"seed must be in [-2**63, 2**64 - 1], got {seed}", "seed", "invalid_value")
    if "generation_config" in fields:
        try:
            settings = json.loads(fields["generation_config"])
        except ValueError as err:
            raise ApiError(400, f"generation_config is no JSON: {err}", "generation_config", "invalid_value") from err
        if not isinstance(settings, dict):
            raise ApiError(400, "generation_config must hold a JSON object", "generation_config", "invalid_value")


def _check_prompt(endpoint: str, fields: dict) -> None:
    """The prompt's shape, as the handlers read it: completions take one string, chat a
    non-empty list of messages, each an object with a string role."""
    if endpoint == "completions" and not isinstance(fields.get("prompt", ""), str):
        prompt = fields["prompt"]
        if isinstance(prompt, list):
            raise ApiError(400, "prompt must be one string: a list of prompts or of token ids is not served", "prompt")
        raise ApiError(422, f"prompt must be a string, got {_shown(prompt)}", "prompt", "invalid_type")
    if endpoint == "chat":
        messages = fields.get("messages")
        if not messages:
            raise ApiError(400, "messages must be a non-empty list of messages", "messages", "invalid_value")
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                shown = _shown(message)
                raise ApiError(
                    422, f"messages[{i}] must be an object with a string role, got {shown}", "messages", "invalid_type"
                )
            content = message.get("content")
            if content is not None and not isinstance(content, (str, list)):
                text = f"messages[{i}].content must be a string or a list of parts, got {_shown(content)}"
                raise ApiError(422, text, "messages", "invalid_type")
    if endpoint == "responses" and "input" not in fields:
        raise ApiError(400, "input is required: a string or a list of input items", "input", "invalid_value")


def requested_tokens(endpoint: str, body: dict) -> tuple[str, int] | None:
    """The field that asks for a number of new tokens and its value, or None where the server's
    default applies (``max_new_tokens`` in ``generation_config`` counts as asked)."""
    for name in COUNT_FIELDS[endpoint]:
        if body.get(name) is not None:
            return name, body[name]
    settings = json.loads(body["generation_config"]) if body.get("generation_config") else {}
    if settings.get("max_new_tokens") is not None:
        return "generation_config", settings["max_new_tokens"]
    return None


def fit_context(endpoint: str, body: dict, prompt_tokens: int, context: int | None, gen_config) -> None:
    """Check the prompt and the tokens asked for against the model's ``context`` positions, and
    cut the server's default to what is left where none were asked for (``gen_config`` is
    changed in place): a decode never runs past the positions the model has."""
    if context is None:
        return
    field, room = PROMPT_FIELDS[endpoint], context - prompt_tokens
    if room < 1:
        raise prompt_too_long(endpoint, prompt_tokens, context)
    asked = requested_tokens(endpoint, body)
    if asked is None:  # the server's default: at most what is left
        if gen_config.max_new_tokens is not None:
            gen_config.max_new_tokens = min(gen_config.max_new_tokens, room)
        elif gen_config.max_length is not None and gen_config.max_length > context:
            gen_config.max_length = context
        return
    name, count = asked
    if isinstance(count, int) and prompt_tokens + count > context:
        message = (
            f"This model's maximum context length is {context} tokens. However, you requested "
            f"{prompt_tokens + count} tokens ({prompt_tokens} in the {field}, {count} in the completion). "
            f"Please reduce the length of the {field} or {name} (at most {room} here)."
        )
        raise ApiError(400, message, name, "context_length_exceeded")


def prompt_too_long(endpoint: str, prompt_tokens: int, context: int) -> ApiError:
    """The 400 for a prompt that leaves no position for the completion."""
    field = PROMPT_FIELDS[endpoint]
    message = (
        f"This model's maximum context length is {context} tokens. However, your {field} has {prompt_tokens} "
        f"tokens, which leaves no room for the completion. Please reduce the length of the {field}."
    )
    return ApiError(400, message, field, "context_length_exceeded")


def context_of(model) -> int | None:
    """The positions ``model`` has (``max_position_embeddings`` or its older names); None where
    its config names none."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _shown(value) -> str:
    """A value as a message shows it: JSON, cut short (a prompt may be megabytes)."""
    if isinstance(value, list) and len(value) > 4:
        return f"a list of {len(value)} items"
    if isinstance(value, dict) and len(value) > 4:
        return f"an object of {len(value)} fields"
    text = json.dumps(value[:80] if isinstance(value, str) else value)
    return text if len(text) <= 80 else f"{text[:77]}..."
