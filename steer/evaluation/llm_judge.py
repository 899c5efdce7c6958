"""An LLM judge: a local instruct model grades each rewrite's style, meaning and fluency.

It reads each (source, rewrite, styles) and answers three questions — target style? meaning kept?
fluent? — scored by its own probabilities of the answers.

Why: the rule-based `usable` (a classifier, a similarity bar and degeneracy rules) keeps
disagreeing with reading; a model that reads the pair knows that "You're welcome, buddy" does not
say "I am writing to express my gratitude". Evaluation only: nothing that selects (rerank, tuning)
may use it, and a judge that is the model that decoded the rewrites is refused unless asked for
(`check_not_decoder`).

How: the prompt (`steer/data/judge.toml`, versioned, read and checked by
`steer.evaluation.judge_prompt`) asks its yes/no questions (judge-v3: fluency) laid out as
[instructions][item][question]: the instructions are the same for every item and are prefilled once
per call; each item (source, rewrite) is prefilled once per batch; its KV cache is tiled to the
yes/no questions, whose last position's logits give P(Yes) = p(Yes) / (p(Yes) + p(No)) over the
answer words' first tokens. The pieces are tokenised separately, so every item starts from the same
instruction tokens.

A question may instead be a forced choice between two words, asked in both orders of the words (a
preference for the first- or last-named cancels); a choice's question is prefilled once per
rendering and expanded to the batch. Style (`[style_choice]`): "is this text in a {a} style or a
{b} style?" about the rewrite alone and about the source alone; a text's target-ness is the
log-odds of the target's name over the source's, and the answer sigmoid(target-ness(rewrite) −
target-ness(source) − margin): the rewrite must read more like the target than its source did, so a
copy fails. Meaning (`[meaning_choice]`): "apart from the change of style, are the two texts about
the same thing, with the same details? same or different" about the source and the rewrite side by
side, sigmoid(log-odds of "same" − margin). Why choices: asked yes/no, the judge said "yes" to nearly
every rewrite, so its answers did not separate rewrites that read well from ones that did not; as
choices they did. A margin may differ per style pair (`[[pair_margins]]`): a sentiment rewrite moves
much further toward its target than a formality one, and the judge calls every sentiment flip
"different", so judge-v3 sets sentiment a larger style margin and asks it no meaning (docs/decisions.md).
Answers are cached per (model fingerprint, prompt version, question and a digest of its text,
styles, source, rewrite) in a JSONL file under `$STEER_CACHE/judge/`, a choice's score before its
margin: re-judging a table, or with a new margin, costs no forward pass. `prefer` compares two
rewrites of one source (the prompt's optional `[pairwise_choice]`; `steer.evaluation.pairwise`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from steer.errors import SteerError
from steer.evaluation.agreement import agreement  # noqa: F401  (re-exported: the judge's agreement with reads)
from steer.evaluation.judge_prompt import (
    CHOICE_TABLES,
    PAIRWISE_TABLE,
    QUESTIONS,
    check_judge_prompt,
    load_judge_prompt,
    margins_for,
    pair_margins,
    pairwise_table,
)
from steer.evaluation.pairwise import check_pairs, pairwise_asks, pairwise_log_odds
from steer.model.loading import LoadedModel
from steer.model.padding import pad_rows
from steer.model.prefix import expand_cache, extend_cache, prefix_cache

logger = logging.getLogger(__name__)

DEFAULT_JUDGE_MODEL = "qwen2.5-coder-1.5b"
YES, NO = ("Yes", " Yes", "yes", " yes"), ("No", " No", "no", " no")
_MARK = "\x00"  # stands for the item and question inside the chat template while it is split


MAX_JUDGED_CHARS = 2000  # a source or rewrite longer than this is judged on its start (and counted as cut)


@dataclass(frozen=True)
class JudgeItem:
    """One rewrite to judge; a source or rewrite over `MAX_JUDGED_CHARS` is cut to it (`cut` set),
    so one runaway rewrite cannot ask for gigabytes of attention."""

    source: str
    rewrite: str
    source_style: str
    target_style: str
    cut: bool = False

    def __post_init__(self) -> None:
        if len(self.source) > MAX_JUDGED_CHARS or len(self.rewrite) > MAX_JUDGED_CHARS:
            object.__setattr__(self, "source", self.source[:MAX_JUDGED_CHARS])
            object.__setattr__(self, "rewrite", self.rewrite[:MAX_JUDGED_CHARS])
            object.__setattr__(self, "cut", True)


@dataclass(frozen=True)
class Verdict:
    """Each question's answer in [0, 1] (P(Yes), or a choice's sigmoid); a question passes at ≥ 0.5,
    and `usable` needs all three (a NaN answer fails)."""

    style: float
    meaning: float
    fluency: float

    @property
    def usable(self) -> bool:
        return all(answer >= 0.5 for answer in (self.style, self.meaning, self.fluency))


def check_not_decoder(judge_fingerprint: str, records: Sequence[dict[str, Any]], *, allow_same_model: bool) -> None:
    """What decodes never grades itself: refuse a judge whose fingerprint is a decoding model's."""
    decoders = {str(r.get("fingerprint")) for r in records if r.get("fingerprint")}
    if judge_fingerprint in decoders and not allow_same_model:
        model = next(str(r.get("model_id")) for r in records if str(r.get("fingerprint")) == judge_fingerprint)
        raise SteerError(
            f"the LLM judge is the model that decoded these rewrites ({model}), so it would grade its own outputs; "
            "choose another with --judge llm:MODEL, or pass --allow-same-model (the results then say so)"
        )


def _sigmoid(x: float) -> float:
    """1 / (1 + e^−x) without overflow; NaN stays NaN (and so fails)."""
    if x != x:
        return x
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


class LLMJudge:
    """The three questions asked of one loaded instruct model, batched and cached."""

    def __init__(
        self,
        lm: LoadedModel,
        *,
        cache_dir: Path | None = None,
        batch_size: int = 8,
        prompt: dict[str, Any] | None = None,
    ) -> None:
        """`prompt`: a trial prompt's TOML as a dict (research/scripts/judge_prompt_trial.py); else the packaged one."""
        if lm.tokenizer is None:
            raise SteerError(f"{lm.model_id} has no tokenizer; the LLM judge needs one")
        self.lm, self.batch_size = lm, max(1, batch_size)
        self.prompt = check_judge_prompt(load_judge_prompt() if prompt is None else prompt)
        self.version = str(self.prompt["version"])
        self.yes_no = tuple(q for q in QUESTIONS if q in self.prompt.get("questions", {}))  # asked as yes/no
        # the questions asked as a forced choice, each with its table (question, margin, ...)
        self.choices: dict[str, dict[str, Any]] = {
            q: self.prompt[table] for q, table in CHOICE_TABLES.items() if table in self.prompt
        }
        self.choice: dict[str, Any] | None = self.choices.get("style")
        self.pairwise: dict[str, Any] | None = self.prompt.get(PAIRWISE_TABLE)  # two rewrites compared (`prefer`)
        self.name = f"llm:{lm.model_id}"
        self.forward_passes = 0  # model calls made (a fully cached call makes none)
        self._yes, self._no = self._first_tokens(YES), self._first_tokens(NO)
        if self._yes & self._no or not self._yes or not self._no:
            raise SteerError(f"{lm.model_id}'s tokenizer cannot tell 'Yes' from 'No'; choose another judge model")
        self.head, self.tail = self._template_pieces()
        # a lighter weight format (`--dtype fp16-linear`) answers within its rounding: cached apart
        name = f"{lm.fingerprint}-{lm.weights}" if getattr(lm, "weights", None) else lm.fingerprint
        # "-scores": each answer before its margin (an older cache held answers after it, keyed otherwise)
        self.cache_path = None if cache_dir is None else cache_dir / f"{name}-{self.version}-scores.jsonl"
        self._answers: dict[str, float] = self._read_cache()
        self._prefix: Any = None
        self._choice_prefixes: dict[str, Any] = {}  # per rendered choice question (its two answers in order)

    def _first_tokens(self, spellings: Sequence[str], *, whole: bool = True) -> set[int]:
        """The first token of each spelling of an answer, kept where it reads back as the answer
        itself (`whole`: a yes/no word) or as its start (a style name, whose first token may be a
        piece: "Inform"); an unknown-word token or a bare space is no answer."""
        tok, ids = self.lm.tokenizer, set()
        for spelling in spellings:
            encoded = tok.encode(spelling, add_special_tokens=False)
            piece, word = (tok.decode(encoded[:1]).strip().lower() if encoded else ""), spelling.strip().lower()
            if piece and (piece == word if whole else word.startswith(piece)):
                ids.add(encoded[0])
        return ids

    def _choice_ids(self, a: str, b: str) -> tuple[list[int], list[int]]:
        """The answer tokens of a choice between the words `a` and `b` (as written, capitalised,
        after a space): each word's own first tokens, those the two share left out (they tell neither)."""

        def spellings(name: str) -> tuple[str, ...]:
            return (name, name.capitalize(), " " + name, " " + name.capitalize())

        ids_a, ids_b = self._first_tokens(spellings(a), whole=False), self._first_tokens(spellings(b), whole=False)
        only_a, only_b = sorted(ids_a - ids_b), sorted(ids_b - ids_a)
        if not only_a or not only_b:
            raise SteerError(
                f"{self.lm.model_id}'s tokenizer cannot choose between the answers {a!r} and {b!r}: each needs a "
                "first token of its own (a word it does not know has none); choose another judge model with "
                "--judge llm:MODEL"
            )
        return only_a, only_b

    def _template_pieces(self, message: str | None = None) -> tuple[str, str]:
        """The chat-rendered text before `_MARK` (the end of the instructions unless `message` is
        given) and after it."""
        tok, message = self.lm.tokenizer, (self.prompt["instructions"] if message is None else message) + _MARK
        if getattr(tok, "chat_template", None):
            rendered = tok.apply_chat_template(
                [{"role": "user", "content": message}], tokenize=False, add_generation_prompt=True
            )
        else:
            rendered = message + "\n\nAnswer:"
        head, tail = rendered.split(_MARK)
        return head, tail

    def _tokens(self, text: str) -> list[int]:
        return list(self.lm.tokenizer.encode(text, add_special_tokens=False))

    @staticmethod
    def _key(question: str, item: JudgeItem, *other: str) -> str:
        """An answer's key in the cache; `other`: a pair's other rewrite."""
        blob = json.dumps([question, item.source_style, item.target_style, item.source, item.rewrite, *other])
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def _name(self, question: str) -> str:
        """A question's name in the cache, with a digest of the text that asks it (an edited
        prompt never reuses an old answer); a choice stores its score before the margin, so a new
        margin reuses it."""
        choice = self.pairwise if question == "pairwise" else self.choices.get(question)
        if choice is not None:
            asked: Any = {k: v for k, v in choice.items() if k != "margin"}
        else:
            asked = [self.prompt["instructions"], self.prompt["item"], self.prompt["questions"][question]]
        digest = hashlib.sha256(json.dumps(asked, sort_keys=True).encode("utf-8")).hexdigest()[:16]
        return f"{question}-{'choice-' if choice is not None else ''}{digest}"

    def _read_cache(self) -> dict[str, float]:
        if self.cache_path is None or not self.cache_path.is_file():
            return {}
        answers = {}
        for line in self.cache_path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
                answers[str(entry["key"])] = float(entry["value"])
            except (ValueError, KeyError, TypeError):
                logger.warning("ignoring a damaged line of the judge cache %s", self.cache_path)
        return answers

    def _write_cache(self, keys: Sequence[str] = ()) -> None:
        """Append the answers of `keys` to the cache file as they come (one write per call, opened
        for appending: a Ctrl-C keeps what was judged, and processes judging at once never replace
        each other's answers; a later line for a key wins when read)."""
        if self.cache_path is None or not keys:
            return
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        lines = "".join(json.dumps({"key": k, "value": self._answers[k]}) + "\n" for k in keys)
        with self.cache_path.open("a", encoding="utf-8") as fh:
            fh.write(lines)

    def scores(self, items: Sequence[JudgeItem], questions: Sequence[str] = QUESTIONS) -> list[dict[str, float]]:
        """Each item's raw answers, from the cache where there, else from the model: P(Yes) of a
        yes/no question; a choice's log-odds (style: target-ness of the rewrite minus the
        source's; meaning: "same" over "different") before its margin."""
        from tqdm.auto import tqdm

        unique, names = list(dict.fromkeys(items)), {q: self._name(q) for q in QUESTIONS}  # names: once per call
        cut = sum(it.cut for it in unique)
        if cut:
            logger.warning("%d texts longer than %d characters were judged on their start", cut, MAX_JUDGED_CHARS)
        missing = {q: [it for it in unique if self._key(names[q], it) not in self._answers] for q in questions}
        computed = {"style": self.style_shifts, "meaning": self.meaning_log_odds}
        for question in self.choices:
            if missing.get(question):
                keys = [self._key(names[question], item) for item in missing[question]]
                for key, value in zip(keys, computed[question](missing[question]), strict=True):
                    self._answers[key] = value
                self._write_cache(keys)
        todo = list(dict.fromkeys(it for q in self.yes_no for it in missing.get(q, [])))
        starts = range(0, len(todo), self.batch_size)
        for start in tqdm(starts, desc="LLM judge", unit="batch", disable=None if len(starts) > 1 else True):
            batch, done = todo[start : start + self.batch_size], []
            for item, answers in zip(batch, self._judge_batch(batch), strict=True):
                for question, p_yes in zip(self.yes_no, answers, strict=True):
                    done.append(self._key(names[question], item))
                    self._answers[done[-1]] = p_yes
            self._write_cache(done)  # as each batch is answered
        return [{q: self._answers[self._key(names[q], it)] for q in questions} for it in items]

    def verdicts(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        """A `Verdict` per item: P(Yes), or sigmoid(choice score − margin), the margin of the
        item's style pair where the prompt's `[[pair_margins]]` sets one."""
        margins = {q: float(c["margin"]) for q, c in self.choices.items()}
        pairs = pair_margins(self.prompt)

        def verdict(item: JudgeItem, s: dict[str, float]) -> Verdict:
            m = margins_for(margins, pairs, item.source_style, item.target_style)
            return Verdict(*(_sigmoid(s[q] - m[q]) if q in m else s[q] for q in QUESTIONS))

        return [verdict(item, s) for item, s in zip(items, self.scores(items), strict=True)]

    def style_shifts(self, items: Sequence[JudgeItem]) -> list[float]:
        """How much more target-like each rewrite reads than its source: target-ness(rewrite) −
        target-ness(source) (a copy scores 0)."""
        odds = self._choices("style", self.choice_asks("style", items))
        return [((odds[4 * k] - odds[4 * k + 1]) - (odds[4 * k + 2] - odds[4 * k + 3])) / 2 for k in range(len(items))]

    def target_ness(self, pairs: Sequence[tuple[str, str, str]]) -> list[float]:
        """How much each (text, target, other) reads as `target` rather than `other`: the log-odds
        of the target's name over the other's, asked "a or b" in both orders and averaged (a
        preference for the first- or last-named cancels). Each (text, order) is computed once."""
        odds = self._choices("style", [ask for x, t, o in pairs for ask in self._style_asks(x, t, o)])
        return [(odds[2 * k] - odds[2 * k + 1]) / 2 for k in range(len(pairs))]

    def meaning_log_odds(self, items: Sequence[JudgeItem]) -> list[float]:
        """Whether each rewrite says what its source says, its change of style apart: the log-odds
        of "same" over "different" asked of the two texts side by side, in both orders of the two
        answers, averaged."""
        odds = self._choices("meaning", self.choice_asks("meaning", items))
        return [(odds[2 * k] - odds[2 * k + 1]) / 2 for k in range(len(items))]

    def prefer(self, pairs: Sequence[tuple[JudgeItem, JudgeItem]]) -> list[float]:
        """Per pair (A, B) of rewrites of one source, the log-odds that A is the better rewrite (> 0:
        A preferred): the prompt's `[pairwise_choice]` asked with A shown first and with B first, each
        in both orders of the answer words, averaged (`steer.evaluation.pairwise`): swapping A and B
        negates it, identical rewrites give 0. Cached like the choices (a pair cached the other way
        round is read negated); a prompt without the table is one line."""
        pairs = list(pairs)
        table, name = pairwise_table(self.prompt), self._name("pairwise")
        check_pairs(pairs)
        keys = [(self._key(name, a, b.rewrite), self._key(name, b, a.rewrite)) for a, b in pairs]
        todo = list(
            dict.fromkeys(p for p, (ab, ba) in zip(pairs, keys, strict=True) if {ab, ba}.isdisjoint(self._answers))
        )
        if todo:
            odds = self._choices("pairwise", pairwise_asks(table, todo))
            for (a, b), value in zip(todo, pairwise_log_odds(odds), strict=True):
                self._answers[self._key(name, a, b.rewrite)] = value
            self._write_cache([self._key(name, a, b.rewrite) for a, b in todo])
        return [self._answers[ab] if ab in self._answers else -self._answers[ba] for ab, ba in keys]

    def choice_asks(self, question: str, items: Sequence[JudgeItem]) -> list[tuple[str, str, str, str]]:
        """The (rendered question, text, a, b) asks a choice question needs, item by item: for style
        the rewrite's two orders of the names (target first) then the source's; for meaning the
        pair's two orders of the answers ("same" first)."""
        if question == "style":
            return [
                ask
                for i in items
                for text in (i.rewrite, i.source)
                for ask in self._style_asks(text, i.target_style, i.source_style)
            ]
        choice = self.choices["meaning"]
        template, pair = str(choice["question"]), str(choice["text"])
        same, different = choice["answers"]
        return [
            (
                template.format(a=a, b=b, source=i.source_style, target=i.target_style),
                pair.format(source_text=i.source, rewrite=i.rewrite),
                a,
                b,
            )
            for i in items
            for a, b in ((same, different), (different, same))
        ]

    def _style_asks(self, text: str, target: str, other: str) -> list[tuple[str, str, str, str]]:
        """The style question about `text`, with the target named first, then last."""
        template = str(self.choices["style"]["question"])
        return [(template.format(a=a, b=b), text, a, b) for a, b in ((target, other), (other, target))]

    def _choices(self, question: str, asks: Sequence[tuple[str, str, str, str]]) -> list[float]:
        """log p(a) − log p(b) of each (rendered question, text, a, b): the question asks "a or b"
        about the text. Each distinct ask is computed once; the texts of one question are batched,
        shortest first."""
        from tqdm.auto import tqdm

        log_odds: dict[tuple[str, str, str, str], float] = dict.fromkeys(asks, math.nan)
        grouped: dict[tuple[str, str, str], list[str]] = {}  # (rendered question, a, b) → its distinct texts
        for q, text, a, b in log_odds:
            grouped.setdefault((q, a, b), []).append(text)
        batches = []  # (rendered question, a, b, texts)
        for (q, a, b), texts in grouped.items():
            texts.sort(key=lambda t: (len(t), t))
            batches += [(q, a, b, texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        shown = None if len(batches) > 1 else True
        for q, a, b, chunk in tqdm(batches, desc=f"LLM judge: {question}", unit="batch", disable=shown):
            for text, value in zip(chunk, self._choice_batch(q, chunk, a, b), strict=True):
                log_odds[(q, text, a, b)] = value
        return [log_odds[ask] for ask in asks]

    def _choice_batch(self, question: str, texts: Sequence[str], a: str, b: str) -> list[float]:
        """log p(a) − log p(b) after "{question}{text}", the question's chat-rendered head
        prefilled once per question and expanded to the batch."""
        model, pad = self.lm.model, self.lm.tokenizer.pad_token_id or 0
        ids_a, ids_b = self._choice_ids(a, b)
        head, tail = self._template_pieces(question)
        with torch.no_grad():
            if head not in self._choice_prefixes:
                self._choice_prefixes[head] = prefix_cache(model, self._tokens(head))
                self.forward_passes += 1
            prefix = self._choice_prefixes[head]
            ids, mask = pad_rows([self._tokens(text + tail) for text in texts], pad, side="left")
            mask = torch.cat([torch.ones(len(texts), prefix.get_seq_length(), dtype=torch.long), mask], dim=1)
            logits, _ = extend_cache(model, ids, mask, expand_cache(model, prefix, len(texts)))
            self.forward_passes += 1
        logp = torch.log_softmax(logits.float(), dim=-1)
        return (torch.logsumexp(logp[:, ids_a], dim=-1) - torch.logsumexp(logp[:, ids_b], dim=-1)).tolist()

    def _judge_batch(self, items: Sequence[JudgeItem]) -> list[list[float]]:
        """P(Yes) of each yes/no question for each item: the instructions' cache expanded to the
        batch, each item prefilled once, its cache tiled to the questions."""
        model, pad = self.lm.model, self.lm.tokenizer.pad_token_id or 0
        with torch.no_grad():
            if self._prefix is None:
                self._prefix = prefix_cache(model, self._tokens(self.head))
                self.forward_passes += 1
            width = self._prefix.get_seq_length()
            item_rows = [
                self._tokens(
                    self.prompt["item"].format(
                        source=it.source_style, target=it.target_style, source_text=it.source, rewrite=it.rewrite
                    )
                )
                for it in items
            ]
            ids, mask = pad_rows(item_rows, pad, side="left")
            mask = torch.cat([torch.ones(len(items), width, dtype=torch.long), mask], dim=1)
            _, cache = extend_cache(model, ids, mask, expand_cache(model, self._prefix, len(items)))
            questions = self.prompt["questions"]
            question_rows = [
                self._tokens(
                    "\n\nQuestion: " + questions[q].format(source=it.source_style, target=it.target_style) + self.tail
                )
                for it in items
                for q in self.yes_no
            ]
            tiled = torch.arange(len(items)).repeat_interleave(len(self.yes_no))
            cache.reorder_cache(tiled.to(next(model.parameters()).device))
            q_ids, q_mask = pad_rows(question_rows, pad, side="left")
            logits, _ = extend_cache(model, q_ids, torch.cat([mask[tiled], q_mask], dim=1), cache)
            self.forward_passes += 2
        logp = torch.log_softmax(logits.float(), dim=-1)
        yes = torch.logsumexp(logp[:, sorted(self._yes)], dim=-1)
        no = torch.logsumexp(logp[:, sorted(self._no)], dim=-1)
        p_yes = torch.sigmoid(yes - no).tolist()
        n = len(self.yes_no)
        return [p_yes[i * n : (i + 1) * n] for i in range(len(items))]


def judge_rates(verdicts: Sequence[Verdict]) -> dict[str, float]:
    """The share of rewrites passing each question, and `llm_usable` (all three)."""
    n = max(1, len(verdicts))
    rates = {f"llm_{q}": sum(getattr(v, q) >= 0.5 for v in verdicts) / n for q in QUESTIONS}
    rates["llm_usable"] = sum(v.usable for v in verdicts) / n
    return rates
