"""What only the benchmarks use: the scripts here, and the code they share (:mod:`bench.lib`),
importable as ``bench`` from the repository's root, never installed with the package."""
