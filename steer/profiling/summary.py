"""What a profile holds, as data: its model, styles, strength calibration, where one direction's
style-specific neurons sit layer by layer, and its style probe — what `steer inspect` prints and
`steer inspect --json` writes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from steer.profiling.corpus import source_file
from steer.profiling.probe import StyleProbe, probe_path
from steer.profiling.profile import StyleProfile


def summarize(
    prof: StyleProfile, path: Path, source: str | None, target: str | None, top_k: str, method: str
) -> dict[str, Any]:
    """The profile at `path` described for `source` → `target` (default: its first two styles)."""
    source = source or prof.styles[0]
    target = target or next(s for s in prof.styles if s != source)
    selection = prof.neurons(source, target, top_k=top_k, method=method)
    styles = []
    for style, counts in prof.counts.items():
        recorded = str(prof.corpora.get(style, {}).get("source") or "")
        file = source_file(recorded) if recorded else None
        styles.append({
            "style": style, "texts": counts.num_texts, "tokens": counts.num_tokens,
            "mean_rate": round(float(counts.rate.mean().item()), 6), "corpus": recorded or None,
            "corpus_found": file is not None and Path(file).is_file(),
        })  # fmt: skip
    probe = None
    if probe_path(path).is_file():
        built = StyleProbe.load(probe_path(path))
        accuracy = None if math.isnan(built.heldout_accuracy) else built.heldout_accuracy
        probe = {
            "file": probe_path(path).name, "neurons": int(built.neurons.numel()), "heldout_accuracy": accuracy,
            "heldout_size": built.heldout_size, "judges_heldout_accuracy": dict(built.judges_heldout_accuracy),
        }  # fmt: skip
    layers = {
        f"{source}_only": selection.source.per_layer(),
        f"{target}_only": selection.target.per_layer(),
        "shared": selection.shared.per_layer(),
    }
    return {
        "profile": str(path), "steer_version": prof.steer_version,
        "model": {"id": prof.model_id, "type": prof.model_type, "layers": prof.num_layers,
                  "neurons_per_layer": prof.num_neurons, "fingerprint": prof.fingerprint,
                  "activation": prof.settings.get("activation")},
        "styles": styles,
        "calibration": {"unit": prof.unit(), "per_direction": dict(prof.calibration)} if prof.calibration else None,
        "selection": {"source": source, "target": target, "method": method, "top_k": top_k,
                      "per_style": selection.top_k, "of": prof.total_neurons,
                      "per_layer": {name: [int(x) for x in col] for name, col in layers.items()}},
        "probe": probe,
    }  # fmt: skip
