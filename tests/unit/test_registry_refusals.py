"""`supportbench registry ...` refuses bad input with exit 2 and one line naming the value and what
is allowed, and writes nothing: one row per case (issue 33); the registry's content and the results
folder are hashed before and after each. Then what the refusals protect: the registry each command
writes (and says so), every row a query returns (table, csv, json), unknown names stored only when
allowed, and the lock: an idle query prompt never blocks an ingest, and a blocked writer is told who
holds the registry."""

import contextlib
import csv
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from supportbench.cli import main
from supportbench.errors import RegistryError
from supportbench.experiments.decisions import decision_hash, freeze_decision
from supportbench.experiments.spec import spec_key
from supportbench.registry import synthetic as syn

CLI = [sys.executable, "-m", "supportbench.cli"]
ROW = {
    "experiment": "e",
    "benchmark": "tofu",
    "field": "forget10",
    "objective": "npo",
    "method": "wagle",
    "variant": "static",
    "seed": "1",
    "split": "final",
    "J": "0.5",
    "status": "ok",
}
LACUNA = ["--experiment", "lac", "--objective", "ga", "--allow-unknown"]


# ---- what a case starts from, and how "nothing written" is checked -------------------------------
def _registry_digest(path: Path) -> str:
    """The registry's content (every table's rows), not its bytes: opening a file writable
    rewrites its header."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        h = hashlib.sha256()
        tables = con.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_type = 'BASE TABLE' ORDER BY 1"
        ).fetchall()
        for (t,) in tables:
            rows = con.execute(f'SELECT * FROM "{t}"').fetchall()
            h.update(t.encode() + repr(sorted(map(repr, rows))).encode())
        return h.hexdigest()
    finally:
        con.close()


def snapshot(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = (
            "dir"
            if p.is_dir()
            else _registry_digest(p)
            if p.suffix == ".duckdb"
            else hashlib.sha256(p.read_bytes()).hexdigest()
        )
    return out


@pytest.fixture()
def world(tmp_path, capsys):
    """res/: two records and their registry res/registry.duckdb (`registry ingest res` wrote it)."""
    res = tmp_path / "res"
    for seed, method in ((1, "wagle"), (2, "random")):
        syn.write(res, syn.record(experiment="e", method=method, seed=seed, J=float(seed)))
    assert main(["registry", "ingest", str(res)]) == 0
    capsys.readouterr()
    return tmp_path


def table(tmp: Path, **cells) -> str:
    """An outcome table of one row: ROW with ``cells`` changed (metric:NAME adds a column)."""
    row = {**ROW, **cells}
    path = tmp / "in" / "t.csv"
    path.parent.mkdir(exist_ok=True)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(row)
    w.writerow(row.values())
    path.write_text(buf.getvalue())
    return str(path)


def lacuna(tmp: Path) -> str:
    d = tmp / "in" / "unlearned_models" / "Email_Address" / "GradientAscent"
    d.mkdir(parents=True)
    (d / "Panorama_SUMMARY.json").write_text(json.dumps({"forget_Q_A_Prob": 0.12}))
    (d / "lm_eval.json").write_text(json.dumps({"arc_easy": 0.6, "_mean": 0.6}))
    return str(d)


def record(tmp: Path, edit=None, raw: str | None = None, **kw) -> None:
    """A record added to res/runs: syn.record(**kw), edited by ``edit`` (its key recomputed from
    its spec), or ``raw`` text."""
    rec = syn.record(experiment="e", seed=9, **kw)
    if edit:
        edit(rec)
        if isinstance(rec.get("spec"), dict):
            rec["run_key"] = spec_key(rec["spec"])
    (tmp / "res" / "runs" / "bad.json").write_text(raw if raw is not None else json.dumps(rec))


def decision(tmp: Path, key: str, value) -> None:
    """A frozen decision in res/decisions with ``key`` set to ``value`` (its hash recomputed)."""
    dec = freeze_decision(
        tmp / "in",
        tau=0.02,
        rho_p=0.01,
        d=20,
        t=160,
        T=200,
        actions=[0, 0.01],
        admissible_range=[0.2, 0.8],
        calibration_seeds=[7],
        baselines=["random"],
        benchmark="natural_tofu",
        objective="npo",
        selection="evaluation",
        experiment="e",
        calibration_runs=[],
    )
    dec[key] = value
    dec["hash"] = decision_hash(dec)
    (tmp / "res" / "decisions").mkdir()
    (tmp / "res" / "decisions" / "bad.json").write_text(json.dumps(dec))


def deep_toml(tmp: Path, body: str) -> str:
    path = tmp / "in" / "deep.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f'[experiment]\nname = "x"\n{body}\n')
    return str(path)


def T(**cells):  # noqa: N802 -- the case table's short names
    return lambda t: {"table": table(t, **cells)}


def R(edit=None, raw=None, **kw):  # noqa: N802
    return lambda t: record(t, edit, raw, **kw)


def spec(key, value):
    return lambda rec: rec["spec"].__setitem__(key, value)


def top(key, value):
    return lambda rec: rec.__setitem__(key, value)


def D(key, value):  # noqa: N802
    return lambda t: decision(t, key, value)


def AFILE(t):  # noqa: N802 -- a plain file where a folder would have to be
    (t / "afile").write_text("not a folder")
    return {}


LONG = "x" * 300


def L(t):  # noqa: N802
    return {"src": lacuna(t)}


DB = ["--registry", "{db}"]
QUERY = ["registry", "query", *DB]
INGEST = ["registry", "ingest", "{res}"]
FRESH = [*INGEST, "--registry", "{tmp}/new/r.duckdb"]  # no registry and no folder there yet
IMPORT = ["registry", "import", "{table}", *DB]
SRC = ["registry", "import", "{src}", *DB]
LOCK = "SUPPORTBENCH_LOCK_TIMEOUT"
N = 50_000
LOCK_MSG = (
    "is not allowed: it is the seconds to wait for another process's lock, a decimal number in "
    "0..604800"
)
SEED_MSG = "is not allowed; a seed is a whole number in 0..2^63-1 written as digits"
J_MSG = "is not allowed; it must be a finite decimal number"
TOML_MSG = "deep.toml': arrays, tables or dotted keys nested more than 100 levels deep"
INSTANCES = [{"run_key": "k", "s": "x", "gamma": 0.1}]

# (id, prepare(tmp) -> {placeholder: value} or None, argv, env, message fragment)
# every case: exit 2, one line on stderr, nothing written, nothing lost
CASES = [
    # 1. an empty -c; options of another action
    ("query -c empty", None, [*QUERY, "-c", ""], {}, "-c '': an empty query"),
    ("query -c blank", None, [*QUERY, "-c", " \n\t"], {}, "an empty query; give one read"),
    ("query PATH", None, ["registry", "query", "{db}"], {}, "registry query takes no PATH"),
    (
        "query --format tofu-logs",
        None,
        [*QUERY, "--format", "tofu-logs", "-c", "SELECT 1"],
        {},
        "--format tofu-logs: not a registry query format; allowed: table, csv, json",
    ),
    (
        "import --format json",
        T(),
        [*IMPORT, "--format", "json"],
        {},
        "--format json: not a registry import format",
    ),
    (
        "ingest --format",
        None,
        [*INGEST, "--format", "csv"],
        {},
        "registry ingest takes no --format",
    ),
    ("ingest -c", None, [*INGEST, "-c", "SELECT 1"], {}, "-c is the SQL of registry query"),
    (
        "query --allow-unknown",
        None,
        [*QUERY, "-c", "SELECT 1", "--allow-unknown"],
        {},
        "--allow-unknown is for registry ingest and import",
    ),
    # 3. the lock timeout's value
    *[
        (f"{LOCK}={v}", None, INGEST, {LOCK: v}, f"{LOCK}={v!r} {LOCK_MSG}")
        for v in ("abc", "-1", "nan", "inf", "1_0", "0x10", "")
    ],
    (f"{LOCK} query", None, [*QUERY, "-c", "SELECT 1"], {LOCK: "-5"}, f"{LOCK}='-5' {LOCK_MSG}"),
    # 5. strict numbers in an outcome table
    *[
        (f"table seed {v}", T(seed=v), IMPORT, {}, f"t.csv row 1, column 'seed': {v!r} {SEED_MSG}")
        for v in ("-1", "1_000", "9e99", str(2**63), str(2**70), "7.0", " 7", "+7", "0x10")
    ],
    ("table build -1", T(build="-1"), IMPORT, {}, "t.csv row 1, column 'build': '-1' is not"),
    *[
        (f"table J {v}", T(J=v), IMPORT, {}, f"t.csv row 1, column 'J': {v!r} {J_MSG}")
        for v in ("1_000", "0x10", "inf", "-Infinity", "nan", "1e999", "abc", " 1")
    ],
    (
        "table metric 1_0",
        T(**{"metric:forget_quality": "1_0"}),
        IMPORT,
        {},
        "column 'metric:forget_quality': '1_0' is not allowed",
    ),
    (
        "table forget quality -5",
        T(**{"metric:forget_quality": "-5"}),
        IMPORT,
        {},
        "metric forget_quality = -5.0 is out of range; it must lie in [0, 1]",
    ),
    (
        "table ROUGE 1.5 under open-unlearning's name",
        T(**{"metric:forget_Q_A_ROUGE": "1.5"}),
        IMPORT,
        {},
        "metric forget_Q_A_ROUGE = 1.5 is out of range; it must lie in [0, 1] (forget_rouge)",
    ),
    # 5. the strict seed of a single-run import
    (
        "import --seed -1",
        L,
        [*SRC, *LACUNA, "--seed", "-1"],
        {},
        "--seed must be a whole number in 0..2^63-1 written as digits, got '-1'",
    ),
    ("import --seed 1_0", L, [*SRC, *LACUNA, "--seed", "1_0"], {}, "digits, got '1_0'"),
    ("import --seed 9e99", L, [*SRC, *LACUNA, "--seed", "9e99"], {}, "digits, got '9e99'"),
    (
        "import --seed 2^63",
        L,
        [*SRC, *LACUNA, "--seed", str(2**63)],
        {},
        f"--seed '{2**63}' is out of range; allowed: a whole number in 0..2^63-1",
    ),
    # 6. unknown names, control characters
    (
        "table unknown method",
        T(method="wagel"),
        IMPORT,
        {},
        "t.csv: unknown method 'wagel'. Did you mean 'wagle'? Known: activation",
    ),
    (
        "table unknown benchmark",
        T(benchmark="tofuu"),
        IMPORT,
        {},
        "unknown benchmark 'tofuu'. Did you mean 'tofu'?",
    ),
    (
        "table unknown objective",
        T(objective="npo2"),
        IMPORT,
        {},
        "unknown objective 'npo2'. Did you mean 'npo'?",
    ),
    (
        "import unknown method",
        L,
        [*SRC, *LACUNA[:4], "--seed", "1"],
        {},
        "unknown method 'GradientAscent'",
    ),
    (
        "table experiment ESC",
        T(experiment="a\x1bb"),
        [*IMPORT, "--allow-unknown"],
        {},
        "experiment 'a\\x1bb' holds a control character (U+001B at position 1)",
    ),
    ("table field BEL", T(field="f\x07"), IMPORT, {}, "field 'f\\x07' holds a control character"),
    (
        "table metric name",
        T(**{"metric:a\x01": "1"}),
        IMPORT,
        {},
        "metric name 'a\\x01' holds a control character",
    ),
    (
        "import --experiment bidi override",
        L,
        [*SRC, *LACUNA, "--seed", "1", "--experiment", "a\u202eb"],
        {},
        "holds a control character (U+202E",
    ),
    (
        "import --experiment line separator",
        L,
        [*SRC, *LACUNA, "--seed", "1", "--experiment", "a\u2028b"],
        {},
        "holds a control character (U+2028",
    ),
    (
        "import --experiment NUL",
        L,
        [*SRC, *LACUNA, "--seed", "1", "--experiment", "a\x00b"],
        {},
        "experiment 'a\\x00b' holds a control character (U+0000",
    ),
    (
        "record unknown method",
        R(method="wagel"),
        INGEST,
        {},
        "bad.json: unknown method 'wagel'. Did you mean 'wagle'?",
    ),
    ("record unknown objective", R(objective="npoo"), FRESH, {}, "unknown objective 'npoo'"),
    (
        "record unknown benchmark",
        R(spec("benchmark", "tofuu")),
        INGEST,
        {},
        "unknown benchmark 'tofuu'",
    ),
    (
        "record objective option out of range",
        R(hyperparameters={"objective.beta": -5.0}),
        INGEST,
        {},
        "bad.json: objective.beta = -5: must be a number in (0, 1000] (1/nat); nothing stored",
    ),
    (
        "record method option out of range",
        R(hyperparameters={"method.eps": 2.0}),
        FRESH,
        {},
        "bad.json: method.eps = 2: must be a number in (0, 1]; nothing stored",
    ),
    (
        "record undeclared method option",
        R(hyperparameters={"method.epsilon": 1e-8}),
        INGEST,
        {},
        "bad.json: method.epsilon is not an option of method 'intervention_score' (did you mean "
        "'method.eps'?); declared: eps",
    ),
    (
        "record option of another objective",
        R(objective="graddiff", hyperparameters={"objective.beta": 0.1}),
        INGEST,
        {},
        "objective.beta is not an option of objective 'graddiff'; declared: forget_coef, "
        "retain_coef",
    ),
    (
        "record NUL experiment",
        R(spec("experiment", "a\x00b")),
        [*INGEST, "--allow-unknown"],
        {},
        "experiment 'a\\x00b' holds a control character (U+0000)",
    ),
    (
        "record newline field",
        R(spec("field", "forget10\n")),
        FRESH,
        {},
        "field 'forget10\\n' holds a control character (U+000A)",
    ),
    # 7. nesting; malformed fields
    (
        "record nested arrays",
        R(raw="[" * N + "]" * N),
        INGEST,
        {},
        "bad.json: nested more than 100 levels deep",
    ),
    (
        "record nested objects",
        R(raw='{"a":' * N + "1" + "}" * N),
        FRESH,
        {},
        "nested more than 100 levels deep",
    ),
    ("record 101 levels", R(raw="[" * 101 + "]" * 101), INGEST, {}, "nested more than 100 levels"),
    (
        "record spec []",
        R(top("spec", [])),
        INGEST,
        {},
        "bad.json: a record needs a run_key and a spec object",
    ),
    (
        "record outcome x",
        R(top("outcome", "x")),
        INGEST,
        {},
        "bad.json: status 'ok' but J, G_F, D_coll not a finite number ('x')",
    ),
    (
        "record compute 5",
        R(top("compute", 5)),
        INGEST,
        {},
        "bad.json: Expected `object`, got `int` - at `$.compute`",
    ),
    (
        "decision frozen_at 5",
        D("frozen_at", 5),
        INGEST,
        {},
        "bad.json: no frozen_at timestamp (got 5)",
    ),
    (
        "decision calibration x",
        D("calibration", "x"),
        FRESH,
        {},
        "bad.json: calibration = 'x' must be an object whose instances are a list",
    ),
    (
        "decision instance s",
        D("calibration", {"instances": INSTANCES}),
        INGEST,
        {},
        "calibration.instances[0].s = 'x' must be a finite number",
    ),
    (
        "decision instance run_key",
        D("calibration", {"instances": [{"s": 1.0, "gamma": 0.1}]}),
        INGEST,
        {},
        "calibration.instances[0].run_key = None must be a run key",
    ),
    (
        "decision experiment []",
        D("experiment", []),
        INGEST,
        {},
        "bad.json: experiment = [] must be a name (text)",
    ),
    (
        "decision benchmark NUL",
        D("benchmark", "a\x00"),
        INGEST,
        {},
        "benchmark 'a\\x00' holds a control character",
    ),
    *[
        (
            f"toml {what}",
            lambda t, body=body: {"spec": deep_toml(t, body)},
            ["sweep", "--dry-run", "{spec}"],
            {},
            TOML_MSG,
        )
        for what, body in (
            ("arrays", "fields = " + "[" * N + "]" * N),
            ("inline tables", "x = " + "{a=" * N + "1" + "}" * N),
            ("dotted key", "a" + ".a" * N + " = 1"),
            ("quoted dotted key", '"a"' + '."a"' * N + " = 1"),
            ("101 levels", "fields = " + "[" * 101 + "]" * 101),
        )
    ],
    # 8. paths the file system cannot use: under a file, a name over 255 bytes (the review's cases)
    (
        "ingest --registry under a file",
        AFILE,
        [*INGEST, "--registry", "{tmp}/afile/r.duckdb"],
        {},
        "/afile/r.duckdb' lies under",
    ),
    (
        "import --registry under a file",
        lambda t: {**AFILE(t), **T()(t)},
        ["registry", "import", "{table}", "--registry", "{tmp}/afile/r.duckdb"],
        {},
        "which is a file",
    ),
    (
        "export under a file",
        AFILE,
        ["registry", "export", "{tmp}/afile/o.csv", *DB],
        {},
        "outcome table '",
    ),
    ("ingest DIR a file", AFILE, ["registry", "ingest", "{tmp}/afile"], {}, "which is a file"),
    (
        "ingest --registry too long",
        None,
        [*INGEST, "--registry", "{tmp}/" + LONG + ".duckdb"],
        {},
        "is longer than 255 bytes",
    ),
    (
        "query --registry too long",
        None,
        ["registry", "query", "--registry", "{tmp}/" + LONG + "/r.duckdb", "-c", "SELECT 1"],
        {},
        "is longer than 255 bytes",
    ),
    (
        "ingest DIR too long",
        None,
        ["registry", "ingest", "{tmp}/" + LONG],
        {},
        "is longer than 255 bytes",
    ),
    (
        "ingest --experiment",
        None,
        [*INGEST, "--experiment", "foo"],
        {},
        "--experiment is for registry export and import",
    ),
    (
        "ingest --seed",
        None,
        [*INGEST, "--seed", "5"],
        {},
        "--seed is for registry import; registry ingest takes none",
    ),
    (
        "query --replace-reruns",
        None,
        [*QUERY, "-c", "SELECT 1", "--replace-reruns"],
        {},
        "--replace-reruns is for registry ingest",
    ),
    (
        "query --registry /dev/null",
        None,
        ["registry", "query", "--registry", "/dev/null", "-c", "SELECT 1"],
        {},
        "is not a regular file (a device, FIFO or socket)",
    ),
    # numbers no timer or parser holds (issue 33's second review)
    (f"{LOCK}=1e308", None, INGEST, {LOCK: "1e308"}, f"{LOCK}='1e308' {LOCK_MSG}"),
    (
        "query seconds 1e308",
        None,
        [*QUERY, "-c", "SELECT 1"],
        {"SUPPORTBENCH_QUERY_SECONDS": "1e308"},
        "must be a number of seconds in (0, 604800]",
    ),
    (
        "record with a 5000-digit number",
        R(raw='{"run_key": "k", "spec": {"seed": ' + "1" * 5000 + "}}"),
        INGEST,
        {},
        "a value it cannot read",
    ),
    # calibrate: where its decision goes, and what goes into it, are checked before any work
    *[
        (
            f"calibrate --out {what}",
            prep,
            [
                "calibrate",
                "--results",
                "{res}",
                "--benchmark",
                "lacuna",
                "--objective",
                "graddiff",
                "--out",
                out,
            ],
            {},
            msg,
        )
        for what, prep, out, msg in (
            ("a file", AFILE, "{tmp}/afile", "is a file, not a folder"),
            ("under a file", AFILE, "{tmp}/afile/sub", "lies under"),
            ("too long", None, "{tmp}/" + LONG, "is longer than 255 bytes"),
        )
    ],
    (
        "calibrate --benchmark misspelt",
        None,
        ["calibrate", "--results", "{res}", "--benchmark", "lacunaa", "--objective", "graddiff"],
        {},
        "(did you mean 'lacuna'?)",
    ),
    (
        "calibrate --objective unknown",
        None,
        ["calibrate", "--results", "{res}", "--benchmark", "lacuna", "--objective", "dpo"],
        {},
        "--objective 'dpo' is not an objective",
    ),
    (
        "calibrate --baselines control character",
        None,
        [
            "calibrate",
            "--results",
            "{res}",
            "--benchmark",
            "lacuna",
            "--objective",
            "graddiff",
            "--baselines",
            "a\x01",
        ],
        {},
        "holds a control character",
    ),
    # a name the file system holds, but not with DuckDB's '.wal' (or a temp name) beside it
    (
        "ingest --registry 252-byte name",
        None,
        [*INGEST, "--registry", "{tmp}/" + "r" * 245 + ".duckdb"],
        {},
        "too long for DuckDB's '.wal' file",
    ),
]


@pytest.mark.parametrize(
    ("prepare", "argv", "env", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_registry_input_is_refused_and_nothing_is_written(
    world, capsys, monkeypatch, prepare, argv, env, message
):
    res = world / "res"
    values = {
        "tmp": str(world),
        "res": str(res),
        "db": str(res / "registry.duckdb"),
        **((prepare(world) or {}) if prepare else {}),
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    before = snapshot(world)
    try:
        rc = main([a.format(**values) for a in argv])
    except SystemExit as exc:  # argparse's own refusal
        rc = exc.code
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert message in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    assert snapshot(world) == before  # nothing written, nothing lost
    assert not list(world.rglob("*.owner"))  # no owner note left behind


def test_api_results_of_an_unknown_experiment_is_the_clis_error(world, capsys):
    import supportbench as sb

    db = world / "res" / "registry.duckdb"
    reg = sb.open_registry(db)
    for frame in (reg.results, reg.components, reg.metrics):
        with pytest.raises(
            RegistryError,
            match=r"experiment 'nope': no such experiment in the "
            r"registry; it holds: e$",
        ):
            frame("nope")
    assert reg.results("e").height == 2
    rc = main(
        ["registry", "export", str(world / "o.csv"), "--registry", str(db), "--experiment", "nope"]
    )
    assert rc == 2 and "no such experiment in the registry; it holds: e" in capsys.readouterr().err
    # items(): a run key, of a run the registry holds
    # (not a path: '../x' would leave the items folder)
    for bad, message in (
        ("nope", "is not a run key"),
        ("../" * 10 + "etc/passwd", "is not a run key"),
        ("0" * 64, "no run 000000000000... in registry"),
    ):
        with pytest.raises(RegistryError, match=re.escape(message)):
            reg.items(bad)


# ---- 4. which registry, said every time --------------------------------------------------------
def test_ingest_writes_beside_its_folder_and_import_into_the_default_folder(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    syn.write(tmp_path / "elsewhere", syn.record(experiment="e"))
    assert main(["registry", "ingest", "elsewhere"]) == 0
    out = capsys.readouterr().out
    assert "into registry elsewhere/registry.duckdb" in out
    assert (tmp_path / "elsewhere" / "registry.duckdb").is_file()
    assert not (tmp_path / "results").exists()  # never ./results when DIR is named
    assert main(["registry", "import", table(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "into registry results/registry.duckdb" in out
    assert (tmp_path / "results" / "registry.duckdb").is_file()
    assert main(["registry", "export", "o.csv"]) == 0
    assert "(from registry results/registry.duckdb)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["registry", "--help"])
    assert "for ingest, DIR's (DIR/registry.duckdb)" in " ".join(capsys.readouterr().out.split())


# ---- 6. unknown names stored when allowed, and counted ------------------------------------------
def test_allow_unknown_stores_and_counts_unknown_names(world, capsys):
    record(world, method="wagel", objective="npoo")
    db = world / "res" / "registry.duckdb"
    assert main(["registry", "ingest", str(world / "res"), "--allow-unknown"]) == 0
    out = capsys.readouterr().out
    assert "2 unknown name(s) stored (--allow-unknown): method 'wagel', objective 'npoo'" in out
    assert (
        main(["registry", "import", lacuna(world), "--registry", str(db), *LACUNA, "--seed", "3"])
        == 0
    )
    out = capsys.readouterr().out
    assert "1 unknown name(s) stored (--allow-unknown): method 'GradientAscent'" in out
    con = duckdb.connect(str(db), read_only=True)
    n = con.execute("SELECT count(*) FROM runs WHERE method IN ('wagel', 'GradientAscent')")
    assert n.fetchone()[0] == 2
    con.close()


def test_known_names_are_read_without_torch_and_include_run_time_ones(world):
    code = (
        "import sys; from supportbench.registry.names import known; "
        "print(sorted(known('benchmark')), sorted(known('objective')), "
        "{'lora', 'backbone', 'wagle'} <= known('method'), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split("] ")[-1].strip() == "True False", out.stderr
    assert "'controlled', 'lacuna', 'natural_tofu', 'tofu'" in out.stdout
    assert "['ga', 'graddiff', 'npo', 'simnpo']" in out.stdout
    from supportbench.methods.base import METHODS
    from supportbench.registry.names import known

    METHODS.register("my_runtime_method", type("Fake", (), {}))
    try:
        assert "my_runtime_method" in known("method")
        record(world, method="my_runtime_method")
        assert main(["registry", "ingest", str(world / "res")]) == 0
    finally:
        METHODS.unregister("my_runtime_method")


# ---- 2. every row, three formats ----------------------------------------------------------------
@pytest.fixture()
def many(tmp_path, capsys):
    res = tmp_path / "res"
    for rec in syn.grid(75, experiment="e"):
        syn.write(res, rec)
    assert main(["registry", "ingest", str(res)]) == 0
    capsys.readouterr()
    return res / "registry.duckdb"


def test_query_prints_every_row_in_each_format(many, capsys):
    sql = (
        "SELECT method, seed, J, [1, 2] AS l, 'a,\"b' AS q, 'nan'::DOUBLE AS n FROM results "
        "ORDER BY J"
    )
    query = ["registry", "query", "--registry", str(many), "-c", sql]
    assert main(query) == 0
    out = capsys.readouterr().out
    assert "75 rows" in out
    assert sum(line.startswith("│") for line in out.splitlines()) == 75 + 2  # + name, type rows
    assert main([*query, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 75 and rows[0]["q"] == 'a,"b' and rows[0]["l"] == "[1, 2]"
    assert rows[0]["n"] == "nan"
    assert main([*query, "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert len(got) == 75 and got[0]["l"] == [1, 2] and got[0]["q"] == 'a,"b'
    assert got[0]["n"] is None
    assert [r["J"] for r in got] == sorted(r["J"] for r in got)


def test_query_says_when_the_row_limit_cut_the_result(many, capsys):
    query = ["registry", "query", "--registry", str(many), "-c"]
    assert main([*query, "SELECT range AS i FROM range(10005)", "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == "i" and len(lines) == 10_001 and lines[-1] == "9999"
    assert "the first 10,000 rows are shown: the query returned more" in err
    assert main([*query, "SELECT range FROM range(10000)", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == 10_000 and err == ""
    assert main([*query, "SELECT range FROM range(10001)"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("narrow it with WHERE or LIMIT)")


# ---- 3. the lock -------------------------------------------------------------------------------
def _owner_mode(db: Path):
    try:
        return json.loads((db.parent / (db.name + ".owner")).read_text())["mode"]
    except (OSError, ValueError):
        return None


def test_an_idle_query_prompt_never_blocks_an_ingest(many):
    env = {**os.environ, LOCK: "5"}
    res = many.parent
    prompt = subprocess.Popen(
        CLI + ["registry", "query", "--registry", str(many)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        prompt.stdin.write("SELECT count(*) AS n FROM runs;\n")
        prompt.stdin.flush()
        seen = []
        while not seen or "└" not in seen[-1]:  # its answer printed: the prompt waits for input
            seen.append(prompt.stdout.readline())
            assert seen[-1], prompt.stderr.read()
        assert any("75" in line for line in seen)
        assert _owner_mode(many) is None  # no statement running: nothing open, no note
        syn.write(res, syn.record(experiment="e", method="wagle", seed=99))
        out = subprocess.run(
            CLI + ["registry", "ingest", str(res)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert "1 new" in out.stdout
        assert prompt.poll() is None  # the prompt is still there, idle
        prompt.stdin.write("SELECT count(*) AS n FROM runs;\n")
        prompt.stdin.close()
        answer = prompt.stdout.read()
        assert prompt.wait(timeout=60) == 0
        assert "76" in answer  # the next statement sees the ingest's run
    finally:
        if prompt.poll() is None:
            prompt.kill()
            prompt.wait()
    assert _owner_mode(many) is None


HOLD = textwrap.dedent("""
    import sys, time
    from supportbench.registry.store import connect
    con = connect(sys.argv[1])   # holder-marker
    print("holding", flush=True)
    time.sleep(120)
""")


def _ingest(res: Path, timeout: str):
    return subprocess.run(
        CLI + ["registry", "ingest", str(res)],
        capture_output=True,
        text=True,
        env={**os.environ, LOCK: timeout},
        timeout=120,
    )


def test_a_blocked_writer_is_told_who_holds_the_registry(many):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(many)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        note = json.loads((many.parent / "registry.duckdb.owner").read_text())
        assert note["pid"] == holder.pid and note["mode"] == "write"
        assert "holder-marker" in note["command"]
        out = _ingest(many.parent, "1")
        assert out.returncode == 2, out.stderr
        err = out.stderr.strip()
        assert len(err.splitlines()) == 1
        assert f"is locked by another process, pid {holder.pid} (writing since " in err
        assert "holder-marker" in err and f"waited 1 s ({LOCK})" in err
    finally:
        holder.kill()
        holder.wait()


def test_a_stale_owner_note_is_ignored(many):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (many.parent / "registry.duckdb.owner").write_text(
        json.dumps(
            {
                "pid": dead.pid,
                "host": os.uname().nodename,
                "mode": "write",
                "command": "stale-marker",
                "since": "2000-01-01T00:00:00+00:00",
            }
        )
    )
    raw = textwrap.dedent("""
        import sys, time, duckdb
        con = duckdb.connect(sys.argv[1])   # raw-holder: no owner note of its own
        print("holding", flush=True)
        time.sleep(120)
    """)
    holder = subprocess.Popen(
        [sys.executable, "-c", raw, str(many)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        out = _ingest(many.parent, "0")
        assert out.returncode == 2 and "stale-marker" not in out.stderr, out.stderr
        assert f"pid {holder.pid}" in out.stderr  # as DuckDB names it,
        assert "raw-holder" in out.stderr  # its command line from /proc
    finally:
        holder.kill()
        holder.wait()


def test_the_owner_note_lives_as_long_as_the_writable_connection(tmp_path):
    from supportbench.registry.store import close, connect, owner_path

    db = tmp_path / "r.duckdb"
    con = connect(db)
    assert json.loads(owner_path(db).read_text())["pid"] == os.getpid()
    close(con, db)
    assert not owner_path(db).exists()
    con = connect(db)
    del con  # collected: its note goes with it
    assert not owner_path(db).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.duckdb"]


def test_a_killed_creators_private_copy_is_removed_by_the_next_creator(tmp_path):
    """kill -9 during the first ingest leaves '.supportbench-PID-TID.creating' (and its .wal): the
    next creation in that folder removes those whose process is gone, and leaves a live one's
    alone."""
    import subprocess
    import sys

    from supportbench.registry.store import connect

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    dead = [
        tmp_path / f".supportbench-{p.pid}-1.creating",
        tmp_path / f".supportbench-{p.pid}-1.creating.wal",
    ]
    live = tmp_path / f".supportbench-{os.getpid()}-2.creating"
    for f in (*dead, live):
        f.write_bytes(b"x")
    connect(tmp_path / "r.duckdb").close()
    assert not any(f.exists() for f in dead) and live.exists()


def test_a_registry_that_cannot_be_written_is_named_so(world, capsys):
    """An immutable registry file (as a read-only file system would be): 'cannot be written', not
    'not a DuckDB registry file' (issue 33's second review)."""
    import subprocess

    db = world / "res" / "registry.duckdb"
    if (
        os.geteuid() != 0
        or subprocess.run(["chattr", "+i", str(db)], capture_output=True).returncode
    ):
        pytest.skip("needs root and chattr +i")
    try:
        rc = main(["registry", "ingest", str(world / "res")])
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)
    err = capsys.readouterr().err
    assert rc == 2 and "cannot be written" in err and "read-only file or file system" in err, err


def test_declared_options_in_range_are_stored_and_undeclared_ones_only_when_allowed(tmp_path):
    """Controls for the option rows above: a record whose ``method.eps`` and ``objective.beta``
    are in their declared ranges is stored; an undeclared option is stored with --allow-unknown
    and named in the ingest's report."""
    from supportbench.registry.ingest import ingest
    from supportbench.registry.store import connect

    res = tmp_path / "res"
    good = {"method.eps": 1e-6, "objective.beta": 0.5}
    syn.write(res, syn.record(experiment="e", seed=1, hyperparameters=good))
    syn.write(res, syn.record(experiment="e", seed=2, hyperparameters={"method.epsilon": 1.0}))
    con = connect(tmp_path / "r.duckdb")
    with pytest.raises(RegistryError, match="method.epsilon is not an option"):
        ingest(con, res)
    rep = ingest(con, res, allow_unknown=True)
    assert rep.new == 2
    assert "method option 'intervention_score.epsilon'" in rep.unknown


def test_a_registry_open_for_writing_is_written_in_row_groups_of_row_group_rows(tmp_path):
    """A writing connection attaches the registry with ``store.ROW_GROUP`` rows per row group (a
    commit compresses one row group per task: DuckDB's default of 122,880 committed a 100,000-run
    ingest on one core), and DuckDB does not keep the size in the file: each opening asks again."""
    from supportbench.registry.store import ROW_GROUP, close, connect

    db = tmp_path / "r.duckdb"
    for _ in range(2):  # created, then reopened
        con = connect(db)
        con.execute(
            f"CREATE OR REPLACE TABLE wide AS SELECT range AS i FROM range({ROW_GROUP + 1})"
        )
        rows = con.sql(
            "SELECT row_group_id, max(count) FROM pragma_storage_info('wide') "
            "WHERE column_name = 'i' GROUP BY ALL ORDER BY 1"
        ).fetchall()
        close(con, db)
        assert ROW_GROUP < 122_880 and rows == [(0, ROW_GROUP), (1, 1)], rows


def test_a_registry_opened_twice_in_one_process_names_the_open_connection(tmp_path):
    """DuckDB attaches a file once per process: a second opening while the first is open (for
    writing or reading) is refused naming the registry and what to do, not DuckDB's raw error."""
    from supportbench.registry.store import close, connect

    db = tmp_path / "r.duckdb"
    con = connect(db)
    try:
        for read_only in (False, True):
            with pytest.raises(RegistryError, match="is already open in this process") as exc:
                connect(db, read_only=read_only, timeout=1)
            assert str(db) in str(exc.value) and "close that connection first" in str(exc.value)
    finally:
        close(con, db)
    close(connect(db), db)  # closed: it opens again


def _lock_folder(request, folder: Path) -> None:
    """Nothing can be created in ``folder`` for the rest of the test: chmod 0o555 for a user, the
    immutable attribute for root (whom permission bits do not stop); skips where neither works."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        request.addfinalizer(lambda: folder.chmod(0o755))
        return
    r = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"running as root and chattr +i fails here ({r.stderr.strip()})")
    request.addfinalizer(lambda: subprocess.run(["chattr", "-i", str(folder)], check=True))


def test_a_registry_whose_folder_takes_no_file_is_refused_before_any_work(world, capsys, request):
    """DuckDB writes its log beside the registry at the first commit: a writable registry in a
    folder that takes no new file is refused when opened for writing, naming the folder (it was an
    internal error at the commit: 'cannot rollback - no transaction is active')."""
    res = world / "res"
    syn.write(res, syn.record(experiment="e", method="wagle", seed=3, J=3.0))
    before = _registry_digest(res / "registry.duckdb")
    _lock_folder(request, res)
    assert main(["registry", "ingest", str(res)]) == 2
    err = capsys.readouterr().err
    assert "cannot be written" in err and f"its folder '{res}' takes no new file" in err, err
    assert "registry.duckdb.wal" in err and "internal error" not in err, err
    assert _registry_digest(res / "registry.duckdb") == before


def test_a_commit_duckdb_refuses_is_named_and_stores_nothing(tmp_path, request):
    """The folder locked after the registry was opened: the ingest's commit cannot write DuckDB's
    log. A ``RegistryError`` naming the registry, nothing stored, and the connection still takes
    the next transaction."""
    from supportbench.registry import ledger
    from supportbench.registry.ingest import ingest
    from supportbench.registry.store import connect

    res, folder = tmp_path / "res", tmp_path / "db"
    for rec in syn.grid(5, experiment="e"):
        syn.write(res, rec)
    folder.mkdir()
    con = connect(folder / "r.duckdb")
    con.execute("CHECKPOINT")  # the log written so far goes into the file, and the log away
    assert not (folder / "r.duckdb.wal").exists()
    _lock_folder(request, folder)
    with pytest.raises(RegistryError, match="did not store the change, nothing of it is kept") as e:
        ingest(con, res)
    assert str(folder / "r.duckdb") in str(e.value)
    assert con.execute("SELECT count(*) FROM runs").fetchall() == [(0,)]
    assert ledger.head(con)["seq"] == 0
    con.execute("BEGIN")  # no transaction was left open
    con.execute("ROLLBACK")


def test_a_dangling_link_into_a_missing_folder_is_named(tmp_path):
    """A registry path that is a link to a file in a folder that does not exist: refused naming
    the folder DuckDB would write in, not DuckDB's 'Cannot open file'."""
    from supportbench.registry.store import connect

    link = tmp_path / "r.duckdb"
    link.symlink_to(tmp_path / "nowhere" / "r.duckdb")
    with pytest.raises(RegistryError, match="cannot be written") as e:
        connect(link)
    assert f"its folder '{tmp_path / 'nowhere'}' takes no new file" in str(e.value)
    assert not (tmp_path / "nowhere").exists()


def test_a_registry_link_to_itself_is_named(tmp_path):
    """A registry path that is a link to itself: a ``RegistryError`` naming it, not the bare
    RuntimeError of resolving it."""
    from supportbench.registry.store import connect

    link = tmp_path / "r.duckdb"
    link.symlink_to(link)
    with pytest.raises(RegistryError, match="cannot be resolved") as e:
        connect(link)
    assert str(link) in str(e.value)


def test_a_relative_registry_path_in_a_deleted_working_folder_is_named(tmp_path, monkeypatch):
    """The working folder deleted under the process: a relative registry path names nothing; a
    ``RegistryError`` saying so, not the bare FileNotFoundError of making it absolute."""
    from supportbench.registry.store import connect

    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with pytest.raises(RegistryError, match="the working folder is gone") as e:
        connect("r.duckdb")
    assert "'r.duckdb'" in str(e.value) and "absolute path" in str(e.value)


def test_a_registry_under_a_link_to_no_folder_says_so(tmp_path):
    """A registry path under a folder link that leads nowhere (dangling, or a loop): named as a link
    to no folder, not as a file."""
    from supportbench.registry.store import connect

    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for folder in ("dangling", "loop"):
        with pytest.raises(RegistryError, match="which is a link to no folder") as e:
            connect(tmp_path / folder / "r.duckdb")
        assert f"lies under '{tmp_path / folder}'" in str(e.value)


def test_a_body_error_is_raised_even_when_duckdb_ended_the_transaction(tmp_path):
    """The error inside a transaction is the one raised, and nothing of the block is kept, also
    when the transaction ended before the rollback (here the block rolled back itself): the
    rollback DuckDB then refuses ('no transaction is active') does not take the error's place."""
    from supportbench.registry.store import connect, transaction

    con = connect(tmp_path / "r.duckdb")
    with pytest.raises(ValueError, match="the body's own error"), transaction(con):
        con.execute("INSERT INTO experiments VALUES ('e', now())")
        con.execute("ROLLBACK")
        raise ValueError("the body's own error")
    assert con.execute("SELECT count(*) FROM experiments").fetchall() == [(0,)]
    with transaction(con):  # the connection takes the next transaction
        con.execute("INSERT INTO experiments VALUES ('e', now())")
    assert con.execute("SELECT count(*) FROM experiments").fetchall() == [(1,)]


def test_a_ctrl_c_duckdb_turned_into_its_own_error_is_raised_as_the_interrupt(tmp_path):
    """A Ctrl-C during a DuckDB query reaches the block as DuckDB's error ('Query interrupted'), and
    the clean-up's next query fails on the aborted transaction: the transaction rolls back and
    raises KeyboardInterrupt (the CLI says 'interrupted', exit 130), not an internal error.
    Without a Ctrl-C the same error is raised as it is."""
    import signal

    from supportbench.registry.store import connect, transaction

    con = connect(tmp_path / "r.duckdb")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt) as got, transaction(con):
            con.execute("INSERT INTO experiments VALUES ('e', now())")
            try:  # as DuckDB does: it takes the KeyboardInterrupt and raises its own error
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                with contextlib.suppress(duckdb.Error):  # a key twice: the transaction is aborted
                    con.execute("INSERT INTO experiments VALUES ('e', now())")
                try:
                    raise RuntimeError("Query interrupted") from None
                finally:  # the clean-up's next query fails on the aborted transaction
                    con.execute("SELECT 1")
        assert isinstance(got.value.__cause__, duckdb.TransactionException)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with pytest.raises(RuntimeError, match="Query interrupted"), transaction(con):
            raise RuntimeError("Query interrupted")  # no Ctrl-C: the error itself
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
    assert con.execute("SELECT count(*) FROM experiments").fetchall() == [(0,)]


class _InterruptedAt:
    """A connection whose ``statement`` is interrupted by a Ctrl-C, as DuckDB answers one: it takes
    the KeyboardInterrupt and raises RuntimeError('Query interrupted')."""

    def __init__(self, statement: str, con):
        self.statement, self.con, self.seen = statement, con, []

    def execute(self, sql, *args):
        import signal

        self.seen.append(sql)
        if sql == self.statement:
            try:
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                raise RuntimeError("Query interrupted") from None
        return self.con.execute(sql, *args)


@pytest.mark.parametrize("body_error", [True, False])
def test_a_ctrl_c_during_the_rollback_or_the_commit_is_the_interrupt(tmp_path, body_error):
    """A second Ctrl-C during the rollback of a block a first one stopped, or one during the
    commit: KeyboardInterrupt still, not DuckDB's error, and the handler put back."""
    import signal

    from supportbench.registry.store import connect, transaction

    con = connect(tmp_path / "r.duckdb")
    fake = _InterruptedAt("ROLLBACK" if body_error else "COMMIT", con)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), transaction(fake):
            con.execute("INSERT INTO experiments VALUES ('e', now())")
            if body_error:  # a first Ctrl-C, as DuckDB reports it
                try:
                    signal.raise_signal(signal.SIGINT)
                except KeyboardInterrupt:
                    raise RuntimeError("Query interrupted") from None
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
    end = ["ROLLBACK"] if body_error else ["COMMIT", "ROLLBACK"]
    assert fake.seen == ["BEGIN TRANSACTION", *end]
    with contextlib.suppress(duckdb.Error):  # the interrupted ROLLBACK never reached DuckDB
        con.execute("ROLLBACK")
    assert con.execute("SELECT count(*) FROM experiments").fetchall() == [(0,)]


def test_a_backslash_in_a_registry_path_is_refused_and_nothing_made(tmp_path, monkeypatch, capsys):
    """DuckDB reads a backslash as a folder separator: 'a\\b.duckdb' would be opened as a/b.duckdb
    and the published file could not be opened again. Refused, nothing written; a results
    directory (read by Python, not DuckDB) may have one."""
    monkeypatch.chdir(tmp_path)
    res = tmp_path / "res\\x"
    syn.write(res, syn.record(experiment="e", method="wagle", seed=1, J=1.0))
    assert main(["registry", "ingest", str(res), "--registry", "a\\b.duckdb"]) == 2
    err = capsys.readouterr().err
    assert "a\\b.duckdb" in err and "folder separator" in err and "it would open" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res\\x"]
    assert main(["registry", "ingest", str(res), "--registry", "r.duckdb"]) == 0


@pytest.mark.parametrize("name", ["md:r.duckdb", "duckdb:r.duckdb", "sqlite:r.duckdb"])
def test_a_relative_registry_name_with_a_colon_is_a_file_of_that_name(
    tmp_path, monkeypatch, capsys, name
):
    """DuckDB reads a relative name starting 'word:' as a database type or service (MotherDuck,
    SQLite): the registry opens it as the file of that very name, written and read back."""
    monkeypatch.chdir(tmp_path)
    syn.write(tmp_path / "res", syn.record(experiment="e", method="wagle", seed=1, J=1.0))
    assert main(["registry", "ingest", "res", "--registry", name]) == 0
    assert (tmp_path / name).is_file() and not (tmp_path / "r.duckdb").exists()
    capsys.readouterr()
    sql = "SELECT count(*) AS n FROM runs"
    assert main(["registry", "query", "--registry", name, "--format", "csv", "-c", sql]) == 0
    assert capsys.readouterr().out.split() == ["n", "1"]


def test_a_linked_registry_is_judged_by_the_folder_of_the_file_it_links_to(
    tmp_path, capsys, request
):
    """DuckDB follows a symbolic link and writes its log beside the file linked to: a link in a
    locked folder to a registry in a writable one ingests; a link in a writable folder to a
    registry in a locked one is refused when opened, naming the locked folder."""
    res = tmp_path / "res"
    syn.write(res, syn.record(experiment="e", method="wagle", seed=1, J=1.0))
    rw, ro = tmp_path / "rw", tmp_path / "ro"
    for folder in (rw, ro):
        folder.mkdir()
        assert main(["registry", "ingest", str(res), "--registry", str(folder / "r.duckdb")]) == 0
    (ro / "to-rw.duckdb").symlink_to(rw / "r.duckdb")
    (rw / "to-ro.duckdb").symlink_to(ro / "r.duckdb")
    syn.write(res, syn.record(experiment="e", method="wagle", seed=2, J=2.0))
    _lock_folder(request, ro)
    capsys.readouterr()
    assert main(["registry", "ingest", str(res), "--registry", str(ro / "to-rw.duckdb")]) == 0
    assert main(["registry", "ingest", str(res), "--registry", str(rw / "to-ro.duckdb")]) == 2
    err = capsys.readouterr().err
    assert f"its folder '{ro}' takes no new file" in err and "internal error" not in err, err


def test_dot_dot_after_a_linked_folder_is_followed_as_the_file_system_does(
    tmp_path, monkeypatch, capsys
):
    """'lnk/../r.duckdb' where lnk links to real/sub is real/r.duckdb for the file system; DuckDB
    alone collapses it to ./r.duckdb. The registry is created, and then found again, at
    real/r.duckdb, and no second file appears."""
    (tmp_path / "real" / "sub").mkdir(parents=True)
    work = tmp_path / "w"
    work.mkdir()
    (work / "lnk").symlink_to(tmp_path / "real" / "sub")
    monkeypatch.chdir(work)
    res = tmp_path / "res"
    for seed in (1, 2):
        syn.write(res, syn.record(experiment="e", method="wagle", seed=seed, J=float(seed)))
        assert main(["registry", "ingest", str(res), "--registry", "lnk/../r.duckdb"]) == 0
    assert sorted(p.name for p in work.iterdir()) == ["lnk"]
    sql = "SELECT count(*) AS n FROM runs"
    capsys.readouterr()
    db = str(tmp_path / "real" / "r.duckdb")
    assert main(["registry", "query", "--registry", db, "--format", "csv", "-c", sql]) == 0
    assert capsys.readouterr().out.split() == ["n", "2"]
