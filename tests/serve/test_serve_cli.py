"""``lookahead serve``'s options: refused before anything loads (exit 2, one line), loopback by
default, ``--continuous-batching`` refused with the reason."""

from __future__ import annotations

import pytest

from lookahead import cli


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
    ],
)
def test_bad_options_exit_2_with_one_line(argv, message, capsys):
    assert cli.main(["serve", *argv]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("lookahead serve: error: ") and message in err and err.count("\n") == 1


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
