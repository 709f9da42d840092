"""The output files' reference page, written from the models that write them.

Every key of ``best.json``, every column of ``trials.csv``, a trial's ``report.json``, ``best.env``'s
variables and ``autotune ensure --json``, each with the description its model gives it (a field
without one is refused, so that a new key cannot go undocumented). The tables are read from the
models' JSON Schemas: a nested model gets a table of its own, headed by every path where it appears
(``runs[]``: each item of a list; ``routes.*``: each value of a mapping).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

#: The page, from the repository's root.
PAGE = Path("docs") / "reference" / "outputs.md"

#: ``autotune ensure --json``'s keys: :class:`~autotune.daemon.ensure.EnsureResult` gives them no
#: descriptions of its own.
ENSURE_KEYS = {
    "source": "`stored`: the answer was stored already; `tuned`: this run tuned.",
    "study": "The study the lookup key names.",
    "ran": "Trials run now.",
    "job": "The daemon's job that tuned it (`--server`); null where none did.",
    "env_file": "The path of the best.env written.",
    "json_file": "The path of the best.json written.",
    "best": "The configuration, as best.json holds it.",
    "seconds": "Seconds the command took.",
}

HEADER = """# Output files

What a study writes under `--out` (default `.autotune/<study>/`), what a trial leaves in its folder
and what `autotune ensure` prints, key by key. This page is written by
`python -m autotune.cli.reference` from the models that write the files; a test fails when it is
stale. A `null` is a figure not known or not measured; a fraction is 0.05 for 5%. An objective's
figure is in its unit: samples/s for `throughput`, ms for a latency, US dollars per 1e6 samples for
`cost`, bytes for `peak_memory`, a script's metric in its own.
"""


def page() -> str:
    from autotune.daemon.ensure import EnsureResult
    from autotune.records import HarnessReport
    from autotune.results.outputs import SCHEMA_FILE, SCHEMA_VERSION, best_schema

    ensure = EnsureResult.model_json_schema(mode="serialization")
    for name, described in ENSURE_KEYS.items():
        ensure["properties"][name]["description"] = described
    parts = [
        HEADER,
        "## `best.json`\n",
        f"The tuned configuration. Its JSON Schema ships in the package as `autotune/{SCHEMA_FILE}` "
        f"(`importlib.resources.files(\"autotune\") / \"{SCHEMA_FILE}\"`); `schema_version` is {SCHEMA_VERSION}.\n",
        *_tables(best_schema()),
        "## `best.env`\n",
        "`export` lines for a production run: `source best.env && python train.py`.\n",
        *_env_table(),
        "## `trials.csv`\n",
        "A row per trial, in the order they were asked for; an empty cell is `null`. The figures are the "
        "configuration's, the same in each of its trials; `run_*` are the trial's own run.\n",
        *_csv_table(),
        "## A trial's `report.json`\n",
        "What the process of a trial writes in its folder, `trials/NNNN/` under `--out` (a re-measurement's: "
        "`NNNN-again...`), beside `spec.json` (what it was given) and `trial.log`. Each process of a trial of "
        "several writes its own in `ranks/`.\n",
        *_tables(HarnessReport.model_json_schema(mode="serialization")),
        "## `autotune ensure --json`\n",
        "One object on stdout.\n",
        *_tables(ensure, elsewhere={"BestConfig": "best.json"}),
        "## `autotune ensure`'s exit codes\n",
        *_exit_codes(),
    ]
    return "\n".join(parts).rstrip("\n") + "\n"


def _deref(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {**defs[schema["$ref"].rsplit("/", 1)[1]], **rest}
    return schema


def alternatives(schema: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    """The kinds of value ``schema`` allows, each resolved (``null`` among them)."""
    schema = _deref(schema, defs)
    if "anyOf" in schema:
        return [a for alt in schema["anyOf"] for a in alternatives(alt, defs)]
    return [schema]


def is_model(schema: dict[str, Any]) -> bool:
    """An object whose keys a model names (not a mapping, whose keys are data)."""
    return "properties" in schema


def _walk(schema: dict[str, Any], defs: dict[str, Any], path: str, found: dict[str, list[str]],
          models: dict[str, dict[str, Any]], elsewhere: dict[str, str]) -> None:
    """Every model under ``schema`` (at ``path``) and where: ``found[title]`` its paths."""
    for alt in alternatives(schema, defs):
        if is_model(alt) and alt.get("title") not in elsewhere:
            title = alt["title"]
            if path:
                found.setdefault(title, []).append(path)
            models.setdefault(title, alt)
            for name, prop in alt["properties"].items():
                _walk(prop, defs, f"{path}.{name}" if path else name, found, models, elsewhere)
        elif alt.get("type") == "array":
            _walk(alt.get("items", {}), defs, path + "[]", found, models, elsewhere)
        elif isinstance(alt.get("additionalProperties"), dict):
            _walk(alt["additionalProperties"], defs, path + ".*", found, models, elsewhere)


def _tables(schema: dict[str, Any], elsewhere: dict[str, str] | None = None) -> list[str]:
    """The root model's table, then one per nested model, headed by its paths."""
    defs, elsewhere = schema.get("$defs", {}), elsewhere or {}
    found: dict[str, list[str]] = {}
    models: dict[str, dict[str, Any]] = {}
    _walk(schema, defs, "", found, models, elsewhere)
    where = {title: paths[0] for title, paths in found.items()}
    out = _model_table(schema, defs, where, elsewhere)
    for title, paths in found.items():
        out += [f"### {', '.join(f'`{p}`' for p in paths)}\n", *_model_table(models[title], defs, where, elsewhere)]
    return out


def _model_table(schema: dict[str, Any], defs: dict[str, Any], where: dict[str, str],
                 elsewhere: dict[str, str]) -> list[str]:
    rows = ["| key | type | meaning |", "|---|---|---|"]
    for name, prop in schema["properties"].items():
        rows.append(f"| `{name}` | {_type(prop, defs, where, elsewhere)} | {_described(schema, name, prop)} |")
    return ["\n".join(rows) + "\n"]


def _described(schema: dict[str, Any], name: str, prop: dict[str, Any]) -> str:
    text = prop.get("description")
    if not text:
        raise ValueError(f"{schema.get('title')}.{name} has no description: give its field one")
    return " ".join(text.split()).replace("|", "\\|")


def _type(schema: dict[str, Any], defs: dict[str, Any], where: dict[str, str], elsewhere: dict[str, str]) -> str:
    return " or ".join(_one(a, defs, where, elsewhere) for a in alternatives(schema, defs))


def _one(schema: dict[str, Any], defs: dict[str, Any], where: dict[str, str], elsewhere: dict[str, str]) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(f"`{v}`" for v in schema["enum"])
    if is_model(schema):
        title = schema.get("title", "")
        return f"object, as `{elsewhere[title]}`" if title in elsewhere else f"object (`{where[title]}`)"
    kind = schema.get("type")
    if kind == "array":
        return "list of " + _type(schema.get("items", {}), defs, where, elsewhere)
    if kind == "object":
        values = schema.get("additionalProperties")
        return "object of " + _type(values, defs, where, elsewhere) if isinstance(values, dict) else "object"
    return kind or "any"


def _env_table() -> list[str]:
    from autotune.results.outputs import ENV_VARIABLES

    rows = ["| variable | meaning |", "|---|---|",
            "| each of `env` | The configuration's own env vars (`NEURON_CC_FLAGS`, `XLA_FLAGS`, ...). |"]
    rows += [f"| `{name}` | {text} |" for name, text in ENV_VARIABLES.items()]
    return ["\n".join(rows) + "\n"]


def _csv_table() -> list[str]:
    from autotune.results.outputs import CSV_COMPUTED, CSV_FIELDS, RUN_FIELDS, RunFigure, TrialSummary

    rows = ["| column | type | meaning |", "|---|---|---|"]
    rows += [_csv_row(name, TrialSummary, CSV_COMPUTED) for name in CSV_FIELDS]
    rows += [_csv_row(name, RunFigure, {}, prefix="run_") for name in RUN_FIELDS]
    return ["\n".join(rows) + "\n"]


def _csv_row(name: str, model: type[BaseModel], computed: dict[str, str], prefix: str = "") -> str:
    if name in computed:
        return f"| `{name}` | number | {computed[name]} |"
    schema = model.model_json_schema(mode="serialization")
    prop = schema["properties"][name]
    kinds = sorted({str(a["type"]) for a in alternatives(prop, schema.get("$defs", {}))
                    if a.get("type", "null") != "null"})
    shown = {"object": "JSON object", "array": "text, items joined by `; `", "boolean": "`True` or `False`"}
    kind = " or ".join(shown.get(k, k) for k in kinds)
    text = _described(schema, name, prop)
    text = f"This trial's own run: {text[0].lower()}{text[1:]}" if prefix else text
    return f"| `{prefix}{name}` | {kind} | {text} |"


def _exit_codes() -> list[str]:
    from autotune.daemon.messages import EXIT_CANCELLED
    from autotune.study.options import EXIT_ALL_FAILED, EXIT_BAD_INPUT, EXIT_OK

    rows = ["| code | when |", "|---|---|",
            f"| {EXIT_OK} | `best.env` and `best.json` written: the stored answer, or tuned now (the best so far "
            "where `--timeout` or a budget ended the study) |",
            f"| {EXIT_BAD_INPUT} | bad input (an option, a script that does not exist, a job command that is not "
            "found), or a daemon that cannot be reached or refuses the token |",
            f"| {EXIT_ALL_FAILED} | every trial failed: nothing written |",
            f"| {EXIT_CANCELLED} | the daemon's job was cancelled, or the command interrupted |",
            "| another | with `--server`: the daemon's job failed with that exit code (1 where it has none) |",
            "| the job's | with `--exec`, once a result was written: the job's own exit code |"]
    return ["\n".join(rows) + "\n"]
