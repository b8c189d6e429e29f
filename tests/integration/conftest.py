import pytest

from supportbench.benchmarks.base import get_benchmark


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    """One prepared-model cache for the whole session: theta_0 is trained once (~30 s)."""
    return tmp_path_factory.mktemp("sbcache")


@pytest.fixture(scope="session")
def tofu(cache):
    b = get_benchmark("tofu", cache_dir=cache, progress=False)
    b.prepare("tiny-llama")
    return b
