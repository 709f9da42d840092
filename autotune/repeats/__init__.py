"""What a study measures again: the between-run noise early, the incumbent raced against a
challenger, the best and the baseline before the end (:mod:`.racing`); the bar under which a trial
stops and how long a run measures (:mod:`.pruning`); the noise kept for the next study here
(:mod:`.kept_noise`)."""
