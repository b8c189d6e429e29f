"""The benchmark contract: declared members checked at registration, the Protocols' isinstance
checks, and the shared free functions of benchmarks/base.py (J, disjointness, cache keys,
build-then-publish)."""

import hashlib
import json
import sys

import pytest
import torch

from supportbench._registry import Registry
from supportbench.benchmarks.base import (
    BENCHMARKS,
    Benchmark,
    Calibrated,
    EvalSplit,
    InterfaceBenchmark,
    Roles,
    building,
    calibration_fields,
    check_benchmark_class,
    check_disjoint,
    content_key,
    get_benchmark,
    is_calibrated,
    j_components,
    record_theta0_nll,
    register_benchmark,
    require_prepared,
    to_outcome,
)
from supportbench.errors import SpecError, StateError
from supportbench.unlearning.data import DiagnosticRecords, dataset_nll, tokenize_pairs

FACTS = [
    (
        "Where was Ada Quill born?",
        "Ada Quill was born in Port Varnel.",
    ),  # the tiny tokenizer's texts
    ("What does Ada Quill write?", "Ada Quill writes gothic sea novels."),
    ("Who inspired Bo Tarrant?", "Bo Tarrant was inspired by his aunt, a clockmaker."),
    ("What award did Bo Tarrant win?", "Bo Tarrant won the Silver Lantern prize."),
    ("Which city does Cy Morrow live in?", "Cy Morrow lives in Elder Bay."),
    ("What is Cy Morrow's first book?", "Cy Morrow's first book is The Glass Orchard."),
    ("What is the capital of France?", "The capital of France is Paris."),
    ("How many legs does a spider have?", "A spider has eight legs."),
]


class Good:
    """The smallest class the registry accepts."""

    DEFAULT_MODEL = "tiny-llama"
    DEFAULT_FIELD = "a"
    INTERFACES = ()

    def __init__(self, cache_dir=None, progress=True, device=None, build=0, size="mini"): ...

    @classmethod
    def field_names(cls, options):
        return ("a", "b")

    @classmethod
    def check_inputs(cls, options, field, settings): ...

    def prepare(self, model_preset): ...

    def roles(self, field, seed): ...

    def evaluate(self, model, roles, which="eval", full=False): ...


def variant(**changes):
    """A subclass of Good with members replaced (``None`` deletes one)."""
    cls = type(
        "Bad",
        (),
        {
            k: v
            for k, v in vars(Good).items()
            if k not in ("__dict__", "__weakref__", "__qualname__")
        },
    )
    for k, v in changes.items():
        if v is None:
            delattr(cls, k)
        else:
            setattr(cls, k, v)
    return cls


def test_a_class_missing_default_field_is_refused_by_name():
    with pytest.raises(
        TypeError,
        match=r"benchmark 'bad_bench' \(.*\.Bad\) lacks DEFAULT_FIELD: declare "
        r"`DEFAULT_FIELD: ClassVar\[str\]`",
    ):
        register_benchmark("bad_bench")(variant(DEFAULT_FIELD=None))
    assert "bad_bench" not in BENCHMARKS


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"DEFAULT_MODEL": None}, "lacks DEFAULT_MODEL"),
        ({"DEFAULT_MODEL": 7}, "DEFAULT_MODEL must be a str, got int 7"),
        ({"INTERFACES": None}, "lacks INTERFACES"),
        ({"INTERFACES": ["lora"]}, r"INTERFACES must be a tuple of str, got \['lora'\]"),
        ({"DEFAULT_FIELD": "c"}, r"DEFAULT_FIELD 'c' is not one of field_names\(\{\}\): a, b"),
        ({"evaluate": None}, r"lacks the method evaluate\(self, model, roles"),
        ({"field_names": lambda self, options: ("a",)}, "field_names must be a classmethod"),
        (
            {"INTERFACES": ("lora",)},
            r"declares INTERFACES \('lora',\) but lacks the method intervene",
        ),
        (
            {"INTERFACES": ("lora",), "intervene": lambda *a: {}},
            r"declares INTERFACES \('lora',\) but lacks the method allowed\(self, model, method\)",
        ),
        (
            {
                "INTERFACES": ("lora",),
                "intervene": lambda self, spec, model, roles, objective, data, config: {},
                "allowed": lambda *a: {},
            },
            r"intervene must accept on_step=None \(a run's curve hook\)",
        ),
        (
            {"__init__": lambda self, cache_dir=None, progress=True: None},
            "must accept the keywords cache_dir=None, progress=True, device=None and build=0",
        ),
        (
            {"field_names": classmethod(lambda cls, options: options["n"])},
            r"field_names\(\{\}\) raised KeyError",
        ),
        (
            {
                "INTERFACES": ("lora",),
                "intervene": lambda *a, **k: {},
                "allowed": lambda *a: {},
                "calibration_fields": classmethod(lambda cls, o: ()),
            },
            "declares calibration_fields but lacks calibration_aurocs: "
            "a benchmark that freezes its own decision",
        ),
        (
            {
                "calibration_fields": classmethod(lambda cls, o: ()),
                "calibration_aurocs": lambda self: {},
            },
            "declares Calibrated's members but no INTERFACES",
        ),
        (
            {
                "INTERFACES": ("lora",),
                "intervene": lambda *a, **k: {},
                "allowed": lambda *a: {},
                "calibration_aurocs": lambda self: {},
                "calibration_fields": lambda self, o: (),
            },
            "calibration_fields must be a classmethod",
        ),
    ],
)
def test_wrong_declarations_are_refused(changes, says):
    with pytest.raises(TypeError, match=says):
        check_benchmark_class("bad_bench", variant(**changes))


def test_an_instance_is_not_a_benchmark_class():
    with pytest.raises(TypeError, match="is not a class"):
        check_benchmark_class("bad_bench", Good())


def test_the_builtins_pass_and_declare_their_defaults():
    want = {
        "tofu": ("tiny-llama", "forget10", ()),
        "natural_tofu": ("tiny-llama", "forget10", ()),
        "lacuna": ("tiny-olmo3", "Email_Address", ()),
        "controlled": ("tiny-qwen2", "t00", ("backbone", "lora")),
    }
    assert set(BENCHMARKS.names()) >= set(want)
    for name, (model, fld, interfaces) in want.items():
        cls = BENCHMARKS.get(name)
        check_benchmark_class(name, cls)
        declared = (cls.DEFAULT_MODEL, cls.DEFAULT_FIELD, cls.INTERFACES)
        assert declared == (model, fld, interfaces), name
    ctl = BENCHMARKS.get("controlled")
    assert ctl.field_names({"n_targets": 4, "n_calibration_targets": 0}) == (
        "t00",
        "t01",
        "t02",
        "t03",
    )
    # the calibration targets are fields a run may name
    # (the controlled decision's runs), never final ones
    assert ctl.field_names({"n_targets": 4, "n_calibration_targets": 2}) == (
        "t00",
        "t01",
        "t02",
        "t03",
        "c00",
        "c01",
    )
    assert ctl.calibration_fields({}) == tuple(f"c{k:02d}" for k in range(12))


def test_registration_records_which_benchmarks_freeze_their_own_decision():
    """The harness asks the registry whether a benchmark calibrates (``is_calibrated``), never the
    class: a registered class that declares Calibrated's members is recorded, one that declares none
    is not, and an unregistered class with the members is not either."""
    assert is_calibrated(BENCHMARKS.get("controlled"))
    assert not any(is_calibrated(BENCHMARKS.get(n)) for n in ("tofu", "natural_tofu", "lacuna"))
    assert calibration_fields(BENCHMARKS.get("controlled"), {"n_calibration_targets": 2}) == (
        "c00",
        "c01",
    )
    assert calibration_fields(BENCHMARKS.get("tofu"), {}) == ()
    members = {
        "INTERFACES": ("lora",),
        "intervene": lambda *a, **k: {},
        "allowed": lambda *a: {},
        "calibration_aurocs": lambda self: {},
        "calibration_fields": classmethod(lambda cls, o: ("b",)),
    }
    cls = variant(**members)
    assert (
        not is_calibrated(cls) and calibration_fields(cls, {}) == ()
    )  # not registered: not known to calibrate
    try:
        register_benchmark("calibrated_probe")(cls)
        assert is_calibrated(cls) and calibration_fields(cls, {}) == ("b",)
    finally:
        BENCHMARKS.unregister("calibrated_probe")


def test_instances_satisfy_the_protocols(tmp_path):
    for name in ("tofu", "lacuna", "controlled"):
        b = get_benchmark(
            name, cache_dir=tmp_path, progress=False, device="cpu"
        )  # the shared constructor
        assert isinstance(b, Benchmark) and b.name == name
        assert isinstance(b, InterfaceBenchmark) == bool(b.INTERFACES), name
        assert isinstance(b, Calibrated) == (name == "controlled"), name
    assert not isinstance(
        Good(), Benchmark
    )  # unregistered: the registry gives a benchmark its name


def test_a_plugin_that_fails_the_check_is_listed_as_broken(tmp_path, monkeypatch):
    (tmp_path / "sb_plugin_bench.py").write_text(
        "class NoField:\n    DEFAULT_MODEL = 'tiny-llama'\n    INTERFACES = ()\n"
    )
    d = tmp_path / "sb_plugin_bench-0.1.dist-info"
    d.mkdir()
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: sb_plugin_bench\nVersion: 0.1\n")
    (d / "entry_points.txt").write_text(
        "[supportbench.benchmarks]\nno_field = sb_plugin_bench:NoField\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "sb_plugin_bench", raising=False)
    reg = Registry(
        "benchmark", entry_point_group="supportbench.benchmarks", check=check_benchmark_class
    )
    reg.register("good", Good)
    assert reg.names() == ["good"]
    assert "TypeError" in reg.broken["no_field"] and "lacks DEFAULT_FIELD" in reg.broken["no_field"]


# ---- shared functions ----------------------------------------------------------------------------
def test_require_prepared_is_a_state_error():
    require_prepared(object(), "roles()")
    with pytest.raises(StateError, match=r"call prepare\(\) before roles\(\)"):
        require_prepared(None, "roles()")


def _split(tok, name, pairs):
    rows = [{"question": q, "answer": a} for q, a in pairs]
    prompts = [f"Q: {q}\nA: " for q, _ in pairs]
    return EvalSplit(name, tokenize_pairs(tok, prompts, [a for _, a in pairs]), rows, prompts)


def test_check_disjoint_refuses_a_shared_question_answer_pair(tiny_tokenizer):
    diag = [{"question": q, "answer": a} for q, a in FACTS[:2]]
    splits = {
        "eval": {
            "forget": _split(tiny_tokenizer, "forget", FACTS[2:4]),
            "retain": _split(tiny_tokenizer, "retain", FACTS[4:6]),
        }
    }
    check_disjoint("f", diag, splits)  # disjoint: nothing raised
    check_disjoint(
        "f", [{"question": FACTS[4][0], "answer": "another answer"}], splits
    )  # same question only
    splits["eval"]["retain"] = _split(tiny_tokenizer, "retain", [FACTS[5], FACTS[1]])
    with pytest.raises(
        SpecError, match=r"^f: eval/retain overlaps the diagnostic records \('What does Ada"
    ):
        check_disjoint("f", diag, splits)


def test_content_key_is_sixteen_hex_of_the_canonical_json():
    want = hashlib.sha256(b'["v1", {"a": 1, "b": [2, 3]}, 0]').hexdigest()[:16]
    assert content_key("v1", {"b": (2, 3), "a": 1}, 0) == want
    assert content_key("v1", None) != content_key("v1", "None")


def test_building_publishes_on_success_and_leaves_nothing_on_failure(tmp_path):
    final = tmp_path / "models" / "entry"
    with building(final) as tmp:
        assert (
            not tmp.exists() and tmp.parent == final.parent
        )  # nothing made before the body writes
        tmp.mkdir(parents=True)
        (tmp / "w").write_text("x")
    assert (final / "w").read_text() == "x" and not tmp.exists()
    other = tmp_path / "models" / "broken"
    with pytest.raises(RuntimeError, match="boom"), building(other) as tmp:
        tmp.mkdir()
        (tmp / "w").write_text("half")
        raise RuntimeError("boom")
    assert not other.exists() and not tmp.exists()


@pytest.fixture()
def roles(tiny_tokenizer):
    splits = {
        w: {
            "forget": _split(tiny_tokenizer, "forget", FACTS[:3]),
            "retain": _split(tiny_tokenizer, "retain", FACTS[3:6]),
            "protected": _split(tiny_tokenizer, "protected", FACTS[6:]),
        }
        for w in ("dev", "eval")
    }
    tok = splits["eval"]["forget"].data
    return Roles("f", 0, DiagnosticRecords(F=tok, R=tok, P=tok, N=tok), tok, tok, splits)


def test_j_components_follow_eq_19(tiny_model, roles):
    with pytest.raises(
        StateError, match=r"record_theta0_nll\(theta_0, roles\) must run before evaluate\(\)"
    ):
        j_components(tiny_model, roles, "eval")
    record_theta0_nll(tiny_model, roles)
    with pytest.raises(SpecError, match="unknown split 'plain'; allowed: dev, eval"):
        j_components(tiny_model, roles, "plain")
    with pytest.raises(SpecError, match="unknown split 'dev'; allowed: eval"):
        j_components(tiny_model, roles, "dev", allowed=("eval",))
    same = to_outcome(j_components(tiny_model, roles, "eval")[0])
    assert (same.J, same.G_F, same.D_coll) == (0.0, 0.0, 0.0)  # theta_0 against itself

    base = {k: dataset_nll(tiny_model, s.data)[0] for k, s in roles.splits["eval"].items()}
    with torch.no_grad():
        for p in tiny_model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    comp, nll = j_components(tiny_model, roles, "eval")
    inc = {
        k: float((dataset_nll(tiny_model, s.data)[0] - base[k]).double().mean())
        for k, s in roles.splits["eval"].items()
    }
    d_coll = max(0.0, inc["retain"]) + max(0.0, inc["protected"])
    assert comp["G_F"] == pytest.approx(inc["forget"], rel=1e-6)
    assert comp["D_coll"] == pytest.approx(d_coll, rel=1e-6, abs=1e-9)
    assert comp["J"] == pytest.approx(inc["forget"] - d_coll, rel=1e-6, abs=1e-9)
    for k in ("forget", "retain", "protected"):
        s, n = nll[k]
        assert comp[f"{k}_prob"] == pytest.approx(float(torch.exp(-s / n).mean()), rel=1e-6)
    out = to_outcome(dict(comp, extra=1.0))
    assert (out.J, out.G_F, out.D_coll) == (comp["J"], comp["G_F"], comp["D_coll"])
    assert set(out.components) == set(comp) - {"J", "G_F", "D_coll"} | {"extra"}
    json.dumps(out.to_dict())
