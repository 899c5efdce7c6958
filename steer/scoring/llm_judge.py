"""An LLM judge: a local instruct model reads each (source, rewrite, styles) and answers three
questions — target style? meaning kept? fluent? — scored by its own probabilities of the answers.

Why: the rule-based `usable` (a classifier, a similarity bar and degeneracy rules) keeps
disagreeing with reading; a model that reads the pair knows that "You're welcome, buddy" does not
say "I am writing to express my gratitude". Evaluation only: nothing that selects (rerank, tuning)
may use it, and a judge that is the model that decoded the rewrites is refused unless asked for
(`check_not_decoder`).

How: the prompt (`steer/data/judge.toml`, versioned) is laid out as [instructions][item][question]:
the instructions are the same for every item and are prefilled once per call; each item (source,
rewrite) is prefilled once per batch; its KV cache is tiled to the yes/no questions, whose last
position's logits give P(Yes) = p(Yes) / (p(Yes) + p(No)) over the answer words' first tokens.
The pieces are tokenised separately, so every item starts from the same instruction tokens.

Style is asked as a forced choice where the prompt has a `[style_choice]` table (judge-v2): "is
this text in a {a} style or a {b} style?" about the rewrite alone and about the source alone,
each in both orders of the two style names (a position bias cancels). A text's target-ness is the
log-odds of the target's name over the source's, averaged over the orders; the answer is
sigmoid(target-ness(rewrite) − target-ness(source) − margin): the rewrite must read clearly more
like the target than its source did, so a copy fails. Why: asked yes/no, the 1.5B said "yes" to
style for nearly every rewrite (AUC 0.52 against the read's style); the choice ranks it at 0.79
(docs/findings.md, 2026-12-06). Its question is prefilled once per ordered pair of style names.
Answers are cached per (model fingerprint, prompt version, question, styles, source, rewrite) in a
JSONL file under `$STEER_CACHE/judge/`: re-judging a table costs no forward pass.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from steer.config import SteerError
from steer.files import atomic_path
from steer.model.loading import LoadedModel
from steer.model.padding import pad_rows
from steer.model.prefix import expand_cache, extend_cache, prefix_cache

logger = logging.getLogger(__name__)

JUDGE_RESOURCE = "data/judge.toml"
QUESTIONS = ("style", "meaning", "fluency")
DEFAULT_JUDGE_MODEL = "qwen2.5-coder-1.5b"
YES, NO = ("Yes", " Yes", "yes", " yes"), ("No", " No", "no", " no")
_MARK = "\x00"  # stands for the item and question inside the chat template while it is split


@dataclass(frozen=True)
class JudgeItem:
    """One rewrite to judge."""

    source: str
    rewrite: str
    source_style: str
    target_style: str


@dataclass(frozen=True)
class Verdict:
    """Each question's answer in [0, 1] (P(Yes), or the style choice's sigmoid); a question passes at
    ≥ 0.5, and `usable` needs all three."""

    style: float
    meaning: float
    fluency: float

    @property
    def usable(self) -> bool:
        return min(self.style, self.meaning, self.fluency) >= 0.5


def load_judge_prompt() -> dict[str, Any]:
    """The packaged judge prompt: version, instructions, item, the yes/no questions and the style
    choice (checked by `LLMJudge`)."""
    from importlib.resources import files

    resource = files("steer").joinpath(JUDGE_RESOURCE)
    if not resource.is_file():
        raise SteerError(f"the packaged judge prompt ({JUDGE_RESOURCE}) is missing; reinstall steer")
    return tomllib.loads(resource.read_text(encoding="utf-8"))


def check_not_decoder(judge_fingerprint: str, records: Sequence[dict[str, Any]], *, allow_same_model: bool) -> None:
    """What decodes never grades itself: refuse a judge whose fingerprint is a decoding model's."""
    decoders = {str(r.get("fingerprint")) for r in records if r.get("fingerprint")}
    if judge_fingerprint in decoders and not allow_same_model:
        model = next(str(r.get("model_id")) for r in records if str(r.get("fingerprint")) == judge_fingerprint)
        raise SteerError(
            f"the LLM judge is the model that decoded these rewrites ({model}), so it would grade its own outputs; "
            "choose another with --judge llm:MODEL, or pass --allow-same-model (the results then say so)"
        )


def _check_prompt(data: dict[str, Any]) -> dict[str, Any]:
    """The prompt's questions: style as a yes/no question or as `[style_choice]`, never both."""
    asked = sorted([*data.get("questions", {}), *(["style"] if "style_choice" in data else [])])
    if asked != sorted(QUESTIONS):
        raise SteerError(
            f"{JUDGE_RESOURCE} must ask exactly the questions {', '.join(QUESTIONS)} (style in [questions] or as "
            f"[style_choice]); it asks {', '.join(asked) or 'none'}"
        )
    choice = data.get("style_choice")
    if choice is not None:
        question, margin = str(choice.get("question", "")), choice.get("margin")
        if "{a}" not in question or "{b}" not in question:
            raise SteerError(
                f"the judge prompt's [style_choice] question {question!r} must name both styles as {{a}} and {{b}}"
            )
        if isinstance(margin, bool) or not isinstance(margin, int | float) or not math.isfinite(margin):
            raise SteerError(f"the judge prompt's [style_choice] margin {margin!r} must be a number (nats, e.g. 9.4)")
    return data


class LLMJudge:
    """The three questions asked of one loaded instruct model, batched and cached."""

    def __init__(self, lm: LoadedModel, *, cache_dir: Path | None = None, batch_size: int = 8) -> None:
        if lm.tokenizer is None:
            raise SteerError(f"{lm.model_id} has no tokenizer; the LLM judge needs one")
        self.lm, self.batch_size = lm, max(1, batch_size)
        self.prompt = _check_prompt(load_judge_prompt())
        self.version = str(self.prompt["version"])
        self.yes_no = tuple(q for q in QUESTIONS if q in self.prompt["questions"])  # asked as yes/no
        self.choice: dict[str, Any] | None = self.prompt.get("style_choice")
        # the style answer depends on the margin too: a new margin is a new cached answer
        self._style_key = "style" if self.choice is None else f"style-choice-{float(self.choice['margin'])!r}"
        self.name = f"llm:{lm.model_id}"
        self.forward_passes = 0  # model calls made (a fully cached call makes none)
        self._yes, self._no = self._first_tokens(YES), self._first_tokens(NO)
        if self._yes & self._no or not self._yes or not self._no:
            raise SteerError(f"{lm.model_id}'s tokenizer cannot tell 'Yes' from 'No'; choose another judge model")
        self.head, self.tail = self._template_pieces()
        # a lighter weight format (`--dtype fp16-linear`) answers within its rounding: cached apart
        name = f"{lm.fingerprint}-{lm.weights}" if getattr(lm, "weights", None) else lm.fingerprint
        self.cache_path = None if cache_dir is None else cache_dir / f"{name}-{self.version}.jsonl"
        self._answers: dict[str, float] = self._read_cache()
        self._prefix: Any = None
        self._choice_prefixes: dict[tuple[str, str], Any] = {}  # per ordered pair of style names

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
        """The answer tokens of a choice between style names `a` and `b` (as written, capitalised,
        after a space): each name's own first tokens, those the two share left out (they tell neither)."""

        def spellings(name: str) -> tuple[str, ...]:
            return (name, name.capitalize(), " " + name, " " + name.capitalize())

        ids_a, ids_b = self._first_tokens(spellings(a), whole=False), self._first_tokens(spellings(b), whole=False)
        only_a, only_b = sorted(ids_a - ids_b), sorted(ids_b - ids_a)
        if not only_a or not only_b:
            raise SteerError(
                f"{self.lm.model_id}'s tokenizer cannot choose between the style names {a!r} and {b!r}: each needs a "
                "first token of its own (a name it does not know has none); choose another judge model with "
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
    def _key(question: str, item: JudgeItem) -> str:
        blob = json.dumps([question, item.source_style, item.target_style, item.source, item.rewrite])
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def _read_cache(self) -> dict[str, float]:
        if self.cache_path is None or not self.cache_path.is_file():
            return {}
        answers = {}
        for line in self.cache_path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
                answers[str(entry["key"])] = float(entry["p_yes"])
            except (ValueError, KeyError, TypeError):
                logger.warning("ignoring a damaged line of the judge cache %s", self.cache_path)
        return answers

    def _write_cache(self) -> None:
        if self.cache_path is None:
            return
        with atomic_path(self.cache_path) as tmp:
            Path(tmp).write_text(
                "".join(json.dumps({"key": k, "p_yes": v}) + "\n" for k, v in self._answers.items()), encoding="utf-8"
            )

    def verdicts(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        """A `Verdict` per item, from the cache where every answer is there, else from the model."""
        from tqdm.auto import tqdm

        names = {q: self._style_key if q == "style" else q for q in QUESTIONS}  # each answer's cache name
        todo = [
            i for i, item in enumerate(items) if any(self._key(names[q], item) not in self._answers for q in QUESTIONS)
        ]
        if self.choice is not None and todo:
            waiting = [items[i] for i in todo]
            for item, p_style in zip(waiting, self._style_choices(waiting), strict=True):
                self._answers[self._key(names["style"], item)] = p_style
        starts = range(0, len(todo), self.batch_size)
        for start in tqdm(starts, desc="LLM judge", unit="batch", disable=None if len(starts) > 1 else True):
            batch = [items[i] for i in todo[start : start + self.batch_size]]
            for item, answers in zip(batch, self._judge_batch(batch), strict=True):
                for question, p_yes in zip(self.yes_no, answers, strict=True):
                    self._answers[self._key(names[question], item)] = p_yes
        if todo:
            self._write_cache()
        return [Verdict(*(self._answers[self._key(names[q], item)] for q in QUESTIONS)) for item in items]

    def _style_choices(self, items: Sequence[JudgeItem]) -> list[float]:
        """The style answer of each item by forced choice: sigmoid(target-ness(rewrite) −
        target-ness(source) − margin)."""
        assert self.choice is not None
        pairs = [(i.rewrite, i.target_style, i.source_style) for i in items]
        pairs += [(i.source, i.target_style, i.source_style) for i in items]
        ness = torch.tensor(self.target_ness(pairs), dtype=torch.float64)
        shift = ness[: len(items)] - ness[len(items) :]
        return torch.sigmoid(shift - float(self.choice["margin"])).tolist()  # NaN stays NaN: it fails

    def target_ness(self, pairs: Sequence[tuple[str, str, str]]) -> list[float]:
        """How much each (text, target, other) reads as `target` rather than `other`: the log-odds
        of the target's name over the other's, asked "a or b" in both orders and averaged (a
        preference for the first- or last-named cancels). Each (text, order) is computed once."""
        from tqdm.auto import tqdm

        log_odds: dict[tuple[str, str, str], float] = {}  # (text, a, b) → log-odds of a over b, asked "a or b"
        for text, target, other in pairs:
            for a, b in ((target, other), (other, target)):
                log_odds.setdefault((text, a, b), math.nan)
        batches = []  # (a, b, texts): each ordered pair's texts, shortest first, in batches
        for a, b in dict.fromkeys((a, b) for _, a, b in log_odds):
            texts = sorted({t for t, x, y in log_odds if (x, y) == (a, b)}, key=lambda t: (len(t), t))
            batches += [(a, b, texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        shown = None if len(batches) > 1 else True
        for a, b, chunk in tqdm(batches, desc="LLM judge: style", unit="batch", disable=shown):
            for text, value in zip(chunk, self._choice_batch(chunk, a, b), strict=True):
                log_odds[(text, a, b)] = value
        return [(log_odds[(x, t, o)] - log_odds[(x, o, t)]) / 2 for x, t, o in pairs]

    def _choice_batch(self, texts: Sequence[str], a: str, b: str) -> list[float]:
        """log p(a's name) − log p(b's name) after "… a or b? … Text: {text}", the question's
        chat-rendered head prefilled once per ordered pair and expanded to the batch."""
        assert self.choice is not None
        model, pad = self.lm.model, self.lm.tokenizer.pad_token_id or 0
        ids_a, ids_b = self._choice_ids(a, b)
        head, tail = self._template_pieces(str(self.choice["question"]).format(a=a, b=b))
        with torch.no_grad():
            if (a, b) not in self._choice_prefixes:
                self._choice_prefixes[(a, b)] = prefix_cache(model, self._tokens(head))
                self.forward_passes += 1
            prefix = self._choice_prefixes[(a, b)]
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


def agreement(predicted: Sequence[bool], labels: Sequence[bool]) -> dict[str, float]:
    """Accuracy and Cohen's κ of two yes/no labellings of the same items (κ is NaN when both are
    constant and equal, where chance agreement is 1)."""
    if len(predicted) != len(labels) or not labels:
        raise ValueError(f"{len(predicted)} predictions for {len(labels)} labels; they must be the same, non-zero")
    n = len(labels)
    observed = sum(p == t for p, t in zip(predicted, labels, strict=True)) / n
    p_yes, t_yes = sum(predicted) / n, sum(labels) / n
    chance = p_yes * t_yes + (1 - p_yes) * (1 - t_yes)
    kappa = math.nan if chance == 1 else (observed - chance) / (1 - chance)
    return {"n": n, "accuracy": observed, "kappa": kappa}
