"""Write a transformers ``custom_generate`` folder that runs lookahead decoding.

transformers 5.x loads ``custom_generate="user/repo"`` (or a local folder) by checking
``custom_generate/requirements.txt`` against the installed packages and calling the
``generate`` function of ``custom_generate/generate.py`` as
``generate(model=model, **generate_arguments)``. It only does so when the caller passes
``trust_remote_code=True``: this package never sets that flag itself.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = "lookahead-decoding"

GENERATE_PY = '''\
"""Exact lookahead decoding as a transformers custom_generate method.

    out = model.generate(input_ids, custom_generate="<this repo>", trust_remote_code=True,
                         max_new_tokens=128)

returns what model.generate returns, the same tokens as greedy decoding (exact in fp32), in
fewer forward passes. Extra keywords: lookahead_config=lookahead.LookaheadConfig(...),
lookahead_stats=lookahead.LookaheadStats(), lookahead_pool=, generator=.
Without lookahead_pool=, one pool is kept on the model object across calls (under
`transformers serve MODEL --trust-remote-code`: across requests); it never changes an output.
This file only forwards to the installed package {package} (pip install {package}).
"""

try:
    import lookahead
except ImportError as err:  # a bare import would make transformers suggest another package's name
    raise ImportError("this custom_generate needs the {package} package: pip install {package}") from err


def generate(*args, model, **kwargs):
    """Decode with lookahead.generate; takes and returns what model.generate does.

    transformers calls generate(model=model, **generate_arguments). model is keyword-only
    because from_pretrained(..., trust_remote_code=True) on a repository holding this folder
    binds functools.partial(generate, model=model) as model.generate, which then gets the
    input ids positionally.
    """
    if kwargs.get("custom_generate") is not None:
        # Re-entered through that bound model.generate: lookahead.generate calls model.generate
        # with its own decoding loop, which transformers' generate runs.
        return type(model).generate(model, *args, **kwargs)
    from lookahead.serve import kept  # a pool kept on the model across calls

    return kept.generate(model, *args, **kwargs)
'''

README_MD = """\
---
library_name: transformers
tags:
  - custom_generate
---

# Lookahead decoding (custom_generate)

Exact lookahead decoding for decoder-only models ({package}): greedy output equals
`model.generate(do_sample=False)` token for token (fp32), in fewer forward passes; sampling keeps
the model's distribution. No draft model.

## Push it to the Hub

From this folder, after `hf auth login`:

```bash
hf upload YOUR_USER/lookahead-generate .
```

(huggingface_hub < 1.0: `huggingface-cli upload YOUR_USER/lookahead-generate .`)

or from Python: `HfApi().upload_folder(repo_id="YOUR_USER/lookahead-generate", folder_path=".")`
(after `HfApi().create_repo("YOUR_USER/lookahead-generate", exist_ok=True)`).
You can also copy `custom_generate/` into a model repository.

## Use it

```python
out = model.generate(input_ids, custom_generate="YOUR_USER/lookahead-generate",
                     trust_remote_code=True, max_new_tokens=128)
```

`trust_remote_code=True` runs `custom_generate/generate.py` from the repository: read it first
(it only forwards to the installed `lookahead` package). It needs `pip install {package}`.
Extra keywords: `lookahead_config=lookahead.LookaheadConfig(window=4, ngram=5, guesses=2)`,
`lookahead_stats=lookahead.LookaheadStats()`.
"""

FILES = {
    "custom_generate/generate.py": GENERATE_PY,
    "custom_generate/requirements.txt": "{package}>={version}\n",
    "README.md": README_MD,
}
KEEP_IF_PRESENT = ("README.md",)  # an existing model card is never replaced


def export_custom_generate(path, overwrite: bool = False) -> list[Path]:
    """Write a transformers ``custom_generate`` folder for lookahead decoding into ``path``.

    Writes ``path/custom_generate/generate.py``, ``path/custom_generate/requirements.txt``
    (naming ``lookahead-decoding``) and ``path/README.md`` (how to push it to the Hub and call
    ``model.generate(custom_generate="user/repo", trust_remote_code=True)``); an existing
    README.md, e.g. a model card, is left alone. ``path`` may be a model folder.

    Returns the files written. Raises ``FileExistsError`` for a ``custom_generate`` file that
    exists with other contents unless ``overwrite``, and ``NotADirectoryError`` when ``path``
    is a file.
    """
    from lookahead import __version__

    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    root = Path(path).expanduser()
    if root.exists() and not root.is_dir():
        raise NotADirectoryError(f"path {str(root)!r} is a file; give a folder to write custom_generate/ into")
    contents = {name: text.format(package=PACKAGE, version=__version__) for name, text in FILES.items()}
    todo = _to_write(root, contents, overwrite)
    written = []
    for name in todo:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(contents[name], encoding="utf-8")
        written.append(target)
    return written


def _to_write(root: Path, contents: dict, overwrite: bool) -> list[str]:
    """The files to write; refuses (before writing anything) to replace different contents."""
    todo = []
    for name, text in contents.items():
        target = root / name
        if not target.exists():
            todo.append(name)
        elif name in KEEP_IF_PRESENT or target.read_text(encoding="utf-8") == text:
            continue
        elif overwrite:
            todo.append(name)
        else:
            raise FileExistsError(
                f"{str(target)!r} exists with other contents; pass overwrite=True (--force) to replace it"
            )
    return todo
