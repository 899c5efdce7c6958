"""A style probe read from the model's own neurons: P(style | a text's mean activations of the
MLP neurons whose means differ most between the styles), stored beside its profile.

The probe needs no external classifier: the profile says which neurons carry the style, and a
logistic regression on their per-text mean activations (one forward pass of the unedited model)
turns them into a probability. The same pass gives the text's log-likelihood, so the reranker
scores style and fluency at once. Artefact: safetensors (neurons, standardisation, weights) +
JSON metadata (styles, held-out accuracy, the profile's sha256, the text judges' held-out
accuracy on the same split for comparison). Nothing is ever unpickled.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import Tensor

from steer.distributed import map_sharded
from steer.errors import SteerError
from steer.files import atomic_path, read_safetensors, sha256_file
from steer.model.hooks import capture_neurons
from steer.model.invariant import one_thread
from steer.model.loading import LoadedModel
from steer.model.padding import pad_rows
from steer.probe_fit import PROBE_C, PROBE_LIMIT, PROBE_TOP, probe_fit
from steer.profiling.profile import StyleProfile
from steer.scoring.fluency import rows_nll
from steer.scoring.judges import heldout_cut
from steer.version import __version__

FORMAT = "steer.probe"
FORMAT_VERSION = 1
PROBE_HELDOUT = 0.1  # the share of the texts held out to measure the probe (and the text judges beside it)


def probe_path(profile_path: str | Path) -> Path:
    """Where a profile's probe lives: `x.safetensors` → `x.probe.safetensors`."""
    path = Path(profile_path)
    return path.with_name(f"{path.name.removesuffix('.safetensors')}.probe.safetensors")


def style_neurons(profile: StyleProfile, top: int) -> tuple[Tensor, Tensor]:
    """(layers, neurons) of the `top` neurons whose mean activation varies most across styles."""
    means = torch.stack([profile.counts[s].mean.float() for s in profile.styles])  # [styles, L, N]
    spread = means.max(0).values - means.min(0).values
    top = min(top, spread.numel())
    flat = spread.reshape(-1).topk(top).indices.sort().values
    return flat // profile.num_neurons, flat % profile.num_neurons


@dataclass
class TextFeatures:
    """Per text: mean activation of the probe's neurons [n, k], and (summed NLL, tokens) under the model."""

    activations: Tensor
    nll: list[tuple[float, int]] = field(default_factory=list)


def read_features(
    lm: LoadedModel,
    texts: Sequence[str],
    layers: Tensor,
    neurons: Tensor,
    *,
    batch_size: int = 16,
    invariant: bool = False,
) -> TextFeatures:
    """One forward pass of the unedited model per batch: masked mean activations of the chosen
    neurons, and each text's next-token NLL. Empty texts get zero features and (0, 0).

    `invariant`: each text alone on one thread (`steer.model.invariant`), for numbers that records
    carry: then they are the same bits whatever the batch, the workers or the cores."""
    if invariant:
        with one_thread():
            return read_features(lm, texts, layers, neurons, batch_size=1)
    tok = lm.tokenizer
    by_layer: dict[int, Tensor] = {}
    columns: dict[int, Tensor] = {}
    for layer in layers.unique().tolist():
        where = (layers == layer).nonzero().reshape(-1)
        by_layer[int(layer)], columns[int(layer)] = neurons[where], where
    encoded = [tok(t, add_special_tokens=True)["input_ids"][:512] if t and t.strip() else [] for t in texts]
    out = torch.zeros(len(texts), len(neurons))
    nll: list[tuple[float, int]] = [(0.0, 0)] * len(texts)
    order = sorted((i for i, e in enumerate(encoded) if e), key=lambda i: -len(encoded[i]))
    with capture_neurons(lm.activation_sites(), by_layer) as captured, torch.inference_mode():
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            ids, mask = pad_rows([encoded[i] for i in chunk], tok.pad_token_id, "right")
            logits = lm.model(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device)).logits.float()
            weights = mask.float().unsqueeze(-1)
            feats = torch.zeros(len(chunk), len(neurons))
            for layer, cols in columns.items():
                act = captured[layer].cpu()
                feats[:, cols] = (act * weights).sum(1) / weights.sum(1).clamp_min(1)
            out[chunk] = feats
            if ids.shape[1] > 1:
                for i, scored in zip(chunk, rows_nll(logits.cpu(), ids, mask), strict=True):
                    nll[i] = scored
    return TextFeatures(out, nll)


@dataclass(frozen=True)
class StyleProbe:
    """Logistic regression on standardised mean activations of a profile's most style-different neurons."""

    styles: tuple[str, ...]
    layers: Tensor  # long [k]
    neurons: Tensor  # long [k]
    center: Tensor  # [k]
    scale: Tensor  # [k]
    coef: Tensor  # [classes, k] (one row for two styles: the second style's log-odds)
    intercept: Tensor  # [classes]
    fingerprint: str
    profile_sha256: str
    heldout_accuracy: float
    judges_heldout_accuracy: dict[str, float] = field(default_factory=dict)
    train_size: int = 0
    heldout_size: int = 0
    fit: dict[str, float] = field(default_factory=dict)  # `probe_fit` (empty: a probe written before it was recorded)

    def __post_init__(self) -> None:
        # row-major copies: a product's rounding depends on its operands' strides (scikit-learn's
        # one-row `coef_` arrives with stride 0), so a probe just built must score with the same bits
        # as the same probe read back from its file
        for name in ("center", "scale", "coef", "intercept"):
            value = getattr(self, name)
            object.__setattr__(self, name, value.detach().reshape(-1).clone().reshape(value.shape))

    def probabilities_of(self, activations: Tensor) -> Tensor:
        """P(style) per row of mean activations [n, k] → [n, styles]."""
        logits = ((activations - self.center) / self.scale) @ self.coef.T + self.intercept
        if logits.shape[1] == 1:  # binary: sklearn keeps one row, the log-odds of the second class
            return torch.cat([torch.sigmoid(-logits), torch.sigmoid(logits)], 1)
        return logits.softmax(-1)

    def check_model(self, lm: LoadedModel) -> None:
        if lm.fingerprint != self.fingerprint:
            raise SteerError(
                f"the probe was built on a model with fingerprint {self.fingerprint}, not {lm.fingerprint} "
                f"({lm.model_id}); rebuild it with 'steer probe'"
            )

    def score(self, lm: LoadedModel, texts: Sequence[str], target: str) -> tuple[list[float], list[tuple[float, int]]]:
        """P(target) per text (0 for an empty text) and each text's (summed NLL, tokens), each read
        alone on one thread, so that records carry the same bits however texts were batched."""
        if target not in self.styles:
            raise SteerError(f"the probe knows styles {', '.join(self.styles)}, not {target!r}")
        features = read_features(lm, texts, self.layers, self.neurons, invariant=True)
        with one_thread():  # one row per product too: a matrix product's rounding depends on its row count
            rows = [self.probabilities_of(row[None]) for row in features.activations]
        column = self.styles.index(target)
        probs = [float(r[0, column]) for r in rows]
        return [p if t and t.strip() else 0.0 for p, t in zip(probs, texts, strict=True)], features.nll

    def save(self, path: str | Path, *, force: bool = False) -> Path:
        from safetensors.torch import save_file

        path = Path(path)
        if path.exists() and not force:
            raise SteerError(f"{path} exists; pass `force` to overwrite it")
        tensors = {
            "layers": self.layers.long().contiguous(),
            "neurons": self.neurons.long().contiguous(),
            "center": self.center.float().contiguous(),
            "scale": self.scale.float().contiguous(),
            "coef": self.coef.float().contiguous(),
            "intercept": self.intercept.float().contiguous(),
        }
        meta = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "steer_version": __version__,
            "styles": list(self.styles),
            "fingerprint": self.fingerprint,
            "profile_sha256": self.profile_sha256,
            "heldout_accuracy": self.heldout_accuracy,
            "judges_heldout_accuracy": self.judges_heldout_accuracy,
            "train_size": self.train_size,
            "heldout_size": self.heldout_size,
            "fit": self.fit,
        }
        with atomic_path(path) as tmp:
            save_file(tensors, tmp, metadata={"steer": json.dumps(meta)})
        return path

    @classmethod
    def load(cls, path: str | Path) -> StyleProbe:
        """Read and validate a probe; never unpickles anything."""
        path = Path(path)
        if not path.is_file():
            raise SteerError(f"probe {path} does not exist; build it with 'steer probe PROFILE'")
        profile = path.with_name(path.name.removesuffix(".probe.safetensors") + ".safetensors")
        raw, tensors = read_safetensors(path, "probe", f"rebuild it with: steer probe {profile} --force")
        try:
            meta = json.loads(raw or "")
            if meta.get("format") != FORMAT or int(meta["format_version"]) > FORMAT_VERSION:
                raise SteerError(f"{path} is not a steer probe this version reads; rebuild it with 'steer probe'")
            k = tensors["neurons"].shape[0]
            styles = tuple(str(s) for s in meta["styles"])
            ok = (
                tensors["layers"].shape == (k,)
                and tensors["center"].shape == (k,)
                and tensors["scale"].shape == (k,)
                and tensors["coef"].shape[1] == k
                and tensors["coef"].shape[0] in (1, len(styles))
                and tensors["intercept"].shape == (tensors["coef"].shape[0],)
                and bool((tensors["scale"] > 0).all())
            )
            if not ok or len(styles) < 2:
                raise SteerError(f"{path}: probe tensors are inconsistent; rebuild it with 'steer probe'")
            return cls(
                styles=styles,
                layers=tensors["layers"],
                neurons=tensors["neurons"],
                center=tensors["center"],
                scale=tensors["scale"],
                coef=tensors["coef"],
                intercept=tensors["intercept"],
                fingerprint=str(meta["fingerprint"]),
                profile_sha256=str(meta["profile_sha256"]),
                heldout_accuracy=float(meta["heldout_accuracy"]),
                judges_heldout_accuracy={str(a): float(b) for a, b in meta.get("judges_heldout_accuracy", {}).items()},
                train_size=int(meta.get("train_size", 0)),
                heldout_size=int(meta.get("heldout_size", 0)),
                fit={str(a): float(b) for a, b in meta.get("fit", {}).items()},
            )
        except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
            raise SteerError(f"{path}: probe metadata is incomplete or corrupt ({exc})") from None


def build_probe(
    lm: LoadedModel,
    profile: StyleProfile,
    corpora: Mapping[str, Sequence[str]],
    *,
    profile_sha256: str = "",
    top: int = PROBE_TOP,
    limit: int = PROBE_LIMIT,
    c: float = PROBE_C,
    heldout: float = PROBE_HELDOUT,
    seed: int = 0,
    compare_judges: bool = True,
) -> StyleProbe:
    """Fit the probe on up to `limit` texts per style (L2 strength 1/`c`); report held-out accuracy
    (and, with `compare_judges`, the TF-IDF and MiniLM judges' on the same split)."""
    from sklearn.linear_model import LogisticRegression

    fit = probe_fit(top, limit, c)
    profile.check_model(lm.model_type, lm.num_layers, lm.num_neurons, lm.fingerprint, lm.model_id)
    missing = [s for s in profile.styles if s not in corpora]
    if missing:
        raise SteerError(f"the probe needs texts of every profiled style; {missing[0]!r} has none")
    rng = random.Random(seed)
    rows = []
    for style in profile.styles:
        texts = [t for t in corpora[style] if t.strip()]
        rng.shuffle(texts)
        rows += [(t, style) for t in texts[:limit]]
    rng.shuffle(rows)
    cut = heldout_cut(len(rows), heldout)
    test, train = rows[:cut], rows[cut:]
    if len({s for _, s in train}) < 2:
        raise SteerError("the probe needs training texts of at least two styles")
    layers, neurons = style_neurons(profile, top)
    # per text, so several processes (steer run --processes N) each read their share
    rows_of = map_sharded(lambda part: list(read_features(lm, part, layers, neurons).activations), [t for t, _ in rows])
    feats = torch.stack(rows_of)
    train_x, test_x = feats[cut:], feats[:cut]
    center = train_x.mean(0)
    scale = train_x.std(0).clamp_min(1e-6)
    model = LogisticRegression(max_iter=3000, C=c)
    model.fit(((train_x - center) / scale).numpy(), [s for _, s in train])
    order = [list(model.classes_).index(s) for s in profile.styles if s in model.classes_]
    coef = torch.tensor(model.coef_, dtype=torch.float32)
    intercept = torch.tensor(model.intercept_, dtype=torch.float32)
    styles = tuple(str(c) for c in model.classes_)
    if coef.shape[0] > 1:  # keep the profile's style order
        coef, intercept, styles = coef[order], intercept[order], tuple(styles[i] for i in order)
    probe = StyleProbe(
        styles, layers, neurons, center, scale, coef, intercept, lm.fingerprint, profile_sha256, float("nan"),
        train_size=len(train), heldout_size=len(test), fit=fit,
    )  # fmt: skip
    accuracy = float("nan")
    if test:
        predicted = probe.probabilities_of(test_x).argmax(-1).tolist()
        accuracy = sum(probe.styles[p] == s for p, (_, s) in zip(predicted, test, strict=True)) / len(test)
    judges: dict[str, float] = {}
    if compare_judges and test:
        from steer.scoring.judges import EmbeddingClassifier, StyleClassifier

        split = {s: [t for t, style in train if style == s] for s in profile.styles}
        for judge in (StyleClassifier(split, heldout=0.0), EmbeddingClassifier(split, heldout=0.0)):
            judge._score_heldout(test)
            judges[judge.name] = judge.heldout_accuracy
    return StyleProbe(
        probe.styles, layers, neurons, center, scale, probe.coef, probe.intercept, lm.fingerprint, profile_sha256,
        accuracy, judges, len(train), len(test), fit,
    )  # fmt: skip


def load_probe_for(profile_path: str | Path, lm: LoadedModel) -> StyleProbe:
    """The probe stored beside a profile, checked against the model and the profile's bytes."""
    probe = StyleProbe.load(probe_path(profile_path))
    probe.check_model(lm)
    if probe.profile_sha256 and probe.profile_sha256 != sha256_file(profile_path):
        raise SteerError(
            f"the probe beside {profile_path} was built from another profile or an earlier version of this file; "
            f"rebuild it with 'steer probe {profile_path} --force'"
        )
    return probe


def restamp_probe(profile_path: str | Path, old_sha256: str) -> bool:
    """After `steer calibrate` rewrote a profile (its counts, and so the neurons the probe reads,
    unchanged): the probe beside it, when it was built from the old file, now names the new one.
    False when there is no probe, or it was built from yet another file (left as it is)."""
    path = probe_path(profile_path)
    if not path.is_file():
        return False
    probe = StyleProbe.load(path)
    if probe.profile_sha256 != old_sha256:
        return False
    replace(probe, profile_sha256=sha256_file(profile_path)).save(path, force=True)
    return True
