"""The harness's step clock: which events are steps (:mod:`.step_sources`), the windows it times
(:mod:`.timed_windows`), the stage after warm-up (:mod:`.measuring_stage`) and the clock itself
(:mod:`.step_clock`)."""
