"""``python -m lookahead``: the same as the ``lookahead`` command."""

from lookahead.cli import main

raise SystemExit(main())
