"""Where studies are kept: the Optuna database (:mod:`.optuna_storage`, :mod:`.database`, waiting
for one that restarts in :mod:`.reconnecting`, what differs between Optuna's releases in
:mod:`.optuna_versions`), the driver's one copy of each study's trials (:mod:`.trial_cache`) and
what they add up to (:mod:`.folded`), which driver measures a configuration (:mod:`.claims`), and
what autotune keeps on each trial and study (:mod:`.attrs`)."""
