"""What runs inside the user's process: one trial's process (:mod:`.trial_process`, run as
``python -m autotune.harness SPEC.json``), the interceptions that apply its knobs, the script's
model and optimizers as it finds them, the step clock that times them (:mod:`.timing`), and the hook
that makes workers the script spawns ranks of the trial (:mod:`.spawned`, ``hook/``). It never
imports Optuna, Ray or the driver's parts (an import-linter contract)."""
