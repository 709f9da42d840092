"""``python -m autotune.harness SPEC.json``: one trial's process (:mod:`.trial_process`)."""

from autotune.harness.trial_process import main

main()
