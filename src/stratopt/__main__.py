"""python -m stratopt: the same as the stratopt command."""

import sys

from stratopt.cli import main

if __name__ == "__main__":
    sys.exit(main())
