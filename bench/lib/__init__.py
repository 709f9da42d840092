"""The code the benchmarks share, which no command of autotune runs: the study on a recorded
landscape in memory (:mod:`.simulate`), the by-hand baseline a search is measured against
(:mod:`.by_hand`), the compile farm on a simulated clock (:mod:`.farm`) and the noisy
neighbour a benchmark measures beside (:mod:`.neighbour`)."""
