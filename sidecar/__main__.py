"""`python -m sidecar` runs the `infercache` command line."""

from sidecar.cli.main import main

raise SystemExit(main())
