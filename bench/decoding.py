"""Decoding cost on the same texts in the same run, printed as Markdown tables.

1. Stop-at-answer and the loop guard, before → after: "before" decodes every row to the token
   limit with no loop guard and cleans afterwards (what steer did before stop-at-answer); "after"
   is the default. Generated tokens per text, wall time per text, loops, identical outputs.
2. Wall time per text of the presets prompt, guided and rerank at each of `--ladders` (with its
   probe scoring, also shown apart), and of the instruction push (λ 3, and λ 8 with guidance) where
   `steer instruct` measured the direction beside the profile, same texts and batch size; the ratio
   to prompt is the figure to read. With `--unshared`, guided also runs with the shared prefill off
   (`Steerer.share_prefill`), to show what it saves and that the outputs are the same; with
   `--keep-finished`, prompt and each rerank ladder also run with finished rows kept in the batch
   to the end, as `generate()` does (`Steerer.drop_finished_rows` off). With `--markers-from`,
   keep-words leaves out and lowers the source style's markers found in those texts, as a run does.

    python bench/decoding.py --corpus ../shared/data/formality/dev.formal.txt --texts 32
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from options import decoding_options, load_decoding  # noqa: E402  (bench/options.py, this script's folder)

from steer.generation.replies import clean_output  # noqa: E402
from steer.generation.steerer import Steerer, TransferSettings  # noqa: E402
from steer.profiling.corpus import read_texts  # noqa: E402
from steer.prompts import prompt_template  # noqa: E402
from steer.scoring.faithfulness import instruction_text  # noqa: E402
from steer.scoring.loops import has_loop  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    decoding_options(ap)
    ap.add_argument("--skip-stop", action="store_true", help="Only the preset-cost table.")
    ap.add_argument("--ladders", default="0,u0.5,1,3;0,u0.5,u1,3;0,1,2,3", help="rerank ladders to time, ';'-separated")
    ap.add_argument("--unshared", action="store_true", help="Also time guided with the shared prefill off.")
    ap.add_argument(
        "--keep-finished", action="store_true", help="Also time prompt and rerank with finished rows kept in the batch."
    )
    ap.add_argument(
        "--markers-from", nargs=2, metavar=("SOURCE_TEXTS", "TARGET_TEXTS"),
        help="Training texts of both styles: keep-words leaves out and lowers the source style's markers, as in a run.",
    )  # fmt: skip
    args = ap.parse_args()
    profile, lm, texts = load_decoding(args)
    markers = None
    if args.markers_from:
        from steer.generation.markers import StyleMarkers

        source_texts, target_texts = (read_texts(f) for f in args.markers_from)
        markers = StyleMarkers({args.source: source_texts, args.target: target_texts})
    steerer = Steerer(lm, profile, markers=markers)
    print(
        f"{len(texts)} texts of {args.corpus}, {args.source} → {args.target}, greedy, "
        f"max {args.max_new_tokens} new tokens, batch {args.batch_size}, {torch.get_num_threads()} threads\n"
    )
    print("| preset | run | new tokens / text | s / text | loops | cleaned outputs equal to before |")
    print("|---|---|---|---|---|---|")
    for preset in ("prompt", "guided"):
        after = TransferSettings.preset(preset, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
        if args.skip_stop:
            break
        before = replace(after, clean=False, loop_guard=False)
        rows = {}
        for label, settings in (("before", before), ("after", after)):
            start = time.perf_counter()
            results = steerer.transfer(texts, args.source, args.target, settings)
            seconds = time.perf_counter() - start
            outputs = [r.output if settings.clean else clean_output(r.raw_output) for r in results]
            tokens = sum(r.info["new_tokens"] for r in results) / len(texts)
            rows[label] = (outputs, tokens, seconds / len(texts))
        base = rows["before"]
        for label, (outputs, tokens, per_text) in rows.items():
            same = sum(a == b for a, b in zip(outputs, base[0], strict=True))
            loops = sum(has_loop(o) for o in outputs)
            print(
                f"| {preset} | {label} | {tokens:.1f} ({tokens / base[1]:.2f}×) | {per_text:.2f} "
                f"({per_text / base[2]:.2f}×) | {loops} of {len(texts)} | {same} of {len(texts)} |"
            )
    preset_costs(steerer, args, texts)


def preset_costs(steerer: Steerer, args: argparse.Namespace, texts: list[str]) -> None:
    """Wall time per text of prompt, guided and rerank at each `--ladders` ladder (probe scoring
    included, and shown apart: decoding the rungs, then ranking them)."""
    from steer.generation.rerank import Reranker
    from steer.ladder import RerankSettings, parse_ladder
    from steer.profiling.probe import StyleProbe, build_probe, probe_path

    path = probe_path(args.profile)
    if path.is_file():
        probe = StyleProbe.load(path)
    else:
        corpora = {s: read_texts(m["source"])[:600] for s, m in steerer.profile.corpora.items()}
        probe = build_probe(steerer.lm, steerer.profile, corpora, compare_judges=False)
    reranker = Reranker(steerer, probe)
    print(f"\nPreset cost ({len(texts)} texts, batch {args.batch_size}):\n")
    print("| preset | rows / text | s / text | vs prompt | of which scoring | new tokens / text |")
    print("|---|---|---|---|---|---|")
    base = TransferSettings.preset("guided", max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    plain = TransferSettings.resolve("prompt", base=base)
    runs = {
        "prompt": (1, lambda: (steerer.transfer(texts, args.source, args.target, plain), 0.0)),
        "guided": (2, lambda: (steerer.transfer(texts, args.source, args.target, base), 0.0)),
    }

    def rerank(settings: RerankSettings) -> tuple[list, float]:
        decoded = steerer.transfer_candidates(texts, args.source, args.target, settings.candidates())
        start = time.perf_counter()
        template = prompt_template(args.source, args.target, settings.base, steerer.prompts)
        instruction = instruction_text(template, args.source, args.target)
        results = reranker.rank(texts, args.target, decoded, settings, None, instruction)
        return results, time.perf_counter() - start

    from steer.profiling.instruction import InstructionShifts, instruction_path

    measured = (
        InstructionShifts.load(instruction_path(args.profile)) if instruction_path(args.profile).is_file() else None
    )
    if measured is not None and f"{args.source}->{args.target}" in measured.shifts:  # `steer instruct` measured it
        pushed = TransferSettings.resolve("prompt", base=base, push=3.0, guidance=0.0)
        guided_push = TransferSettings.resolve("prompt", base=base, push=8.0, guidance=1.0)
        runs["push λ=3"] = (1, lambda: (steerer.transfer(texts, args.source, args.target, pushed), 0.0))
        runs["push λ=8 + guidance"] = (2, lambda: (steerer.transfer(texts, args.source, args.target, guided_push), 0.0))
    for spec in args.ladders.split(";"):
        settings = RerankSettings(ladder=parse_ladder(spec), base=base)
        rows = sum(r.rows for r in settings.ladder)
        runs[f"rerank {settings.label}"] = (rows, lambda settings=settings: rerank(settings))
    if args.unshared:  # every row group prefilling its own copy of the prompt (what steer did before)
        runs["guided, prefill not shared"] = runs["guided"]
    kept = {}
    if args.keep_finished:  # every row decoded until the batch's last one stops (what generate() does)
        kept = {f"{name}, finished rows kept": name for name in runs if name.startswith(("prompt", "rerank"))}
        runs.update({alias: runs[name] for alias, name in kept.items()})
    steerer.transfer(texts[: args.batch_size], args.source, args.target, plain)  # warm-up, untimed
    first = None
    tokens_of: dict[str, list[list[int]]] = {}
    for name, (rows, run) in runs.items():
        # a steerer (and its reranker) built with this run's switches; the closures above read these names
        steerer = Steerer(
            steerer.lm, steerer.profile, markers=steerer.markers, share_prefill="not shared" not in name,
            drop_finished_rows=name not in kept, instructions=measured,
        )  # fmt: skip
        reranker = Reranker(steerer, probe)
        start = time.perf_counter()
        results, scoring = run()
        per_text = (time.perf_counter() - start) / len(texts)
        first = first or per_text
        tokens = sum(r.info["new_tokens"] for r in results) / len(texts)
        tokens_of[name] = [r.info["token_ids"] for r in results]
        share = f"{scoring / len(texts) / first:.2f}×" if scoring else "—"
        print(f"| {name} | {rows} | {per_text:.2f} | {per_text / first:.2f}× | {share} | {tokens:.1f} |")
    for alias, name in kept.items():
        same = sum(a == b for a, b in zip(tokens_of[name], tokens_of[alias], strict=True))
        print(f"\n{name}: {same} of {len(texts)} winning outputs token-identical with finished rows kept")
    if args.unshared:
        same = sum(a == b for a, b in zip(tokens_of["guided"], tokens_of["guided, prefill not shared"], strict=True))
        print(f"\nguided: {same} of {len(texts)} outputs token-identical with and without the shared prefill")


if __name__ == "__main__":
    main()
