"""Entry point for `python -m kdiag`."""

from kdiag.cli import main

raise SystemExit(main())
