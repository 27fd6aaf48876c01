"""Entry point for `python -m kdiag`."""

from kdiag.cli.main import main

raise SystemExit(main())
