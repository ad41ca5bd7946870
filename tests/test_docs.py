"""The documentation runs: every code block of the docs site and the README is executed or checked.

- ``pycon``: doctest, outputs compared;
- ``python``: executed (the blocks of one page share a namespace), must not raise;
- ``console``: every ``$ stratopt ...`` line runs in a scratch folder (``models``, ``scripts`` and
  ``../shared`` reachable as from the repository) and its output, stdout and stderr together, must
  match the lines shown: a line ``...`` stands for any run of lines, seconds and wall times are
  masked. A block marked ``<!-- docs-test: parse-only (why) -->`` (a long run) has its command lines
  parsed by ``stratopt``'s own parser instead;
- ``bash``: set-up lines; each ``pip install`` names extras that pyproject declares, each
  ``stratopt`` line parses, each ``python scripts/X.py`` names a script that exists;
- ``text``: command synopses; each ``stratopt`` line names a command, and every ``--option`` in it
  is one of that command's.

Every command page lists every option of its command, so the pages stay true to ``--help``.
"""

from __future__ import annotations

import doctest
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from scripts.check_unchanged import _VARYING

from stratopt.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
FENCE = re.compile(
    r"(?:<!-- docs-test: (?P<mark>[^>]*?) -->\n)?^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```$", re.M | re.S
)
LANGS = ("pycon", "python", "console", "bash", "text", "json")


def blocks() -> list[tuple[Path, int, str, str, str]]:
    found = []
    for page in PAGES:
        for i, m in enumerate(FENCE.finditer(page.read_text())):
            found.append((page, i, m["lang"], m["body"], m["mark"] or ""))
    return found


BLOCKS = blocks()
NAMESPACES: dict[Path, tuple[dict, set[int]]] = {}


def _id(block: tuple) -> str:
    page, i, lang, _, _ = block
    return f"{page.relative_to(ROOT)}#{i}-{lang}"


def _subcommands() -> dict:
    parser = build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return action.choices


SUB = _subcommands()


def _options(name: str) -> set[str]:
    return {o for a in SUB[name]._actions for o in a.option_strings}


#: check-plan's losses and their relative error differ in their last digits from one CPU to another.
_ROUNDING = (
    re.compile(r"\b[0-9.]+(e[+-]?\d+)? against [0-9.]+(e[+-]?\d+)? \(relative error [0-9.e+-]+,"),
    "L against L (relative error E,",
)


def _mask(text: str) -> list[str]:
    text = text.rstrip("\n") + "\n"
    for pattern, repl in (*_VARYING, _ROUNDING):
        text = pattern.sub(repl, text)
    return [line.rstrip() for line in text.strip("\n").splitlines()]


def _matches(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` is ``expected`` with each ``...`` line standing for any run of lines."""
    pattern = "".join(r"(?:[^\n]*\n)*?" if line == "..." else re.escape(line) + r"\n" for line in expected)
    return re.fullmatch(pattern, "".join(line + "\n" for line in actual)) is not None


def _commands(body: str) -> list[tuple[str, list[str]]]:
    """(command line, the output lines shown after it) per ``$`` line of a console block."""
    out: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
    return out


def _parse(command: str) -> None:
    argv = shlex.split(command.split(" | ")[0])
    assert argv[0] == "stratopt", command
    try:
        build_parser().parse_args(argv[1:])
    except SystemExit as exc:  # --help and --version exit 0; anything else is a bad line
        assert exc.code == 0, command


def _run_code(page: Path, block: tuple) -> None:
    """Run a pycon or python block in its page's namespace, after the page's earlier code blocks
    (so that a block runs alone, under ``-k``, as it runs in order)."""
    namespace, done = NAMESPACES.setdefault(page, ({}, set()))
    for earlier in BLOCKS:
        if earlier[0] != page or earlier[1] > block[1] or earlier[1] in done or earlier[2] not in ("pycon", "python"):
            continue
        done.add(earlier[1])
        _, _, lang, body, _ = earlier
        if lang == "pycon":
            test = doctest.DocTestParser().get_doctest(body, namespace, page.name, str(page), 0)
            runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
            runner.run(test, out=lambda text: sys.stderr.write(text), clear_globs=False)
            namespace.update(test.globs)  # a DocTest runs in a copy of the namespace it is given
            assert runner.failures == 0, f"{page.name}: a doctest failed (see stderr)"
        else:
            if re.search(r"^import torch|^from stratopt.importers", body, re.M):
                pytest.importorskip("torch")
            exec(compile(body, str(page), "exec"), namespace)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A folder where commands run as from the repository root (``../shared`` beside it)."""
    top = tmp_path_factory.mktemp("docs")
    work = top / "work"
    work.mkdir()
    for name in ("models", "scripts", "src"):
        (work / name).symlink_to(ROOT / name)
    shared = ROOT.parent / "shared"
    if shared.exists():
        (top / "shared").symlink_to(shared)
    return work


@pytest.mark.parametrize("block", BLOCKS, ids=_id)
def test_block_runs(block, scratch) -> None:
    """Each block does what the page says it does (see the module docstring)."""
    page, _, lang, body, mark = block
    assert lang in LANGS, f"{page.name}: a code block needs a language, one of {LANGS}"
    if lang in ("pycon", "python"):
        _run_code(page, block)
    elif lang == "json":
        import json

        json.loads(body)
    elif lang == "console":
        for command, shown in _commands(body):
            if mark.startswith("parse-only"):
                _parse(command)
                continue
            if "../shared/" in command and not (scratch.parent / "shared").exists():
                pytest.skip("../shared is not beside the repository")
            if "importers.hf:" in command:
                pytest.importorskip("transformers")
            argv = [sys.executable, "-m", "stratopt", *shlex.split(command)[1:]]
            env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "80"}
            proc = subprocess.run(
                argv, cwd=scratch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300, env=env
            )
            actual = _mask(proc.stdout)
            assert _matches(_mask("\n".join(shown)), actual), (
                f"{command}\n--- shown\n" + "\n".join(shown) + "\n--- got\n" + "\n".join(actual)
            )
    else:  # bash, text: lines to check, not to run
        extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
        for line in body.splitlines():
            for part in (p.strip() for p in line.split("&&")):
                if part.startswith("pip install"):
                    named = re.findall(r"\[([\w,]+)\]", part)
                    assert all(set(n.split(",")) <= extras for n in named), part
                elif part.startswith("python scripts/"):
                    assert (ROOT / part.split()[1]).exists(), part
                elif part.startswith("stratopt ") and lang == "bash":
                    _parse(part)
                elif part.startswith("stratopt "):
                    words = part.split()
                    assert words[1] in SUB, part
                    for option in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", part):
                        assert option in _options(words[1]), f"{part}: {option} is not an option of {words[1]}"


@pytest.mark.parametrize("name", sorted(SUB))
def test_command_pages_list_every_option(name) -> None:
    """docs/commands/NAME.md names every option of ``stratopt NAME --help``."""
    text = (ROOT / "docs" / "commands" / f"{name}.md").read_text()
    missing = sorted(o for o in _options(name) if o.startswith("--") and o != "--help" and f"`{o}`" not in text)
    assert not missing, f"docs/commands/{name}.md does not mention {missing}"
