"""experiments.hub offline (issue 37): with HF_HUB_OFFLINE set it asks huggingface_hub for local
files only, and an OfflineModeIsEnabled (any huggingface_hub release) is the offline-miss refusal,
not an internal error. huggingface_hub 1.33's snapshot_download lists a repository's tree for a
commit revision even offline unless asked for local files only (found on the GPU machine,
2026-11-27)."""

import huggingface_hub
import pytest
from huggingface_hub import constants, errors

from supportbench.errors import SpecError
from supportbench.experiments import hub


@pytest.fixture(autouse=True)
def fresh():
    hub.resolve.cache_clear()
    yield
    hub.resolve.cache_clear()


def test_offline_resolution_asks_for_local_files_only(monkeypatch, tmp_path):
    seen = {}

    def snapshot_download(repo, revision=None, repo_type="model", local_files_only=False):
        seen.update(repo=repo, revision=revision, local_files_only=local_files_only)
        return str(tmp_path / "snapshots" / ("1" * 40))

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    ref = hub.resolve(f"org/model@{'1' * 40}")
    assert seen == {"repo": "org/model", "revision": "1" * 40, "local_files_only": True}
    assert ref.revision == "1" * 40
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    hub.resolve.cache_clear()
    hub.resolve("org/model")
    assert seen["local_files_only"] is False  # online: the user's own settings, a fetch allowed


def test_offline_mode_error_is_the_offline_miss_refusal(monkeypatch):
    def snapshot_download(*a, **k):
        raise errors.OfflineModeIsEnabled("Cannot reach https://huggingface.co/api/models/x")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    with pytest.raises(SpecError) as e:
        hub.resolve("org/model@main")
    msg = str(e.value)
    assert "'org/model@main' is neither a folder here nor in the Hugging Face cache" in msg
    assert "HF_HUB_OFFLINE is set" in msg and "hf download org/model --revision main" in msg


@pytest.mark.parametrize(
    ("error", "ref", "says"),
    [
        ("GatedRepoError", "meta-llama/Llama-3.1-8B", "'meta-llama/Llama-3.1-8B' is gated"),
        ("RepositoryNotFoundError", "org/secret", "or it is private and this user is not logged"),
        ("RevisionNotFoundError", "org/model@v9", "model 'org/model' has no revision 'v9'"),
    ],
)
def test_gated_private_and_unknown_revision_are_named(monkeypatch, error, ref, says):
    """Online answers of the hub (huggingface_hub's own error types) become named refusals."""
    cls = getattr(errors, error)

    def snapshot_download(*a, **k):
        e = cls.__new__(cls)  # the HTTP errors want a response object; the message is what matters
        Exception.__init__(e, "403 / 404 from the hub")
        raise e

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    with pytest.raises(SpecError, match=says):
        hub.resolve(ref)


def test_a_network_failure_online_falls_back_to_the_cache(monkeypatch, tmp_path):
    """Review D1: huggingface_hub 1.33 raises its HTTP client's ConnectError for a commit revision
    when the network is down (2.4 falls back to the cache itself); online, the cache is then read
    as 2.4 does, and a miss there is the 'hub is unreachable' refusal."""

    class ConnectError(Exception):  # httpx's, which is neither an OSError nor a hub error
        pass

    calls = []

    def snapshot_download(repo, revision=None, repo_type="model", local_files_only=False):
        calls.append(local_files_only)
        if not local_files_only:
            raise ConnectError("[Errno -2] Name or service not known")
        return str(tmp_path / revision)

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    assert hub.resolve(f"org/model@{'a' * 40}").revision == "a" * 40 and calls == [False, True]

    def missing(repo, revision=None, repo_type="model", local_files_only=False):
        if not local_files_only:
            raise ConnectError("[Errno -2] Name or service not known")
        raise errors.LocalEntryNotFoundError("not in the cache")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", missing)
    with pytest.raises(SpecError, match=r"nor in the Hugging Face cache .*the hub is unreachable"):
        hub.resolve("org/other")


@pytest.mark.parametrize("ref", ["models/llama--v2", "out/ckpt.", "data/tofu..old"])
def test_an_absent_path_that_no_hub_id_can_be_is_refused_by_name(ref):
    """Review D2: huggingface_hub's own validator refuses these (the real call, offline)."""
    with pytest.raises(SpecError, match=r"is neither a folder here nor a valid hub id"):
        hub.resolve(ref)


def test_a_token_the_hub_refuses_and_a_partial_snapshot_are_named(monkeypatch):
    """Review D3 and D6: a 401 (invalid or expired token) names the token; an interrupted download
    (huggingface_hub's IncompleteSnapshotError, a LocalEntryNotFoundError) is 'only partly in the
    cache', not 'not in the cache'."""

    def refused(*a, **k):
        e = errors.HfHubHTTPError.__new__(errors.HfHubHTTPError)
        Exception.__init__(e, "401 Client Error: Invalid credentials")
        raise e

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", refused)
    with pytest.raises(SpecError, match=r"refused model 'org/model' \(401 .*check the token"):
        hub.resolve("org/model")

    def partial(*a, **k):
        raise errors.IncompleteSnapshotError("snapshot lacks model.safetensors", snapshot_path="x")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", partial)
    with pytest.raises(SpecError, match=r"only partly in the Hugging Face cache .*download org/p"):
        hub.resolve("org/p")
