"""The autotune daemon: a persistent job queue that many clients and pipelines share.

``autotune serve`` runs it (:mod:`.server`); ``submit``, ``status``, ``cancel``, ``logs``,
``best --server`` and ``ensure --server`` talk to it (:mod:`.client`). The queue lives in the same
database as the studies (:mod:`.jobs`), each job is an ``autotune run`` process (:mod:`.runner`),
and a job's code arrives as a checked snapshot (:mod:`.archive`).
"""

from autotune.daemon.messages import EnsureReply, JobInfo, JobSpec, JobState, RunOptions

__all__ = ["EnsureReply", "JobInfo", "JobSpec", "JobState", "RunOptions"]
