"""The corpus: public example scripts, kept byte for byte as published, and how each one is run.

Users bring upstream scripts as they are; these are such scripts, each in a folder of its own with
the files as published, ``SOURCE.md`` (repository, path, commit, licence), the licence's text, and
``corpus.toml``, which says how the corpus runs it without editing it:

- ``script``, ``target``: the file to run and the autotune target to run it under;
- ``loop``: the shape of its training loop, in words (what the harness has to find);
- ``batch_size``: the samples of one step of one process, which a trial must report as
  ``samples_per_step`` (each rank's, where the script trains in ``processes`` processes at once);
- ``args``: arguments that keep it short (epochs, data sizes), the same for a trial and a plain run;
- ``script_loader``: what it gives its DataLoaders itself under those arguments (each knob's
  distinct values, sorted; ``{}`` where it makes none), as a trial must report it;
- ``env``: environment variables a user of this torch needs for it (none where it runs as it is);
- ``flags``: parameters the script takes as flags of its own, ``{batch_size = "--batch-size"}``,
  which a study gives it as its user would (``autotune run --arg batch_size=--batch-size``);
- ``dirs``: empty folders it writes into and expects to exist;
- ``[[data]]``: data sets of ``make_data.py`` (``set``), where the script looks for them (``at``,
  relative to its working directory) and their sizes (``options``);
- ``[figure]``: how to read the script's own throughput from its output (:class:`OwnFigure`).

:meth:`Entry.prepare` makes a working directory: the script's Python files copied into ``run/``,
which is the working directory, and its data made where it reads them (often ``../data``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

from pydantic import ValidationError

from autotune.records import TrialResult
from corpus.make_data import WRITERS

ROOT = Path(__file__).resolve().parent

#: ``python -c`` that runs a script unchanged, as ``python SCRIPT ARGS`` would (its folder first
#: on ``sys.path``, ``sys.argv`` its own), timing only the script: ``{startup}`` is imported before
#: the clock starts. Its last line says how long the script ran.
STOPWATCH = """\
import os, runpy, sys, time
{startup}
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
started = time.perf_counter()
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    print(f"corpus stopwatch: {{time.perf_counter() - started:.6f}} s", flush=True)
"""
STOPWATCH_LINE = re.compile(r"^corpus stopwatch: ([0-9.]+) s$", re.MULTILINE)


@dataclass(frozen=True)
class DataSet:
    """One of ``make_data.py``'s data sets, made at ``at`` (relative to the working directory)."""

    set: str
    at: str
    options: dict[str, int] = field(default_factory=dict)

    def make(self, cwd: Path) -> None:
        WRITERS[self.set]((cwd / self.at).resolve(), **self.options)


@dataclass(frozen=True)
class OwnFigure:
    """How a script's own throughput (samples/s) is read from a plain run's output.

    - ``printed``: the script prints it; ``pattern``'s first group, the median of the matches
      after the first ``skip`` (its warm-up).
    - ``progress``: it prints progress lines, stamped with the time each one arrives (the run is
      unbuffered). With a ``done`` group the line says how many samples (times ``scale``) are
      done, within its ``epoch`` where the pattern has that group, and in its ``worker``'s process
      where several print; without, each line is ``scale`` samples more. The figure is the samples between
      consecutive lines of one epoch and worker over the time between them, summed over the run
      after the first ``skip`` lines, so that what happens between epochs (test passes,
      checkpoints) is not in it; workers that run side by side add up.
    - ``wall``: it prints only at the end how much it did (``pattern``'s group x ``scale``
      samples): that over the time the script itself ran, from a stopwatch around it
      (:data:`STOPWATCH`: ``startup``'s imports first, then the script by ``runpy`` as
      ``__main__``, unchanged), so that starting Python and importing torch are not in it.
    """

    kind: str
    pattern: str
    skip: int = 0
    scale: float = 1.0
    #: Imported before the stopwatch starts (``wall``).
    startup: str = "import torch"

    def __post_init__(self) -> None:
        if self.kind not in ("printed", "progress", "wall"):
            raise ValueError(f"figure kind {self.kind!r}: expected printed, progress or wall")

    def command(self, script: str, args: tuple[str, ...] | list[str]) -> list[str]:
        """How a plain run starts the script: ``python SCRIPT ARGS``, or under the stopwatch."""
        if self.kind == "wall":
            return [sys.executable, "-c", STOPWATCH.format(startup=self.startup), script, *args]
        return [sys.executable, script, *args]

    def read(self, lines: list[tuple[float, str]]) -> float | None:
        """The figure from ``(arrival time, line)`` pairs, or None when the output has too little."""
        regex = re.compile(self.pattern)
        matches = [(t, m) for t, line in lines if (m := regex.search(line))]
        if self.kind == "printed":
            values = [float(m.group(1)) for _, m in matches[self.skip:]]
            return median(values) if values else None
        if self.kind == "wall":
            timed = [float(m.group(1)) for _, line in lines if (m := STOPWATCH_LINE.search(line))]
            if not matches or not timed or timed[-1] <= 0:
                return None
            return float(matches[-1][1].group(1)) * self.scale / timed[-1]
        return self._progress(matches[self.skip:])

    def _progress(self, matches: list[tuple[float, re.Match[str]]]) -> float | None:
        last: dict[str, tuple[float, str, float]] = {}
        samples: dict[str, float] = {}
        seconds: dict[str, float] = {}
        counted = 0.0
        for t, m in matches:
            groups = m.groupdict()
            worker = groups.get("worker") or ""
            epoch = groups.get("epoch") or ""
            if groups.get("done") is not None:
                done = float(groups["done"]) * self.scale
            else:
                counted += self.scale
                done = counted
            before = last.get(worker)
            if before is not None and before[1] == epoch and done > before[2] and t > before[0]:
                samples[worker] = samples.get(worker, 0.0) + done - before[2]
                seconds[worker] = seconds.get(worker, 0.0) + t - before[0]
            last[worker] = (t, epoch, done)
        rates = [samples[w] / seconds[w] for w in samples if seconds[w] > 0]
        return sum(rates) if rates else None


@dataclass(frozen=True)
class Entry:
    """One script of the corpus and how it is run (its ``corpus.toml``)."""

    name: str
    folder: Path
    script: str
    target: str
    loop: str
    batch_size: int
    args: tuple[str, ...]
    figure: OwnFigure
    processes: int = 1
    env: dict[str, str] = field(default_factory=dict)
    data: tuple[DataSet, ...] = ()
    dirs: tuple[str, ...] = ()
    flags: dict[str, str] = field(default_factory=dict)
    #: What the script gives its DataLoaders itself, each knob's distinct values sorted.
    script_loader: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def load(cls, folder: Path) -> Entry:
        raw = tomllib.loads((folder / "corpus.toml").read_text())
        return cls(name=folder.name, folder=folder, script=raw["script"], target=raw["target"], loop=raw["loop"],
                   batch_size=int(raw["batch_size"]), processes=int(raw.get("processes", 1)),
                   args=tuple(raw.get("args", ())),
                   figure=OwnFigure(**raw["figure"]), env=dict(raw.get("env", {})),
                   data=tuple(DataSet(**d) for d in raw.get("data", ())), dirs=tuple(raw.get("dirs", ())),
                   flags=dict(raw.get("flags", {})), script_loader=dict(raw["script_loader"]))

    @property
    def source(self) -> str:
        """``repository path@commit`` as SOURCE.md records it."""
        text = (self.folder / "SOURCE.md").read_text()
        fields = dict(re.findall(r"^- (\w+): `?([^`\n]+)`?$", text, flags=re.MULTILINE))
        return f"{fields.get('repository', '?')} {fields.get('path', '?')}@{fields.get('commit', '?')[:10]}"

    @property
    def blobs(self) -> dict[str, str]:
        """Each published file's git object id at its commit, as SOURCE.md records it."""
        text = (self.folder / "SOURCE.md").read_text()
        return dict(re.findall(r"^- blob: (\S+) ([0-9a-f]{40})$", text, flags=re.MULTILINE))

    def prepare(self, workdir: Path) -> Path:
        """A working directory for one run: the script's files in ``workdir/run`` (returned), the
        folders it writes into, and its data where it reads them."""
        cwd = workdir / "run"
        cwd.mkdir(parents=True, exist_ok=True)
        for path in self.folder.glob("*.py"):
            shutil.copy2(path, cwd / path.name)
        for name in self.dirs:
            (cwd / name).mkdir(parents=True, exist_ok=True)
        for data in self.data:
            data.make(cwd)
        return cwd


    def run_env(self) -> dict[str, str]:
        """This process's environment with the entry's own variables."""
        return {**os.environ, **self.env}

    @property
    def flag_options(self) -> list[str]:
        """``--arg PARAM=FLAG`` for each of :attr:`flags`: options of ``autotune trial`` and ``run``."""
        return [opt for param, flag in sorted(self.flags.items()) for opt in ("--arg", f"{param}={flag}")]

    def trial_command(self, trial_dir: Path, *, max_seconds: float, timeout: float,
                      extra: tuple[str, ...] = ()) -> list[str]:
        """``autotune trial`` of the script under its target's baseline, as a user types it in the
        working directory that :meth:`prepare` made; ``extra`` are more options of the command."""
        return [sys.executable, "-m", "autotune.cli", "trial", self.script, "--target", self.target,
                "--max-seconds", str(max_seconds), "--trial-timeout", str(timeout), "--json",
                "--trial-dir", str(trial_dir), *extra, "--", *self.args]


def read_trial(stdout: str) -> TrialResult | None:
    """The result ``autotune trial --json`` printed, or None when it printed none."""
    start, end = stdout.find("{"), stdout.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        return TrialResult.model_validate(json.loads(stdout[start:end + 1]))
    except (json.JSONDecodeError, ValidationError):
        return None


def entries() -> list[Entry]:
    """Every script of the corpus, by folder name."""
    return [Entry.load(p.parent) for p in sorted(ROOT.glob("*/corpus.toml"))]


def entry(name: str) -> Entry:
    found = {e.name: e for e in entries()}
    if name not in found:
        raise KeyError(f"no corpus entry {name!r}; there are {', '.join(sorted(found))}")
    return found[name]
