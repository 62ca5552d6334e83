"""The zero-install path: a ``lookahead export-custom-generate`` folder inside a model folder, under
plain transformers serve with ``--trust-remote-code`` (its app, its managers, nothing of ours):
answers equal plain serve's, and one pool is kept on the loaded model across requests."""

from __future__ import annotations

import os

from test_serve_exact import complete

import lookahead
from lookahead.default_model import default_model_path
from lookahead.serve import kept

from serving import embedded_options, live, need_server_packages

PROMPTS = ("def add(a, b):\n", "def add(a, b, c):\n", "class Point:\n")


def test_an_exported_folder_keeps_a_pool_per_model_under_plain_serve(tmp_path, servers):
    need_server_packages()
    from lookahead.serve.app import build_app

    for entry in default_model_path().iterdir():  # the embedded model's files, linked, not copied
        os.symlink(entry, tmp_path / entry.name)
    lookahead.export_custom_generate(tmp_path)
    served = build_app(embedded_options(model_dir=str(tmp_path), trust_remote_code=True), lookahead=False)
    (timed,) = served.model_manager.loaded_models.values()
    with live(served, str(tmp_path)) as remote:
        held = []
        for prompt in PROMPTS:
            assert complete(remote, False, prompt=prompt, max_tokens=24) == complete(
                servers.plain, False, prompt=prompt, max_tokens=24
            )
            (pool, _lock), *others = getattr(timed.model, kept.ATTRIBUTE).values()
            held.append(len(pool.history))
    assert not others and held[0] < held[1] < held[2]  # one pool, each request's text kept in it


def test_a_pool_in_use_is_not_shared_with_a_concurrent_call():
    class Model:
        pass

    model = Model()
    with kept.kept_pool(model, None) as first:
        with kept.kept_pool(model, None) as second:
            assert first is not None and second is None  # lookahead.generate makes a fresh one
    with kept.kept_pool(model, None) as again:
        assert again is first
