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
