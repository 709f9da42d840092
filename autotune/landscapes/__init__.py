"""Recorded landscapes: every configuration of a small space measured once and kept as data
(:mod:`.landscape`, the file format; :mod:`.recording` records one), a surrogate that answers the
configurations not recorded (:mod:`.surrogate`), studies replayed against them instead of real
trials (:mod:`.replay`), the
same loop in memory for comparing strategies (:mod:`.simulate`), and compiling apart from the
devices against compiling on them, on a simulated clock (:mod:`.farm`).

They drive the real study loop, so they sit above :mod:`autotune.study`; the search benchmark
(``bench/search_bench.py``) and ``autotune landscape`` use them.
"""
