"""What a stored study says, to the study itself and to every reader (the CLI, the daemon, the
report): its configurations ranked with one figure each (:mod:`.standings`), the best
(:mod:`.best`), every trial (:mod:`.summaries`), the files it leaves (:mod:`.outputs`), whether more
trials would help (:mod:`.outlook`) and studies side by side (:mod:`.comparison`)."""
