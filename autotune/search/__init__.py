"""Search: what to try next. autotune's own sampler (:mod:`.strategy`) beside Optuna's.

It knows spaces and targets (to enumerate and check configurations) and nothing of how a trial
runs or where results are stored.
"""
