import fcntl

import pytest

from supportbench.benchmarks.base import get_benchmark


@pytest.fixture(scope="session")
def cache(tmp_path_factory, worker_id):
    """One prepared-model cache for the integration tests of the whole run, shared by the
    pytest-xdist workers: a theta_0 built through ``tofu`` below (under a lock: the other worker
    waits and reads it) is trained once (~30-60 s), not once per worker. Every entry is published
    whole (``benchmarks.base.building``), as for a sweep's workers, so two workers that build one
    entry at once without the lock only lose time."""
    root = tmp_path_factory.getbasetemp()  # a worker's: pytest-N/popen-gwK, shared: pytest-N
    path = (root if worker_id == "master" else root.parent) / "sbcache-shared"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def tofu(cache):
    with open(cache / ".tofu-prepare.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        b = get_benchmark("tofu", cache_dir=cache, progress=False)
        b.prepare("tiny-llama")
    return b
