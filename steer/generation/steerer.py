"""Phase 2: generate rewrites — prompt the model while hooks steer its neurons, with guidance or
contrastive layer decoding, stopping each row at its answer and cutting loops.

`Steerer` wraps one loaded model and (optionally) one profile; `Steerer.transfer` decodes one recipe
(`steer.settings.TransferSettings`), `Steerer.transfer_candidates` several in one batch. Settings
and prompts (`steer.settings`, `steer.prompts`) are re-exported here for older callers.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from steer.errors import SteerError
from steer.generation.contrast import EarlyExit, parse_layers
from steer.generation.decoding import (
    ECHO_SIZE,
    CallPlan,
    decoding_groups,
    greedy_decode,
    step_edits,
    stopping_rules,
    token_rules,
)
from steer.generation.edits import build_edit
from steer.generation.instructed import build_push, measurements, refusal_direction
from steer.generation.keeping import content_tokens, marker_tokens
from steer.generation.processors import (
    GuidanceLogitsProcessor,
    InstructionContrastLogitsProcessor,
    LayerContrastLogitsProcessor,
)
from steer.generation.replies import clean_output, echo_filter, echo_ngrams, finish_output, first_word_tokens
from steer.generation.sampling import sampling_processors
from steer.generation.stopping import InterruptStoppingCriteria
from steer.labels import describe
from steer.model.hooks import NeuronEdit, capture_hidden
from steer.model.loading import LoadedModel
from steer.model.padding import pad_rows
from steer.model.prefix import common_prefix_length, prefix_cache, shared_prefix_cache
from steer.profiling.instruction import InstructionShifts
from steer.profiling.profile import StyleProfile, check_direction
from steer.profiling.trained import TrainedEdits
from steer.prompts import (
    GENERIC_PROMPT,
    NEUTRAL,
    check_template,
    load_openings,
    load_prompts,
    prompt_template,
    render_prompt,
    reply_opening,
)
from steer.scoring.faithfulness import instruction_text
from steer.settings import CONTRAST_DTYPES, DEFAULT_PRESET, MODES, PRESETS, TransferSettings

__all__ = [
    "CONTRAST_DTYPES",
    "DEFAULT_PRESET",
    "GENERIC_PROMPT",
    "MODES",
    "PRESETS",
    "Steerer",
    "TransferResult",
    "TransferSettings",
    "check_template",
    "clean_output",
    "describe",
    "echo_filter",
    "finish_output",
    "load_openings",
    "load_prompts",
    "prompt_template",
    "render_prompt",
]
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TransferResult:
    """One rewrite: the input, the cleaned output and what the model actually generated."""

    text: str
    output: str
    raw_output: str
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)


class Steerer:
    """A model plus (optionally) a style profile: builds edits and runs steered generation."""

    def __init__(
        self,
        lm: LoadedModel,
        profile: StyleProfile | None = None,
        *,
        check_model: bool = True,
        prompts_file: str | Path | None = None,
        examples: Callable[[str, Sequence[str], int], list[list[str]]] | None = None,
        markers: Callable[[str, str], frozenset[str]] | None = None,
        share_prefill: bool = True,
        share_prompt_prefix: bool = True,
        drop_finished_rows: bool = True,
        instructions: InstructionShifts | Callable[[], InstructionShifts] | None = None,
        trained: TrainedEdits | Callable[[], TrainedEdits] | None = None,
    ) -> None:
        """`prompts_file`: a TOML of templates and openings (None: the packaged ones); `examples`, `markers`,
        `instructions` and `trained` (`steer.profiling.instruction`, `.trained`, or a function reading it
        when first needed): what few-shot, keep-words, push, refusal and trained recipes need. The three switches
        change speed only, never an output: off only to measure what each saves (`bench/`)."""
        if profile is not None and check_model:
            profile.check_model(lm.model_type, lm.num_layers, lm.num_neurons, lm.fingerprint, lm.model_id)
        self.lm, self.profile = lm, profile
        self.prompts = load_prompts(prompts_file)
        self.openings = load_openings(prompts_file)
        # speed switches, same outputs either way: one unedited prefill shared by a batch's row groups
        # when no edit touches the prompt; the tokens every prompt of a call starts with prefilled once
        # per call (needs `share_prefill`); finished rows leaving the batch
        self.share_prefill = share_prefill
        self.share_prompt_prefix = share_prompt_prefix
        self.drop_finished_rows = drop_finished_rows
        self._early_exit = EarlyExit(lm)  # layer contrast's early exit (caches a bfloat16 LM head)
        # few-shot examples for recipes with `examples` > 0: (target style, sources, k) → k texts per
        # source (`steer.generation.examples.ExampleSource`; steer run gives its training texts)
        self.examples = examples
        # the source style's marker words, which keep-words leaves out and lowers: (source, target) →
        # words (`steer.generation.markers.StyleMarkers`; steer run gives its training texts). None: none
        self.markers = markers
        self.instructions, self.trained = measurements(instructions), trained
        # called once per decoding step; True stops the batch there (a server's timed-out requests)
        self.interrupt: Callable[[], bool] | None = None

    def build_edit(self, source: str, target: str, settings: TransferSettings) -> NeuronEdit:
        """The neuron edit a mode asks for (an empty edit for `prompt`): `steer.generation.edits`."""
        shape = (self.lm.num_layers, self.lm.num_neurons)
        return build_edit(self.profile, shape, source, target, settings, self.trained)

    def _eos_token_id(self) -> Any:
        """The model's end-of-reply token(s): its generation config's, else the tokenizer's."""
        return getattr(self.lm.model.generation_config, "eos_token_id", None) or self.lm.tokenizer.eos_token_id

    def transfer(
        self,
        texts: Sequence[str],
        source: str,
        target: str,
        settings: TransferSettings = TransferSettings(),
        *,
        progress: bool = False,
        on_batch: Callable[[list[int], list[TransferResult]], None] | None = None,
    ) -> list[TransferResult]:
        """Rewrite `texts` from `source` to `target` style under `settings`, in input order.

        `on_batch(indices, results)` is called after every decoded batch (indices into `texts`),
        so a caller can save finished rewrites before the whole input is done."""
        each = None if on_batch is None else (lambda rows, results: on_batch(rows, results[0]))
        return self.transfer_candidates(texts, source, target, [settings], progress=progress, on_batch=each)[0]

    def transfer_candidates(
        self,
        texts: Sequence[str],
        source: str,
        target: str,
        candidates: Sequence[TransferSettings],
        *,
        progress: bool = False,
        on_batch: Callable[[list[int], list[list[TransferResult]]], None] | None = None,
    ) -> list[list[TransferResult]]:
        """Rewrite `texts` under several recipes at once: result[k][i] is text i under candidate k;
        `on_batch(indices, results)` gets each decoded batch (results[k][j]: text indices[j], candidate k).
        Each batch is one `decoding.greedy_decode` call holding every candidate's rows (guided copies
        included), a row leaving once finished, each candidate's hooks on its own rows; candidates that
        differ in more than the edit (few-shot, layer contrast, sampling) decode in groups of their own
        per batch (`decoding_groups`), with the same results."""
        from tqdm.auto import tqdm

        if not texts:
            raise SteerError("no texts to transfer; pass TEXT arguments, -i FILE or lines on stdin")
        if not candidates:
            raise SteerError("no candidate recipes to decode")
        if self.profile is not None:
            self.profile.check_style(source)
            self.profile.check_style(target)
        check_direction(source, target)
        groups = decoding_groups(candidates)
        if len(groups) > 1:
            return self._transfer_in_groups(texts, source, target, candidates, groups, progress, on_batch)
        plan = self._plan(texts, source, target, candidates)
        order = sorted(range(len(texts)), key=lambda i: -len(plan.prompts[i]))
        done: list[dict[int, TransferResult]] = [{} for _ in candidates]
        bar = tqdm(total=len(texts), unit="text", desc=f"{source}→{target}", disable=not progress, file=sys.stderr)
        with bar, torch.inference_mode():
            # before any edit hook: the unedited cache of what every prompt of the call starts with
            prefix = prefix_cache(self.lm.model, plan.prompts[0][: plan.prefix_length]) if plan.prefix_length else None
            for start in range(0, len(order), candidates[0].batch_size):
                rows = order[start : start + candidates[0].batch_size]
                batch = self._decode_batch(plan, texts, rows, prefix)
                for k in range(len(candidates)):
                    done[k].update(zip(rows, batch[k], strict=True))
                if on_batch is not None:
                    on_batch(list(rows), batch)
                bar.update(len(rows))
        return [[done[k][i] for i in range(len(texts))] for k in range(len(candidates))]

    def _plan(self, texts: Sequence[str], source: str, target: str, candidates: Sequence[TransferSettings]) -> CallPlan:
        """What every batch of one `transfer_candidates` call shares: the candidates' edits, the
        encoded prompts, the reply opening, the instruction's echo guard per text."""
        first = candidates[0]
        lm, tok = self.lm, self.lm.tokenizer
        edits = [self.build_edit(source, target, c) for c in candidates]
        pushes = [build_push(self.instructions, source, target, c) for c in candidates]
        refusals = [refusal_direction(self.instructions, c) for c in candidates]
        layers = parse_layers(first.contrast_layers, lm.num_layers) if first.contrast else []
        prompts, truncated = self.encode_prompts(texts, source, target, first)
        instruction = instruction_text(prompt_template(source, target, first, self.prompts), source, target)
        encode = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
        first_tokens, echo_grams = [], []
        if first.echo_guard and instruction.strip():
            first_tokens = [first_word_tokens(encode, instruction, t) for t in texts]
            echo_grams = [echo_ngrams(encode, instruction, t, ECHO_SIZE) for t in texts]
        keep_tokens, markers_said = [], []
        if any(c.keep_words > 0 for c in candidates):  # keep the source's words, lower its style's markers
            markers = self.markers(source, target) if self.markers is not None else frozenset()
            keep_tokens = [content_tokens(encode, t, markers) for t in texts]
            markers_said = [marker_tokens(encode, t, markers) for t in texts] if markers else []
        # Row groups whose prompts no edit touches (edits at generated positions only, or none)
        # share one unedited prefill of each prompt but its last token (`steer.model.prefix.shared_prefix_cache`).
        contrasted = [c.instruction_contrast > 0 for c in candidates]
        neutral = self.encode_prompts(texts, source, target, first, neutral=first.neutral)[0] if any(contrasted) else []
        # (rows under another instruction have prompts of their own: no prefill is shared then)
        share_prefill = (
            self.share_prefill
            and not layers
            and not any(contrasted)
            and not any(r is not None for r in refusals)  # the refusal projection touches the prompt
            and all(c.positions == "generated" or not len(e) for c, e in zip(candidates, edits, strict=True))
        )
        shared_length = common_prefix_length(prompts) if share_prefill and self.share_prompt_prefix else 0
        return CallPlan(
            candidates=list(candidates),
            edits=edits,
            guided=[
                c.guides and (len(e) > 0 or p is not None or r is not None)
                for c, e, p, r in zip(candidates, edits, pushes, refusals, strict=True)
            ],
            contrasted=contrasted,
            layers=layers,
            prompts=prompts,
            truncated=truncated,
            opening=reply_opening(source, target, first, self.openings),
            instruction=instruction,
            rejects=[echo_filter(t, instruction) for t in texts],
            first_tokens=first_tokens,
            echo_grams=echo_grams,
            keep_tokens=keep_tokens,
            marker_tokens=markers_said,
            share_prefill=share_prefill,
            prefix_length=shared_length,
            eos_token_id=self._eos_token_id(),
            neutral_prompts=neutral,
            pushes=pushes,
            refusals=refusals,
        )

    def _decode_batch(
        self, plan: CallPlan, texts: Sequence[str], rows: list[int], shared: Any = None
    ) -> list[list[TransferResult]]:
        """Every candidate's results for the texts `rows` (result[k][j]: text rows[j] under candidate
        k), decoded in one `greedy_decode` call over the rows of the plan's `BatchLayout`.

        With `shared` (the cache of the plan's `prefix_length` tokens every prompt starts with), the
        rows hold those tokens first and each text's own tokens left-padded after them, so the one
        prefix cache lines up with every row; the model sees each prompt's tokens at the same
        positions either way (`steer.model.prefix.positions_of`)."""
        first, lm, tok = plan.candidates[0], self.lm, self.lm.tokenizer
        length = plan.prefix_length if shared is not None else 0
        one, one_mask = pad_rows([plan.prompts[i][length:] for i in rows], tok.pad_token_id, "left")
        if length:
            head = torch.tensor(plan.prompts[rows[0]][:length], dtype=one.dtype).expand(len(rows), length)
            one, one_mask = torch.cat([head, one], 1), torch.cat([torch.ones_like(head), one_mask], 1)
        layout = plan.layout(len(rows))
        if any(layout.contrasted):  # the neutral instruction's rows have prompts of their own
            ids, mask = pad_rows(plan.row_prompts(rows, layout), tok.pad_token_id, "left")
        else:
            ids, mask = one.repeat(layout.copies, 1), one_mask.repeat(layout.copies, 1)
        prefix = None
        if plan.share_prefill and (layout.copies > 1 or length) and one.shape[1] > 1:  # before any edit hook
            prefix = shared_prefix_cache(lm.model, one, one_mask, layout.copies, shared)
        with ExitStack() as stack:
            pairs = [
                layout.guidance_pair(k, c.alpha, c.guidance) for k, c in enumerate(plan.candidates) if plan.guided[k]
            ]
            row_rejects = layout.per_row([plan.rejects[i] for i in rows])
            processors = token_rules(plan, rows, layout, ids.shape[1], tok.decode)
            guidance = GuidanceLogitsProcessor(pairs) if pairs else None
            if guidance is not None:
                processors.append(guidance)
            contrast = None
            if any(layout.contrasted):
                groups = [
                    layout.contrast_pair(k, c.alpha, c.instruction_contrast)
                    for k, c in enumerate(plan.candidates)
                    if layout.contrasted[k]
                ]
                contrast = InstructionContrastLogitsProcessor(groups)
                processors.append(contrast)
            if plan.layers:
                hidden = stack.enter_context(capture_hidden(lm.blocks(), plan.layers))
                early_exit = self._early_exit(first.contrast_dtype)
                processors.append(
                    LayerContrastLogitsProcessor(hidden, plan.layers, early_exit, alpha=first.alpha, beta=first.beta)
                )
            if first.temperature > 0:  # one row per text: sampling excludes guidance and candidates
                processors.extend(sampling_processors([texts[i] for i in rows], first))
            # always greedy: sampling is the last logits processor, seeded per text (steer.generation.sampling)
            generated = greedy_decode(
                lm.model,
                ids,
                mask,
                max_new_tokens=first.max_new_tokens,
                min_new_tokens=first.min_new_tokens,
                pad_token_id=tok.pad_token_id,
                eos_token_id=plan.eos_token_id,
                processors=processors,
                stopping=[
                    *stopping_rules(plan, row_rejects, ids.shape[1], tok.decode),
                    *([InterruptStoppingCriteria(self.interrupt)] if self.interrupt is not None else []),
                ],
                cache=prefix,
                hooks=step_edits(lm.activation_sites(), plan, layout, lm.shape_blocks()),
                # layer contrast reads every row's hidden states, so its batch stays whole
                compact=self.drop_finished_rows and not plan.layers,
            ).cpu()
        batch: list[list[TransferResult]] = []
        for k, c in enumerate(plan.candidates):
            batch.append([])
            for row, i in enumerate(rows):
                new = generated[layout.row(k, row), ids.shape[1] :].tolist()
                while new and new[-1] == tok.pad_token_id:  # rows that finished early are padded
                    new.pop()
                raw = plan.opening + tok.decode(new, skip_special_tokens=True)  # the primed opening is the reply's
                info = {"edited_neurons": len(plan.edits[k]), "new_tokens": len(new), "token_ids": new}
                if plan.contrasted[k] and contrast is not None and contrast.filtered is not None:
                    # the steps at which the prompted model's plausible set overruled the contrast
                    info["contrast_filtered"] = int(contrast.filtered[layout.row(k, row)])
                if plan.guided[k] and guidance is not None and guidance.filtered is not None:
                    # the steps at which the unedited model's plausible set weakened the edit
                    info["guidance_filtered"] = int(guidance.filtered[layout.row(k, row)])
                output = finish_output(raw, c, plan.rejects[i])
                batch[k].append(TransferResult(texts[i], output, raw, plan.truncated[i], info))
        return batch

    def _transfer_in_groups(
        self,
        texts: Sequence[str],
        source: str,
        target: str,
        candidates: Sequence[TransferSettings],
        groups: list[list[int]],
        progress: bool,
        on_batch: Callable[[list[int], list[list[TransferResult]]], None] | None,
    ) -> list[list[TransferResult]]:
        """Candidates that cannot share a batch (`decoding_groups`: e.g. a few-shot rung's prompt of
        its own): per batch of texts (longest first), each group decoded in its own pass, then the
        batch handed to `on_batch` with every candidate's results, as one shared batch would be."""
        from tqdm.auto import tqdm

        done: list[dict[int, TransferResult]] = [{} for _ in candidates]
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        step = candidates[0].batch_size
        bar = tqdm(total=len(texts), unit="text", desc=f"{source}→{target}", disable=not progress, file=sys.stderr)
        with bar:
            for start in range(0, len(order), step):
                rows = order[start : start + step]
                batch: list[list[TransferResult]] = [[] for _ in candidates]
                for members in groups:
                    group = [candidates[k] for k in members]
                    decoded = self.transfer_candidates([texts[i] for i in rows], source, target, group)
                    for k, results in zip(members, decoded, strict=True):
                        batch[k] = results
                        done[k].update(zip(rows, results, strict=True))
                if on_batch is not None:
                    on_batch(list(rows), batch)
                bar.update(len(rows))
        return [[done[k][i] for i in range(len(texts))] for k in range(len(candidates))]

    def encode_prompts(
        self, texts: Sequence[str], source: str, target: str, settings: TransferSettings, neutral: str | None = None
    ) -> tuple[list[list[int]], list[bool]]:
        """Prompt token ids per text (chat template applied) and which texts were cut; with `neutral`,
        under that neutral instruction and its opening (`steer.prompts.NEUTRAL`) instead."""
        tok = self.lm.tokenizer
        template = prompt_template(source, target, settings, self.prompts)
        opening = reply_opening(source, target, settings, self.openings)
        if neutral is not None:
            template, opening = NEUTRAL[neutral]
        chat = bool(getattr(tok, "chat_template", None))
        shots: list[list[str]] = [[] for _ in texts]
        if settings.examples and neutral is None:  # the neutral instruction shows no texts of the target style
            if self.examples is None:
                raise SteerError(
                    f"`examples` {settings.examples} needs texts of the {target} style to show: steer run takes "
                    "its training texts; in Python set `Steerer.examples` (steer.generation.examples.ExampleSource)"
                )
            shots = self.examples(target, texts, settings.examples)
        prompts, truncated = [], []
        for text, shown in zip(texts, shots, strict=True):
            ids = tok(text, add_special_tokens=False)["input_ids"]
            cut = len(ids) > settings.max_input_tokens
            if cut:
                text = tok.decode(ids[: settings.max_input_tokens])
            truncated.append(cut)
            prompt = render_prompt(tok, template, text, source, target, opening, shown)
            prompts.append(tok(prompt, add_special_tokens=not chat)["input_ids"])
        if any(truncated) and neutral is None:  # a warning (once), shown also when progress bars are off
            logger.warning(
                "%d of %d texts were longer than %d tokens and were truncated (raise `max_input_tokens` to keep more)",
                sum(truncated),
                len(texts),
                settings.max_input_tokens,
            )
        return prompts, truncated
