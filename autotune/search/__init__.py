"""Search: what to try next. autotune's own sampler (:mod:`.strategy`, its models in :mod:`.models`)
beside Optuna's (:mod:`.samplers`), and the configurations of a finite space (:mod:`.configurations`).

It knows spaces and targets (to enumerate and check configurations) and nothing of how a trial
runs or where results are stored.
"""
