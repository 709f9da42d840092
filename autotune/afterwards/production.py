"""A production run of a study's best configuration (``autotune exec``, ``ensure --exec``): the
best read from a study or a ``best.json``, the environment ``best.env`` would give, and the
command started the way the best was measured (``python train.py`` becomes the measured torchrun
launch).

The knobs themselves are applied inside the job's processes by the hook that the environment names
(:mod:`autotune.harness.apply`), exactly as with ``source best.env``.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pydantic import ValidationError

from autotune.errors import AutotuneError, InvalidConfigError
from autotune.results.outputs import BestConfig
from autotune.targets import get_target
from autotune.harness.apply import ANNOUNCED_ENV

_PYTHON = re.compile(r"python(\d+(\.\d+)?)?$")
#: torch's elastic launcher, as a command or as a module of ``python -m``.
_LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def load_best(ref: str, storage: str | None = None) -> BestConfig:
    """The best configuration of study ``ref``, or of the ``best.json`` file ``ref`` names."""
    path = Path(ref)
    if path.suffix == ".json" or path.is_file():
        if not path.is_file():
            raise InvalidConfigError(f"{ref}: no such file; give a study name or the path of its best.json")
        try:
            best = BestConfig.model_validate_json(path.read_bytes())
        except (ValidationError, ValueError) as exc:
            first = str(exc).splitlines()[0]
            raise InvalidConfigError(f"{ref} is not a best.json that autotune wrote ({first})") from None
    else:
        from autotune.results.best import best_config
        from autotune.storage.optuna_storage import load_study

        found = best_config(load_study(ref, storage), ref)
        if found is None:
            raise AutotuneError(f"study {ref!r} has no successful trial yet: there is no best to apply")
        best = found
    get_target(best.target)  # a best.json of a target this autotune does not know is refused here
    if best.apply is None:
        raise InvalidConfigError(f"{ref} does not say how to apply its configuration (written by an older "
                                 f"autotune): write it again with `autotune best {best.study} > best.json`")
    return best


def production_env(best: BestConfig, environ: dict[str, str]) -> dict[str, str]:
    """``environ`` with what ``source best.env`` exports."""
    env = dict(environ)
    env.pop(ANNOUNCED_ENV, None)
    env.update(best.variables())
    hook = best.hook_path()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (hook, environ.get("PYTHONPATH", "")) if p)
    return env


@dataclass
class ProductionCommand:
    argv: list[str]
    #: Where the command cannot be started as the best was measured: one line each.
    warnings: list[str] = field(default_factory=list)


def production_command(best: BestConfig, command: list[str]) -> ProductionCommand:
    """``command`` started as the best was measured: ``python SCRIPT ...`` under the measured
    torchrun launch; a command that is a launcher already is kept, with a warning where its process
    count differs; any other command is kept, with a warning where the best needs a launch."""
    check_command(command)
    wanted = best.nproc_per_node if best.launch else 1
    given = launcher_processes(command)
    if given is not None:
        if given != wanted:
            return ProductionCommand(command, [
                f"the best was measured with {wanted} process{'es' if wanted != 1 else ''} per node "
                f"({best.launch or 'python'}); this launcher starts {given}: the batch size is each process's"])
        return ProductionCommand(command)
    if best.launch is None:
        return ProductionCommand(command)
    if is_python_script(command) and best.nnodes > 1:
        return ProductionCommand([command[0], "-m", "torch.distributed.run", f"--nnodes={best.nnodes}",
                                  f"--nproc_per_node={best.nproc_per_node}", *command[1:]], [
            f"the best was measured on {best.nnodes} nodes: run this on each of them, with PET_NODE_RANK (0 to "
            f"{best.nnodes - 1}), PET_MASTER_ADDR (node 0's address) and PET_MASTER_PORT set"])
    if is_python_script(command):
        return ProductionCommand([command[0], "-m", "torch.distributed.run", "--standalone",
                                  f"--nproc_per_node={best.nproc_per_node}", *command[1:]])
    return ProductionCommand(command, [
        f"the best was measured as `{best.launch}`, and {command[0]} is not a python script autotune can start "
        "so: start it that way yourself"])


def check_command(command: list[str]) -> list[str]:
    """``command``, or an error where there is none or its program is not found."""
    if not command:
        raise InvalidConfigError("no command to run: give it after --, for example -- python train.py")
    if shutil.which(command[0]) is None:
        raise InvalidConfigError(f"{command[0]}: command not found")
    return command


def script_arguments(script: Path, command: list[str]) -> list[str]:
    """The arguments ``command`` gives ``script``, where it runs that script; else none."""
    found = script_of(command)
    if found is None or found[0].resolve() != Path(script).resolve():
        return []
    return found[1]


def is_python_script(command: list[str]) -> bool:
    """``python SCRIPT ...`` (any python), not ``-m`` or ``-c``."""
    return (len(command) > 1 and _PYTHON.match(Path(command[0]).name) is not None
            and not command[1].startswith("-"))


def launcher_processes(command: list[str]) -> int | None:
    """The processes per node that a torchrun command starts (1 where it names none); ``None`` for
    a command that is no torchrun."""
    name = Path(command[0]).name
    if name == "torchrun":
        args = command[1:]
    elif _PYTHON.match(name) and len(command) > 2 and command[1] == "-m" and command[2] in _LAUNCHER_MODULES:
        args = command[3:]
    else:
        return None
    for i, arg in enumerate(args):
        for flag in ("--nproc_per_node", "--nproc-per-node"):
            if arg == flag and i + 1 < len(args):
                return int(args[i + 1]) if args[i + 1].isdigit() else None
            if arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
                return int(value) if value.isdigit() else None
    return 1


def script_of(command: list[str]) -> tuple[Path, list[str]] | None:
    """The Python script a command runs and its arguments, where it runs one (``python train.py
    ...``, ``torchrun ... train.py ...``)."""
    if is_python_script(command):
        return Path(command[1]), command[2:]
    if launcher_processes(command) is None:
        return None
    args = command[1:] if Path(command[0]).name == "torchrun" else command[3:]
    for i, arg in enumerate(args):
        if arg.endswith(".py") and not arg.startswith("-"):
            return Path(arg), args[i + 1:]
    return None


def run_production(best: BestConfig, command: list[str], say: Callable[[str], None]) -> None:
    """Replace this process with ``command`` under ``best``: its exit code is the command's."""
    prepared = production_command(best, command)
    for line in prepared.warnings:
        say(f"warning: {line}")
    if prepared.argv != command:
        say(f"running {' '.join(prepared.argv)}")
    env = production_env(best, dict(os.environ))
    try:
        os.execvpe(prepared.argv[0], prepared.argv, env)
    except OSError as exc:
        raise InvalidConfigError(f"cannot run {prepared.argv[0]}: {exc.strerror or exc}") from None
