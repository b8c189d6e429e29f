"""Models and data sets by hub id (issue 37), tested offline: a tiny model and a tiny TOFU-layout
data set are placed into a temporary Hugging Face cache in its real layout (``blobs/`` named by
their hash, ``snapshots/<commit>/`` of relative symlinks, ``refs/main``; huggingface_hub's own
``scan_cache_dir`` must read it back), and ``supportbench run`` names them by id with
``HF_HUB_OFFLINE=1`` in a fresh process: the run resolves them through huggingface_hub, its identity
is the content (the same ``local:<hash>`` as the folder it came from), and the record names the id
and the commit. An id the cache lacks is refused before any work, naming the id, the cache folder
and the command that fetches it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import supportbench
from supportbench.benchmarks.tofu.adapter import Tofu
from supportbench.experiments.identity import content_identity, model_identity
from supportbench.unlearning.models import build_model, save_model, train_tokenizer

pytestmark = pytest.mark.slow
MODEL_ID, DATA_ID = "tiny-org/tiny-llama-tofu", "tiny-org/tofu"
COMMIT, DATA_COMMIT = "1" * 40, "2" * 40


def put_in_hf_cache(cache: Path, repo_type: str, repo_id: str, folder: Path, commit: str) -> Path:
    """``folder``'s files as huggingface_hub stores a downloaded snapshot: content in
    ``blobs/<sha256>``, ``snapshots/<commit>/<name>`` a relative symlink to it, ``refs/main``
    naming the commit."""
    repo = cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = f.relative_to(folder)
        blob = hashlib.sha256(f.read_bytes()).hexdigest()
        (repo / "blobs" / blob).write_bytes(f.read_bytes())
        link = repo / "snapshots" / commit / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(Path(*[".."] * (len(rel.parts) + 1), "blobs", blob), link)
    return repo / "snapshots" / commit


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    """A Hugging Face home with the tiny model and the generated TOFU files, by id."""
    tmp = tmp_path_factory.mktemp("hub")
    tofu = Tofu(size="mini", cache_dir=tmp / "sb-cache", progress=False)
    tok = train_tokenizer(tofu._tokenizer_texts(), 512)
    model_dir = save_model(build_model("tiny-llama", tok, seed=1), tok, tmp / "tiny-model")
    home = tmp / "hf-home"
    hub_cache = home / "hub"
    put_in_hf_cache(hub_cache, "model", MODEL_ID, model_dir, COMMIT)
    put_in_hf_cache(hub_cache, "dataset", DATA_ID, tofu.data_dir, DATA_COMMIT)
    from huggingface_hub import scan_cache_dir

    seen = {(r.repo_id, r.repo_type): r for r in scan_cache_dir(hub_cache).repos}
    assert [x.commit_hash for x in seen[(MODEL_ID, "model")].revisions] == [COMMIT]
    assert [x.commit_hash for x in seen[(DATA_ID, "dataset")].revisions] == [DATA_COMMIT]
    return {"home": home, "model_dir": model_dir, "data_dir": tofu.data_dir, "tmp": tmp}


def _run(hf, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    src = str(Path(supportbench.__file__).resolve().parents[1])
    env.update(
        HF_HOME=str(hf["home"]),
        HF_HUB_OFFLINE="1",
        OMP_NUM_THREADS="1",
        SUPPORTBENCH_CACHE=str(hf["tmp"] / "sb-cache"),
        PYTHONPATH=os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    return subprocess.run(
        [sys.executable, "-m", "supportbench.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_a_cell_runs_by_hub_ids_offline_and_its_record_names_them(hf, tmp_path):
    results = tmp_path / "results"
    out = _run(
        hf,
        "run",
        "--benchmark",
        "tofu",
        "--field",
        "forget01",
        "--objective",
        "npo",
        "--method",
        "random",
        "--theta0",
        f"{MODEL_ID}@{COMMIT}",
        "--data-dir",
        DATA_ID,
        "--T",
        "2",
        "--budget",
        "0.1",
        "--results",
        str(results),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (rec,) = [json.loads(f.read_text()) for f in (results / "runs").glob("*.json")]
    assert rec["status"] == "ok", rec["error"]
    # the identity is the content: the same as the folder the snapshot was made from
    assert rec["spec"]["model"] == model_identity(hf["model_dir"])
    want_data = content_identity(hf["data_dir"], option="benchmark.data_dir")
    assert rec["spec"]["hyperparameters"]["benchmark.data_dir"] == want_data
    src = rec["provenance"]["sources"]
    assert src["model"]["hub_id"] == f"{MODEL_ID}@{COMMIT}" and src["model"]["revision"] == COMMIT
    assert src["model"]["path"].endswith(f"models--tiny-org--tiny-llama-tofu/snapshots/{COMMIT}")
    assert src["benchmark.data_dir"]["hub_id"] == DATA_ID
    assert src["benchmark.data_dir"]["revision"] == DATA_COMMIT  # refs/main resolved
    assert src["benchmark.data_dir"]["repo_type"] == "dataset"


@pytest.mark.parametrize(
    ("flag", "ref", "fetch"),
    [
        ("--model", "tiny-org/absent", "hf download tiny-org/absent"),
        ("--theta0", f"{MODEL_ID}@{'3' * 40}", f"hf download {MODEL_ID} --revision {'3' * 40}"),
        ("--data-dir", "tiny-org/no-data", "hf download tiny-org/no-data --repo-type dataset"),
    ],
)
def test_an_id_the_offline_cache_lacks_is_refused_before_work(hf, tmp_path, flag, ref, fetch):
    results = tmp_path / "results"
    out = _run(
        hf,
        "run",
        "--benchmark",
        "tofu",
        "--objective",
        "npo",
        *(("--theta0", MODEL_ID) if flag == "--data-dir" else ()),
        flag,
        ref,
        "--results",
        str(results),
    )
    assert out.returncode == 2, out.stderr[-3000:]
    err = out.stderr
    assert f"'{ref}' is neither a folder here nor in the Hugging Face cache" in err, err
    assert str(hf["home"] / "hub") in err and fetch in err and "HF_HUB_OFFLINE is set" in err
    assert "Traceback" not in err and not (results / "runs").exists()


def test_a_cell_runs_on_tofu_saved_by_datasets_by_id(hf, tmp_path):
    """The same TOFU files as ``datasets``' save_to_disk folders (one per config, an Arrow stream
    and state.json, the layout of tests/golden/datasets-saved/), by data-set id: the run reads them
    (the same rows as the JSON files, so the same data hash's rows) and names the id."""
    import pyarrow as pa

    from supportbench.benchmarks.tofu import reader as tr

    folder = tmp_path / "tofu-saved"
    for f in sorted(hf["data_dir"].glob("*.json")):
        rows = tr.read_config(hf["data_dir"], f.stem)
        (folder / f.stem).mkdir(parents=True)
        table = pa.Table.from_pylist(rows)
        with (
            pa.OSFile(str(folder / f.stem / "data-00000-of-00001.arrow"), "wb") as out,
            pa.ipc.new_stream(out, table.schema) as w,
        ):
            w.write_table(table)
        state = {"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}
        (folder / f.stem / "state.json").write_text(json.dumps(state))
        assert tr.read_config(folder, f.stem) == rows
    (folder / "neutral.txt").write_bytes((hf["data_dir"] / "neutral.txt").read_bytes())
    put_in_hf_cache(hf["home"] / "hub", "dataset", "tiny-org/tofu-saved", folder, "4" * 40)
    results = tmp_path / "results"
    args = ["run", "--benchmark", "tofu", "--field", "forget01", "--objective", "npo"]
    args += ["--method", "random", "--theta0", MODEL_ID, "--data-dir", "tiny-org/tofu-saved"]
    out = _run(hf, *args, "--T", "2", "--budget", "0.1", "--results", str(results))
    assert out.returncode == 0, out.stderr[-3000:]
    (rec,) = [json.loads(f.read_text()) for f in (results / "runs").glob("*.json")]
    assert rec["status"] == "ok", rec["error"]
    src = rec["provenance"]["sources"]["benchmark.data_dir"]
    assert src["hub_id"] == "tiny-org/tofu-saved" and src["revision"] == "4" * 40
