"""steer's logits processors: every rule that acts on one decoding step's scores, as plain
`transformers` `LogitsProcessor`s, so a user's own `model.generate()` can use them too (with
`steer.apply`, or on an unedited model). `steer.generation.decoding` assembles them, with the
stopping criteria of `steer.generation.stopping`, into one step.

Logits processors (on raw scores, in this order: the bans, keep-words, then the plausibility
filters of guidance or contrast): `NoThirdCopyLogitsProcessor`, `NoRepeatGeneratedNGramLogitsProcessor`,
`NoInstructionEchoLogitsProcessor`, `SourceWordBonusLogitsProcessor`, `MarkerPenaltyLogitsProcessor`,
`GuidanceLogitsProcessor`, `InstructionContrastLogitsProcessor`, `LayerContrastLogitsProcessor`
(sampling: `steer.generation.sampling`).

`decode` is `tokenizer.decode`; `prompt_length` (`n` in the examples) the prompt's length in tokens,
`input_ids.shape[1]`: only generated tokens count, so a rewrite may copy its source freely. Pass them
to `model.generate(..., logits_processor=LogitsProcessorList([...]), stopping_criteria=...)` and read
the answer with `clean_output(tokenizer.decode(out[0, n:], skip_special_tokens=True))`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

import torch
from torch import Tensor
from transformers import LogitsProcessor

from steer.errors import SteerError
from steer.generation.contrast import contrast_scores, guidance_parts, relative_top_mask
from steer.generation.keeping import Endings, add_once, content_tokens, marker_tokens  # noqa: F401  (re-exported)
from steer.generation.replies import clean_output, echo_ngrams, first_word_tokens  # noqa: F401  (re-exported)
from steer.scoring.loops import third_copy_tokens
from steer.settings import check_alpha_beta


class NoThirdCopyLogitsProcessor(LogitsProcessor):
    """Forbid a reply from starting the third consecutive copy of anything it just said twice.

    Only generated tokens count (from `prompt_length` on), so a rewrite may copy the source text
    freely. Banning happens on the raw scores, before guidance or contrast, so their plausibility
    filters choose among the tokens that remain: a banned loop is replaced by the next thing the
    model finds plausible, never by an implausible token. Two copies stay allowed ("very very").

    Args:
        prompt_length: the prompt's tokens; only later ones count. decode: `tokenizer.decode`, so
        copies compare by their text ("Ha ha"); None compares ids. max_unit: the longest unit checked.

    Example: `NoThirdCopyLogitsProcessor(inputs["input_ids"].shape[1], tokenizer.decode)`.
    """

    def __init__(
        self, prompt_length: int, decode: Callable[[list[int]], str] | None = None, max_unit: int = 16
    ) -> None:
        self.prompt_length, self.max_unit, self.decode = prompt_length, max_unit, decode
        self._keys: dict[int, str] = {}
        self.banned = 0  # how many (row, token) bans fired: a diagnostic for tests and benchmarks

    def _key(self, token: int) -> str:
        if token not in self._keys:
            assert self.decode is not None
            # tokens that decode to nothing visible (whitespace, unused ids) compare by id
            self._keys[token] = self.decode([token]).strip().lower() or f"#{token}"
        return self._keys[token]

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        key = self._key if self.decode is not None else None
        rows, tokens = [], []
        for row, generated in enumerate(input_ids[:, self.prompt_length :].tolist()):
            for token in third_copy_tokens(generated, self.max_unit, key):
                rows.append(row)
                tokens.append(token)
        if not rows:
            return scores
        self.banned += len(rows)
        out = scores.clone()
        out[rows, tokens] = float("-inf")
        return out


class NoRepeatGeneratedNGramLogitsProcessor(LogitsProcessor):
    """Forbid a token that would repeat an n-gram the reply already contains.

    Unlike transformers' `no_repeat_ngram_size`, only generated tokens count (positions from
    `prompt_length` on), so the rewrite may still copy phrases of the source text; what it may
    not do is loop ("I swear, I swear, I swear, …"), which steering tends to provoke.

    Args:
        size: the n-gram length (≥ 1). prompt_length: the prompt's tokens, which never count.

    Example: `NoRepeatGeneratedNGramLogitsProcessor(4, inputs["input_ids"].shape[1])`.
    """

    def __init__(self, size: int, prompt_length: int) -> None:
        if size < 1:
            raise SteerError(f"`no_repeat_ngram` must be ≥ 1 (or 0 for off), got {size}")
        self.size, self.prompt_length = size, prompt_length

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        generated = input_ids[:, self.prompt_length :].tolist()
        n = self.size
        banned_rows, banned_tokens = [], []
        for row, tokens in enumerate(generated):
            if len(tokens) < n:
                continue
            prefix = tuple(tokens[len(tokens) - n + 1 :]) if n > 1 else ()
            for i in range(len(tokens) - n + 1):
                if tuple(tokens[i : i + n - 1]) == prefix:
                    banned_rows.append(row)
                    banned_tokens.append(tokens[i + n - 1])
        if not banned_rows:
            return scores
        out = scores.clone()
        out[banned_rows, banned_tokens] = float("-inf")
        return out


class NoInstructionEchoLogitsProcessor(LogitsProcessor):
    """Keep the reply from echoing its instruction: it may not start with the instruction's first
    word, nor copy any run of `size` tokens of the instruction that its source does not contain.

    Only generated tokens count (the prompt, which holds the instruction, does not), per row, so a
    source that itself uses the instruction's words may be copied. Applied with the other bans,
    before guidance and contrast, so both copies of a guided row see the same ban.

    Args:
        prompt_length: the prompt's tokens. first, ngrams: per row, the banned first tokens and
        instruction n-grams (`first_word_tokens`, `echo_ngrams`). size: the n-gram length.

    Example: `NoInstructionEchoLogitsProcessor(n, [first_word_tokens(enc, i, s)], [echo_ngrams(enc, i, s, 3)])`.
    """

    def __init__(
        self,
        prompt_length: int,
        first: Sequence[set[int]],
        ngrams: Sequence[set[tuple[int, ...]]],
        size: int = 3,
    ) -> None:
        if size < 2:
            raise ValueError("an echo n-gram needs at least two tokens")
        self.prompt_length, self.first, self.size = prompt_length, first, size
        self.next_of: list[dict[tuple[int, ...], list[int]]] = []
        for grams in ngrams:
            table: dict[tuple[int, ...], list[int]] = {}
            for gram in grams:
                table.setdefault(gram[:-1], []).append(gram[-1])
            self.next_of.append(table)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        generated = input_ids.shape[1] - self.prompt_length
        rows, tokens = [], []
        for row in range(input_ids.shape[0]):
            banned: Collection[int]
            if generated == 0:
                banned = self.first[row]
            elif generated >= self.size - 1:
                context = tuple(input_ids[row, input_ids.shape[1] - self.size + 1 :].tolist())
                banned = self.next_of[row].get(context, ())
            else:
                continue
            for token in banned:
                rows.append(row)
                tokens.append(token)
        if not rows:
            return scores
        out = scores.clone()
        out[rows, tokens] = float("-inf")
        return out


class SourceWordBonusLogitsProcessor(LogitsProcessor):
    """Add `bonus[row]` to the scores of (1) the first token of each spelling of each of a row's
    source content words (`words[row]`: per word, its spellings' token ids) until the row has
    generated the first token of any spelling of that word, and (2) the next token of every
    spelling whose first j tokens (1 ≤ j < its length) the row's reply ends with. A token favoured
    for several reasons gets β once; rows with a bonus of 0 are left as they are.

    A word is retired as a whole (else it would be said again in another spelling); completion
    only finishes a word the reply has begun ("In" → "Ink", not "Including").

    Args:
        prompt_length: the prompt's tokens. words: per row, `content_tokens(encode, source, skip)`.
        bonus: per row, β (0 leaves the row alone).

    Example: `SourceWordBonusLogitsProcessor(n, [content_tokens(encode, source, frozenset())], [4.0])`.
    """

    def __init__(
        self, prompt_length: int, words: Sequence[Sequence[Sequence[Sequence[int]]]], bonus: Sequence[float]
    ) -> None:
        if len(words) != len(bonus):
            raise ValueError(f"{len(words)} word lists for {len(bonus)} bonuses")
        self.prompt_length = prompt_length
        self.bonus = torch.tensor([float(b) for b in bonus], dtype=torch.float64)
        # (1) one entry per (row, word, first token): the row, the word's index over all rows, the token
        firsts: dict[tuple[int, int, int], None] = {}
        # (2) one entry per (row, first j tokens of a spelling, its next token), 1 ≤ j < its length
        nexts: dict[tuple[int, tuple[int, ...], int], None] = {}
        word = 0
        for row, (row_words, beta) in enumerate(zip(words, bonus, strict=True)):
            if float(beta) == 0:
                continue
            for spellings in row_words:
                for spelling in spellings:
                    if not len(spelling):
                        continue
                    firsts[(row, word, int(spelling[0]))] = None
                    for j in range(1, len(spelling)):
                        prefix = tuple(int(t) for t in spelling[:j])
                        nexts[(row, prefix, int(spelling[j]))] = None
                word += 1
        self.words = word
        first = list(firsts)
        self.first = (
            torch.tensor([r for r, _, _ in first], dtype=torch.long),
            torch.tensor([w for _, w, _ in first], dtype=torch.long),
            torch.tensor([t for _, _, t in first], dtype=torch.long),
        )
        self.next = Endings(nexts)
        self._on: dict[torch.device, tuple[torch.Tensor, ...]] = {}

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if not len(self.first[0]):
            return scores
        if scores.device not in self._on:
            self._on[scores.device] = tuple(t.to(scores.device) for t in self.first)
        rows, word_of, firsts = self._on[scores.device]
        reply = input_ids[:, self.prompt_length :]
        # (1) first tokens of the words no spelling of which has begun in the reply
        begun = (reply[rows] == firsts[:, None]).any(1) if reply.shape[1] else torch.zeros_like(rows, dtype=torch.bool)
        said = torch.zeros(self.words, dtype=torch.long, device=scores.device).index_add(0, word_of, begun.long()) > 0
        # (2) the next token of each spelling the reply ends partway through
        ending_rows, ending_tokens = self.next(reply)
        return add_once(
            scores, [rows[~said[word_of]], *ending_rows], [firsts[~said[word_of]], *ending_tokens], self.bonus
        )


class MarkerPenaltyLogitsProcessor(LogitsProcessor):
    """Subtract `penalty[row]` from the last token of each spelling in `spellings[row]` (the
    source's own style markers, `marker_tokens`) whenever the row's reply ends with that
    spelling's other tokens — always, for a one-token spelling. A token is lowered once per step.

    Why: leaving a marker out of the keep-words bonus does not stop the model from copying it
    ("you are a fucking idiot" → "You're a fucking idiot, …"), and the markers are the words a
    rewrite has to change ("good" → "bad" for positive → negative). Never retired: a marker is
    as unwelcome the second time.

    Args:
        prompt_length: the prompt's tokens. spellings: per row, `marker_tokens(encode, source, markers)`.
        penalty: per row, β.

    Example: `MarkerPenaltyLogitsProcessor(n, [marker_tokens(encode, source, {"thou"})], [4.0])`.
    """

    def __init__(
        self, prompt_length: int, spellings: Sequence[Sequence[Sequence[int]]], penalty: Sequence[float]
    ) -> None:
        if len(spellings) != len(penalty):
            raise ValueError(f"{len(spellings)} spelling lists for {len(penalty)} penalties")
        self.prompt_length = prompt_length
        self.penalty = -torch.tensor([float(b) for b in penalty], dtype=torch.float64)
        entries: dict[tuple[int, tuple[int, ...], int], None] = {}
        for row, (row_spellings, beta) in enumerate(zip(spellings, penalty, strict=True)):
            for spelling in row_spellings if float(beta) else []:
                if len(spelling):
                    entries[(row, tuple(int(t) for t in spelling[:-1]), int(spelling[-1]))] = None
        self.endings = Endings(entries)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        rows, tokens = self.endings(input_ids[:, self.prompt_length :])
        return add_once(scores, rows, tokens, self.penalty)


class _PairedRowsLogitsProcessor(LogitsProcessor):
    """Rows decoded in pairs that stay in step: each (first, second, size, α, γ) group gives both
    copies `log p_first + sign·γ·(log p_second − log p_first)` inside the first rows' plausible tokens
    (`p ≥ α·max p`) and counts, per row of the first copy, the steps the filter changed the greedy
    choice (`filtered`, kept on the scores' device: no host sync per step)."""

    name, fix, sign = "", "", 1.0

    def __init__(self, groups: Sequence[tuple[int, int, int, float, float]]) -> None:
        for _, _, _, alpha, gamma in groups:
            if not 0 < alpha <= 1:
                raise SteerError(f"`alpha` {alpha} is outside (0, 1]; the paper uses 0.1")
            if gamma < 0:
                raise SteerError(f"`{self.name}` {gamma} is negative; {self.fix}")
        self.groups = list(groups)
        self.filtered: Tensor | None = None

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        out = scores.clone()
        if self.filtered is None:
            self.filtered = torch.zeros(scores.shape[0], dtype=torch.long, device=scores.device)
        for first, second, size, alpha, gamma in self.groups:
            plausible, raw = guidance_parts(
                scores[first : first + size], scores[second : second + size], gamma=self.sign * gamma
            )
            chosen = raw.masked_fill(~relative_top_mask(plausible, alpha), float("-inf")).to(scores.dtype)
            self.filtered[first : first + size] += (
                raw.nan_to_num(nan=float("-inf")).argmax(-1) != chosen.argmax(-1)
            ).long()
            out[first : first + size] = chosen
            out[second : second + size] = chosen
        return out


class GuidanceLogitsProcessor(_PairedRowsLogitsProcessor):
    """Guidance for several candidates in one batch: each (base, edited, size, α, γ) group pairs
    rows [base, base+size) (unedited) with rows [edited, edited+size) (edited); both get the
    guided scores. Rows outside every group (e.g. the plain prompt candidate) are untouched.
    Both copies get the same scores, so greedy decoding appends the same token to a prompt's two
    copies and they stay in step: the released sNeuron-TST code's masked-vs-unmasked contrast,
    with one model copy and one batched pass instead of two models.

    Args:
        groups: (unedited start, edited start, size, α in (0, 1], γ ≥ 0) per guided candidate.

    `filtered[r]` counts, per row, the steps at which the unedited model's plausible set weakened the
    edit (the guided scores before the filter would have picked a token the unedited model finds implausible).

    Example: `GuidanceLogitsProcessor([(0, 2, 2, 0.1, 1.0)])`: rows 0-1 unedited, rows 2-3 edited.
    """

    name, fix, sign = "guidance", "use 0 (off), 1 (follow the edit) or more", 1.0


class InstructionContrastLogitsProcessor(_PairedRowsLogitsProcessor):
    """Instruction contrast (classifier-free guidance on the instruction): each group pairs rows
    [instructed, instructed+size), prompted with the direction's instruction, with rows
    [neutral, neutral+size), the same texts under a neutral instruction (paraphrase or repeat);
    both get `log p + γ·(log p − log p_neutral)` inside the instructed rows' plausible tokens
    (`p ≥ α·max p`), so greedy decoding appends the same token to both and they stay in step.
    What the instruction adds over the neutral request — its style — is pushed harder, and never
    beyond what the prompted model itself finds plausible.

    Args:
        groups: (instructed start, neutral start, size, α in (0, 1], γ ≥ 0) per contrasted candidate.

    `filtered[r]` counts, per row, the steps at which the plausibility filter changed the greedy
    choice (the contrast alone would have picked a token the prompted model finds implausible).

        processor = InstructionContrastLogitsProcessor([(0, 2, 2, 0.1, 1.0)])  # rows 0-1 vs rows 2-3
    """

    name, fix, sign = "instruction_contrast", "use 0 (off) or more", -1.0


class LayerContrastLogitsProcessor(LogitsProcessor):
    """A transformers `LogitsProcessor` that applies `contrast_scores` at every decoding step.

    `hidden` is the dict filled by `hooks.capture_hidden` (last position's residual after each
    candidate block); `early_exit` maps such a residual to logits (final norm + LM head). One
    model copy serves both the final and the premature distributions.

    Args:
        hidden: filled by `capture_hidden`. layers: the candidate premature blocks. early_exit:
        residual → logits. alpha: the relative-top filter. beta: the contrast's strength (1: the paper).

    Example: `LayerContrastLogitsProcessor(hidden, [20, 21, 22, 23], EarlyExit(lm)("auto"), beta=0.5)`.
    """

    def __init__(
        self,
        hidden: Mapping[int, Tensor],
        layers: Sequence[int],
        early_exit: Callable[[Tensor], Tensor],
        *,
        alpha: float = 0.1,
        beta: float = 1.0,
    ) -> None:
        check_alpha_beta(alpha, beta)
        if not layers:
            raise SteerError("contrast needs at least one candidate layer")
        self.hidden, self.layers, self.early_exit = hidden, list(layers), early_exit
        self.alpha, self.beta = alpha, beta
        self.chosen: list[Tensor] = []  # per step, the candidate index each row picked

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        stacked = torch.cat([self.hidden[layer] for layer in self.layers])  # [K*B, H]: one LM-head call
        premature = self.early_exit(stacked).reshape(len(self.layers), scores.shape[0], -1)  # [K, B, V]
        vocab = scores.shape[-1]
        out, chosen = contrast_scores(scores, premature[..., :vocab], alpha=self.alpha, beta=self.beta)
        self.chosen.append(chosen)
        return out.to(scores.dtype)


# The names of steer 0.x, kept for callers' code.
NoThirdCopy, NoInstructionEcho = NoThirdCopyLogitsProcessor, NoInstructionEchoLogitsProcessor
SourceWordBonus, MarkerPenalty = SourceWordBonusLogitsProcessor, MarkerPenaltyLogitsProcessor
