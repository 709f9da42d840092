"""The trial side: the Ray worker, the process launcher and the in-process harness."""
