"""`python -m heartlm` runs the command-line interface."""

from heartlm.cli import main

raise SystemExit(main())
