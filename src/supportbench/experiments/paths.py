"""Where supportbench keeps what it can rebuild: prepared models (theta_0), generated data, model
identities.

One cache for the user, whatever the current folder: ``--cache`` (an explicit path), else
``$SUPPORTBENCH_CACHE``, else the user's cache directory (XDG on Linux: ``~/.cache/supportbench``,
via ``platformdirs``). Results never live here: they go to the results directory (``ResultsDir``).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def cache_root(override: str | Path | None = None) -> Path:
    if override:
        return Path(override).expanduser().resolve()
    env = os.environ.get("SUPPORTBENCH_CACHE")
    if env:
        return Path(env).expanduser().resolve()
    return Path(platformdirs.user_cache_dir("supportbench", appauthor=False))
