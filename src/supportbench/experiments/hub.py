"""Models and data sets by the names researchers use: Hugging Face hub ids, resolved through the
user's own Hugging Face cache (docs/scaling.md, "The 8B paper run from hub ids").

A reference is a hub id ``owner/name`` with an optional ``@revision`` (a branch, tag or commit) when
it is not a path that exists here and does not start like one (``/``, ``.``, ``~``). ``local_path``
turns it into the snapshot folder ``huggingface_hub.snapshot_download`` gives -- the user's
``HF_HOME``/``HF_HUB_CACHE``, token and ``HF_HUB_OFFLINE`` as they are, never a downloader of
ours -- and passes every other reference (a folder, a preset name) through unchanged, so everything
after it reads a local folder. A run's identity is the folder's content (``local:<hash>``,
``content:<hash>``), so two users of one id and revision compare; ``source`` is what the record
carries besides: the id, the resolved commit and the folder. No torch here.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from supportbench.errors import SpecError

# owner/name as the hub allows them (letters, digits, '-', '_', '.'), then an optional @revision
_ID = re.compile(
    r"^(?P<repo>[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95})"
    r"(?:@(?P<rev>[A-Za-z0-9][A-Za-z0-9._/-]{0,199}))?$"
)
REPO_TYPES = ("model", "dataset")


@dataclass(frozen=True)
class HubRef:
    """A resolved hub reference: the id, the commit it resolved to, and the snapshot folder."""

    id: str
    revision: str
    path: str
    repo_type: str = "model"

    def source(self) -> dict:
        return {
            "hub_id": self.id,
            "revision": self.revision,
            "repo_type": self.repo_type,
            "path": self.path,
        }


def is_hub_id(ref: object) -> bool:
    """True for ``owner/name[@revision]`` that names no existing path here."""
    if not isinstance(ref, str) or ref.startswith(("/", ".", "~")) or "\\" in ref:
        return False
    return bool(_ID.match(ref)) and not Path(ref).exists()


def split(ref: str) -> tuple[str, str | None]:
    """(repo id, revision or None) of a hub id."""
    m = _ID.match(ref)
    if m is None:
        raise SpecError(f"{ref!r} is not a hub id (owner/name or owner/name@revision)")
    return m["repo"], m["rev"]


@functools.cache
def resolve(ref: str, repo_type: str = "model") -> HubRef:
    """The snapshot of hub id ``ref`` in the user's Hugging Face cache (fetched first when the user
    is online and it is missing), or a named error: absent while offline, gated, private or
    unknown, or a revision the repository lacks."""
    import huggingface_hub as hh
    from huggingface_hub import constants, errors

    if repo_type not in REPO_TYPES:
        raise SpecError(f"repo type {repo_type!r}; allowed: {', '.join(REPO_TYPES)}")
    repo, rev = split(ref)
    what = "data set" if repo_type == "dataset" else "model"
    fetch = (
        f"hf download {repo}"
        + (f" --revision {rev}" if rev else "")
        + (" --repo-type dataset" if repo_type == "dataset" else "")
    )
    cache = constants.HF_HUB_CACHE
    try:
        path = _snapshot(hh, errors, repo, rev, repo_type, constants.HF_HUB_OFFLINE)
    except errors.HFValidationError as exc:
        raise SpecError(
            f"'{ref}' is neither a folder here nor a valid hub id ({str(exc).splitlines()[0]})"
        ) from None
    except errors.GatedRepoError:
        raise SpecError(
            f"{what} '{ref}' is gated on the Hugging Face hub: accept its terms on "
            f"https://huggingface.co/{'datasets/' if repo_type == 'dataset' else ''}{repo}, log in "
            f"(hf auth login), then run `{fetch}`"
        ) from None
    except errors.RevisionNotFoundError:
        raise SpecError(f"{what} '{repo}' has no revision '{rev}' on the hub") from None
    except errors.RepositoryNotFoundError:
        raise SpecError(
            f"{what} '{repo}' is not on the Hugging Face hub, or it is private and this user is "
            "not logged in (hf auth login); a local folder must exist here"
        ) from None
    except errors.IncompleteSnapshotError:
        raise SpecError(
            f"{what} '{ref}' is only partly in the Hugging Face cache '{cache}' (an interrupted "
            f"download?): complete it with `{fetch}` (the same HF_HOME)"
        ) from None
    except (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled):
        offline = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the hub is unreachable"
        raise SpecError(
            f"{what} '{ref}' is neither a folder here nor in the Hugging Face cache "
            f"'{cache}' ({offline}): fetch it on a machine with a network with "
            f"`{fetch}` (the same HF_HOME), or name a local folder"
        ) from None
    except errors.HfHubHTTPError as exc:  # e.g. 401: an invalid or expired token
        raise SpecError(
            f"the Hugging Face hub refused {what} '{ref}' ({str(exc).splitlines()[0]}): check the "
            "token (hf auth login, HF_TOKEN) or name a local folder"
        ) from None
    return HubRef(ref, Path(path).name, str(path), repo_type)


def _snapshot(hh, errors, repo: str, rev: str | None, repo_type: str, offline: bool) -> str:
    """huggingface_hub's snapshot folder: offline from the cache alone (some 1.x releases list the
    repository's tree for a commit revision even with HF_HUB_OFFLINE set, unless asked for local
    files only); online, and the network itself fails (1.x raises its HTTP client's error for a
    commit revision where 2.x falls back to the cache), from the cache as 2.x does."""
    answered = (
        errors.HfHubHTTPError,  # the hub answered: gated, not found, 401, ...
        errors.HFValidationError,
        errors.LocalEntryNotFoundError,
        errors.OfflineModeIsEnabled,
    )
    try:
        return hh.snapshot_download(
            repo, revision=rev, repo_type=repo_type, local_files_only=offline
        )
    except answered:
        raise
    except Exception:  # the network failed before the hub could answer
        if offline:
            raise
        return hh.snapshot_download(repo, revision=rev, repo_type=repo_type, local_files_only=True)


def repo_type_of(option: str) -> str:
    """The hub repository type a path option names by id: a data folder is a data set."""
    return "dataset" if option.removeprefix("benchmark.") == "data_dir" else "model"


def local_path(ref: str, repo_type: str = "model") -> str:
    """The folder a reference names: a hub id's snapshot, anything else unchanged."""
    return resolve(ref, repo_type).path if is_hub_id(ref) else ref


def source(ref: object, repo_type: str = "model") -> dict | None:
    """What a record says about a reference besides its content hash: for a hub id, the id, the
    commit it resolved to and the snapshot folder; for a local folder, its absolute path; else
    None (a preset is its name)."""
    if not isinstance(ref, str):
        return None
    if is_hub_id(ref):
        return resolve(ref, repo_type).source()
    p = Path(ref).expanduser()
    return {"path": str(p.resolve())} if p.exists() else None
