"""Measurement: what a trial's numbers mean. Steady-state windows, intervals and early stopping
(:mod:`.windows`), and the failure category of a trial that ended badly (:mod:`.failures`).

Imported on both sides of a trial (the driver and the harness inside the user's process): it
needs no torch, Ray or Optuna, and imports only the records.
"""
