"""``lookahead serve``: transformers' own OpenAI-compatible server, with lookahead as the model's
``generate`` and one pool kept across requests.

Nothing here is an HTTP server of ours: the app, its handlers and its model manager are
transformers' (``transformers/cli/serving``). We hook in through its extension points only:

- ``managers``: a ``GenerateManager`` subclass that hands transformers' manager the model behind
  a thin view whose ``generate`` is ``lookahead.generate`` (the model object itself is never
  changed), refuses bad requests with a 4xx before they reach the inference thread, and a
  ``ModelManager`` subclass pinned to the one model it serves;
- ``runner``: one request's ``lookahead.generate`` call with the kept pool, its log line;
- ``store``: the kept pool, its atomic saves (a temp file, then ``os.replace``) and its memory
  bound;
- ``stats``: the cumulative counts ``GET /lookahead/stats`` returns;
- ``app``: the app assembled as ``transformers serve`` assembles it, and the server's run;
- ``kept``: a pool per loaded model for the zero-install path (an exported ``custom_generate``
  folder under plain ``transformers serve --trust-remote-code``).

Only ``app`` and ``managers`` import the server's dependencies (``pip install
"lookahead-decoding[serve]"``); the other modules are light.
"""
