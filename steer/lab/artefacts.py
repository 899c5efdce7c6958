"""A run's profile and style probe: the configured ones or the run directory's, reused when they were
made from this model, these corpora and the default fit, else built (once) into the run directory;
and the files measured beside the profile that trained and push recipes need, checked before loading."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from steer.distributed import on_main
from steer.errors import SteerError
from steer.lab.experiment import Experiment, _candidate, mode_settings, parse_mode
from steer.lab.rundir import RunDir
from steer.model.loading import LoadedModel
from steer.profiling.corpus import Corpus, corpus_hash
from steer.profiling.profile import StyleProfile
from steer.settings import TransferSettings


class RunArtefacts:
    """The experiment's profile and probe files, found or made on first use (`profile`, `probe`)."""

    def __init__(
        self, exp: Experiment, run_dir: RunDir, lm: LoadedModel, log: Callable[[str], None], *, progress: bool = False
    ) -> None:
        # `log`: where progress messages go (the runner's); `progress`: profiling's progress bars
        self.exp, self.dir, self.lm, self.log, self.progress = exp, run_dir, lm, log, progress
        self._profile: StyleProfile | None = None
        self._profile_path: Path | None = None
        self.probe_file: Path = run_dir.path / "probe.safetensors"  # or the one beside the configured profile

    def profile(self) -> StyleProfile:
        """The experiment's profile: reused when its model and corpora match, else computed."""
        if self._profile is not None:
            return self._profile
        from steer.profiling.profile import profile_styles

        out = self.dir.path
        limit = self.exp.profile_settings.limit  # `[profile] limit`: the first texts profile; all train the judges
        train = {s: t[:limit] for s, t in self.exp.train.items()}
        hashes = {s: corpus_hash(t) for s, t in train.items()}
        candidates = [Path(self.exp.profile_path)] if self.exp.profile_path else []
        candidates.append(out / "profile.safetensors")
        for path in candidates:
            if path.is_file():
                prof = StyleProfile.load(path)
                same = (
                    prof.fingerprint == self.lm.fingerprint
                    and {s: m.get("sha256") for s, m in prof.corpora.items()} == hashes
                )
                if same:
                    self.log(f"reusing profile {path}")
                    self._profile, self._profile_path = prof, path
                    return prof
        corpora = [Corpus(s, t, self.exp.train_sources[s], hashes[s]) for s, t in train.items()]
        prof = profile_styles(self.lm, corpora, self.exp.profile_settings, progress=self.progress)
        on_main(lambda: self.dir.write(out / "profile.safetensors", lambda p: prof.save(p, force=True)))
        self._profile, self._profile_path = prof, out / "profile.safetensors"
        return prof

    def profile_file(self) -> Path:
        """The file of the experiment's profile (`profile`: the configured one, or the run's own)."""
        self.profile()
        if self._profile_path is None:
            raise RuntimeError("profile() set no profile file")
        return self._profile_path

    def probe(self) -> Any:
        """The profile's style probe for rerank: the one beside a configured profile (`steer probe`'s
        `X.probe.safetensors`), else `probe.safetensors` in the run directory — each taken only when
        made from this profile with the default fit; else built again into the run directory."""
        from steer.files import sha256_file
        from steer.probe_fit import probe_fit
        from steer.profiling.probe import StyleProbe, build_probe, probe_path

        profile_file = self.profile_file()
        digest = sha256_file(profile_file)
        path = self.dir.path / "probe.safetensors"
        beside = [probe_path(profile_file)] if profile_file != self.dir.path / "profile.safetensors" else []
        for candidate in [*beside, path]:
            if candidate.is_file():
                probe = StyleProbe.load(candidate)
                if (probe.profile_sha256, probe.fingerprint, probe.fit) == (digest, self.lm.fingerprint, probe_fit()):
                    self.log(f"reusing style probe {candidate}")
                    self.probe_file = candidate
                    return probe
        self.log("building the style probe from the train corpora")
        probe = build_probe(self.lm, self.profile(), dict(self.exp.train), profile_sha256=digest)
        on_main(lambda: self.dir.write(path, lambda p: probe.save(p, force=True)))
        self.probe_file = path
        judges = ", ".join(f"{k} {v:.3f}" for k, v in probe.judges_heldout_accuracy.items())
        self.log(f"style probe: held-out accuracy {probe.heldout_accuracy:.3f} (text judges: {judges})")
        return probe


def check_measured_files(exp: Experiment) -> None:
    """Before the model loads: a trained recipe (a mode or a tune candidate) needs the trained edit
    of every direction beside the profile, and a push or refusal recipe the instruction file."""
    from steer.profiling.instruction import instruction_path
    from steer.profiling.trained import TrainedEdits, trained_path

    recipes = [mode_settings(m, exp.base) for m in exp.modes if parse_mode(m)[0] not in ("tuned", "rerank")]
    recipes += [TransferSettings.bare(**_candidate(c)[1]) for c in exp.tune.get("candidates", [])]
    trained = any(r.mode == "trained" for r in recipes)
    pushed = any(r.push > 0 or r.refusal > 0 for r in recipes)
    if not (trained or pushed):
        return
    path = exp.profile_path
    if path is None or not Path(path).is_file():
        needs = "steer train" if trained else "steer instruct"
        raise SteerError(
            f"config: a {'trained' if trained else 'push or refusal'} recipe needs `{needs}` run on the profile "
            "first; set [profile] path to that profile (a run that builds its own profile has none)"
        )
    if trained:
        if not trained_path(path).is_file():
            raise SteerError(
                f"config: mode trained needs {trained_path(path).name} beside the profile; run steer train"
            )
        edits = TrainedEdits.load(trained_path(path))
        for direction in exp.directions:
            edits.edit(direction.source, direction.target, path=path)
    if pushed and not instruction_path(path).is_file():
        raise SteerError(
            f"config: push and refusal need {instruction_path(path).name} beside the profile; "
            f"run: steer instruct {path}"
        )
