"""transformers' serving managers, extended where they let us: the generation manager decodes
with lookahead, the model manager serves one model only.

``transformers/cli/serving/utils.py``: ``GenerateManager.generate_streaming`` and
``generate_non_streaming`` call ``model.generate(**inputs, generation_config=..., tokenizer=...)``
(plus ``streamer=`` when streaming) on one inference thread per model; ``GenerationState``
hands the handlers that manager. ``model_manager.py``: ``ModelManager.load_model_and_processor``
loads and caches a model by name.
"""

from __future__ import annotations

import threading

from transformers.cli.serving.model_manager import ModelManager
from transformers.cli.serving.utils import GenerateManager, GenerationState

from lookahead.serve.errors import ApiError
from lookahead.serve.gate import client_gone
from lookahead.serve.runner import BadRequest, RequestCancelled, Runner
from lookahead.support import Unsupported


class LookaheadGenerateManager(GenerateManager):
    """transformers' sequential manager, handed a view of the model whose ``generate`` is
    lookahead's (``runner.LookaheadModel``); a request no decoding can serve is a 400 before it
    is queued, streamed or not. A non-streamed request whose client went away (the gate's
    ``client_gone``) stops at its next token, as a streamed one does."""

    def __init__(self, runner: Runner):
        super().__init__()
        self.runner = runner

    def generate_streaming(self, model, processor, inputs, gen_config, request_id, response_parser=None):
        self._check(gen_config)
        view = self.runner.view(model, request_id)
        return super().generate_streaming(view, processor, inputs, gen_config, request_id, response_parser)

    async def generate_non_streaming(self, model, processor, inputs, gen_config, request_id):
        self._check(gen_config)
        view = self.runner.view(model, request_id, client_gone.get())
        try:
            return await super().generate_non_streaming(view, processor, inputs, gen_config, request_id)
        except RequestCancelled as err:  # no one reads this answer: the client has gone
            raise ApiError(499, "the client went away: the request was cancelled", code="cancelled") from err
        except Unsupported as err:  # a model the start-up decode did not try (--no-warmup)
            raise ApiError(400, f"{err} (lookahead serve --fallback serves it with plain generate)") from err

    def _check(self, gen_config) -> None:
        try:
            self.runner.check(gen_config)
        except BadRequest as err:
            raise ApiError(400, str(err), err.param, "unsupported_parameter") from err


class LookaheadGenerationState(GenerationState):
    """One :class:`LookaheadGenerateManager` per model; never continuous batching (it runs its
    own paged-attention loop, never ``generate``: ``lookahead serve`` refuses the flag)."""

    def __init__(self, runner: Runner):
        super().__init__(continuous_batching=False)
        self.runner = runner
        self._managers: dict[str, LookaheadGenerateManager] = {}
        self._managers_lock = threading.Lock()

    def get_manager(self, model_id: str, use_cb: bool = False) -> LookaheadGenerateManager:
        if use_cb:  # unreachable: continuous_batching is False, so no handler asks for it
            raise RuntimeError("lookahead serve does not run continuous batching")
        with self._managers_lock:
            if model_id not in self._managers:
                self._managers[model_id] = LookaheadGenerateManager(self.runner)
            return self._managers[model_id]


class PinnedModelManager(ModelManager):
    """transformers' model manager, serving the model it was started with and no other: a
    client cannot make the server load a path or a hub id of its choosing (``/load_model``, or
    a request naming another model). ``names``: what ``/v1/models`` lists and requests may name
    (``--served-model-name``; default: the model folder as given)."""

    def __init__(self, *args, names: tuple[str, ...] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.names = tuple(names) or (self.force_model,)

    def load_model_and_processor(self, model_id_and_revision: str, *args, **kwargs):
        pinned = self.process_model_name(self.force_model) if self.force_model is not None else None
        if pinned is not None and model_id_and_revision != pinned:
            raise ValueError(f"this server serves {', '.join(map(repr, self.names))} only")
        return super().load_model_and_processor(model_id_and_revision, *args, **kwargs)

    def list_models(self, cache_dir: str | None = None) -> list[dict]:
        """transformers' entry for the pinned model, once per name it is served under."""
        entry = super().list_models(cache_dir)[0]
        return [{**entry, "id": name} for name in self.names]
