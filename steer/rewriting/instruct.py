"""`steer instruct`: measure what each direction's rewrite instruction does to the model's neurons
(and, with `refusal`, the model's refusal direction) on the profile's training texts, and store it
beside the profile for the push and refusal recipes (`steer.profiling.instruction`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from steer.errors import SteerError
from steer.prompts import NEUTRAL, render_prompt
from steer.rewriting.opened import OpenedProfile
from steer.settings import TransferSettings

INSTRUCT_LIMIT = 64  # training texts of the source style per direction


@dataclass(frozen=True)
class Measured:
    """What one `steer instruct` wrote: the file, per direction the texts used and the shift's size."""

    path: Path
    directions: dict[str, tuple[int, float]]
    refusal_pairs: int = 0


def measure_instructions(
    profile_path: str | Path,
    directions: Sequence[tuple[str, str]],
    *,
    refusal: bool = False,
    limit: int = INSTRUCT_LIMIT,
    neutral: str = "paraphrase",
    prompts_file: str | Path | None = None,
    model_spec: str | None = None,
    dtype: str = "auto",
    device: str = "cpu",
    force: bool = False,
    progress: bool = False,
) -> Measured:
    """Measure the instruction shift of each (source, target) and, with `refusal`, the refusal
    direction; add them to the profile's instruction file (a direction already there is replaced
    only with `force`). Options are checked before the model loads."""
    from steer.profiling.instruction import (
        REPLY_TOKENS,
        InstructionShifts,
        instruction_path,
        load_refusal_requests,
        measure_refusal,
        measure_shift,
    )
    from steer.profiling.profile import check_direction, style_corpora

    if not directions and not refusal:
        raise SteerError("nothing to measure: pass --from SOURCE --to TARGET, or --refusal")
    if limit < 1:
        raise SteerError(f"--limit must be at least 1, got {limit}")
    if neutral not in NEUTRAL:
        raise SteerError(f"--neutral {neutral!r} is not valid; choose one of {', '.join(NEUTRAL)}")
    opened = OpenedProfile.open(profile_path)
    prof = opened.profile
    for source, target in directions:
        prof.check_style(source)
        prof.check_style(target)
        check_direction(source, target)
    path = instruction_path(profile_path)
    known = InstructionShifts.load(path, (prof.num_layers, prof.num_neurons)) if path.is_file() else None
    if known is not None and known.profile_sha256 != opened.sha256:
        if not force:
            raise SteerError(f"{path} was measured on another version of {profile_path}; pass --force to start it anew")
        known = None
    for source, target in directions:
        if known is not None and f"{source}->{target}" in known.shifts and not force:
            raise SteerError(f"{path} already holds {source} → {target}; pass --force to measure it again")
    if known is not None and refusal and known.refusal is not None and not force:
        raise SteerError(f"{path} already holds the refusal direction; pass --force to measure it again")
    corpora = style_corpora((), profile_path, prof) if directions else {}
    lm = opened.load_model(model_spec, dtype=dtype, device=device, progress=progress)
    from steer.generation.steerer import Steerer

    steerer = Steerer(lm, prof, prompts_file=prompts_file)
    tok = lm.tokenizer
    encode = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    shifts = known or InstructionShifts(lm.fingerprint, opened.sha256)
    settings = TransferSettings.preset("prompt", neutral=neutral)
    sizes: dict[str, tuple[int, float]] = {}
    for source, target in directions:
        texts = [t for t in corpora[source] if t.strip()][:limit]
        instructed = steerer.encode_prompts(texts, source, target, settings)[0]
        under = steerer.encode_prompts(texts, source, target, settings, neutral=neutral)[0]
        replies = [encode(t)[:REPLY_TOKENS] for t in texts]  # each text's own first tokens as the reply
        shift, under_neutral = measure_shift(
            lm, instructed, under, replies, batch_size=settings.batch_size, progress=progress
        )
        info = {
            "texts": len(texts),
            "neutral": neutral,
            "reply_tokens": REPLY_TOKENS,
            "corpus": "the profile's training texts",
        }
        shifts = shifts.with_shift(source, target, shift, under_neutral, info)
        sizes[f"{source} → {target}"] = (len(texts), float(shift.abs().mean()))
    pairs = 0
    if refusal:
        refused, answered = load_refusal_requests()
        chat = bool(getattr(tok, "chat_template", None))

        def requests(said: list[str]) -> list[list[int]]:
            rendered = [render_prompt(tok, "{text}", r, "", "") for r in said]
            return [tok(p, add_special_tokens=not chat)["input_ids"] for p in rendered]

        direction = measure_refusal(lm, requests(refused), requests(answered), batch_size=settings.batch_size)
        shifts = shifts.with_refusal(direction, {"pairs": len(refused), "requests": "steer/data/refusal.toml"})
        pairs = len(refused)
    shifts.save(path)
    return Measured(path, sizes, pairs)
