"""What launches a trial: the Ray actor that holds a trial's devices (:mod:`.ray_worker`), the
process launcher (:mod:`.launcher`: timeout, memory limit, process group), torchrun for a trial of
several processes (:mod:`.multiprocess`), and one run made of several processes of a script that
ends too soon (:mod:`.run_parts`). What runs inside the trial's processes is :mod:`autotune.harness`."""
