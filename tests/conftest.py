"""Hypothesis profiles and shared fixtures.

Profiles (see docs/testing.md):

- ``dev``: the default on a workstation. 10 random examples per property, different ones
  each run (it keeps exploring); a failing example is saved in ``.hypothesis/`` and replayed
  first next time.
- ``ci``: chosen automatically when the ``CI`` environment variable is set to a true value
  (CI services set ``CI=true``; ``.ci/run`` runs plain ``python -m pytest -q`` under it).
  Derandomized: the same 20 examples per property on every run, so CI never fails on an
  example no one has seen locally; ``print_blob`` prints how to reproduce a failure.
- ``thorough``: 200 random examples per property, for a deliberate bug hunt (before a
  release, after touching the decoder, mask or cache)::

      HYPOTHESIS_PROFILE=thorough python -m pytest -q

(``mutation``: the ``ci`` examples without shrinking, for tools/mutation.sh.)

``HYPOTHESIS_PROFILE`` always wins over the ``CI`` default. Every profile sets
``deadline=None``: first calls JIT-compile numba kernels and build models.
"""

import os
import sys

import pytest
import torch
from hypothesis import HealthCheck, Phase, settings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "helpers"))  # tiny_models, strategies, ...

# Every profile starts from Hypothesis' own defaults, not from whatever profile is loaded:
# Hypothesis loads its built-in derandomized `ci` profile by itself whenever a `CI` variable
# exists (even CI=false), and a profile registered without a parent would inherit that.
_COMMON = dict(
    parent=settings.get_profile("default"),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", max_examples=10, derandomize=False, **_COMMON)
settings.register_profile("ci", max_examples=20, derandomize=True, print_blob=True, **_COMMON)
settings.register_profile("thorough", max_examples=200, derandomize=False, print_blob=True, **_COMMON)
# tools/mutation.sh: the ci examples without shrinking (a failure is all a mutant needs)
settings.register_profile(
    "mutation", max_examples=20, derandomize=True, phases=[Phase.explicit, Phase.reuse, Phase.generate], **_COMMON
)


def _default_profile() -> str:
    on_ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    return "ci" if on_ci else "dev"


settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or _default_profile())

torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture
def llama():
    from tiny_models import tiny_model

    return tiny_model("llama", "sdpa")


def pytest_sessionfinish(session, exitstatus):
    """Fail the run when any numba kernel ended it with more than one compiled signature:
    each is typed alike at every call site, so a second one is a path that would compile
    inside a decode (lookahead.warmup)."""
    from lookahead.warmup import all_kernels

    many = {name: [str(s) for s in k.signatures] for name, k in all_kernels().items() if len(k.signatures) > 1}
    if many:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        for name, sigs in many.items():
            reporter.write_line(f"kernel {name} compiled {len(sigs)} signatures: {sigs}", red=True)
        session.exitstatus = 1
