"""Deprecated: the Hypothesis strategies moved to ``lookahead.checking.examples``."""

import warnings

from lookahead.checking.examples import *  # noqa: F403
from lookahead.checking.examples import __all__  # noqa: F401

warnings.warn("lookahead.testing is deprecated: import lookahead.checking.examples", DeprecationWarning, stacklevel=2)
