"""The reference pages, written from the code: ``python -m autotune.cli.reference`` writes them all.

``docs/reference/cli.md`` (here): every command and every option of :data:`autotune.cli.app.app`,
with its help text, default and env var, as ``--help`` shows them. Only the parameters' plain
attributes are read (no ``--help`` formatting, no metavar derivation), so that the page is the same
under every typer and click release the package allows. ``docs/reference/outputs.md``
(:mod:`.outputs_reference`): every output file, key by key. And best.json's JSON Schema, which
ships in the package. ``tests/cli_tests/test_reference.py`` fails when a committed one is not what
this writes.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any, Callable

from autotune.cli import outputs_reference

#: The page, from the repository's root.
PAGE = Path("docs") / "reference" / "cli.md"
HEADER = """# Command-line reference

Every command and option, as `autotune COMMAND --help` prints them. This page is written by
`python -m autotune.cli.reference` from the command line itself; a test fails when it is stale.
Bad input gets one or two lines and exit code 2.
"""


def page() -> str:
    """The reference page's Markdown."""
    import typer

    from autotune.cli import app

    root = typer.main.get_command(app)
    parts = [HEADER, *_command(root, ["autotune"])]
    return "\n".join(parts).rstrip("\n") + "\n"


def _command(command: Any, path: list[str]) -> list[str]:
    """The sections of ``command`` and, for a group, of each subcommand, in the order they were
    registered (``commands`` keeps it; click's ``list_commands`` sorts)."""
    name = " ".join(path)
    out = [f"## `{name}`\n", *_help(command.help), *_parameters(command, _declared(command))]
    for sub_name, sub in getattr(command, "commands", {}).items():
        if not sub.hidden:
            out += _command(sub, [*path, sub_name])
    return out


def _help(text: str | None) -> list[str]:
    """A docstring's paragraphs, each on one line."""
    if not text:
        return []
    paragraphs = [" ".join(line.strip() for line in p.splitlines()) for p in text.strip().split("\n\n")]
    return [p + "\n" for p in paragraphs if p and p != "\b"]


def _declared(command: Any) -> dict[str, inspect.Parameter]:
    """The parameters as the command's function declares them, with typer's ``Option`` or
    ``Argument`` as each default: typer's parameter objects carry the type and an argument's help
    differently from one release to the next (typer 0.16 under click 8.5 loses the latter)."""
    return dict(inspect.signature(command.callback).parameters) if command.callback is not None else {}


def _help_of(p: Any, declared: dict[str, inspect.Parameter]) -> str:
    return _text(getattr(declared[p.name].default, "help", None) if p.name in declared else p.help)


def _kind(declared: inspect.Parameter | None) -> str:
    """``Optional[int]`` -> ``INTEGER``, as ``--help`` names a value."""
    annotation = "" if declared is None else declared.annotation
    annotation = annotation if isinstance(annotation, str) else repr(annotation)
    for word, kind in (("Path", "PATH"), ("float", "FLOAT"), ("int", "INTEGER")):
        if word in annotation:
            return kind
    return "TEXT"


def _parameters(command: Any, declared: dict[str, inspect.Parameter]) -> list[str]:
    arguments = [p for p in command.params if p.param_type_name == "argument"]
    options = [p for p in command.params if p.param_type_name == "option" and not p.hidden]
    lines: list[str] = []
    if arguments:
        lines.append("Arguments:\n")
        lines += [_argument(p, declared) for p in arguments]
        lines.append("")
    panels: dict[str, list[Any]] = {}
    for p in options:
        panels.setdefault(getattr(p, "rich_help_panel", None) or "Options", []).append(p)
    for panel, members in panels.items():
        lines.append(f"{panel}:\n")
        lines += [_option(p, declared) for p in members]
        lines.append("")
    return lines


def _argument(p: Any, declared: dict[str, inspect.Parameter]) -> str:
    name = p.metavar or p.name.upper()
    many = " ..." if p.nargs == -1 and not name.endswith("...") else ""
    optional = "" if p.required else " (optional)"
    return f"- `{name}{many}`{optional}: {_help_of(p, declared)}".rstrip(": ")


def _option(p: Any, declared: dict[str, inspect.Parameter]) -> str:
    flags = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
    if not p.is_flag:
        flags += f" `{p.metavar or _kind(declared.get(p.name))}`"
    notes = []
    if p.multiple:
        notes.append("repeatable")
    default = _default(p)
    if default is not None:
        notes.append(f"default `{default}`")
    if p.required:
        notes.append("required")
    if p.envvar:
        notes.append(f"env `{p.envvar}`")
    noted = f" ({'; '.join(notes)})" if notes else ""
    return f"- {flags}{noted}: {_help_of(p, declared)}".rstrip(": ")


def _default(p: Any) -> str | None:
    """The default as a user types it; ``None`` where there is none to show."""
    value = p.default
    if p.is_flag:
        # A plain flag is off unless given; an on/off pair names the side that is on.
        return p.opts[0] if value is True and p.secondary_opts else None
    if value is None or value == [] or value == () or callable(value) or type(value).__name__.lstrip("_") == "Sentinel":
        return None
    return str(value)


def _text(text: str | None) -> str:
    return " ".join((text or "").split())


def schema() -> str:
    """best.json's JSON Schema, as the package ships it."""
    from autotune.results.outputs import best_schema

    return json.dumps(best_schema(), indent=2) + "\n"


def files() -> dict[Path, Callable[[], str]]:
    """What this writes, from the repository's root, and what writes each."""
    from autotune.results.outputs import SCHEMA_FILE

    return {PAGE: page, outputs_reference.PAGE: outputs_reference.page, Path("autotune") / SCHEMA_FILE: schema}


def main(argv: list[str] | None = None) -> int:
    """Write every file of :func:`files` under the folder given (default: this directory), or with
    ``--check`` only say whether those there are current (exit 1 when one is stale)."""
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    root = Path(next((a for a in args if a != "--check"), "."))
    stale = []
    for name, write in files().items():
        path, text = root / name, write()
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if stale:
        print(f"stale: {', '.join(stale)}: run python -m autotune.cli.reference", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
