"""How a (question, answer) row becomes tokens: the text formats of upstream's code, one class each.

A format turns one row into ``Encoded``: the token ids of the whole sequence, how many of them are
the prompt (their labels are ignored; every later token is trained and scored) and, when asked,
which prompt tokens name the subject. ``prompt_ids`` is what generation starts from. The formats
(docs/upstream-formats.md has the sources, read from upstream's code):

- ``RawFormat``: the prompt string as given, then the answer (and EOS), tokenized separately without
  special tokens. supportbench's own construction (the controlled separation) and the pre-format
  behaviour.
- ``OpenUnlearningFormat``: open-unlearning's ``preprocess_chat_instance`` (``src/data/utils.py``)
  without in-context examples: with a chat template, the conversation through
  ``apply_chat_template`` (system prompt, ``date_string``); without one,
  ``user_start_tag + q + user_end_tag + asst_start_tag`` and the answer tokenized **jointly** with
  the tokenizer's special tokens; EOS appended when the last token is not EOS; the prompt's length
  is that of the prompt tokenized alone. TOFU's fine-tuning and evaluation, and the evaluation of
  LACUNA's metrics.
- ``LacunaInstructionFormat``: LACUNA's instruction tuning (``prepare_instruction_data.py``): the
  prompt ``"Q: {q}\\nA: "`` and the label ``" " + (" " + value + "\\n")`` tokenized separately
  without special tokens, no EOS (the leading space is added twice upstream: once to the value, once
  before tokenizing).

Nothing here imports torch: a format is plain text → ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Encoded:
    ids: list[int]
    n_prompt: int  # labels are ignored on ids[:n_prompt]
    subject: list[bool] | None = (
        None  # per token: overlaps the subject's first occurrence in the prompt
    )


@runtime_checkable
class QAFormat(Protocol):
    name: str

    def encode(
        self,
        tokenizer,
        question: str,
        answer: str,
        subject: str | None = None,
        want_subject: bool = False,
        max_length: int | None = None,
    ) -> Encoded: ...

    def prompt_ids(self, tokenizer, question: str) -> list[int]: ...


def _marks(
    offsets: Sequence[tuple[int, int]], text: str, subject: str | None, limit: int
) -> list[bool]:
    """Tokens (among the first ``limit``) whose character span overlaps the subject's first
    occurrence."""
    at = text.find(subject) if subject else -1
    out = [False] * len(offsets)
    if at < 0:
        return out
    for j, (b, e) in enumerate(offsets[:limit]):
        out[j] = b < at + len(subject) and e > at and e > b
    return out


@dataclass(frozen=True)
class RawFormat:
    """``prompt`` + ``answer`` (+ EOS), each tokenized alone without special tokens; ``question`` is
    the whole prompt string."""

    append_eos: bool = True
    name: str = "raw"

    def encode(
        self, tokenizer, question, answer, subject=None, want_subject=False, max_length=None
    ) -> Encoded:
        enc = tokenizer(question, add_special_tokens=False, return_offsets_mapping=want_subject)
        pi = list(enc["input_ids"])
        ai = list(tokenizer(answer, add_special_tokens=False)["input_ids"])
        if self.append_eos:
            ai.append(tokenizer.eos_token_id)
        mark = None
        if want_subject:
            mark = _marks(enc["offset_mapping"], question, subject, len(pi)) + [False] * len(ai)
        cut = slice(None, max_length)  # the whole sequence (EOS included) cut at max_length
        return Encoded((pi + ai)[cut], len(pi), mark[cut] if mark is not None else None)

    def prompt_ids(self, tokenizer, question) -> list[int]:
        return list(tokenizer(question, add_special_tokens=False)["input_ids"])


@dataclass(frozen=True)
class Template:
    """open-unlearning's ``template_args`` (``configs/model/*.yaml``), without in-context
    examples."""

    apply_chat_template: bool
    user_start_tag: str = ""
    user_end_tag: str = ""
    asst_start_tag: str = ""
    system_prompt: str | None = None
    date_string: str | None = None
    system_prompt_with_special_tokens: str | None = (
        None  # the tag path's prefix (upstream: before the tags)
    )
    asst_end_tag: str = (
        ""  # upstream writes it only between in-context examples, which supportbench never uses
    )


# open-unlearning's base-model tags (configs/model/Llama-2-7b-hf.yaml, phi-1_5.yaml)
BASE_TAGS = Template(False, "Question: ", "\n", "Answer: ")
# Llama-2-7b-chat's tags (configs/model/Llama-2-7b-chat-hf.yaml): TOFU's original format
# "[INST] {q} [/INST]{a}". Its assistant tag is empty, not " ": upstream observed that a tag ending
# in a space "leads to very bad tokenization at the border". With a byte-level BPE the space joins
# the answer's first word in the joint tokens ("Answer:", " Paris") but stands alone in the prompt
# ("Answer:", " "), so the prompt is not a prefix of the sequence: the first answer token goes
# unlabelled and generation starts from a token never trained on.
TOFU_TAGS = Template(False, "[INST] ", " [/INST]", "")
# its instruct models (Llama-3.x-Instruct, Qwen2.5-Instruct, Phi-3.5, zephyr): the tokenizer's chat
# template with this system prompt; the date is passed to every template (Llama 3.x prints it,
# others ignore it)
CHAT = Template(True, system_prompt="You are a helpful assistant.", date_string="10 Apr 2025")
# LACUNA's tags (its configs' template_args: Q: / \n / A: / \n, no chat template)
LACUNA_TAGS = Template(False, "Q: ", "\n", "A: ")


@dataclass(frozen=True)
class OpenUnlearningFormat:
    template: Template
    name: str = "open-unlearning"

    def _chat(self, question: str, answer: str | None) -> list[dict]:
        chat = (
            [{"role": "system", "content": self.template.system_prompt}]
            if self.template.system_prompt
            else []
        )
        chat.append({"role": "user", "content": question})
        if answer is not None:
            chat.append({"role": "assistant", "content": answer})
        return chat

    def _kw(self) -> dict:
        return (
            {"date_string": self.template.date_string}
            if self.template.date_string is not None
            else {}
        )

    def _prompt_text(self, tokenizer, question: str) -> str:
        t = self.template
        if t.apply_chat_template:
            return tokenizer.apply_chat_template(
                self._chat(question, None), tokenize=False, add_generation_prompt=True, **self._kw()
            )
        return (
            (t.system_prompt_with_special_tokens or "")
            + t.user_start_tag
            + question
            + t.user_end_tag
            + t.asst_start_tag
        )

    def _ids(self, tokenizer, text: str, offsets: bool, max_length: int | None = None):
        # apply_chat_template(tokenize=True) tokenizes its rendering without special tokens (the
        # template writes them) and is never truncated; the tag path asks for the tokenizer's own
        # special tokens (add_special_tokens=True) and is truncated at max_length, as upstream does
        if self.template.apply_chat_template:
            return tokenizer(text, add_special_tokens=False, return_offsets_mapping=offsets)
        cut = {"max_length": max_length, "truncation": True} if max_length is not None else {}
        return tokenizer(text, add_special_tokens=True, return_offsets_mapping=offsets, **cut)

    def encode(
        self, tokenizer, question, answer, subject=None, want_subject=False, max_length=None
    ) -> Encoded:
        t = self.template
        prompt = self._prompt_text(tokenizer, question)
        if t.apply_chat_template:
            full = tokenizer.apply_chat_template(
                self._chat(question, answer),
                tokenize=False,
                add_generation_prompt=False,
                **self._kw(),
            )
        else:
            full = prompt + answer
        enc = self._ids(tokenizer, full, want_subject, max_length)
        ids = list(enc["input_ids"])
        n_prompt = len(self._ids(tokenizer, prompt, False, max_length)["input_ids"])
        if (
            not ids or ids[-1] != tokenizer.eos_token_id
        ):  # after truncation: a cut row keeps its EOS (upstream)
            ids.append(tokenizer.eos_token_id)
        mark = None
        if (
            want_subject
        ):  # the subject inside the user's question, never a match in the system prompt
            offs = list(enc["offset_mapping"])
            at = full.find(question)
            local = [(b - at, e - at) for b, e in offs] if at >= 0 else [(0, 0)] * len(offs)
            mark = _marks(local, question, subject, min(n_prompt, len(offs))) + [False] * (
                len(ids) - len(offs)
            )
        return Encoded(ids, n_prompt, mark)

    def prompt_ids(self, tokenizer, question) -> list[int]:
        return list(
            self._ids(tokenizer, self._prompt_text(tokenizer, question), False)["input_ids"]
        )


@dataclass(frozen=True)
class LacunaInstructionFormat:
    """LACUNA's instruction tuning (``format_dataset`` + ``tokenize_instruction_data``): prompt and
    label tokenized alone, no special tokens, no EOS. ``panorama``: the answer went through
    ``prepare_panorama``, which prefixes a space (the injected facts); relearning reads raw values
    (``relearn.py``), without it."""

    panorama: bool = True
    name: str = "lacuna-instruction"

    def encode(
        self, tokenizer, question, answer, subject=None, want_subject=False, max_length=None
    ) -> Encoded:
        return RawFormat(append_eos=False).encode(
            tokenizer, self._prompt(question), self.label(answer), subject, want_subject, max_length
        )

    @staticmethod
    def _prompt(question: str) -> str:
        t = LACUNA_TAGS
        return t.user_start_tag + question + t.user_end_tag + t.asst_start_tag

    def label(self, value: str) -> str:
        # prepare_panorama: answer = " " + value; format_dataset appends asst_end_tag "\n";
        # tokenize_instruction_data tokenizes f" {answer}"
        return " " + ((" " if self.panorama else "") + value + LACUNA_TAGS.user_end_tag)

    def prompt_ids(self, tokenizer, question) -> list[int]:
        return RawFormat().prompt_ids(tokenizer, self._prompt(question))


def chat_format(
    tokenizer, chat_template: str, tags: Template = TOFU_TAGS, overrides: dict | None = None
) -> OpenUnlearningFormat:
    """TOFU's format for a tokenizer: ``chat_template`` "auto" uses the tokenizer's chat template
    when it has one (open-unlearning's instruct-model arguments), else ``tags`` (default TOFU's
    original Llama-2-chat tags); "on" requires a chat template; "off" never uses it. ``overrides``
    replaces template arguments (a model config's own ``template_args``: tags, system prompt, date
    string)."""
    has = bool(getattr(tokenizer, "chat_template", None))
    if chat_template == "on" and not has:
        raise ValueError(
            "benchmark.chat_template=on but the tokenizer has no chat template "
            "(use 'auto' or 'off')"
        )
    if chat_template not in ("auto", "on", "off"):
        raise ValueError(f"benchmark.chat_template={chat_template!r}; allowed: auto, on, off")
    chosen = CHAT if has and chat_template != "off" else tags
    chosen = replace(chosen, **overrides) if overrides else chosen
    if chosen.apply_chat_template and chosen.system_prompt:
        try:  # some templates (gemma's) refuse a system turn: say how to leave it out
            tokenizer.apply_chat_template(
                [
                    {"role": "system", "content": chosen.system_prompt},
                    {"role": "user", "content": "x"},
                ],
                tokenize=False,
                add_generation_prompt=True,
            )
        except Exception as exc:
            raise ValueError(
                "the tokenizer's chat template refuses a system prompt "
                f"({str(exc).splitlines()[0]}): set benchmark.template.system_prompt='' "
                "(open-unlearning's config for such a model has none)"
            ) from None
    return OpenUnlearningFormat(chosen)
