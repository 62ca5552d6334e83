"""The ``servers`` fixture: the embedded model behind transformers' app twice in this process,
once with lookahead (a kept pool) and once plain, each a real uvicorn server on a free 127.0.0.1
port with an ``openai`` client (``serving.live``). Every exactness test asks both the same
request; the plain one is the reference, as ``transformers serve`` would answer it.
"""

from __future__ import annotations

import pytest

from serving import Pair, embedded_options, live, need_server_packages


@pytest.fixture(scope="session")
def servers():
    """lookahead serve (kept pool, in memory) and plain transformers serve, on the embedded model."""
    need_server_packages()
    from lookahead.serve.app import build_app

    options = embedded_options()
    look, plain = build_app(options), build_app(options, lookahead=False)
    with live(look, options.model_dir) as a, live(plain, options.model_dir) as b:
        yield Pair(a, b)
