"""Text formats against upstream's code, written out here and fed the same rows
(docs/upstream-formats.md): open-unlearning's ``preprocess_chat_instance`` (src/data/utils.py at
d3d7cf9), LACUNA's instruction tuning (``prepare_instruction_data.py`` + ``lacuna_data/utils.py:
format_dataset`` at 93800b0a) and open-unlearning's exact memorization / extraction strength
(``memorization.py`` via ``tokenwise_vocab_logprobs``). Tokenizers: the offline byte-level BPE the
presets train (no special tokens added), the same with a BOS post-processor
(``add_special_tokens=True`` then matters), and the same with a ChatML chat template."""

import pytest
import torch

from supportbench.benchmarks import evaluators as ev
from supportbench.unlearning import models as models
from supportbench.unlearning.data import IGNORE, concat_sets, tokenize_pairs, tokenize_qa
from supportbench.unlearning.formats import (
    BASE_TAGS,
    CHAT,
    LACUNA_TAGS,
    TOFU_TAGS,
    LacunaInstructionFormat,
    OpenUnlearningFormat,
    RawFormat,
    chat_format,
)

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# the range users hit: plain, unicode, digits and punctuation, an empty answer, a long answer
ROWS = [
    ("Who wrote The Silent Orchard?", "Basil Mahfouz Al-Kuwaiti wrote it."),
    ("Où est né Émile Zola ?", "À Paris, en 1840 — ünïcödé."),
    ("What is his Phone Number?", "+1 (555) 010-4477"),
    ("What is nothing?", ""),
    ("Tell me everything.", " ".join(["a long answer"] * 60)),
]


def _tokenizer(kind: str):
    texts = [q + " " + a for q, a in ROWS] + [
        "Question: x\nAnswer: ",
        "Q: x\nA: ",
        "<|im_start|>user\n",
    ]
    tok = models.train_tokenizer(texts, 600)
    if kind == "bos":
        from tokenizers.processors import TemplateProcessing

        tok._tokenizer.post_processor = TemplateProcessing(
            single=f"{tok.bos_token} $A", special_tokens=[(tok.bos_token, tok.bos_token_id)]
        )
    if kind == "chat":
        tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
        tok.chat_template = CHATML
    return tok


@pytest.fixture(scope="module", params=["plain", "bos", "chat"])
def tok(request):
    return _tokenizer(request.param)


# ---- open-unlearning's preprocess_chat_instance, transcribed -------------------------------------
# (no in-context examples, training mode)
def ou_preprocess(tokenizer, template: dict, prompt: str, response: str, max_length: int = 512):
    if template["apply_chat_template"]:
        chat = []
        if template.get("system_prompt"):
            chat += [{"role": "system", "content": template["system_prompt"]}]
        chat += [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
        date_info = (
            {"date_string": template["date_string"]}
            if template.get("date_string") is not None
            else {}
        )
        chat_ids = tokenizer.apply_chat_template(
            chat, tokenize=True, add_generation_prompt=False, **date_info
        )
        prompt_ids = tokenizer.apply_chat_template(
            chat[:-1], tokenize=True, add_generation_prompt=True, **date_info
        )
    else:
        wrapped = (
            (template.get("system_prompt_with_special_tokens") or "")
            + template["user_start_tag"]
            + prompt
            + template["user_end_tag"]
            + template["asst_start_tag"]
        )
        chat_ids = tokenizer(
            wrapped + response, add_special_tokens=True, max_length=max_length, truncation=True
        )["input_ids"]
        prompt_ids = tokenizer(
            wrapped, add_special_tokens=True, max_length=max_length, truncation=True
        )["input_ids"]
    chat_ids = list(chat_ids.get("input_ids", chat_ids) if hasattr(chat_ids, "get") else chat_ids)
    prompt_ids = list(
        prompt_ids.get("input_ids", prompt_ids) if hasattr(prompt_ids, "get") else prompt_ids
    )
    if chat_ids[-1] != tokenizer.eos_token_id:
        chat_ids += [tokenizer.eos_token_id]
    labels = [IGNORE] * len(prompt_ids) + chat_ids[len(prompt_ids) :]
    return chat_ids, labels, prompt_ids


def as_dict(t):
    return {
        "apply_chat_template": t.apply_chat_template,
        "user_start_tag": t.user_start_tag,
        "user_end_tag": t.user_end_tag,
        "asst_start_tag": t.asst_start_tag,
        "system_prompt": t.system_prompt,
        "date_string": t.date_string,
        "system_prompt_with_special_tokens": t.system_prompt_with_special_tokens,
    }


def test_open_unlearning_format_equals_upstream(tok):
    templates = [BASE_TAGS, LACUNA_TAGS, TOFU_TAGS] + ([CHAT] if tok.chat_template else [])
    for template in templates:
        fmt = OpenUnlearningFormat(template)
        got = tokenize_qa(tok, fmt, [q for q, _ in ROWS], [a for _, a in ROWS], max_length=512)
        for i, (q, a) in enumerate(ROWS):
            ids, labels, prompt = ou_preprocess(tok, as_dict(template), q, a)
            n = int(got.attention_mask[i].sum())
            assert got.input_ids[i, :n].tolist() == ids, (template, q)
            assert got.labels[i, :n].tolist() == labels, (template, q)
            assert fmt.prompt_ids(tok, q) == prompt  # generation starts where upstream's does
    if tok.chat_template:  # the chat path really uses the template: the system prompt is in the ids
        ids = OpenUnlearningFormat(CHAT).encode(tok, "hi", "there").ids
        assert "You are a helpful assistant." in tok.decode(ids)


def test_tags_ending_in_a_space_break_the_border_and_tofus_do_not():
    """Why TOFU's tags (the reason is the tokenization, measured on text, not any outcome)."""
    t = _tokenizer("plain")
    q, a = ROWS[0]
    base, tofu = (
        OpenUnlearningFormat(BASE_TAGS).encode(t, q, a),
        OpenUnlearningFormat(TOFU_TAGS).encode(t, q, a),
    )
    assert base.ids[: base.n_prompt] != OpenUnlearningFormat(BASE_TAGS).prompt_ids(t, q)
    lost = t.decode(base.ids[base.n_prompt :], skip_special_tokens=True)
    assert lost == " Mahfouz Al-Kuwaiti wrote it."  # "Basil" is not labelled
    assert tofu.ids[: tofu.n_prompt] == OpenUnlearningFormat(TOFU_TAGS).prompt_ids(t, q)
    assert t.decode(tofu.ids[tofu.n_prompt :], skip_special_tokens=True) == a


def test_tag_path_adds_the_tokenizers_special_tokens_and_eos():
    bos = _tokenizer("bos")
    e = OpenUnlearningFormat(BASE_TAGS).encode(bos, "Who?", "Me.")
    assert e.ids[0] == bos.bos_token_id and e.ids[-1] == bos.eos_token_id
    assert (
        bos.decode(e.ids[e.n_prompt :], skip_special_tokens=True) == "Me."
    )  # joint: no space added
    assert bos.decode(e.ids[: e.n_prompt], skip_special_tokens=True) == "Question: Who?\nAnswer: "


# ---- LACUNA's instruction tuning, transcribed ----------------------------------------------------
def lacuna_instruction(tokenizer, question: str, value: str):
    label = " " + value  # prepare_panorama
    user = "Q: " + question + "\n" + "A: "  # format_dataset(include_answer_token=True)
    answer = label + "\n"
    prompt_ids = tokenizer(user, add_special_tokens=False, truncation=True, max_length=2048)[
        "input_ids"
    ]
    label_ids = tokenizer(f" {answer}", add_special_tokens=False, truncation=True, max_length=2048)[
        "input_ids"
    ]
    return prompt_ids + label_ids, [IGNORE] * len(prompt_ids) + label_ids


def lacuna_relearn(tokenizer, question: str, value: str):
    """relearn.py (data_source memorized): format_dataset + tokenize_instruction_data on the raw
    Ground_Truth."""
    user = "Q: " + question + "\n" + "A: "
    answer = value + "\n"
    prompt_ids = tokenizer(user, add_special_tokens=False, truncation=True, max_length=2048)[
        "input_ids"
    ]
    label_ids = tokenizer(f" {answer}", add_special_tokens=False, truncation=True, max_length=2048)[
        "input_ids"
    ]
    return prompt_ids + label_ids, [IGNORE] * len(prompt_ids) + label_ids


@pytest.mark.parametrize(
    ("fmt", "upstream"),
    [
        (LacunaInstructionFormat(), lacuna_instruction),
        (LacunaInstructionFormat(panorama=False), lacuna_relearn),
    ],
)
def test_lacuna_instruction_format_equals_upstream(tok, fmt, upstream):
    got = tokenize_qa(tok, fmt, [q for q, _ in ROWS], [a for _, a in ROWS], max_length=512)
    for i, (q, a) in enumerate(ROWS):
        ids, labels = upstream(tok, q, a)
        n = int(got.attention_mask[i].sum())
        assert got.input_ids[i, :n].tolist() == ids and got.labels[i, :n].tolist() == labels
        assert tok.eos_token_id not in ids  # no EOS
    spaces = "   " if fmt.panorama else "  "
    assert (
        tok.decode(got.input_ids[0, : int(got.attention_mask[0].sum())])
        == f"Q: Who wrote The Silent Orchard?\nA:{spaces}Basil Mahfouz Al-Kuwaiti wrote it.\n"
    )


def test_a_system_prompt_prefix_and_a_template_without_a_system_turn():
    plain, chat = _tokenizer("plain"), _tokenizer("chat")
    pre = chat_format(
        plain, "off", overrides={"system_prompt_with_special_tokens": "<<SYS>>be brief<</SYS>> "}
    )
    q, a = ROWS[0]
    ids, labels, prompt = ou_preprocess(
        plain,
        {**as_dict(pre.template), "system_prompt_with_special_tokens": "<<SYS>>be brief<</SYS>> "},
        q,
        a,
    )
    assert pre.encode(plain, q, a).ids == ids and pre.prompt_ids(plain, q) == prompt
    chat.chat_template = (
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system role') }}"
        "{% endif %}{{ m.content }}{% endfor %}"
    )
    with pytest.raises(
        ValueError, match="refuses a system prompt .*benchmark.template.system_prompt=''"
    ):
        chat_format(chat, "auto")
    assert chat_format(chat, "auto", overrides={"system_prompt": ""}).template.system_prompt == ""


def test_raw_format_is_the_old_tokenize_pairs(tok):
    """The controlled construction keeps its format: prompt and answer alone, EOS, subject marks as
    before."""
    prompts, answers = ["Q: Name the crest of Odo Vell.\nA: ", "Odo Vell is "], ["owl", "tall"]
    got = tokenize_pairs(tok, prompts, answers, subjects=["Odo Vell", None])
    for i, (p, a) in enumerate(zip(prompts, answers)):
        pi = tok(p, add_special_tokens=False)["input_ids"]
        ai = tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        n = len(pi) + len(ai)
        assert got.input_ids[i, :n].tolist() == pi + ai
        assert got.labels[i, :n].tolist() == [IGNORE] * len(pi) + ai
    marked = tok.decode(got.input_ids[0][got.subject_mask[0]])
    assert "Odo Vell" in marked and "crest" not in marked and not got.subject_mask[1].any()


def test_subject_marks_point_into_the_question_in_every_format(tok):
    q, subject = "Where was Basil Mahfouz born?", "Basil Mahfouz"
    fmts = [LacunaInstructionFormat(), OpenUnlearningFormat(BASE_TAGS)] + (
        [OpenUnlearningFormat(CHAT)] if tok.chat_template else []
    )
    for fmt in fmts:
        s = tokenize_qa(tok, fmt, [q], ["Cairo"], subjects=[subject])
        marked = tok.decode(s.input_ids[0][s.subject_mask[0]]).strip()
        assert subject.split()[0] in marked and "born" not in marked and "Cairo" not in marked, (
            fmt.name
        )
        assert not (s.subject_mask[0] & (s.labels[0] != IGNORE)).any()


def test_chat_format_choice():
    plain, chat = _tokenizer("plain"), _tokenizer("chat")
    assert chat_format(plain, "auto").template == TOFU_TAGS
    assert chat_format(plain, "auto", BASE_TAGS).template == BASE_TAGS
    assert chat_format(chat, "auto").template == CHAT
    assert chat_format(chat, "off").template == TOFU_TAGS
    with pytest.raises(ValueError, match="has no chat template"):
        chat_format(plain, "on")
    with pytest.raises(ValueError, match="allowed: auto, on, off"):
        chat_format(chat, "sometimes")


def test_a_models_own_template_args_replace_the_defaults_and_equal_upstream():
    """benchmark.template.* (a model config's template_args) reach the format, and the result is
    still exactly upstream's preprocessing with those arguments."""
    plain, chat = _tokenizer("plain"), _tokenizer("chat")
    tags = chat_format(
        plain,
        "auto",
        overrides={"user_start_tag": "<|user|>\n", "asst_start_tag": "<|assistant|>\n"},
    )
    mine = chat_format(
        chat, "auto", overrides={"system_prompt": "Answer briefly.", "date_string": "1 Jan 2024"}
    )
    assert (tags.template.user_start_tag, tags.template.user_end_tag) == (
        "<|user|>\n",
        TOFU_TAGS.user_end_tag,
    )
    assert mine.template.system_prompt == "Answer briefly." and mine.template.apply_chat_template
    for t, fmt in ((plain, tags), (chat, mine)):
        for q, a in ROWS[:3]:
            ids, _, prompt = ou_preprocess(t, as_dict(fmt.template), q, a)
            assert fmt.encode(t, q, a).ids == ids and fmt.prompt_ids(t, q) == prompt
    assert "Answer briefly." in chat.decode(mine.encode(chat, "hi", "there").ids)


def test_tofu_refuses_a_bad_template_option_before_any_work(tmp_path):
    from supportbench.benchmarks.tofu.adapter import Tofu
    from supportbench.errors import SpecError

    with pytest.raises(
        SpecError, match=r"unknown benchmark.template option\(s\) \['user_tag'\]; allowed: "
    ):
        Tofu(data_dir=tmp_path, template={"user_tag": "x"})
    with pytest.raises(SpecError, match="benchmark.template.system_prompt=3 must be a string"):
        Tofu(data_dir=tmp_path, template={"system_prompt": 3})
    with pytest.raises(SpecError, match="benchmark.theta0='yes'; allowed: finetune, given"):
        Tofu(data_dir=tmp_path, theta0="yes")


@pytest.mark.parametrize("max_length", [4, 9, 16, 30])
def test_a_cut_row_is_cut_as_upstream_cuts_it(tok, max_length):
    """The tag path is truncated at max_length, then EOS appended (a cut row keeps its EOS label);
    the chat path is never truncated (upstream's preprocess_chat_instance)."""
    for template in [BASE_TAGS, TOFU_TAGS] + ([CHAT] if tok.chat_template else []):
        for q, a in ROWS:
            got = tokenize_qa(tok, OpenUnlearningFormat(template), [q], [a], max_length=max_length)
            ids, labels, _ = ou_preprocess(tok, as_dict(template), q, a, max_length=max_length)
            n = int(got.attention_mask[0].sum())
            assert got.input_ids[0, :n].tolist() == ids and got.labels[0, :n].tolist() == labels, (
                template,
                q,
            )
            if not template.apply_chat_template:
                assert n <= max_length + 1 and ids[-1] == tok.eos_token_id


def test_truncation_and_concat():
    t = _tokenizer("plain")
    s = tokenize_qa(t, OpenUnlearningFormat(BASE_TAGS), [ROWS[4][0]], [ROWS[4][1]], max_length=16)
    assert s.input_ids.shape == (1, 17) and int(s.attention_mask.sum()) == 17  # 16, then EOS
    assert s.input_ids[0, -1] == t.eos_token_id
    r = tokenize_qa(t, RawFormat(), [ROWS[4][0]], [ROWS[4][1]], max_length=16)
    assert r.input_ids.shape == (1, 16)  # the raw format: cut after EOS
    a = tokenize_qa(t, RawFormat(), ["a "], ["b"])
    both = concat_sets([s, a], t.pad_token_id)
    assert both.input_ids.shape == (2, 17)
    assert both.take([1]).input_ids.tolist() == a.input_ids.tolist()
    assert (both.labels[1, a.input_ids.shape[1] :] == IGNORE).all()


# ---- exact memorization and extraction strength, transcribed -------------------------------------
def ou_em_es(logits: torch.Tensor, labels: torch.Tensor):
    """tokenwise_vocab_logprobs + _exact_memorization + _extraction_strength for one sequence
    (unshifted labels)."""
    log_probs = torch.log_softmax(logits, -1)[:-1]
    idx = (labels != IGNORE).nonzero(as_tuple=True)[0][:-1]
    if len(idx) == 0:
        return None, 0
    lp = log_probs[idx[0].item() - 1 : idx[-1].item()]
    lab = labels[idx]
    preds = lp.argmax(-1)
    n = len(lab)
    em = ((preds == lab).sum() / n).item()
    for k in range(n):
        if torch.equal(preds[k:], lab[k:]):
            break
    return em, 1 - k / n


class FixedLogits(torch.nn.Module):
    """A 'model' whose logits are given: the metric alone is under test."""

    def __init__(self, logits):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.logits = logits

    def forward(self, input_ids, attention_mask):
        return type(
            "Out", (), {"logits": self.logits[: input_ids.shape[0], : input_ids.shape[1]]}
        )()


@pytest.mark.parametrize("seed", range(6))
def test_token_match_equals_open_unlearning(seed):
    g = torch.Generator().manual_seed(seed)
    B, L, V = 24, 12, 5  # a small vocabulary: many argmax hits, partial suffixes, full matches
    ids = torch.randint(0, V, (B, L), generator=g)
    labels = ids.clone()
    n_prompt = torch.randint(1, L, (B,), generator=g)
    length = torch.randint(1, L + 1, (B,), generator=g)
    for i in range(B):
        labels[i, : n_prompt[i]] = IGNORE
        labels[i, length[i] :] = IGNORE
    labels[0, :] = IGNORE  # a row without label tokens
    labels[1, :] = IGNORE
    labels[1, 5] = ids[1, 5]  # a row with one label token (the EOS prediction only)
    logits = torch.randn(B, L, V, generator=g)
    for i in range(2, B, 3):  # some rows memorized exactly
        logits[i, :-1] = torch.nn.functional.one_hot(ids[i, 1:], V).float() * 9
    from supportbench.unlearning.data import TokenizedSet

    data = TokenizedSet(ids, torch.ones_like(ids), labels)
    em, es = ev.token_match(FixedLogits(logits), data, batch_size=B)
    for i in range(B):
        want_em, want_es = ou_em_es(logits[i], labels[i])
        if want_em is None:
            assert torch.isnan(em[i])
        else:
            assert em[i].item() == pytest.approx(want_em, abs=1e-7)  # upstream divides in float32
        assert es[i].item() == pytest.approx(want_es, abs=1e-12)
    assert torch.isnan(em[0]) and es[0] == 0 and torch.isnan(em[1]) and es[1] == 0
    assert (em[2::3][~em[2::3].isnan()] == 1).all() and (es[2::3][~em[2::3].isnan()] == 1).all()


def test_tofu_refuses_an_unknown_chat_template_before_any_work(tmp_path):
    from supportbench.benchmarks.tofu.adapter import Tofu
    from supportbench.errors import SpecError

    with pytest.raises(
        SpecError, match=r"benchmark.chat_template='sometimes'; allowed: auto, on, off"
    ):
        Tofu(cache_dir=tmp_path, chat_template="sometimes")
    assert not any(tmp_path.iterdir())  # refused before the generator wrote anything
