"""``lookahead index build``: files and folders, include and exclude patterns, the written index
(every token of every matched file, each file followed by -1), and usage errors."""

from __future__ import annotations

import pytest

import lookahead
from lookahead import SuffixIndex, cli

needs_embedded = pytest.mark.skipif(
    not (lookahead.default_model_path() / "model.safetensors").is_file(), reason="embedded model not shipped"
)


@needs_embedded
def test_index_build_tokenizes_the_matched_files(tmp_path, capsys):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(lookahead.default_model_path()))
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    files = {"src/a.py": "def add(a, b):\n    return a + b\n", "src/pkg/b.py": "import os\nprint(os.sep)\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "src" / "notes.txt").write_text("not python")
    (tmp_path / "src" / "pkg" / "test_b.py").write_text("assert True\n")
    out = tmp_path / "corpus.npz"
    argv = ["index", "build", str(tmp_path / "src"), "--include", "*.py", "--exclude", "*/test_*", "-o", str(out)]
    assert cli.main(argv) == 0
    assert "indexed 2 files" in capsys.readouterr().out
    index = SuffixIndex.load(out, vocab_size=len(tok))
    want = []
    for name in sorted(files):
        want += tok(files[name], add_special_tokens=False).input_ids + [-1]
    assert index.text.tolist() == want
    ids = tok(files["src/a.py"], add_special_tokens=False).input_ids
    assert index.count(ids[2:6]) == 1 and index.count(ids) == 1


def test_index_build_without_matches_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("x")
    code = cli.main(["index", "build", str(tmp_path), "--include", "*.py", "-o", str(tmp_path / "i.npz")])
    assert code == 2 and "no files matched" in capsys.readouterr().err
    code = cli.main(["index", "build", str(tmp_path / "missing"), "-o", str(tmp_path / "i.npz")])
    assert code == 2 and "does not exist" in capsys.readouterr().err


@needs_embedded
def test_generate_refuses_a_spoiled_or_foreign_index_with_exit_2(tmp_path, capsys):
    """A truncated index, a text file, and an index marked with another tokenizer of the same
    vocabulary size: each a usage error (exit 2) that says what the file is not."""
    import numpy as np

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("def add(a, b):\n    return a + b\n" * 400)
    good = tmp_path / "corpus.npz"
    assert cli.main(["index", "build", str(tmp_path / "src"), "-o", str(good)]) == 0
    assert good.stat().st_size > 5000
    (tmp_path / "cut.npz").write_bytes(good.read_bytes()[:5000])
    (tmp_path / "notes.txt").write_text("not an index\n")
    data = dict(np.load(good))
    size = str(data["vocabulary"][()]).split(":")[0]
    data["vocabulary"] = np.array(f"{size}:0123456789abcdef")  # same size, other tokens
    np.savez(tmp_path / "foreign.npz", **data)
    capsys.readouterr()
    for name, message in (
        ("cut.npz", "damaged or truncated"),
        ("notes.txt", "not a lookahead suffix index"),
        ("foreign.npz", "made with another tokenizer"),
    ):
        argv = ["generate", "--max-new-tokens", "4", "--index", str(tmp_path / name), "def f():"]
        assert cli.main(argv) == 2, name
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
