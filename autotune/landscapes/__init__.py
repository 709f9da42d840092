"""Recorded landscapes: every configuration of a small space measured once and kept as data
(:mod:`.landscape`), and studies replayed against them instead of real trials (:mod:`.replay`).

They drive the real study loop, so they sit above :mod:`autotune.study`; the search benchmark
(``bench/search_bench.py``) and ``autotune landscape`` use them.
"""
