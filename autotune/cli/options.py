"""Options that ``autotune run``, ``submit`` and ``ensure`` share: one definition, one help text.

A typer ``Option`` object is only a default value with its metadata, so the same one can stand in
several commands' signatures.
"""

from __future__ import annotations

import typer

SCRIPT_ARGS = typer.Argument(None, help="Arguments for the script, after --.")
TARGET = typer.Option("auto", "--target", "-t", help="auto, neuron, xla or inductor.")
PLATFORM = typer.Option(None, help="Neuron platform: trn1, trn1n, inf2, trn2.")
SET = typer.Option(None, "--set", "-s", help="Fix a parameter, KEY=VALUE; repeatable.")
CORES_PER_TRIAL = typer.Option(1, help="NeuronCores each trial holds.")
TRIAL_TIMEOUT = typer.Option(1800.0, help="Hard timeout of each trial, seconds.")
TIMEOUT = typer.Option(None, help="Stop starting trials after this many seconds.")
SAMPLER = typer.Option("autotune", help="autotune (expected improvement from a Gaussian process over "
                                        "whole configurations; bench/search_bench.py), tpe (multivariate, constant liar), "
                                        "random or qmc.")
SEED = typer.Option(None, help="Seed of the sampler and of the trials.")
METRIC = typer.Option("throughput", help="What to optimise: throughput, or a metric the script reports "
                                         "with autotune.report().")
DIRECTION = typer.Option("maximize", help="maximize or minimize the metric.")
MEMORY_LIMIT = typer.Option(None, help="Host-memory limit per trial, e.g. 8GiB.")
RETRY_FAILED = typer.Option(False, "--retry-failed", help="Compile again configurations whose compile "
                                                          "failed before.")
LOSS_TOLERANCE = typer.Option(0.2, help="Numerics guard: how far (relative) the mean of a trial's first "
                                        "losses may leave the baseline's.")
NUMERICS_GUARD = typer.Option(True, "--numerics-guard/--no-numerics-guard",
                              help="Never report a configuration whose losses diverge as best.")
CONFIRM = typer.Option(0, min=0, metavar="K",
                       help="Measure the best K configurations once more at the end, unpruned, and pick the "
                            "best on the mean of each one's measurements (one lucky measurement does not win).")
PRUNE = typer.Option(True, "--prune/--no-prune",
                     help="Stop measuring a trial once its 95% interval is wholly more than 2% behind the "
                          "best so far.")
