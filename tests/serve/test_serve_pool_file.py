"""The kept pool is the user's data: ``--pool PATH`` loads it at start (a bad file: one clear line,
exit 2), the server saves it atomically every N requests and when SIGTERM stops it, a ``kill -9``
in the middle of a save leaves a file that loads, and a reloaded pool still changes no answer."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from lookahead import cli
from lookahead.drafts.kept import KeptState
from lookahead.drafts.pool import NgramPool
from lookahead.serve.store import PoolStore, remove_stale_temporaries, save_atomic

from serving import embedded_options, live, need_server_packages

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S, STOP_TIMEOUT_S = 120, 60
SAVER = """
import sys
import numpy as np
from lookahead.drafts.kept import KeptState
from lookahead.serve.store import save_atomic

pools = []
for k in range(2):  # two versions, told apart by their history's tokens; big, so a save takes a while
    pool = KeptState(history=1 << 20)
    pool.remember(np.full((1 << 20) - 1, k + 3))
    pools.append(pool)
save_atomic(pools[0], sys.argv[1])
print("saved", flush=True)
i = 1
while True:
    save_atomic(pools[i % 2], sys.argv[1])
    i += 1
"""


def env() -> dict:
    """This checkout first on the path, one thread: the child runs the code under test."""
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize(
    "contents, message",
    [
        (b"not a pool\n", "not a lookahead pool"),
        (b"PK\x03\x04 truncated", "damaged or truncated"),
    ],
)
def test_a_bad_pool_file_is_one_line_and_exit_2(tmp_path, capsys, contents, message):
    need_server_packages()
    path = tmp_path / "pool.npz"
    path.write_bytes(contents)
    assert cli.main(["serve", "--pool", str(path), "--port", "0"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("lookahead serve: error: ") and message in err and err.count("\n") == 1


def test_a_pool_of_another_shape_or_folder_is_refused(tmp_path, capsys):
    need_server_packages()
    KeptState(NgramPool(4, 2)).save(tmp_path / "small.npz")
    assert cli.main(["serve", "--pool", str(tmp_path / "small.npz"), "--port", "0"]) == cli.EXIT_USAGE
    assert "ngram=4" in capsys.readouterr().err
    assert cli.main(["serve", "--pool", str(tmp_path / "no" / "pool.npz"), "--port", "0"]) == cli.EXIT_USAGE
    assert "its folder does not exist" in capsys.readouterr().err


def test_an_atomic_save_replaces_the_file_whole(tmp_path):
    path = tmp_path / "pool.npz"
    old, new = KeptState(), KeptState()
    old.remember(np.arange(3, 10))
    new.remember(np.arange(3, 30))
    save_atomic(old, str(path))
    save_atomic(new, str(path))
    assert len(KeptState.load(path).history) == 28  # numpy added no ".npz", no temp file is left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pool.npz"]


def test_kill_9_during_saves_leaves_a_pool_that_loads(tmp_path):
    """A process saving two versions over one path, again and again, killed at random moments:
    the path always holds one of the two versions, whole, and a new store removes exactly the
    temporary file a kill inside a save left. Rounds go on (at most 12) until a kill has landed
    inside a save: a temporary file seen a moment before the kill makes that likely, not certain."""
    path = tmp_path / "pool.npz"
    interrupted = rounds = 0
    while rounds < 3 or (not interrupted and rounds < 12):
        rounds += 1
        child = subprocess.Popen([sys.executable, "-c", SAVER, str(path)], stdout=subprocess.PIPE, env=env())
        try:
            assert select.select([child.stdout], [], [], START_TIMEOUT_S)[0], "the saver did not start"
            assert child.stdout.readline().strip() == b"saved"
            time.sleep(random.uniform(0.05, 0.4))
            wait_for_a_temporary(tmp_path, child)
        finally:
            child.kill()  # SIGKILL: no handler, no cleanup
            child.wait(STOP_TIMEOUT_S)
        history = KeptState.load(path).history.tokens
        assert history.shape[0] == 1 << 20 and int(history[0]) in (3, 4)
        leftovers = [p for p in tmp_path.iterdir() if p.name != "pool.npz"]
        interrupted += bool(leftovers)
        assert sorted(remove_stale_temporaries(str(path))) == sorted(str(p) for p in leftovers)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["pool.npz"]
    assert interrupted, f"no kill in {rounds} rounds landed inside a save: the test proved nothing"


def wait_for_a_temporary(folder: Path, child: subprocess.Popen, timeout_s: float = 5.0) -> None:
    """Return as soon as ``folder`` holds a save's temporary file (the kill that follows then
    most likely lands inside that save), or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and child.poll() is None:
        if any(p.name.endswith(".tmp") for p in folder.iterdir()):
            return
        time.sleep(0.0005)


def test_a_new_store_removes_only_dead_savers_temporaries(tmp_path):
    path = tmp_path / "pool.npz"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(STOP_TIMEOUT_S)
    stale = tmp_path / f".pool.npz.{dead.pid}.abc123.tmp"
    live_one = tmp_path / f".pool.npz.{os.getpid()}.def456.tmp"  # a save in progress: this process runs
    other = tmp_path / f".other.npz.{dead.pid}.abc123.tmp"  # another target's
    for p in (stale, live_one, other):
        p.write_bytes(b"partial")
    PoolStore(KeptState(), str(path), None, 10)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live_one.name, other.name])


def test_sigterm_saves_the_pool_and_a_reload_is_still_exact(tmp_path, servers):
    """``lookahead serve --pool`` in its own process: two requests, SIGTERM, exit 0 with the pool
    saved; a server started from that file answers as plain serve does."""
    path = tmp_path / "pool.npz"
    log = open(tmp_path / "stderr.txt", "wb")  # noqa: SIM115 - the child writes it until it exits
    argv = ["serve", "--port", "0", "--pool", str(path), "--save-every", "100", "--no-warmup", "--threads", "1"]
    keyed = {**env(), "LOOKAHEAD_API_KEY": "k-env"}
    child = subprocess.Popen([sys.executable, "-m", "lookahead", *argv], stdout=subprocess.PIPE, stderr=log, env=keyed)
    try:
        url = _wait_for_url(child)
        import openai

        with pytest.raises(urllib.error.HTTPError) as refused:  # the key from the environment is asked for
            urllib.request.urlopen(f"{url}/models", timeout=30)
        assert refused.value.code == 401
        client = openai.OpenAI(base_url=url, api_key="k-env", timeout=60, max_retries=0)
        for prompt in ("def add(a, b):\n", "class Point:\n"):
            client.completions.create(model=servers.look.model, prompt=prompt, max_tokens=16)
        assert not path.exists()  # --save-every 100: nothing saved yet
        child.send_signal(signal.SIGTERM)
        assert child.wait(STOP_TIMEOUT_S) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(STOP_TIMEOUT_S)
        log.close()
    said = (tmp_path / "stderr.txt").read_text()
    assert "lookahead: stopped; the pool was saved to" in said and "lookahead: lookahead serve" not in said
    assert "lookahead serve: loading" in said and "no start-up decode" in said
    assert len(KeptState.load(path).history) > 32  # both requests' texts
    _reloaded_is_exact(path, servers)


def _wait_for_url(child) -> str:
    """The URL ``lookahead serve`` prints once it listens; bounded in time (a child that hangs
    silent fails the test, it does not hang it)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([child.stdout], [], [], left)[0]:
            break
        line = child.stdout.readline().decode()
        if not line:
            break
        if line.startswith("lookahead serve:") and "http://" in line:
            return line.split(" on ", 1)[1].split()[0]
    raise AssertionError(f"lookahead serve did not start (exit status {child.poll()})")


def _reloaded_is_exact(path, servers) -> None:
    from lookahead.serve.app import build_app

    served = build_app(embedded_options(pool_path=str(path), warmup=False))
    assert len(served.runner.store.pool.history) > 32
    with live(served, servers.plain.model) as look:
        for prompt in ("def add(a, b):\n", "def add(x, y):\n"):
            got = look.client.completions.create(model=look.model, prompt=prompt, max_tokens=24)
            want = servers.plain.client.completions.create(model=look.model, prompt=prompt, max_tokens=24)
            assert got.choices[0].text == want.choices[0].text
