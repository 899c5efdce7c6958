"""One opened profile: the profile file read and hashed at most once, with its style probe read at
most once — what the checks before loading, the recipe choice and the rewrite service all take
instead of a path, so one rewrite never reopens or rehashes its artefacts.

Invariants: `StyleProfile.load` and `sha256_file` run at most once per `OpenedProfile`, on first use
(so a check that needs neither, such as an option's syntax, still comes first); the probe is read
on first use and checked against the sha256 already computed; a profile held only in memory
(`OpenedProfile.held`) has no path, so no probe, read defaults or recorded corpora.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from steer.errors import SteerError
from steer.files import sha256_file
from steer.profiling.defaults import defaults_path, read_default
from steer.profiling.instruction import InstructionShifts, instruction_path
from steer.profiling.probe import StyleProbe, probe_path
from steer.profiling.profile import StyleProfile
from steer.profiling.trained import TrainedEdits, trained_path


class OpenedProfile:
    """A profile opened once: `profile`, its file's `sha256` (None when held in memory), its probe
    and read defaults, each read on first use."""

    def __init__(self, path: str | Path | None, profile: StyleProfile | None = None, sha256: str | None = None):
        self.path = Path(path) if path is not None else None
        if self.path is None and profile is None:
            raise SteerError("an opened profile needs a path or a profile")
        self._profile, self._sha256 = profile, sha256
        self._probe: StyleProbe | None = None
        self._instructions: InstructionShifts | None = None
        self._trained: TrainedEdits | None = None

    @classmethod
    def open(cls, path: str | Path) -> OpenedProfile:
        """The profile at `path`, read and hashed when first needed."""
        return cls(path)

    @classmethod
    def held(cls, profile: StyleProfile) -> OpenedProfile:
        """A profile the caller holds in memory (`steer.rewrite(texts, profile_object, …)`)."""
        return cls(None, profile)

    @classmethod
    def of(cls, profile: OpenedProfile | StyleProfile | str | Path) -> OpenedProfile:
        """Whatever a caller passed as the profile, opened once."""
        if isinstance(profile, OpenedProfile):
            return profile
        if isinstance(profile, StyleProfile):
            return cls.held(profile)
        return cls.open(profile)

    @property
    def profile(self) -> StyleProfile:
        """The profile, read and validated once."""
        if self._profile is None:
            assert self.path is not None
            self._profile = StyleProfile.load(self.path)
        return self._profile

    @property
    def sha256(self) -> str | None:
        """The profile file's sha256, computed once (None for a profile held in memory)."""
        if self._sha256 is None and self.path is not None:
            self._sha256 = sha256_file(self.path)
        return self._sha256

    @property
    def label(self) -> str:
        """How messages name the profile."""
        return str(self.path) if self.path is not None else "the profile object"

    def has_probe(self) -> bool:
        """Whether a style probe lies beside the profile file."""
        return self.path is not None and probe_path(self.path).is_file()

    def probe(self) -> StyleProbe:
        """The probe beside the profile, read once and checked against this profile's bytes."""
        if self._probe is None:
            if self.path is None:
                raise SteerError("rerank needs the profile's style probe: pass the profile as a path, not an object")
            if not self.has_probe():
                raise SteerError(
                    f"--preset rerank needs the profile's style probe; build it with: steer probe {self.path}"
                )
            probe = StyleProbe.load(probe_path(self.path))
            self._check_made_from(
                probe.profile_sha256,
                f"the probe beside {self.path} was built from another profile or an earlier version of this file; "
                f"rebuild it with 'steer probe {self.path} --force'",
            )
            self._probe = probe
        return self._probe

    def _check_made_from(self, sha256: str | None, stale: str) -> None:
        """An artefact beside the profile names the profile bytes it was made from: `stale` (one line)
        when they are not this file's."""
        if sha256 and sha256 != self.sha256:
            raise SteerError(stale)

    def probe_for(self, lm: Any) -> StyleProbe:
        """The probe, checked against the loaded model too."""
        probe = self.probe()
        probe.check_model(lm)
        return probe

    def instructions(self) -> InstructionShifts:
        """The instruction measurements beside the profile (`steer instruct`), read once and checked
        against this profile's bytes."""
        if self._instructions is None:
            if self.path is None:
                raise SteerError("`push` and `refusal` read the profile's instruction file: pass the profile as a path")
            path = instruction_path(self.path)
            if not path.is_file():
                raise SteerError(
                    f"`push` and `refusal` need the instruction measurements beside the profile; "
                    f"run: steer instruct {self.path} --from SOURCE --to TARGET (add --refusal for `refusal`)"
                )
            found = InstructionShifts.load(path, (self.profile.num_layers, self.profile.num_neurons))
            self._check_made_from(
                found.profile_sha256,
                f"{path} was measured on another profile or an earlier version of {self.path}; measure each "
                f"direction again with 'steer instruct {self.path} --from SOURCE --to TARGET --force' (the old "
                "measurements are dropped)",
            )
            self._instructions = found
        return self._instructions

    def instructions_for(self, lm: Any) -> InstructionShifts:
        """The instruction measurements, checked against the loaded model too."""
        found = self.instructions()
        if found.fingerprint != lm.fingerprint:
            raise SteerError(f"{instruction_path(self.path or '')} was measured on another model than {lm.model_id}")
        return found

    def trained(self) -> TrainedEdits:
        """The trained edits beside the profile (`steer train`), read once and checked against this
        profile's bytes."""
        if self._trained is None:
            if self.path is None:
                raise SteerError("`mode` trained reads the profile's trained edits: pass the profile as a path")
            path = trained_path(self.path)
            if not path.is_file():
                raise SteerError(
                    f"`mode` trained needs the trained edits beside the profile; "
                    f"run: steer train {self.path} --from SOURCE --to TARGET --pairs FILE.tsv"
                )
            found = TrainedEdits.load(path, (self.profile.num_layers, self.profile.num_neurons))
            self._check_made_from(
                found.profile_sha256,
                f"{path} was trained on another profile or an earlier version of {self.path}; train each "
                f"direction again with 'steer train {self.path} --from SOURCE --to TARGET --pairs FILE.tsv --force'",
            )
            self._trained = found
        return self._trained

    def trained_for(self, lm: Any) -> TrainedEdits:
        """The trained edits, checked against the loaded model too."""
        found = self.trained()
        if found.fingerprint != lm.fingerprint:
            raise SteerError(f"{trained_path(self.path or '')} was trained on another model than {lm.model_id}")
        return found

    def read_default(self, source: str, target: str) -> tuple[str, dict[str, Any]] | None:
        """(preset, the read's entry) when a blind read of this very file chose the direction's recipe."""
        if self.path is None or not defaults_path(self.path).is_file():
            return None
        return read_default(self.path, source, target, sha256=self.sha256)

    def check_styles(self, source: str, target: str, *, reranking: bool) -> None:
        """--from/--to against the profile's styles, and the probe's under rerank (files alone, no model)."""
        self.profile.check_style(source)
        self.profile.check_style(target)
        if reranking:
            probe = self.probe()
            for style in (source, target):
                if style not in probe.styles:
                    raise SteerError(
                        f"the probe beside {self.path} knows styles {', '.join(probe.styles)}, not {style!r}; "
                        f"rebuild it with: steer probe {self.path} --force"
                    )

    def load_model(
        self,
        model_spec: str | None = None,
        *,
        dtype: str = "auto",
        device: str = "cpu",
        device_map: str | None = None,
        progress: bool = False,
    ) -> Any:
        """The model the profile was made on (or `model_spec`, another copy of it: the fingerprint is
        checked), loaded."""
        from steer.model.loading import load_model

        prof = self.profile
        if model_spec is None and not _loadable(prof.model_id):
            raise SteerError(
                f"the profile was made on {prof.model_id!r}, which is not a local directory, a .gguf file, an "
                "embedded alias or a Hub id; pass --model (or `model_spec`) with that model"
            )
        lm = load_model(
            model_spec or prof.model_id,
            dtype=dtype,
            device=device,
            device_map=device_map,
            progress=progress,
            activation_hint=prof.settings.get("activation"),  # where the counts were taken, on any copy
        )
        prof.check_model(lm.model_type, lm.num_layers, lm.num_neurons, lm.fingerprint, lm.model_id)
        return lm


def _loadable(model_id: str) -> bool:
    """Whether a recorded model id can name a model at all (a path, an alias, a Hub id); `steer.profile`
    records a held model's class name ("your LlamaForCausalLM") when it was not loaded from a path."""
    return Path(model_id).exists() or not model_id.startswith("your ")
