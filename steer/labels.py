"""A recipe's short human label (`describe`): what records, tables and progress lines call it."""

from __future__ import annotations

from typing import Any

from steer.settings import TransferSettings


def describe(settings: TransferSettings | dict[str, Any]) -> str:
    """A short human label for a recipe, e.g. `shift 5% λ=2 guidance γ=1` or `deactivate paper 1% + contrast β=1`."""
    f = (
        settings.to_dict()
        if isinstance(settings, TransferSettings)
        else {**TransferSettings.bare().to_dict(), **settings}
    )
    shots = f" + {f['examples']} examples" if f.get("examples") else ""
    if f["mode"] == "prompt":
        extra = _instruction_contrast(f) + _instructed(f)
        return ("prompt" + extra if extra else "prompt only") + shots
    if f["mode"] == "shift":
        parts = [f"shift {f['top_k']} λ={f['strength']:g}"]
    elif f["mode"] == "trained":  # its neurons and values come from the trained file, not these fields
        parts = ["trained edit"]
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
    return " ".join(parts) + _instruction_contrast(f) + _instructed(f) + shots


def _instruction_contrast(f: dict[str, Any]) -> str:
    """The instruction contrast's part of a recipe's label ("" when off)."""
    gamma = f.get("instruction_contrast") or 0
    return f" + instruction contrast γ={gamma:g} α={f['alpha']:g} ({f.get('neutral', 'paraphrase')})" if gamma else ""


def _instructed(f: dict[str, Any]) -> str:
    """The instruction push's and the refusal projection's part of a label ("" when both are off)."""
    out = ""
    if f.get("push"):
        shape = [f.get("push_top_k", "1%")]
        if f.get("push_schedule", "all") != "all":
            shape.append(f["push_schedule"])
        if not f.get("push_gate", True):
            shape.append("ungated")
        out += f" + push λ={f['push']:g} ({', '.join(shape)})"
    if f.get("refusal"):
        out += f" + refusal removed ×{f['refusal']:g}"
    if out and f.get("guidance") and f["mode"] == "prompt":  # an edit's guidance is named with the edit
        out += f" + guidance γ={f['guidance']:g} α={f['alpha']:g}"
    return out
