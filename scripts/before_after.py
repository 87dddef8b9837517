#!/usr/bin/env python3
"""Before/after tables of `cumind benchmark` results, for scripts/benchmark_gpu.sh (BEFORE=).

    python3 scripts/before_after.py DIR

DIR holds {conv,small}_{before,after,nographs,variant-NAME}_{N}.json (the JSON that `cumind
benchmark --out` writes, round N = 1, 2, ...; a variant is the after binary with one `--set`)
and, beside each, a .mem file with the peak GPU memory in MiB that the script sampled. Each
figure is the median over the rounds; the tables print in Markdown.
"""

import json
import statistics
import sys
from pathlib import Path


def rounds(directory: Path, network: str, side: str):
    """The reports of every round of one network and binary, with their peak memory."""
    found = []
    for path in sorted(directory.glob(f"{network}_{side}_*.json")):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        mem_path = Path(str(path) + ".mem")
        try:
            mem = float(mem_path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            mem = float("nan")
        found.append((report, mem))
    return found


def median(values):
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def inference(reports):
    """(dtype, batch) -> (recurrent inferences/s, ms per search, the search's recurrent
    inferences/s or NaN where the binary does not report them), medians over rounds."""
    cells = {}
    for report, _ in reports:
        for row in report["rows"]:
            cells.setdefault((row["dtype"], row["batch"]), []).append(
                (
                    row["recurrent_per_second"],
                    row["search_ms"],
                    row.get("search_recurrent_per_second", float("nan")),
                )
            )
    return {
        key: tuple(median([v[i] for v in vals]) for i in range(3))
        for key, vals in cells.items()
    }


def training(reports):
    """dtype -> ms per training step (one replica), median over rounds."""
    cells = {}
    for report, _ in reports:
        for row in report["training"]:
            if row["replicas"] == 1:
                cells.setdefault(row["dtype"], []).append(row["step_ms"])
    return {key: median(vals) for key, vals in cells.items()}


def shared_keys(first, second):
    """The (dtype, batch) cells both tables hold, float32 first, then by batch."""
    return sorted(set(first) & set(second), key=lambda k: (k[0] != "float32", k[1]))


def paired_rows(base, new, rate):
    """One row per shared cell: inferences/s (the cell's value at index `rate`) and ms per
    search, base then new, each with new's speed over base's."""
    rows = []
    for key in shared_keys(base, new):
        (rb, sb), (rn, sn) = (base[key][rate], base[key][1]), (new[key][rate], new[key][1])
        rows.append(
            f"| {key[0]} | {key[1]:,} | {rb:,.0f} | {rn:,.0f} | {rn / rb:.2f} "
            f"| {sb:.2f} | {sn:.2f} | {sb / sn:.2f} |"
        )
    return rows


def table(directory: Path, network: str, title: str) -> str:
    before, after = rounds(directory, network, "before"), rounds(directory, network, "after")
    if not before or not after:
        return f"## {title}\n\n(no results for {network})\n"
    out = [f"## {title}", ""]
    out.append(f"Rounds: {len(before)} before, {len(after)} after (medians over them).")
    out.append("")
    out.append(
        "| dtype | batch | recurrent inf/s before | after | x "
        "| search's call inf/s before | after | x | ms/search before | after | x |"
    )
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    b, a = inference(before), inference(after)
    for key in shared_keys(b, a):
        (rb, sb, qb), (ra, sa, qa) = b[key], a[key]
        out.append(
            f"| {key[0]} | {key[1]:,} | {rb:,.0f} | {ra:,.0f} | {ra / rb:.2f} "
            f"| {qb:,.0f} | {qa:,.0f} | {qa / qb:.2f} "
            f"| {sb:.2f} | {sa:.2f} | {sb / sa:.2f} |"
        )
    off = inference(rounds(directory, network, "nographs"))
    if off:
        out.append("")
        out.append(
            "The search's own recurrent call (parents gathered, dynamics and prediction, "
            "children stored, one read), the after binary without and with CUDA graphs:"
        )
        out.append("")
        out.append(
            "| dtype | batch | inf/s without graphs | with | x | ms/search without | with | x |"
        )
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        out.extend(paired_rows(off, a, 2))
    prefix = f"{network}_variant-"
    variants = sorted(
        {p.name[len(prefix) :].rsplit("_", 1)[0] for p in directory.glob(f"{prefix}*_*.json")}
    )
    tb, ta = training(before), training(after)
    for name in variants:
        found = rounds(directory, network, f"variant-{name}")
        v, tv = inference(found), training(found)
        out.append("")
        out.append(
            f"Variant `{name}` (the after binary with one `--set`, {len(found)} rounds) against after:"
        )
        out.append("")
        out.append("| dtype | batch | recurrent inf/s after | variant | x | ms/search after | variant | x |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        out.extend(paired_rows(a, v, 0))
        for dtype in sorted(set(tv) & set(ta)):
            t = ta[dtype]
            out.append(
                f"| {dtype} | training ms/step | {t:.2f} | {tv[dtype]:.2f} | {t / tv[dtype]:.2f} | | | |"
            )
        out.append("")
        out.append(
            f"Peak GPU memory: after {median([m for _, m in after]):,.0f} MiB, "
            f"variant {median([m for _, m in found]):,.0f} MiB."
        )
    if tb and ta:
        report = after[0][0]
        batch = next((r["batch"] for r in report["training"]), 0)
        unroll = next((r["unroll_steps"] for r in report["training"]), 0)
        out.append("")
        out.append(f"| dtype | training ms/step before (batch {batch:,}, K = {unroll}) | after | x |")
        out.append("|---|---:|---:|---:|")
        for dtype in sorted(set(tb) & set(ta)):
            out.append(
                f"| {dtype} | {tb[dtype]:.2f} | {ta[dtype]:.2f} | {tb[dtype] / ta[dtype]:.2f} |"
            )
    out.append("")
    out.append("bf16 against f32 (after):")
    out.append("")
    out.append("| batch | recurrent inf/s bf16 / f32 | search bf16 / f32 (speed) |")
    out.append("|---:|---:|---:|")
    for batch in sorted({k[1] for k in a}):
        f, h = a.get(("float32", batch)), a.get(("bfloat16", batch))
        if f and h:
            out.append(f"| {batch:,} | {h[0] / f[0]:.2f} | {f[1] / h[1]:.2f} |")
    if ta.get("float32") and ta.get("bfloat16"):
        out.append(f"| training | | {ta['float32'] / ta['bfloat16']:.2f} |")
    mb = median([m for _, m in before])
    ma = median([m for _, m in after])
    out.append("")
    out.append(
        f"Peak GPU memory of the whole benchmark (nvidia-smi every 100 ms, over idle): "
        f"before {mb:,.0f} MiB, after {ma:,.0f} MiB."
    )
    out.append("")
    return "\n".join(out)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    directory = Path(sys.argv[1])
    print(table(directory, "conv", "Conv ResNet (agents/connect4_gpu.json)"))
    print(table(directory, "small", "CartPole's default network"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
