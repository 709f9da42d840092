"""The options of ``autotune run``, ``submit`` and ``ensure``, derived from the run configuration,
and those that several commands share (the script, the daemon to talk to).

:func:`config_options` adds one typer option per field of :class:`autotune.config.RunConfig` (or
:class:`~autotune.config.JobConfig`) to a command: its flag from the field's name, its default and
help from the field. The command receives the validated configuration as ``config``; a bad value
is an :class:`~autotune.errors.InvalidConfigError` that names the option.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, TypeVar

import typer

from autotune.config import DIRECTIONS, SAMPLERS, JobConfig, option_flag
from autotune.errors import require
from autotune.objectives import BUILT_IN
from autotune.storage.database import STORAGE_ENV
from autotune.targets import TARGETS
from autotune.trial import parse_sets

if TYPE_CHECKING:
    from typer.models import OptionInfo

    from autotune.daemon.client import DaemonClient

SCRIPT = typer.Argument(..., help="The training or inference script, unmodified.")
SCRIPT_ARGS = typer.Argument(None, help="Arguments for the script, after --.")
#: The storage of the commands that read stored studies (best, show, report, dashboard).
STORAGE = typer.Option(None, envvar=STORAGE_ENV, show_envvar=True,
                       help="Optuna storage URL (default: sqlite under .autotune/).")

#: The help panel of each field of the run configuration; the command's own options, and a field
#: not listed yet (tests/cli_tests/test_command_line.py asks for one), stay under "Options".
PANELS: dict[str, str] = {
    **dict.fromkeys(("trials", "target", "space", "platform", "sets", "arg", "env", "sampler", "seed",
                     "warm_start", "warm", "fresh", "retry_failed", "prune", "race", "confirm", "numerics_guard",
                     "loss_tolerance"), "Search"),
    **dict.fromkeys(("metric", "direction", "objective", "constraint", "prefer", "instance_type", "price_per_hour",
                     "prices", "budget_usd", "budget_hours"), "Objective and budget"),
    **dict.fromkeys(("workers", "cores_per_trial", "gpus_per_trial", "nproc_per_node", "nnodes", "compile_workers", "compile_ahead",
                     "ray_address", "trial_timeout", "timeout", "memory_limit"), "Placement"),
    **dict.fromkeys(("study", "storage", "cache"), "Storage"),
    "out": "Output",
}
#: The values an option takes, shown in --help as its metavar; the model checks them, so that a typo
#: is autotune's one-line error rather than click's usage box. --objective also takes a metric of
#: the script's own.
CHOICES: dict[str, str] = {
    "target": "[" + "|".join(("auto", *TARGETS)) + "]",
    "sampler": "[" + "|".join(SAMPLERS) + "]",
    "direction": "[" + "|".join(DIRECTIONS) + "]",
    "objective": "[" + "|".join(BUILT_IN) + "|METRIC]",
}
#: Env vars an option is read from when it is not given. Ray reads RAY_ADDRESS itself: the option
#: names it so that --help shows it.
ENVVARS: dict[str, str] = {"storage": STORAGE_ENV, "ray_address": "RAY_ADDRESS"}

# The daemon a client command talks to.
SERVER_ENV = "AUTOTUNE_SERVER"
SERVER = typer.Option("http://127.0.0.1:8765", "--server", envvar=SERVER_ENV,
                      help="URL of the autotune daemon (or AUTOTUNE_SERVER).")
TOKEN_FILE = typer.Option(None, "--token-file", help="File holding the daemon's token (or AUTOTUNE_TOKEN).")


def daemon_client(server: str, token_file: Path | None) -> DaemonClient:
    require("httpx", "a client of the autotune daemon", "serve")
    from autotune.daemon.client import DaemonClient, read_token

    return DaemonClient(server, read_token(token_file, server))


F = TypeVar("F", bound=Callable[..., Any])


def config_options(model: type[JobConfig], *, exclude: Iterable[str] = (), only: Iterable[str] | None = None,
                   help: dict[str, str] | None = None) -> Callable[[F], F]:
    """Give the decorated command an option for each field of ``model`` (``only`` those, or all but
    ``exclude``); it is called with ``config=model(...)``, the other fields at their defaults.
    ``help`` replaces a field's help text in this command."""
    names = [n for n in model.model_fields if n not in set(exclude) and (only is None or n in set(only))]
    helps = help or {}

    def decorate(command: F) -> F:
        signature = inspect.signature(command)
        own = [p for p in signature.parameters.values() if p.name != "config"]
        added = [inspect.Parameter(_param(n), inspect.Parameter.KEYWORD_ONLY, default=_option(model, n, helps),
                                   annotation=_annotation(model, n)) for n in names]

        @functools.wraps(command)
        def with_config(*args: object, **kwargs: object) -> object:
            values: dict[str, Any] = {n: kwargs.pop(_param(n)) for n in names}
            if "sets" in values:
                values["sets"] = parse_sets(values["sets"])
            for name in names:
                if _is_list(model, name) and name != "sets":
                    values[name] = values[name] or []
            return command(*args, config=model.checked(**values), **kwargs)

        with_config.__signature__ = signature.replace(parameters=[*own, *added])  # type: ignore[attr-defined]
        return with_config  # type: ignore[return-value]

    return decorate


def _param(name: str) -> str:
    return "set_" if name == "sets" else name  # ``set`` is a builtin


def _option(model: type[JobConfig], name: str, helps: dict[str, str]) -> OptionInfo:
    field = model.model_fields[name]
    text = helps.get(name, field.description or "")
    flag = option_flag(name)
    short = [model.SHORT[name]] if name in model.SHORT else []
    shown: dict[str, Any] = {"help": text, "rich_help_panel": PANELS.get(name)}
    if name in ENVVARS:
        shown.update(envvar=ENVVARS[name], show_envvar=True)
    if name == "sets" or _is_list(model, name):
        return typer.Option(None, flag, *short, metavar=CHOICES.get(name), **shown)
    default = field.get_default(call_default_factory=True)
    if field.annotation is bool:
        return typer.Option(default, f"{flag}/--no-{flag[2:]}" if default else flag, *short, **shown)
    return typer.Option(default, flag, *short, metavar=CHOICES.get(name, model.METAVAR.get(name)), **shown)


def _annotation(model: type[JobConfig], name: str) -> object:
    """The type typer parses the option as: the field's, ``X | None`` as ``Optional[X]``; text for
    the model to parse where the model says so."""
    if name == "sets":
        return Optional[list[str]]
    if _is_list(model, name):
        return Optional[model.model_fields[name].annotation]
    if name in model.PARSED_BY_MODEL:
        return Optional[str]
    annotation = model.model_fields[name].annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        (inner,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        return Optional[inner]
    return annotation


def _is_list(model: type[JobConfig], name: str) -> bool:
    """A repeatable option: the field is a list (``--objective A --objective B``)."""
    return typing.get_origin(model.model_fields[name].annotation) is list
