"""``lookahead serve``'s options: refused before anything loads (exit 2, one line), loopback by
default, ``--continuous-batching`` refused with the reason."""

from __future__ import annotations

import threading

import pytest
from test_serve_exact import complete

from lookahead import cli

from serving import embedded_options, live, need_server_packages


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--continuous-batching"], "never calls generate"),
        (["--pool", "p.npz", "--no-keep-pool"], "pass one of them"),
        (["--model", "/no/such/model"], "no such folder"),
        (["--port", "70000"], "--port must be in [0, 65535]"),
        (["--threads", "0"], "--threads must be >= 1"),
        (["--save-every", "0"], "--save-every must be >= 1"),
        (["--set", "nope=1"], "unknown LookaheadConfig field(s) nope"),
        (["--max-request-bytes", "0"], "--max-request-bytes must be >= 1, got 0"),
        (["--api-key", " "], "--api-key must not be empty"),
        (["--served-model-name", ""], "--served-model-name must not be empty"),
        (["--pool", "/proc/pool.npz"], "--pool '/proc/pool.npz': cannot write in /proc"),
    ],
)
def test_bad_options_exit_2_with_one_line(argv, message, capsys):
    assert cli.main(["serve", *argv]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("lookahead serve: error: ") and message in err and err.count("\n") == 1


def test_a_pool_path_it_cannot_save_to_is_refused_before_the_model_loads(tmp_path, capsys):
    """A folder for a file, a folder it cannot write (as root only a read-only file system
    stops a write, hence /proc): one line, exit 2, and no model loaded."""
    for path, words in ((str(tmp_path), "is a folder: name a file in it"), ("/proc/pool.npz", "cannot write in /proc")):
        assert cli.main(["serve", "--pool", path, "--port", "0"]) == cli.EXIT_USAGE
        captured = capsys.readouterr()
        assert words in captured.err and captured.err.count("\n") == 1 and "Loading" not in captured.err + captured.out
    assert list(tmp_path.iterdir()) == []  # the trial file is gone


def test_the_api_key_comes_from_the_environment_unless_given(monkeypatch):
    from lookahead.cli.serve import validate

    monkeypatch.setenv("LOOKAHEAD_API_KEY", "from-env")
    for argv, key in ((["serve"], "from-env"), (["serve", "--api-key", "given"], "given")):
        args = cli.build_parser().parse_args(argv)
        validate(args)
        assert args.api_key == key
    monkeypatch.delenv("LOOKAHEAD_API_KEY")
    args = cli.build_parser().parse_args(["serve"])
    validate(args)
    assert args.api_key is None


def test_a_model_folder_without_safetensors_is_refused(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"a pickle")
    assert cli.main(["serve", "--model", str(tmp_path)]) == cli.EXIT_USAGE
    assert "loads safetensors only" in capsys.readouterr().err


def test_it_listens_on_loopback_unless_told(capsys):
    args = cli.build_parser().parse_args(["serve"])
    assert (args.host, args.port, args.no_keep_pool, args.trust_remote_code) == ("127.0.0.1", 8000, False, False)
    with pytest.raises(SystemExit) as exc:
        cli.main(["serve", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "example" in out and "lookahead serve" in out and "2 usage error" in out and "127.0.0.1" in out


def mpt_folder(path):
    """A tiny MPT (ALiBi: lookahead cannot decode it) with the tiny tokenizer, as a model folder."""
    import torch
    import transformers as tf

    from tiny_models import tiny_tokenizer

    torch.manual_seed(0)
    config = tf.MptConfig(vocab_size=48, d_model=32, n_layers=2, n_heads=4, architectures=["MptForCausalLM"])
    tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager").save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return str(path)


def test_a_model_lookahead_cannot_decode_is_refused_at_start_or_served_plain(tmp_path, capsys):
    need_server_packages()
    from lookahead.serve.app import ServeOptions, build_app

    folder = mpt_folder(tmp_path)
    capsys.readouterr()
    assert cli.main(["serve", "--model", folder, "--port", "0"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # after transformers' loading lines
    assert last.startswith("lookahead serve: error: ") and "does not honour a custom 4D attention mask" in last
    assert last.endswith("--fallback serves it with plain generate")
    options = ServeOptions(model_dir=folder, fallback=True)
    look, plain = build_app(options), build_app(options, lookahead=False)
    with live(look, folder) as a, live(plain, folder) as b:
        assert complete(a, False, prompt="abcab", max_tokens=6) == complete(b, False, prompt="abcab", max_tokens=6)
    assert look.runner.stats.as_dict()["outcomes"]["fallback"] == 1


def test_the_warm_up_decodes_on_the_thread_that_serves_the_requests(monkeypatch):
    """Not on the main thread: GNU OpenMP keeps a team of worker threads for each thread that
    ran a parallel region, and with more of them alive than cores its workers stop spinning
    between regions (every forward then waits on sleeping workers, measured 6-10% slower)."""
    need_server_packages()
    import lookahead
    from lookahead.serve.app import build_app

    decoding_threads, real = [], lookahead.generate

    def recording(*args, **kwargs):
        decoding_threads.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(lookahead, "generate", recording)
    options = embedded_options()
    served = build_app(options)
    assert len(decoding_threads) == 1 and decoding_threads[0] != threading.get_ident()  # the warm-up
    with live(served, options.model_dir) as server:
        assert complete(server, stream=False, max_tokens=4)[1] == "length"
    assert decoding_threads == [decoding_threads[0]] * 2


def test_a_transformers_without_the_serving_api_it_extends_is_one_line_and_exit_2(monkeypatch, capsys):
    """transformers 5.25 has no ``GenerateManager`` (5.19 no ``systemone``): exit 2 naming what is
    missing and the versions that have it."""
    need_server_packages()
    import transformers.cli.serving.utils as serving_utils

    monkeypatch.delattr(serving_utils, "GenerateManager")
    assert cli.main(["serve", "--port", "0"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no transformers.cli.serving.utils.GenerateManager" in err
    assert "transformers 5.20-5.24" in err and "pip install 'transformers>=5.20,<5.25'" in err


def test_the_start_up_check_covers_every_piece_the_server_takes_from_transformers():
    """``SERVING_API`` is the list the start-up check imports; a new import in ``lookahead/serve``
    that is not in it would crash older or newer transformers with a traceback again."""
    import re
    from pathlib import Path

    from lookahead.cli.serve import SERVING_API

    source = "\n".join(p.read_text() for p in (Path(cli.__file__).parents[1] / "serve").glob("*.py"))
    pattern = r"from transformers\.cli\.serving\.(\w+) import (?:\(([^)]*)\)|([\w, ]+))"  # (a, b) or a, b
    taken = {
        f"{module}.{name.strip()}"
        for module, grouped, inline in re.findall(pattern, source)
        for name in (grouped or inline).split(",")
        if name.strip()
    }
    assert taken and taken <= set(SERVING_API)
