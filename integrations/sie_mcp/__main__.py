"""`python -m sie_mcp ...`: the same as the `sie-mcp` script."""

import sys

from .cli import main

sys.exit(main())
