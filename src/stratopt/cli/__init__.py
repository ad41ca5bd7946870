"""The ``stratopt`` command line: parse (:mod:`.parser`, with the argument types of :mod:`.args`),
call the library, print (:mod:`.commands`, rendering with :mod:`stratopt.report`)."""

from stratopt.cli.parser import build_parser, entry, main

__all__ = ["build_parser", "entry", "main"]
