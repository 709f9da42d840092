"""Search spaces: one YAML file per target and platform under ``autotune/search_spaces/``.

A file looks like::

    target: xla
    description: torch-xla on any PJRT device
    parameters:
      batch_size:
        type: int
        choices: [8, 16, 32, 64]
        default: null          # null keeps the script's own value: the baseline
      per_core_batch:
        type: int
        choices: [8, 16]
        arg: --batch_size      # given to the script as its own flag (--batch_size 16), not intercepted;
                               # intercept: true would do both. A bool is a switch: the flag alone when true.
      opt_level:
        type: int
        choices: [0, 1, 2, 3]
        unset_is: 3            # what leaving it unset gives anyway (the compiler's default): setting 3
                               # is the same run, so a study measures it once
      auto_cast_type:
        type: categorical
        choices: [bf16, fp16, tf32, fp8_e4m3]
        when: {auto_cast: [matmult, all]}   # active only for these values of auto_cast
    fixed: {target: trn1}      # parameters every trial of this space gets
    known_good:                # enqueued right after the baseline
      - {precision: bf16_model, model_type: transformer, optlevel: 3}

Errors in a file name the file, the line and the problem.
"""

from autotune.space.files import (
           builtin_space,
           builtin_space_path,
           load_space,
           parse_space,
)
from autotune.space.keys import RUNTIME_ONLY_PARAMS, compile_key, config_key
from autotune.space.parameters import Parameter, ParamType, ParamValue
from autotune.space.search_space import SearchSpace

__all__ = ["Parameter", "ParamType", "ParamValue", "RUNTIME_ONLY_PARAMS", "SearchSpace", "builtin_space", "builtin_space_path",
           "compile_key", "config_key", "load_space", "parse_space"]
