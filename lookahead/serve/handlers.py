"""transformers' three text handlers (``/v1/completions``, ``/v1/chat/completions``,
``/v1/responses``), each with its ``handle_request`` in the order transformers runs it, and three
changes (``transformers/cli/serving/{completion,chat_completion,response}.py``):

- the body is checked first (``checks.check_body``): a bad field is a 4xx naming it, before
  anything is tokenized;
- the prompt is tokenized (the chat template applied) on a thread of its own, not on the event
  loop, so ``/health`` and other clients are answered while a large prompt is read; one prompt at
  a time, so that concurrent large prompts do not add up in memory;
- the prompt and the tokens asked for are checked against the model's positions
  (``checks.fit_context``), and the model is the one the server serves under the names it
  serves it (``--served-model-name``): another name is a 404.

The rest is transformers': the model's loading, the generation config, the streamed and whole
answers (``_streaming``, ``_non_streaming``). Only ``lookahead serve``'s app uses these; the plain
reference app keeps transformers' own handlers.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from jinja2.exceptions import TemplateError
from transformers.cli.serving.chat_completion import ChatCompletionHandler
from transformers.cli.serving.completion import CompletionHandler
from transformers.cli.serving.response import ResponseHandler
from transformers.cli.serving.utils import Modality

from lookahead.serve.checks import PROMPT_FIELDS, check_body, context_of, fit_context, prompt_too_long
from lookahead.serve.errors import ApiError


class Served:
    """What the three handlers share: the names the model is served under (the first is the
    one answers carry when a request names none) and the one thread prompts are tokenized on."""

    def __init__(self, *args, names: tuple[str, ...], tokenizing: ThreadPoolExecutor, **kwargs):
        super().__init__(*args, **kwargs)
        self.names, self.tokenizing = names, tokenizing

    endpoint = ""  # "completions", "chat" or "responses": which checks apply

    async def handle_request(self, body: dict, request_id: str):
        known = getattr(self._valid_params_class, "__mutable_keys__", set())
        check_body(self.endpoint, body, set(known))
        name = self._pin_model(body)
        model_id, model, processor = self._resolve_model(body)
        modality = self.model_manager.get_model_modality(model, processor=processor)
        manager = self.generation_state.get_manager(model_id)
        context = context_of(model)
        inputs = await self._tokenized(processor, body, modality, context)
        inputs = inputs.to(model.device)
        gen_config = self._build_generation_config(body, model.generation_config)
        fit_context(self.endpoint, body, int(inputs["input_ids"].shape[-1]), context, gen_config)
        return await self.answer(request_id, model, processor, name, body, inputs, gen_config, manager)

    def _pin_model(self, body: dict) -> str:
        """The name the request asked for (a 404 unless it is one of ours), replaced in ``body``
        by the model folder transformers' manager loads; the name to answer with."""
        asked = body.get("model")
        if asked is not None and asked not in self.names:
            served = ", ".join(repr(name) for name in self.names)
            message = f"The model {asked!r} does not exist here: this server serves {served}"
            raise ApiError(404, message, "model", "model_not_found")
        body["model"] = self.model_manager.force_model
        return asked if asked is not None else self.names[0]

    async def _tokenized(self, processor, body: dict, modality, context: int | None):
        """:meth:`_fitting` on the tokenizing thread; what the tokenizer or the chat template
        could not read in the prompt is a 400 naming the prompt's field."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self.tokenizing, self._fitting, processor, body, modality, context)
        except (KeyError, TypeError, ValueError, TemplateError) as err:
            field = PROMPT_FIELDS[self.endpoint]
            reason = f"no field {err}" if isinstance(err, KeyError) else str(err)
            raise ApiError(400, f"{field} could not be read: {reason}", field, "invalid_value") from err

    def _fitting(self, processor, body: dict, modality, context: int | None):
        """:meth:`tokenize`, and a 400 for a prompt that fills the model's positions, raised
        once its tokens are dropped: the refusal's traceback must not keep them (a 4 MiB prompt
        is about a million tokens) alive while the next requests come."""
        inputs = self.tokenize(processor, body, modality)
        length = int(inputs["input_ids"].shape[-1])
        if context is not None and length >= context:
            del inputs
            raise prompt_too_long(self.endpoint, length, context)
        return inputs

    def tokenize(self, processor, body: dict, modality):
        raise NotImplementedError

    async def answer(self, request_id, model, processor, name, body, inputs, gen_config, manager):
        raise NotImplementedError

    def _templated(self, processor, messages: list[dict], tools, body: dict, modality):
        """The chat template applied to transformers' processor inputs, as its chat and
        responses handlers apply it (32 frames where a video is sent; the server's then the
        request's template settings)."""
        video = any(
            part.get("type") == "video"
            for message in messages
            for part in (message.get("content") if isinstance(message.get("content"), list) else [])
        )
        settings = {"num_frames": 32} if video else {}
        settings.update(self.chat_template_kwargs)
        settings.update(body.get("chat_template_kwargs") or {})
        return processor.apply_chat_template(
            messages,
            add_generation_prompt=True,
            tools=tools,
            return_tensors="pt",
            return_dict=True,
            tokenize=True,
            load_audio_from_video=modality == Modality.MULTIMODAL and video,
            **settings,
        )


class ServedCompletions(Served, CompletionHandler):
    endpoint = "completions"

    def tokenize(self, processor, body, modality):
        return getattr(processor, "tokenizer", processor)(body.get("prompt", ""), return_tensors="pt")

    async def answer(self, request_id, model, processor, name, body, inputs, gen_config, manager):
        parts = (request_id, model, processor, name, inputs, gen_config, manager, body.get("suffix"))
        return self._streaming(*parts) if body.get("stream") else await self._non_streaming(*parts)


class ServedChat(Served, ChatCompletionHandler):
    endpoint = "chat"

    def tokenize(self, processor, body, modality):
        messages = self.get_processor_inputs_from_messages(body["messages"], modality)
        return self._templated(processor, messages, body.get("tools"), body, modality)

    async def answer(self, request_id, model, processor, name, body, inputs, gen_config, manager):
        parts = (request_id, model, processor, name, inputs, gen_config)
        if body.get("stream"):
            return self._streaming(*parts, gen_manager=manager, tools=body.get("tools"))
        return await self._non_streaming(*parts, gen_manager=manager, tools=body.get("tools"))


class ServedResponses(Served, ResponseHandler):
    endpoint = "responses"

    def tokenize(self, processor, body, modality):
        messages = self.get_processor_inputs_from_messages(self._normalize_input(body), modality)
        return self._templated(processor, messages, self._normalize_tools(body.get("tools")), body, modality)

    async def answer(self, request_id, model, processor, name, body, inputs, gen_config, manager):
        parts = (request_id, model, processor, name, body, inputs, gen_config)
        tools = self._normalize_tools(body.get("tools"))
        if body.get("stream", True):  # transformers' default for this endpoint: streamed
            return self._streaming(*parts, gen_manager=manager, tools=tools)
        return await self._non_streaming(*parts, gen_manager=manager, tools=tools)
