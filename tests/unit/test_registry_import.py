"""`registry import` of results users already have: TOFU's eval logs (aggregated exactly as TOFU's
aggregate_eval_stat.py, written out here independently), open-unlearning's EVAL/SUMMARY files,
LACUNA's run folders, outcome tables without J; the metrics view, export/import round trips,
per-item values beside the records, NULL-J runs kept out of J statistics, and the bad inputs (named
error, exit 2)."""

import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy.stats import hmean, ks_2samp

from supportbench.cli import main
from supportbench.errors import RegistryError
from supportbench.experiments.results import ResultsDir
from supportbench.registry import synthetic as syn
from supportbench.registry.audit import audit
from supportbench.registry.imported import import_key
from supportbench.registry.imports import import_results as _import_results
from supportbench.registry.imports import import_table
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect, scalar
from supportbench.registry.tables import export_table

TOFU_FILES = (
    "eval_log.json",
    "eval_real_author_wo_options.json",
    "eval_real_world_wo_options.json",
    "eval_log_forget.json",
)
IDENT = [
    "--experiment",
    "imp",
    "--field",
    "forget10",
    "--objective",
    "npo",
    "--method",
    "graddiff_full",
    "--seed",
    "7",
]


# ---- TOFU's eval logs, shaped as locuslab/tofu evaluate_util.py writes them ----------------------
def tofu_log(rng, n, k, lo, hi, perturbed_options: bool) -> dict:
    """One eval file: per data index (JSON string keys), summed losses over answer tokens and their
    per-token averages (TOFU divides by the token count), ROUGE recalls, generations, perturbed
    answers as lists."""
    idx = [str(i) for i in range(n)]
    n_gt = rng.integers(3, 40, n)
    gt_loss = rng.uniform(lo, hi, n) * n_gt
    n_para = rng.integers(3, 40, n)
    para_loss = rng.uniform(lo, hi, n) * n_para
    n_pert = rng.integers(3, 40, (n, k))
    pert_loss = rng.uniform(lo, hi, (n, k)) * n_pert
    log = {
        "avg_gt_loss": dict(zip(idx, (gt_loss / n_gt).tolist())),
        "gt_loss": dict(zip(idx, gt_loss.tolist())),
        "num_token_gt": dict(zip(idx, n_gt.tolist())),
        "generated_text": {i: [f"Question {i}?", f"answer {i}", f"true answer {i}"] for i in idx},
        "rouge1_recall": dict(zip(idx, rng.uniform(0, 1, n).tolist())),
        "rougeL_recall": dict(zip(idx, rng.uniform(0, 1, n).tolist())),
        "average_perturb_loss": dict(zip(idx, (pert_loss / n_pert).tolist())),
        "avg_paraphrased_loss": dict(zip(idx, (para_loss / n_para).tolist())),
        "truth_ratio": dict(
            zip(idx, np.exp(para_loss / n_para - (pert_loss / n_pert).mean(-1)).tolist())
        ),
        "paraphrased_loss": dict(zip(idx, para_loss.tolist())),
        "perturb_loss": dict(zip(idx, pert_loss.tolist())),
        "num_token_paraphrased": dict(zip(idx, n_para.tolist())),
        "num_token_perturb": dict(zip(idx, n_pert.tolist())),
    }
    if perturbed_options:  # TOFU adds it for the files that are not eval_log*
        log["normalized_gt_loss"] = dict(zip(idx, rng.uniform(0, 3, n).tolist()))
    return log


def write_tofu(folder: Path, seed: int, lo=0.0, hi=5.0) -> dict:
    rng = np.random.default_rng(seed)
    shapes = {
        "eval_log.json": (30, 5),
        "eval_real_author_wo_options.json": (20, 3),
        "eval_real_world_wo_options.json": (25, 3),
        "eval_log_forget.json": (40, 5),
    }
    logs = {f: tofu_log(rng, n, k, lo, hi, "eval_log" not in f) for f, (n, k) in shapes.items()}
    folder.mkdir(parents=True, exist_ok=True)
    for f, log in logs.items():
        (folder / f).write_text(json.dumps(log, indent=4))
    return logs


def tofu_reference(ckpt: dict, retain: dict) -> dict:
    """locuslab/tofu aggregate_eval_stat.py, in numpy, reading values in file order as it does."""

    def vals(log, key):
        return np.array(list(log[key].values()))

    res = {}
    for name, log in ckpt.items():
        if "eval_log" in name:
            prob = np.mean(np.exp(-vals(log, "avg_gt_loss")))
        else:
            true_p = np.exp(-vals(log, "avg_gt_loss"))
            false_p = np.exp(-vals(log, "average_perturb_loss"))
            prob = np.mean(true_p / (true_p + false_p.sum(axis=1)))
        ratio = np.exp(
            vals(log, "average_perturb_loss").mean(axis=-1) - vals(log, "avg_paraphrased_loss")
        )
        tr = (
            np.mean(np.minimum(ratio, 1 / ratio))
            if "forget" in name
            else np.mean(np.maximum(0, 1 - 1 / ratio))
        )
        res[name] = (prob, np.mean(vals(log, "rougeL_recall")), tr)
    utility = [v for name, triple in res.items() if "forget" not in name for v in triple]
    forget, ref = ckpt["eval_log_forget.json"], retain["eval_log_forget.json"]
    ks = ks_2samp(
        np.exp(
            vals(forget, "average_perturb_loss").mean(-1) - vals(forget, "avg_paraphrased_loss")
        ),
        np.exp(vals(ref, "average_perturb_loss").mean(-1) - vals(ref, "avg_paraphrased_loss")),
    )
    names = {
        "eval_log.json": ("retain_Q_A_Prob", "retain_Q_A_ROUGE", "retain_Truth_Ratio"),
        "eval_real_author_wo_options.json": (
            "ra_Q_A_Prob_normalised",
            "ra_Q_A_ROUGE",
            "ra_Truth_Ratio",
        ),
        "eval_real_world_wo_options.json": (
            "wf_Q_A_Prob_normalised",
            "wf_Q_A_ROUGE",
            "wf_Truth_Ratio",
        ),
        "eval_log_forget.json": ("forget_Q_A_Prob", "forget_Q_A_ROUGE", "forget_truth_ratio"),
    }
    out = {n: float(v) for f, triple in res.items() for n, v in zip(names[f], triple)}
    return {
        **out,
        "model_utility": float(hmean(utility)),
        "forget_quality": float(ks.pvalue),
        "forget_ks_statistic": float(ks.statistic),
    }


def metrics_of(con, key) -> dict:
    return dict(con.execute("SELECT name, value FROM metrics WHERE run_key = ?", [key]).fetchall())


def import_results(*args, **kw):
    """``imports.import_results`` of another project's run (its method, e.g. graddiff_full, is not
    registered here): stored with ``allow_unknown`` (test_registry_refusals: refused without)."""
    return _import_results(*args, allow_unknown=True, **kw)


def run(argv, capsys):
    """An import here is another project's run (graddiff_full, LACUNA's GradientAscent): its names
    are not registered, so it is stored with --allow-unknown (test_registry_refusals: refused
    without)."""
    if argv[:2] == ["registry", "import"]:
        argv = [*argv, "--allow-unknown"]
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("lo, hi", [(0.0, 5.0), (0.0, 30.0), (15.0, 60.0)])
def test_tofu_logs_equal_tofus_own_aggregation(tmp_path, capsys, lo, hi):
    ckpt = write_tofu(tmp_path / "unlearned", seed=int(hi), lo=lo, hi=hi)
    ret = write_tofu(tmp_path / "retain", seed=int(hi) + 1, lo=0.0, hi=5.0)
    db = tmp_path / "res" / "registry.duckdb"
    code, out, err = run(
        [
            "registry",
            "import",
            str(tmp_path / "unlearned"),
            "--retain",
            str(tmp_path / "retain"),
            "--registry",
            str(db),
            *IDENT,
        ],
        capsys,
    )
    assert code == 0, err
    assert "1 new" in out
    con = connect(db)
    key = import_key(
        {
            "experiment": "imp",
            "benchmark": "tofu",
            "field": "forget10",
            "objective": "npo",
            "method": "graddiff_full",
            "variant": "static",
            "seed": 7,
            "split": "final",
        }
    )
    got, want = metrics_of(con, key), tofu_reference(ckpt, ret)
    assert set(got) == set(want)
    for name, v in want.items():
        assert got[name] == pytest.approx(v, rel=1e-9, abs=1e-300), name
    row = con.execute(
        "SELECT a.origin, r.source, a.J, a.G_F, a.D_coll, a.status FROM results_all a "
        "JOIN runs r USING (run_key) WHERE run_key = ?",
        [key],
    ).fetchall()
    assert row == [("import", str(tmp_path / "unlearned"), None, None, None, "ok")]
    # per-item values beside the records, in data-index order; forget quality recomputed from them
    items = ResultsDir(db.parent).read_items(key)
    series = {m: g.sort("index")["value"].to_list() for (m,), g in items.group_by("metric")}
    assert series["forget:avg_gt_loss"] == list(
        ckpt["eval_log_forget.json"]["avg_gt_loss"].values()
    )
    assert len([m for m in series if m.startswith("forget:average_perturb_loss:")]) == 5

    def tr(prefix):
        pert = np.mean([series[f"{prefix}average_perturb_loss:{j}"] for j in range(5)], axis=0)
        return np.exp(pert - np.array(series[f"{prefix}avg_paraphrased_loss"]))

    assert ks_2samp(tr("forget:"), tr("retain_model:forget:")).pvalue == pytest.approx(
        got["forget_quality"], rel=1e-9
    )


def test_truth_ratio_direction_on_one_item(tmp_path):
    """Forget: min(r, 1/r); elsewhere max(0, 1 - 1/r); r = P(paraphrase)/P(perturbed) = exp(mean
    pert - para)."""

    def log(para, pert):
        return {
            "avg_gt_loss": {"0": 1.0},
            "rougeL_recall": {"0": 0.5},
            "avg_paraphrased_loss": {"0": para},
            "average_perturb_loss": {"0": pert},
        }

    folder = tmp_path / "u"
    folder.mkdir()
    for f in TOFU_FILES:
        (folder / f).write_text(json.dumps(log(1.0, [2.0, 2.0, 2.0])))
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "eval_log_forget.json").write_text(json.dumps(log(1.0, [3.0, 3.0])))
    con = connect(tmp_path / "x.duckdb")
    import_results(con, folder, options=_opts(), retain=tmp_path / "r")
    key = scalar(con, "SELECT run_key FROM runs")
    m = metrics_of(con, key)
    assert m["forget_truth_ratio"] == pytest.approx(math.exp(-1))  # r = e: min(e, 1/e)
    assert m["retain_Truth_Ratio"] == pytest.approx(1 - math.exp(-1))  # max(0, 1 - 1/e)
    assert m["retain_Q_A_Prob"] == pytest.approx(math.exp(-1))
    p = math.exp(-1)
    assert m["ra_Q_A_Prob_normalised"] == pytest.approx(p / (p + 3 * math.exp(-2)))


def test_aggregated_file_and_key_order(tmp_path):
    """eval_log_aggregated.json holds the four logs; items are paired by data index, so a key
    listing its items in another order (JSON object order is not meaning) gives TOFU's values for
    the file as TOFU writes it."""
    ckpt = write_tofu(tmp_path / "u", 4)
    ret = write_tofu(tmp_path / "ret", 5)
    want = tofu_reference(ckpt, ret)
    shuffled = json.loads(json.dumps(ckpt))
    for log in shuffled.values():
        log["avg_paraphrased_loss"] = dict(reversed(list(log["avg_paraphrased_loss"].items())))
    (tmp_path / "agg").mkdir()
    (tmp_path / "agg" / "eval_log_aggregated.json").write_text(json.dumps(shuffled))
    con = connect(tmp_path / "r.duckdb")
    import_results(
        con, tmp_path / "agg" / "eval_log_aggregated.json", options=_opts(), retain=tmp_path / "ret"
    )
    got = metrics_of(con, scalar(con, "SELECT run_key FROM runs"))
    for name, v in want.items():
        assert got[name] == pytest.approx(v, rel=1e-9), name


def _opts(*extra):
    return {
        k.lstrip("-"): v for k, v in zip((IDENT + list(extra))[::2], (IDENT + list(extra))[1::2])
    }


# ---- open-unlearning -----------------------------------------------------------------------------
def write_ou(folder: Path, name="TOFU", n=12, with_summary=True, fq=0.25) -> dict:
    rng = np.random.default_rng(3)
    idx = [str(i) for i in range(n)]
    loss = rng.uniform(0, 4, n)
    pert = rng.uniform(0, 4, (n, 5))
    tr = np.exp(-pert.mean(1)) / (np.exp(-loss) + 1e-10)
    logs = {
        "forget_Q_A_PARA_Prob": {
            "agg_value": float(np.exp(-loss).mean()),
            "value_by_index": {
                i: {"prob": float(np.exp(-x)), "avg_loss": float(x)} for i, x in zip(idx, loss)
            },
        },
        "forget_Q_A_PERT_Prob": {
            "agg_value": float(np.exp(-pert).mean()),
            "value_by_index": {
                i: {"prob": np.exp(-row).tolist(), "avg_loss": row.tolist()}
                for i, row in zip(idx, pert)
            },
        },
        "forget_truth_ratio": {
            "agg_value": float(np.mean(np.minimum(tr, 1 / (tr + 1e-10)))),
            "value_by_index": {i: {"score": float(s)} for i, s in zip(idx, tr)},
        },
        "forget_Q_A_ROUGE": {
            "agg_value": 0.4,
            "value_by_index": {
                i: {
                    "rouge1_recall": 0.5,
                    "rougeL_f1": 0.3,
                    "rougeL_recall": 0.4,
                    "input": "q",
                    "ground_truth": "a",
                    "generation": "g",
                }
                for i in idx
            },
        },
        "forget_quality": {"agg_value": fq},
        "model_utility": {"agg_value": 0.61},
        "retain_Q_A_Prob": {
            "agg_value": 0.8,
            "value_by_index": {i: {"prob": 0.8, "avg_loss": 0.2231} for i in idx},
        },
        "privleak": {"agg_value": -12.5},
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}_EVAL.json").write_text(json.dumps(logs, indent=4))
    if with_summary:
        summary = {
            k: logs[k]["agg_value"]
            for k in (
                "forget_quality",
                "forget_truth_ratio",
                "forget_Q_A_ROUGE",
                "model_utility",
                "privleak",
            )
        }
        (folder / f"{name}_SUMMARY.json").write_text(json.dumps(summary, indent=4))
    return logs


def test_open_unlearning_eval_and_summary(tmp_path, capsys):
    logs = write_ou(tmp_path / "ou")
    db = tmp_path / "res" / "registry.duckdb"
    code, out, err = run(
        ["registry", "import", str(tmp_path / "ou"), "--registry", str(db), *IDENT], capsys
    )
    assert code == 0, err
    con = connect(db)
    key = scalar(con, "SELECT run_key FROM runs")
    assert scalar(con, "SELECT benchmark FROM runs") == "tofu"
    assert metrics_of(con, key) == {k: pytest.approx(v["agg_value"]) for k, v in logs.items()}
    # stored as the components reports read (open-unlearning's name mapped back)
    comps = dict(con.execute("SELECT name, value FROM components").fetchall())
    assert "forget_rouge" in comps and "retain_prob" in comps and "forget_Q_A_ROUGE" not in comps
    items = ResultsDir(db.parent).read_items(key)
    names = set(items["metric"].unique())
    assert {
        "forget_truth_ratio:score",
        "forget_Q_A_PARA_Prob:avg_loss",
        "forget_Q_A_PERT_Prob:avg_loss:4",
        "forget_Q_A_ROUGE:rougeL_recall",
    } <= names
    assert not any("generation" in m or "input" in m for m in names)
    got = (
        items.filter(pl.col("metric") == "forget_truth_ratio:score")
        .sort("index")["value"]
        .to_list()
    )
    assert got == pytest.approx(
        [v["score"] for v in logs["forget_truth_ratio"]["value_by_index"].values()]
    )


def test_summary_alone_and_null_forget_quality_is_named(tmp_path, capsys):
    write_ou(tmp_path / "ou", fq=None)
    (tmp_path / "ou" / "TOFU_EVAL.json").unlink()
    code, out, err = run(
        [
            "registry",
            "import",
            str(tmp_path / "ou" / "TOFU_SUMMARY.json"),
            "--registry",
            str(tmp_path / "r.duckdb"),
            *IDENT,
        ],
        capsys,
    )
    assert code == 0, err
    assert "not stored (no finite value): forget_quality" in out
    con = connect(tmp_path / "r.duckdb")
    assert set(metrics_of(con, scalar(con, "SELECT run_key FROM runs"))) == {
        "forget_truth_ratio",
        "forget_Q_A_ROUGE",
        "model_utility",
        "privleak",
    }


def test_open_unlearning_folder_with_several_evaluators(tmp_path, capsys):
    """open-unlearning's eval can write several evaluators into one folder (TOFU + LMEval): merged;
    a MIA metric's forget / holdout scores become items; lm-eval's samples are not metrics."""
    d = tmp_path / "ou"
    logs = write_ou(d)
    ev = json.loads((d / "TOFU_EVAL.json").read_text())
    ev["mia_min_k"] = {
        "forget": {"agg_value": 0.7, "value_by_index": {"0": {"score": 1.5}, "1": {"score": 2.5}}},
        "holdout": {"agg_value": 0.6, "value_by_index": {"0": {"score": 1.0}, "1": {"score": 3.0}}},
        "auc": 0.55,
        "agg_value": 0.55,
    }
    (d / "TOFU_EVAL.json").write_text(json.dumps(ev))
    (d / "LMEval_EVAL.json").write_text(json.dumps({"mmlu": [{"doc_id": 0, "resps": [["a"]]}]}))
    (d / "LMEval_SUMMARY.json").write_text(json.dumps({"mmlu/acc": 0.41, "mmlu/acc_stderr": "N/A"}))
    db = tmp_path / "res" / "registry.duckdb"
    code, out, err = run(["registry", "import", str(d), "--registry", str(db), *IDENT], capsys)
    assert code == 0, err
    assert "mmlu/acc_stderr" in out and "mmlu (list in LMEval_EVAL.json" in out
    con = connect(db)
    key = scalar(con, "SELECT run_key FROM runs")
    assert scalar(con, "SELECT benchmark FROM runs") == "tofu"
    m = metrics_of(con, key)
    assert (
        m["mmlu/acc"] == 0.41
        and m["mia_min_k"] == 0.55
        and m["forget_quality"] == logs["forget_quality"]["agg_value"]
    )
    items = ResultsDir(db.parent).read_items(key)
    hold = (
        items.filter(pl.col("metric") == "mia_min_k:holdout:score").sort("index")["value"].to_list()
    )
    assert hold == [1.0, 3.0]
    (d / "MUSE_SUMMARY.json").write_text(json.dumps({"privleak": 3.0}))
    code, _, err = run(
        ["registry", "import", str(d), "--registry", str(tmp_path / "o.duckdb"), *IDENT], capsys
    )
    assert code == 2 and "metric 'privleak' is in both MUSE's and TOFU's files" in err


def test_open_unlearning_forget_quality_from_the_retain_models_eval(tmp_path, capsys):
    """An eval run without retain_logs_path has forget_quality null; --retain computes it as
    open-unlearning's ks_test: scipy.stats.ks_2samp of the two models' forget_truth_ratio scores."""
    logs = write_ou(tmp_path / "ou", fq=None)
    ret = json.loads(json.dumps(logs))
    ret["forget_truth_ratio"]["value_by_index"] = {
        str(i): {"score": 0.5 + i / 10} for i in range(15)
    }
    (tmp_path / "ret").mkdir()
    (tmp_path / "ret" / "TOFU_EVAL.json").write_text(json.dumps(ret))
    db = tmp_path / "r.duckdb"
    code, out, err = run(
        [
            "registry",
            "import",
            str(tmp_path / "ou"),
            "--retain",
            str(tmp_path / "ret"),
            "--registry",
            str(db),
            *IDENT,
        ],
        capsys,
    )
    assert code == 0, err
    assert "forget_quality" not in out
    con = connect(db)
    want = ks_2samp(
        [v["score"] for v in logs["forget_truth_ratio"]["value_by_index"].values()],
        [0.5 + i / 10 for i in range(15)],
    ).pvalue
    assert metrics_of(con, scalar(con, "SELECT run_key FROM runs"))[
        "forget_quality"
    ] == pytest.approx(want, rel=1e-12)
    write_ou(tmp_path / "ou2", fq=0.999)  # a stored forget quality must agree with the KS test
    code, _, err = run(
        [
            "registry",
            "import",
            str(tmp_path / "ou2"),
            "--retain",
            str(tmp_path / "ret"),
            "--registry",
            str(tmp_path / "o.duckdb"),
            *IDENT,
        ],
        capsys,
    )
    assert code == 2 and "differs from the KS test against --retain" in err


# ---- LACUNA --------------------------------------------------------------------------------------
def write_lacuna(root: Path) -> Path:
    d = root / "OLMo2-1B" / "masked" / "unlearned_models" / "Email_Address" / "GradientAscent"
    d.mkdir(parents=True)
    (d / "Panorama_SUMMARY.json").write_text(
        json.dumps(
            {
                "forget_Q_A_Prob": 0.12,
                "forget_Q_A_ROUGE": 0.3,
                "extraction_strength": 0.2,
                "exact_memorization": 0.4,
                "forget_Q_A_Prob_paraphrased": 0.1,
                "retain_Q_A_Prob": 0.7,
                "retain_exact_memorization_paraphrased": 0.6,
            }
        )
    )
    (d / "lm_eval.json").write_text(
        json.dumps(
            {
                "arc_challenge": 0.31,
                "arc_easy": 0.6,
                "hellaswag": 0.45,
                "mmlu": None,
                "_mean": 0.4533,
            }
        )
    )
    (d / "extraction_leakage.json").write_text(
        json.dumps(
            {
                "field": "Email_Address",
                "attempts": 5,
                "total_forget_people": 100,
                "still_leaking_after_unlearn": 3,
                "forgotten_by_unlearn": 97,
                "resurfaced_after_relearn": 10,
                "pct_resurfaced_of_forgotten": 10.31,
            }
        )
    )
    return d


def test_lacuna_run_folder(tmp_path, capsys):
    d = write_lacuna(tmp_path / "art")
    db = tmp_path / "r.duckdb"
    code, out, err = run(
        [
            "registry",
            "import",
            str(d),
            "--registry",
            str(db),
            "--experiment",
            "lac",
            "--objective",
            "ga",
            "--seed",
            "4099",
        ],
        capsys,
    )
    assert code == 0, err
    assert "lm_eval_mmlu" in out  # null accuracy: named, not stored
    con = connect(db)
    assert con.execute("SELECT benchmark, field, method, variant, split FROM runs").fetchall() == [
        ("lacuna", "Email_Address", "GradientAscent", "static", "final")
    ]
    m = metrics_of(con, scalar(con, "SELECT run_key FROM runs"))
    assert (
        m["forget_Q_A_Prob"] == 0.12
        and m["lm_eval_arc_easy"] == 0.6
        and m["lm_eval_mean"] == 0.4533
    )
    assert m["resurfaced_after_relearn"] == 10 and "lm_eval_mmlu" not in m


# ---- outcome tables, the metrics view, round trips -----------------------------------------------
def test_outcome_table_without_J_keeps_metrics(tmp_path):
    (tmp_path / "t.csv").write_text(
        "experiment,benchmark,field,objective,method,variant,seed,split,status,"
        "metric:forget_quality,metric:retain_Q_A_Prob\n"
        "e,tofu,forget10,npo,wagle,static,1,final,ok,0.02,0.8\n"
    )
    con = connect(tmp_path / "r.duckdb")
    assert import_table(con, tmp_path / "t.csv").new == 1
    key = scalar(con, "SELECT run_key FROM runs")
    assert metrics_of(con, key) == {"forget_quality": 0.02, "retain_Q_A_Prob": 0.8}
    assert scalar(con, "SELECT J FROM results_all") is None
    assert scalar(con, "SELECT count(*) FROM results") == 0  # no J: out of J statistics


def test_export_import_round_trips_every_metric(tmp_path, capsys):
    res = tmp_path / "res"
    for k, method in enumerate(("random", "wagle")):
        syn.write(
            res,
            syn.record(
                experiment="imp",
                benchmark="tofu",
                method=method,
                seed=k,
                J=0.5 + k,
                components={
                    "forget_quality": 0.01 * (k + 1),
                    "retain_rouge": 0.7,
                    "world_facts_truth_ratio": 0.4,
                    "evaluation_set": "eval",
                },
            ),
        )
    con = connect(res / "registry.duckdb")
    ingest(con, res)
    write_tofu(tmp_path / "u", 1)
    write_tofu(tmp_path / "ret", 2)
    import_results(con, tmp_path / "u", options=_opts(), retain=tmp_path / "ret", results_root=res)
    write_ou(tmp_path / "ou")
    import_results(con, tmp_path / "ou", options=_opts("--seed", "8"), results_root=res)
    import_results(
        con, write_lacuna(tmp_path / "art"), options=_opts("--seed", "9"), results_root=res
    )
    n = export_table(con, tmp_path / "a.csv")
    first = pl.read_csv(tmp_path / "a.csv")
    assert (
        n == 5
        and "metric:retain_Q_A_ROUGE" in first.columns
        and "metric:model_utility" in first.columns
    )
    assert "metric:retain_rouge" not in first.columns  # open-unlearning's name where it has one
    other = connect(tmp_path / "b.duckdb")
    assert import_table(other, tmp_path / "a.csv", allow_unknown=True).new == 5
    export_table(other, tmp_path / "b.csv")
    assert pl.read_csv(tmp_path / "b.csv").equals(first)
    q = (
        "SELECT r.experiment, r.method, r.seed, m.name, m.value "
        "FROM metrics m JOIN runs r USING (run_key) ORDER BY ALL"
    )
    assert other.execute(q).fetchall() == con.execute(q).fetchall()
    assert scalar(con, "SELECT count(*) FROM metrics") > 40


def test_metric_only_imports_stay_out_of_reports_and_audit_runs(tmp_path):
    """The paper's tables from a registry that also holds metric-only imports are unchanged (no NULL
    J in any statistic) and the audit still runs over every run."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import paper_fixture

    from supportbench.reports.tables import TABLES, Context, file_name, render_all

    db = paper_fixture.build(tmp_path / "p")
    con = connect(db)
    before = scalar(con, "SELECT count(*) FROM results")
    for seed in ("4099", "5"):
        import_results(
            con,
            write_lacuna(tmp_path / f"art{seed}"),
            options=_opts(
                "--experiment",
                "paper",
                "--method",
                "random",
                "--seed",
                seed,
                "--benchmark",
                "lacuna",
                "--field",
                "Email_Address",
            ),
        )
    assert scalar(con, "SELECT count(*) FROM results") == before
    assert scalar(con, "SELECT count(*) FROM results_all") == before + 2
    rep = audit(con, "paper")  # the imported runs are audited: seed 5 adds cells nobody ran
    assert rep.text() and any(m["seed"] == 5 for m in rep.missing)
    con.close()
    status = render_all(Context.from_registry(connect(db, read_only=True)), tmp_path / "t")
    golden = Path(__file__).resolve().parents[1] / "golden"
    assert sum(v is None for v in status.values()) >= 10
    for label in TABLES:
        if status[label] is None:
            assert (tmp_path / "t" / file_name(label)).read_text() == (
                golden / file_name(label)
            ).read_text()


def test_reimport_is_idempotent_and_a_changed_source_is_a_conflict(tmp_path, capsys):
    write_tofu(tmp_path / "u", 1)
    write_tofu(tmp_path / "ret", 2)
    argv = [
        "registry",
        "import",
        str(tmp_path / "u"),
        "--retain",
        str(tmp_path / "ret"),
        "--registry",
        str(tmp_path / "r.duckdb"),
        *IDENT,
    ]
    assert run(argv, capsys)[0] == 0
    code, out, _ = run(argv, capsys)
    assert code == 0 and "1 unchanged" in out
    write_tofu(tmp_path / "u", 3)
    code, out, _ = run(argv, capsys)
    assert code == 1 and "1 conflicts" in out


# ---- bad inputs: a named error, exit 2, nothing written ------------------------------------------
def _tofu_dir(tmp_path):
    write_tofu(tmp_path / "u", 1)
    write_tofu(tmp_path / "ret", 2)
    return tmp_path / "u"


def _only_retain_log(tmp_path):
    d = _tofu_dir(tmp_path)
    for f in TOFU_FILES[1:]:
        (d / f).unlink()
    return d


def _mismatched(tmp_path):
    d = _tofu_dir(tmp_path)
    log = json.loads((d / "eval_log_forget.json").read_text())
    del log["avg_paraphrased_loss"]["3"]
    (d / "eval_log_forget.json").write_text(json.dumps(log))
    return d


def _ambiguous(tmp_path):
    d = _tofu_dir(tmp_path)
    write_ou(d)
    return d


def _csv(tmp_path):
    (tmp_path / "t.csv").write_text(
        "experiment,benchmark,field,objective,method,variant,seed,split,J,status\n"
        "e,tofu,f,npo,m,static,1,final,1,ok\n"
    )
    return tmp_path / "t.csv"


def _csv_and_retain(tmp_path):
    write_tofu(tmp_path / "ret", 2)
    return _csv(tmp_path)


def _unknown_column(tmp_path):
    (tmp_path / "t.csv").write_text(
        "experiment,benchmark,field,objective,method,variant,seed,split,J,status,fq\n"
        "e,tofu,f,npo,m,static,1,final,1,ok,0.3\n"
    )
    return tmp_path / "t.csv"


def _same_metric_twice(tmp_path):
    (tmp_path / "t.csv").write_text(
        "experiment,benchmark,field,objective,method,variant,seed,split,status,"
        "metric:retain_prob,metric:retain_Q_A_Prob\ne,tofu,f,npo,m,static,1,final,ok,1,1\n"
    )
    return tmp_path / "t.csv"


def _nothing(tmp_path):
    (tmp_path / "empty").mkdir()
    return tmp_path / "empty"


def _summary_disagrees(tmp_path):
    write_ou(tmp_path / "ou")
    s = json.loads((tmp_path / "ou" / "TOFU_SUMMARY.json").read_text())
    (tmp_path / "ou" / "TOFU_SUMMARY.json").write_text(json.dumps({**s, "model_utility": 0.1}))
    return tmp_path / "ou"


def _not_json(tmp_path):
    d = _tofu_dir(tmp_path)
    (d / "eval_log.json").write_text("{not json")
    return d


RETAIN = ["--retain", "RET"]
BAD = [
    (
        "wrong format",
        _csv_and_retain,
        ["--format", "tofu-logs", *RETAIN, *IDENT],
        r"t.csv: not a JSON file.*tofu-logs reads",
    ),
    (
        "wrong format (dir)",
        _tofu_dir,
        ["--format", "ou-eval", *IDENT],
        r"no open-unlearning <NAME>_EVAL.json",
    ),
    (
        "missing files",
        _only_retain_log,
        [*RETAIN, *IDENT],
        r"missing TOFU eval file\(s\) eval_real_author",
    ),
    ("no --retain", _tofu_dir, IDENT, r"tofu-logs needs --retain DIR.*forget quality"),
    (
        "--retain elsewhere",
        _csv,
        RETAIN,
        r"--retain is the retain model's TOFU logs \(tofu-logs\) or TOFU_EVAL",
    ),
    (
        "missing options",
        _tofu_dir,
        [*RETAIN, "--experiment", "x", "--field", "forget10"],
        r"name it with --objective, --method, --seed",
    ),
    ("seed not whole", _tofu_dir, [*RETAIN, *IDENT[:-1], "x"], r"--seed must be a whole number"),
    (
        "options on a table",
        _csv,
        ["--method", "x"],
        r"names each run in its own columns; drop --method",
    ),
    ("unknown column", _unknown_column, [], r"unknown column\(s\) \['fq'\]"),
    (
        "same metric twice",
        _same_metric_twice,
        [],
        r"'retain_prob' and 'retain_Q_A_Prob' are the same metric",
    ),
    (
        "ambiguous",
        _ambiguous,
        [*RETAIN, *IDENT],
        r"ambiguous, it could be read as tofu-logs or ou-eval",
    ),
    ("unrecognised", _nothing, IDENT, r"no import format recognises it"),
    ("no such path", lambda p: p / "nope", IDENT, r"no such file or directory"),
    (
        "items differ",
        _mismatched,
        [*RETAIN, *IDENT],
        r"'avg_paraphrased_loss' and 'average_perturb_loss' list",
    ),
    (
        "summary disagrees",
        _summary_disagrees,
        IDENT,
        r"'model_utility' is 0.1 but TOFU_EVAL.json says",
    ),
    ("not json", _not_json, [*RETAIN, *IDENT], r"eval_log.json: not a JSON file"),
    ("bad variant", _tofu_dir, [*RETAIN, *IDENT, "--variant", "x"], r"unknown variant 'x'"),
]


@pytest.mark.parametrize("name, make, args, says", BAD, ids=[b[0] for b in BAD])
def test_bad_imports_exit_2_and_write_nothing(tmp_path, capsys, name, make, args, says):
    path = make(tmp_path)
    args = [str(tmp_path / "ret") if a == "RET" else a for a in args]
    db = tmp_path / "res" / "registry.duckdb"
    code, out, err = run(["registry", "import", str(path), "--registry", str(db), *args], capsys)
    assert code == 2, (out, err)
    assert re.search(says, err), err
    assert scalar(connect(db), "SELECT count(*) FROM runs") == 0
    assert not (db.parent / "items").exists()


def test_unknown_format_is_refused_by_the_parser(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["registry", "import", str(_csv(tmp_path)), "--format", "tofu"])
    assert exc.value.code == 2
    assert "invalid choice: 'tofu'" in capsys.readouterr().err


def test_import_results_raises_registry_error(tmp_path):
    with pytest.raises(RegistryError, match="no such file or directory"):
        import_results(connect(tmp_path / "r.duckdb"), tmp_path / "nope")


def test_failed_import_or_export_creates_no_registry_or_folder(tmp_path, capsys):
    """import reads its input before opening the registry; export needs an existing registry and a
    known experiment; a failure writes nothing (no registry file, no folders, no table)."""
    db = tmp_path / "new" / "registry.duckdb"
    code, out, err = run(
        ["registry", "import", str(tmp_path / "nope"), "--registry", str(db), *IDENT], capsys
    )
    assert code == 2 and "no such file or directory" in err
    assert not (tmp_path / "new").exists()
    code, out, err = run(
        ["registry", "export", str(tmp_path / "o" / "t.csv"), "--registry", str(db)], capsys
    )
    assert code == 2 and f"no registry at '{db}'" in err, (out, err)
    assert not (tmp_path / "new").exists() and not (tmp_path / "o").exists()
    # an existing registry, an unknown experiment: named with the experiments present
    res = tmp_path / "res"
    syn.write(res, syn.record(experiment="e1", method="wagle", seed=1))
    con = connect(res / "registry.duckdb")
    ingest(con, res)
    con.close()
    code, out, err = run(
        [
            "registry",
            "export",
            str(tmp_path / "o" / "t.csv"),
            "--registry",
            str(res / "registry.duckdb"),
            "--experiment",
            "nope",
        ],
        capsys,
    )
    assert code == 2 and "--experiment 'nope'" in err and "it holds: e1" in err, (out, err)
    assert not (tmp_path / "o").exists()
    code, out, err = run(
        [
            "registry",
            "export",
            str(tmp_path / "o" / "t.txt"),
            "--registry",
            str(res / "registry.duckdb"),
        ],
        capsys,
    )
    assert code == 2 and "must be a .csv or .parquet file" in err


def test_benchmark_option_is_a_registered_name_agreeing_with_the_source(tmp_path, capsys):
    d = _tofu_dir(tmp_path)
    db = tmp_path / "res" / "registry.duckdb"
    base = [
        "registry",
        "import",
        str(d),
        "--retain",
        str(tmp_path / "ret"),
        "--registry",
        str(db),
        *IDENT,
    ]
    code, out, err = run([*base, "--benchmark", "tofuu"], capsys)
    assert code == 2 and "--benchmark 'tofuu': no such benchmark. Did you mean 'tofu'?" in err, err
    assert "controlled, lacuna, natural_tofu, tofu" in err
    code, out, err = run([*base, "--benchmark", "lacuna"], capsys)
    assert code == 2 and "--benchmark 'lacuna' contradicts the source" in err and "'tofu'" in err, (
        err
    )
    assert not db.parent.exists()
    code, out, err = run([*base, "--benchmark", "natural_tofu"], capsys)  # TOFU's data: agrees
    assert code == 0, err


def test_overflowing_losses_import_without_numpy_warnings(tmp_path, capsys):
    import warnings

    with np.errstate(over="ignore"):  # the fixture's own truth_ratio overflows too
        write_tofu(tmp_path / "u", 1, lo=0.0, hi=2000.0)
    write_tofu(tmp_path / "ret", 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, out, err = run(
            [
                "registry",
                "import",
                str(tmp_path / "u"),
                "--retain",
                str(tmp_path / "ret"),
                "--registry",
                str(tmp_path / "r.duckdb"),
                *IDENT,
            ],
            capsys,
        )
    assert code == 0, err
    assert "RuntimeWarning" not in err


def test_table_format_on_a_folder_names_the_path_and_the_suffixes(tmp_path, capsys):
    (tmp_path / "u").mkdir()
    code, out, err = run(
        [
            "registry",
            "import",
            str(tmp_path / "u"),
            "--format",
            "supportbench-csv",
            "--registry",
            str(tmp_path / "r.duckdb"),
        ],
        capsys,
    )
    assert (
        code == 2
        and f"outcome table '{tmp_path / 'u'}': a folder; it must be a .csv or .parquet file" in err
    ), err


def test_a_metric_and_its_alias_give_one_row_under_open_unlearnings_name(tmp_path):
    res = tmp_path / "res"
    syn.write(
        res,
        syn.record(
            experiment="e",
            method="wagle",
            seed=1,
            components={"forget_prob": 0.1, "forget_Q_A_Prob": 0.2, "retain_prob": float("nan")},
        ),
    )
    con = connect(res / "registry.duckdb")
    ingest(con, res)
    key = scalar(con, "SELECT run_key FROM runs")
    assert con.execute("SELECT name, value FROM metrics WHERE run_key = ?", [key]).fetchall() == [
        ("forget_Q_A_Prob", 0.2)
    ]  # one row per name; the non-finite retain_prob is not a metric
    export_table(con, tmp_path / "o.csv")
    assert pl.read_csv(tmp_path / "o.csv")["metric:forget_Q_A_Prob"].to_list() == [0.2]
    # a registry whose view still lists both: export refuses, naming the run and the metric
    con.execute(
        "CREATE OR REPLACE VIEW metrics AS SELECT c.run_key, "
        "coalesce(n.name, c.name) AS name, c.value FROM components c LEFT "
        "JOIN metric_names n ON n.component = c.name WHERE isfinite(c.value)"
    )
    with pytest.raises(RegistryError, match=f"run {key} has 2 values of metric 'forget_Q_A_Prob'"):
        export_table(con, tmp_path / "p.csv")
    assert not (tmp_path / "p.csv").exists()
