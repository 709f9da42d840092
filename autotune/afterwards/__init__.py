"""Tools on a stored best: the job run with it applied (:mod:`.production`), the best and the
baseline measured again (:mod:`.verify`), and a failing configuration reduced to the knobs that
make it fail (:mod:`.minimal_failure`)."""
