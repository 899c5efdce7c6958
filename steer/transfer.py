"""Phase 2: prompt the model to rewrite, while hooks steer its neurons and contrast its layers.

`Steerer` wraps one loaded model and (optionally) one profile. Every mode of the CLI is a
`TransferSettings`; the CLI only builds settings and prints results.

Modes:
- `prompt`: the instruction alone (the baseline), no edits.
- `deactivate`: zero the source-only neurons' gated activations (the paper).
- `amplify`: multiply the target-only neurons' activations by `amplify_factor`.
- `deactivate+amplify`: both.
- `shift`: add `strength` × (target − source mean activation) to the `top_k` neurons whose means
  differ most — an activation-steering vector on the MLP neurons (beyond the paper).
`contrast=True` adds contrastive layer decoding (the paper's DoLa variant) to any mode.
`guidance=γ > 0` instead decodes each prompt twice in one batch, unedited and edited, and
follows `log p_base + γ·(log p_edited − log p_base)` inside the base model's plausible tokens.

Callers start from a named recipe, `TransferSettings.preset("guided" | "paper" | "prompt")`;
`guided` (shift at generated positions inside guidance) is the default because it measured best
on the embedded model (docs/results.md), `paper` is the published recipe.
"""

from __future__ import annotations

import logging
import sys
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from steer.config import SteerError
from steer.contrast import (
    GroupGuidance,
    LayerContrastProcessor,
    NoRepeatGeneratedNGram,
    check_alpha_beta,
    parse_layers,
)
from steer.hooks import POSITIONS, NeuronEdit, capture_hidden, edit_neurons
from steer.models import LoadedModel
from steer.neurons import METHODS, StyleProfile
from steer.padding import pad_rows
from steer.repetition import NoThirdCopy, StopOnLoop, trim_loop
from steer.replies import StopAtAnswer, clean_output

__all__ = ["MODES", "PRESETS", "Steerer", "TransferResult", "TransferSettings", "clean_output", "describe"]

MODES = ("prompt", "deactivate", "amplify", "deactivate+amplify", "shift")
GENERIC_PROMPT = (
    "Rewrite the following {source} text in a {target} style. Keep its meaning. "
    "Reply with the rewritten text only.\n\n{text}"
)
CONTRAST_DTYPES = ("auto", "float32", "bfloat16")
PROMPTS_RESOURCE = "data/prompts.toml"  # inside the package, so a wheel install reads the same prompts


# Named recipes. `guided` is the default of `steer transfer` and `steer run`; `paper` is the
# published sNeuron-TST recipe (top-k as a fraction, since the paper's absolute k = 10,000 is 22%
# of a 135M model's neurons). docs/results.md has the measurements behind the choice.
PRESETS: dict[str, dict[str, Any]] = {
    "prompt": {"mode": "prompt"},
    "paper": {
        "mode": "deactivate",
        "method": "paper",
        "top_k": "1%",
        "positions": "all",
        "contrast": True,
        "alpha": 0.1,
        "beta": 1.0,
    },
    "guided": {
        "mode": "shift",
        "top_k": "5%",
        "strength": 2.0,
        "guidance": 1.0,
        "alpha": 0.1,
        "positions": "generated",
    },
}
DEFAULT_PRESET = "guided"
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TransferSettings:
    """Everything that decides a transfer's output; recorded with every JSONL record."""

    mode: str = "deactivate"
    top_k: str = "1%"
    method: str = "paper"
    positions: str = "all"
    edit_layers: str | None = None  # keep only the edits in these blocks ("20-29", "last:10"); None = all
    amplify_factor: float = 2.0
    strength: float = 1.0
    contrast: bool = False
    contrast_layers: tuple[int, ...] | str | None = None
    alpha: float = 0.1
    beta: float = 1.0
    contrast_dtype: str = "auto"
    guidance: float = 0.0
    no_repeat_ngram: int = 0  # > 0: the reply may not repeat its own n-grams (source n-grams stay allowed)
    loop_guard: bool = True  # the reply may not start a third consecutive copy of what it just said twice
    max_new_tokens: int = 64
    max_input_tokens: int = 512
    batch_size: int = 8
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    clean: bool = True
    prompt: str | None = None
    min_new_tokens: int = 0  # > 0 forces that many tokens before EOS (benchmarks use it for equal work)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SteerError(f"--mode {self.mode!r} is not valid; choose one of {', '.join(MODES)}")
        if self.method not in METHODS:
            raise SteerError(f"--method {self.method!r} is not valid; choose one of {', '.join(METHODS)}")
        if self.positions not in POSITIONS:
            raise SteerError(f"--positions {self.positions!r} is not valid; choose one of {', '.join(POSITIONS)}")
        for name in ("max_new_tokens", "max_input_tokens", "batch_size"):
            if getattr(self, name) < 1:
                raise SteerError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.temperature < 0:
            raise SteerError(f"--temperature must be ≥ 0 (0 is greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise SteerError(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.amplify_factor < 0:
            raise SteerError(f"--amplify-factor must be ≥ 0, got {self.amplify_factor}")
        check_alpha_beta(self.alpha, self.beta)
        if self.contrast_dtype not in CONTRAST_DTYPES:
            raise SteerError(
                f"--contrast-dtype {self.contrast_dtype!r} is not valid; choose one of {', '.join(CONTRAST_DTYPES)}"
            )
        if self.no_repeat_ngram < 0:
            raise SteerError(f"--no-repeat-ngram must be ≥ 0 (0 is off), got {self.no_repeat_ngram}")
        if self.guidance < 0:
            raise SteerError(f"--guidance must be ≥ 0 (0 is off), got {self.guidance}")
        if self.guidance > 0 and self.contrast and self.mode != "prompt":
            raise SteerError(
                "--contrast cannot be combined with --guidance (the guided preset uses it); "
                "add --guidance 0 or pick --preset paper"
            )
        if self.guidance > 0 and self.temperature > 0:
            raise SteerError("--guidance decodes greedily; drop --temperature or set it to 0")
        if self.prompt is not None:
            check_template(self.prompt, "--prompt")

    @classmethod
    def resolve(
        cls,
        preset: str | None = None,
        recipe: dict[str, Any] | None = None,
        *,
        base: TransferSettings | None = None,
        **overrides: Any,
    ) -> TransferSettings:
        """The one place a recipe is merged. Fields come, later winning, from `base` (a caller's
        defaults, e.g. a run config's [selection]/[transfer] values; else the dataclass defaults),
        then the recipe's start — `recipe` (recorded fields: a `steer tune` choice or a tune
        candidate), else the named preset, else nothing when `mode` is given (that mode's bare
        settings), else the default preset — then every override that is not None. So
        `mode="deactivate", contrast=True` is the paper's recipe spelled out, not the guided
        preset plus contrast."""
        given = {k: v for k, v in overrides.items() if v is not None}
        if recipe is not None:
            start = dict(recipe)
        elif preset is not None:
            if preset not in PRESETS:
                raise SteerError(f"preset {preset!r} is not valid; choose one of {', '.join(PRESETS)}")
            start = dict(PRESETS[preset])
        elif "mode" in given:
            start = {}
        else:
            start = dict(PRESETS[DEFAULT_PRESET])
        defaults = {f.name: getattr(base, f.name) for f in fields(base)} if base is not None else {}
        try:
            return cls(**{**defaults, **start, **given})
        except TypeError as exc:
            raise SteerError(f"unknown transfer setting ({exc})") from None

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> TransferSettings:
        """A named recipe (`PRESETS`) with some fields overridden (`resolve` with a preset)."""
        return cls.resolve(name, **overrides)

    @property
    def edits(self) -> bool:
        return self.mode != "prompt"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if isinstance(out["contrast_layers"], tuple):
            out["contrast_layers"] = list(out["contrast_layers"])
        return out


@dataclass(frozen=True)
class TransferResult:
    """One rewrite: the input, the cleaned output and what the model actually generated."""

    text: str
    output: str
    raw_output: str
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)


def describe(settings: TransferSettings | dict[str, Any]) -> str:
    """A short human label for a recipe, e.g. `shift 5% λ=2 guidance γ=1` or `deactivate paper 1% + contrast β=1`."""
    f = settings.to_dict() if isinstance(settings, TransferSettings) else {**TransferSettings().to_dict(), **settings}
    if f["mode"] == "prompt":
        return "prompt only"
    if f["mode"] == "shift":
        parts = [f"shift {f['top_k']} λ={f['strength']:g}"]
    else:
        parts = [f"{f['mode']} {f['method']} {f['top_k']}"]
        if "amplify" in f["mode"]:
            parts.append(f"×{f['amplify_factor']:g}")
    if f["positions"] != "all":
        parts.append(f"at {f['positions']} positions")
    if f.get("edit_layers"):
        parts.append(f"layers {f['edit_layers']}")
    if f.get("guidance"):
        parts.append(f"+ guidance γ={f['guidance']:g} α={f['alpha']:g}")
    if f["contrast"]:
        parts.append(f"+ contrast β={f['beta']:g}")
    return " ".join(parts)


def check_template(template: str, where: str) -> None:
    """A prompt template must contain {text} and no other field than {source} and {target}."""
    import string

    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise SteerError(f"{where} is not a valid template ({exc}); write a literal brace as {{{{ or }}}}") from None
    unknown = sorted(fields - {"text", "source", "target"})
    if unknown:
        raise SteerError(
            f"{where} uses the unknown field {{{unknown[0]}}}; the fields are {{text}}, {{source}}, {{target}}"
        )
    if "text" not in fields:
        raise SteerError(f"{where} must contain '{{text}}' (and may use '{{source}}' and '{{target}}')")


def load_prompts(path: str | Path | None = None) -> dict[str, str]:
    """Prompt templates keyed `"source->target"` (plus `"default"`), from a TOML file.

    Without `path`, the prompts shipped inside the package (`steer/data/prompts.toml`, read with
    `importlib.resources`, so editable and wheel installs agree); their absence is an error, never
    a silent fall-back to the generic template.
    """
    if path is None:
        from importlib.resources import files

        resource = files("steer").joinpath(PROMPTS_RESOURCE)
        if not resource.is_file():
            raise SteerError(f"the packaged prompts ({PROMPTS_RESOURCE}) are missing; reinstall steer")
        file, text = Path(str(resource)), resource.read_text(encoding="utf-8")
    else:
        file = Path(path)
        if not file.is_file():
            raise SteerError(f"prompts file {file} does not exist")
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise SteerError(f"{file} is not valid UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SteerError(f"{file} is not valid TOML: {exc}") from None
    prompts = {"default": str(data.get("default", GENERIC_PROMPT))}
    prompts.update({str(k): str(v) for k, v in dict(data.get("pairs", {})).items()})
    for key, template in prompts.items():
        check_template(template, f"{file}: prompt {key!r}")
    return prompts


def prompt_template(source: str, target: str, settings: TransferSettings, prompts: dict[str, str] | None = None) -> str:
    """The template for this direction: `--prompt`, else the pair's, else the default."""
    if settings.prompt is not None:
        return settings.prompt
    prompts = prompts if prompts is not None else load_prompts()
    return prompts.get(f"{source}->{target}", prompts["default"])


def render_prompt(tokenizer: Any, template: str, text: str, source: str, target: str) -> str:
    """Fill the template and wrap it in the tokenizer's chat template when it has one."""
    message = template.format(text=text, source=source, target=target)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": message}], tokenize=False, add_generation_prompt=True
        )
    return f"{message}\n\nRewritten text:"


class Steerer:
    """A model plus (optionally) a style profile: builds edits and runs steered generation."""

    def __init__(self, lm: LoadedModel, profile: StyleProfile | None = None, *, check_model: bool = True) -> None:
        if profile is not None and check_model:
            profile.check_model(lm.model_type, lm.num_layers, lm.num_neurons, lm.fingerprint, lm.model_id)
        self.lm, self.profile = lm, profile
        self.prompts = load_prompts()
        self._bf16_head: tuple[Any, torch.Tensor] | None = None

    def build_edit(self, source: str, target: str, settings: TransferSettings) -> NeuronEdit:
        """The neuron edit a mode asks for (an empty edit for `prompt`)."""
        edit = NeuronEdit.empty(self.lm.num_layers, self.lm.num_neurons)
        if not settings.edits:
            return edit
        if self.profile is None:
            raise SteerError(f"--mode {settings.mode} needs a profile (-p PROFILE)")
        if settings.mode == "shift":
            from steer.neurons import parse_top_k, top_k_mask

            delta = (self.profile.counts[target].mean - self.profile.counts[source].mean).float()
            chosen = top_k_mask(delta.abs(), parse_top_k(settings.top_k, self.profile.total_neurons))
            return self._restrict(edit.with_shift(chosen, settings.strength * delta), settings)
        selection = self.profile.neurons(source, target, top_k=settings.top_k, method=settings.method)
        if "deactivate" in settings.mode:
            edit = edit.with_scale(selection.source.mask, 0.0)
        if "amplify" in settings.mode:
            edit = edit.with_scale(selection.target.mask, settings.amplify_factor)
        return self._restrict(edit, settings)

    def _restrict(self, edit: NeuronEdit, settings: TransferSettings) -> NeuronEdit:
        if settings.edit_layers is None:
            return edit
        layers = parse_layers(settings.edit_layers, self.lm.num_layers, option="--edit-layers", last_allowed=True)
        return edit.only_layers(layers)

    def _early_exit(self, dtype: str) -> Any:
        """hidden → logits through the final norm and LM head (the model's own modules).

        With `dtype="bfloat16"` the LM-head product runs on a cached bfloat16 copy of its weight
        (5× faster on CPUs with bf16 units); the norm, softmaxes and scores stay in float32.
        """
        norm = self.lm.module(self.lm.arch.final_norm)
        head = self.lm.module(self.lm.arch.lm_head)
        cap = getattr(self.lm.model.config, "final_logit_softcapping", None)
        if dtype == "auto":
            dtype = "bfloat16" if _bf16_is_fast(self.lm.device) else "float32"
        weight = None
        if dtype == "bfloat16" and isinstance(head, torch.nn.Linear):
            key = (head.weight.data_ptr(), str(head.weight.device))
            if self._bf16_head is None or self._bf16_head[0] != key:
                self._bf16_head = (key, head.weight.detach().to(torch.bfloat16))
            weight = self._bf16_head[1]

        def early_exit(hidden: torch.Tensor) -> torch.Tensor:
            normed = norm(hidden)
            if weight is not None:
                logits = torch.nn.functional.linear(normed.to(torch.bfloat16), weight).float()
                if head.bias is not None:
                    logits = logits + head.bias.float()
            else:
                logits = head(normed)
            return torch.tanh(logits / cap) * cap if cap else logits

        return early_exit

    def _generation_config(self, settings: TransferSettings) -> Any:
        from transformers import GenerationConfig

        tok = self.lm.tokenizer
        eos = getattr(self.lm.model.generation_config, "eos_token_id", None) or tok.eos_token_id
        sample = settings.temperature > 0
        return GenerationConfig(
            max_new_tokens=settings.max_new_tokens,
            min_new_tokens=settings.min_new_tokens or None,
            do_sample=sample,
            temperature=settings.temperature if sample else None,
            top_p=settings.top_p if sample else None,
            top_k=None,
            pad_token_id=tok.pad_token_id,
            eos_token_id=eos,
        )

    def transfer(
        self,
        texts: Sequence[str],
        source: str,
        target: str,
        settings: TransferSettings = TransferSettings(),
        *,
        progress: bool = False,
    ) -> list[TransferResult]:
        """Rewrite `texts` from `source` to `target` style under `settings`, in input order."""
        return self.transfer_candidates(texts, source, target, [settings], progress=progress)[0]

    def transfer_candidates(
        self,
        texts: Sequence[str],
        source: str,
        target: str,
        candidates: Sequence[TransferSettings],
        *,
        progress: bool = False,
    ) -> list[list[TransferResult]]:
        """Rewrite `texts` under several recipes at once: result[k][i] is text i under candidate k.

        Each batch of texts is decoded in one `generate()` call holding every candidate's rows
        (a guided candidate's unedited and edited copies included), so the candidates share the
        batch's work; each candidate's edit hooks touch only its own rows. The candidates must
        agree on everything but the edit (mode, neurons, λ, positions, guidance); layer contrast
        needs a candidate to itself.
        """
        from tqdm.auto import tqdm
        from transformers import LogitsProcessorList, StoppingCriteriaList

        if not texts:
            raise SteerError("no texts to transfer; pass TEXT arguments, -i FILE or lines on stdin")
        if not candidates:
            raise SteerError("no candidate recipes to decode")
        if self.profile is not None:
            self.profile.check_style(source)
            self.profile.check_style(target)
        if source == target:
            raise SteerError(f"--from and --to are both {source!r}; pick two different styles")
        first = candidates[0]
        _check_shared_decoding(candidates)
        lm, tok = self.lm, self.lm.tokenizer
        edits = [self.build_edit(source, target, c) for c in candidates]
        guided = [c.guidance > 0 and len(e) > 0 for c, e in zip(candidates, edits, strict=True)]
        layers = parse_layers(first.contrast_layers, lm.num_layers) if first.contrast else []
        prompts, truncated = self._encode(texts, source, target, first)
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        config = self._generation_config(first)
        outputs: list[dict[int, tuple[str, list[int]]]] = [{} for _ in candidates]
        bar = tqdm(total=len(texts), unit="text", desc=f"{source}→{target}", disable=not progress, file=sys.stderr)
        with bar, torch.inference_mode(), _seeded(first):
            for start in range(0, len(order), first.batch_size):
                rows = order[start : start + first.batch_size]
                one, one_mask = pad_rows([prompts[i] for i in rows], tok.pad_token_id, "left")
                size = len(rows)
                # rows of candidate k: [offset, offset + size) (and its edited copy right after when guided)
                offsets, total = [], 0
                for g in guided:
                    offsets.append(total)
                    total += 2 * size if g else size
                ids, mask = one.repeat(total // size, 1), one_mask.repeat(total // size, 1)
                with ExitStack() as stack:
                    processors = LogitsProcessorList()
                    pairs = []
                    for k, (c, edit) in enumerate(zip(candidates, edits, strict=True)):
                        if not len(edit):
                            continue
                        lo = offsets[k] + (size if guided[k] else 0)
                        edit_rows = None
                        if total != size:  # several row groups share the batch: edit only this one's
                            edit_rows = (torch.arange(total) >= lo) & (torch.arange(total) < lo + size)
                        stack.enter_context(edit_neurons(lm.activation_sites(), edit, c.positions, edit_rows))
                        if guided[k]:
                            pairs.append((offsets[k], lo, size, c.alpha, c.guidance))
                    # bans go first, on raw scores, so both guided copies see them and the
                    # plausibility filters of guidance and contrast choose among what remains
                    if first.loop_guard:
                        processors.append(NoThirdCopy(ids.shape[1], tok.decode))
                    if first.no_repeat_ngram:
                        processors.append(NoRepeatGeneratedNGram(first.no_repeat_ngram, ids.shape[1]))
                    if pairs:
                        processors.append(GroupGuidance(pairs))
                    if layers:
                        hidden = stack.enter_context(capture_hidden(lm.blocks(), layers))
                        processors.append(
                            LayerContrastProcessor(
                                hidden,
                                layers,
                                self._early_exit(first.contrast_dtype),
                                alpha=first.alpha,
                                beta=first.beta,
                            )
                        )
                    # with cleaning on, a row stops once its answer line is complete (same cleaned output)
                    stopping = StoppingCriteriaList([StopAtAnswer(tok.decode, ids.shape[1])] if first.clean else [])
                    if first.clean and first.loop_guard:  # a looping answer is trimmed: stop decoding it
                        stopping.append(StopOnLoop(tok.decode, ids.shape[1], clean_output))
                    generated = lm.model.generate(
                        input_ids=ids.to(lm.device),
                        attention_mask=mask.to(lm.device),
                        generation_config=config,
                        logits_processor=processors,
                        stopping_criteria=stopping,
                    )
                for k in range(len(candidates)):
                    for row, i in enumerate(rows):
                        new = generated[offsets[k] + row, ids.shape[1] :].tolist()
                        while new and new[-1] == tok.pad_token_id:  # rows that finished early are padded
                            new.pop()
                        outputs[k][i] = (tok.decode(new, skip_special_tokens=True), new)
                bar.update(len(rows))
        results: list[list[TransferResult]] = []
        for k, c in enumerate(candidates):
            mine = []
            for i, text in enumerate(texts):
                raw, new_ids = outputs[k][i]
                out = finish_output(raw, c)
                info = {"edited_neurons": len(edits[k]), "new_tokens": len(new_ids), "token_ids": new_ids}
                mine.append(TransferResult(text, out, raw, truncated[i], info))
            results.append(mine)
        return results

    def _encode(
        self, texts: Sequence[str], source: str, target: str, settings: TransferSettings
    ) -> tuple[list[list[int]], list[bool]]:
        """Prompt token ids per text (chat template applied) and which texts were cut."""
        tok = self.lm.tokenizer
        template = prompt_template(source, target, settings, self.prompts)
        chat = bool(getattr(tok, "chat_template", None))
        prompts, truncated = [], []
        for text in texts:
            ids = tok(text, add_special_tokens=False)["input_ids"]
            cut = len(ids) > settings.max_input_tokens
            if cut:
                text = tok.decode(ids[: settings.max_input_tokens])
            truncated.append(cut)
            prompts.append(
                tok(render_prompt(tok, template, text, source, target), add_special_tokens=not chat)["input_ids"]
            )
        if any(truncated):  # a warning, shown also when progress bars are off
            logger.warning(
                "%d of %d texts were longer than %d tokens and were truncated (max_input_tokens)",
                sum(truncated),
                len(texts),
                settings.max_input_tokens,
            )
        return prompts, truncated


_EDIT_FIELDS = {
    "mode",
    "top_k",
    "method",
    "positions",
    "edit_layers",
    "amplify_factor",
    "strength",
    "guidance",
    "alpha",
}


def _check_shared_decoding(candidates: Sequence[TransferSettings]) -> None:
    """Candidates decoded in one batch must agree on every field but the edit's."""
    if len(candidates) == 1:
        return
    first = {k: v for k, v in candidates[0].to_dict().items() if k not in _EDIT_FIELDS}
    for c in candidates[1:]:
        other = {k: v for k, v in c.to_dict().items() if k not in _EDIT_FIELDS}
        differs = sorted(k for k in first if first[k] != other[k])
        if differs:
            raise SteerError(f"candidates decoded together must share {differs[0]!r}; set it equal for all")
    if any(c.contrast for c in candidates) or any(c.temperature > 0 for c in candidates):
        raise SteerError("candidates decoded together cannot use layer contrast or sampling; decode them one by one")


@contextmanager
def _seeded(settings: TransferSettings) -> Iterator[None]:
    """Seed sampling without touching the caller's random state (greedy needs no seed)."""
    if settings.temperature <= 0:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        yield


def finish_output(raw: str, settings: TransferSettings) -> str:
    """The output a raw reply gives under `settings`: cleaned (first answer line, no label or
    quotes) and, with the loop guard, cut before any loop (`trim_loop`); raw when not cleaning.
    `steer run` re-applies it to cached raw replies, so cached outputs follow the current rules."""
    if not settings.clean:
        return raw.strip()
    out = clean_output(raw)
    return trim_loop(out) if settings.loop_guard else out


def _bf16_is_fast(device: torch.device) -> bool:
    """bfloat16 matmuls are fast on CUDA and on CPUs with native bf16 support (AVX512-BF16/AMX)."""
    if device.type == "cuda":
        return True
    if device.type != "cpu":
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def transfer(
    texts: Sequence[str],
    profile: StyleProfile | str | Path,
    source: str,
    target: str,
    *,
    lm: LoadedModel | None = None,
    preset: str = DEFAULT_PRESET,
    **settings: Any,
) -> list[str]:
    """One call from Python: load the profile's model if needed and return the rewrites.

    `preset` names the recipe (`PRESETS`); keyword `settings` override its fields.
    """
    from steer.models import load_model

    prof = profile if isinstance(profile, StyleProfile) else StyleProfile.load(profile)
    model = lm if lm is not None else load_model(prof.model_id, progress=False)
    chosen = TransferSettings.preset(preset, **settings)
    return [r.output for r in Steerer(model, prof).transfer(texts, source, target, chosen)]
