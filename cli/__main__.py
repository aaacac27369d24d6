"""`python -m cli`: the `populora` command."""

from __future__ import annotations

import sys

from cli.main import main

sys.exit(main())
