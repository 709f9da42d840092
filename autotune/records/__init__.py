"""The plain records that cross process boundaries.

A trial's plan goes from the driver to the trial process as JSON, and its result comes back the
same way; nothing else is shared. Every record is a pydantic model so that both ends validate it.
A record that a user reads in an output file (best.json, a trial's report.json) describes each field
(``Field(description=...)``): docs/reference/outputs.md and best.json's JSON Schema are written from them.
"""

from autotune.records.plan import (
    APPLY_ENV,
    BATCH_SIZE_PARAM,
    INTERCEPTIONS,
    NEUTRAL_KNOB_VALUES,
    NODES_PARAM,
    PROCESSES_PARAM,
    ApplySpec,
    CompileSpec,
    KnobRoute,
    RuntimeKnobs,
    ScriptFlag,
    TraceSpec,
    TrialPlan,
)
from autotune.records.protocol import CompileRequest, MeasurementProtocol, NodeRole, TrialRequest, TrialSpec
from autotune.records.result import (
    PROTOCOL_VERSION,
    CompileOutcome,
    CompileStage,
    CompileStats,
    Failure,
    FailureCategory,
    HarnessReport,
    KnobEffect,
    Measurement,
    RankResult,
    TimedWindow,
    TrialResult,
    TrialStatus,
)

__all__ = [
    "APPLY_ENV", "BATCH_SIZE_PARAM", "INTERCEPTIONS", "NEUTRAL_KNOB_VALUES", "NODES_PARAM", "PROCESSES_PARAM",
    "PROTOCOL_VERSION", "ApplySpec", "CompileOutcome", "CompileRequest", "CompileSpec", "CompileStage", "CompileStats",
    "Failure", "FailureCategory", "HarnessReport", "KnobEffect", "KnobRoute", "Measurement", "MeasurementProtocol",
    "NodeRole", "RankResult", "RuntimeKnobs", "ScriptFlag", "TimedWindow", "TraceSpec", "TrialPlan", "TrialRequest",
    "TrialResult", "TrialSpec", "TrialStatus",
]
