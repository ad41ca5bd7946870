"""python -m stratopt: the same as the stratopt command."""

import sys

from stratopt.cli import main

sys.exit(main())
