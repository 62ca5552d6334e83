"""Hypothesis profiles and shared fixtures.

Profiles: ``dev`` (default, quick), ``ci`` (what .ci/run uses), ``thorough`` (many examples).
Every profile sets ``deadline=None``: first calls JIT-compile numba kernels and build models.
"""

import os
import sys

import pytest
import torch
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", max_examples=10, **_COMMON)
settings.register_profile("ci", max_examples=20, derandomize=True, print_blob=True, **_COMMON)
settings.register_profile("thorough", max_examples=200, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture
def llama():
    from tiny_models import tiny_model

    return tiny_model("llama", "sdpa")
