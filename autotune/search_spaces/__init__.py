"""Built-in search spaces: one YAML file per target and platform (data, no code).

Installed as ``autotune.search_spaces``; :func:`autotune.space.builtin_space` reads them.
"""
