"""python -m stratopt: the same as the stratopt command."""

from stratopt.cli import entry

if __name__ == "__main__":
    entry()
