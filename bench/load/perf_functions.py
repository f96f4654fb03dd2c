#!/usr/bin/env python3
"""Where replaygate's CPU time per request goes, by function, from the runs that
`PERF_DIR=DIR bench/load/cpu-per-request ...` recorded (DIR/NAME.data and DIR/NAME.cpu).

    bench/load/perf_functions.py DIR [--rows N] [--under FUNCTION] [PATTERN ...]

For each run, a function's time is the share of samples whose call chain holds it (inclusive:
its callees count), times the run's CPU time per request, in µs. The table lists the functions
whose time differs most from the first run's (runs in name order; name them so the baseline
sorts first, or pass --base NAME), with PATTERNs keeping only functions whose name holds one.
--under FUNCTION counts only the samples below that function and splits them by its callees.
Sampling with call chains slows the process, so the times are above cpu-per-request's without
perf: compare runs with each other, not with those figures.
"""

import argparse
import collections
import pathlib
import re
import subprocess
import sys

OFFSET = re.compile(r"\+0x[0-9a-f]+$")


def stacks(data: pathlib.Path):
    """Each sample's call chain, innermost first, as function names."""
    text = subprocess.run(
        ["perf", "script", "-i", str(data)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    chain = None
    for line in text.splitlines():
        if not line.strip():
            if chain is not None:
                yield chain
            chain = None
        elif line[0] not in " \t":
            chain = []
        elif chain is not None:
            parts = line.strip().split(" ", 1)
            if len(parts) == 2:
                chain.append(OFFSET.sub("", parts[1].rsplit(" (", 1)[0]))
    if chain:
        yield chain


def times(data: pathlib.Path, cpu_us: float, under: str | None):
    """µs per request of each function (inclusive), and the µs the counted samples make."""
    counts = collections.Counter()
    samples = 0
    counted = 0
    for chain in stacks(data):
        samples += 1
        if under is not None:
            if under not in chain:
                continue
            chain = chain[: chain.index(under)] or ["(self)"]
        counted += 1
        counts.update(set(chain))
    if samples == 0:
        return {}, 0.0
    per_sample = cpu_us / samples
    return {name: n * per_sample for name, n in counts.items()}, counted * per_sample


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", type=pathlib.Path)
    parser.add_argument("patterns", nargs="*")
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--under")
    parser.add_argument("--base")
    args = parser.parse_intermixed_args()
    runs = sorted(p.stem for p in args.dir.glob("*.data"))
    if not runs:
        print(f"no NAME.data in {args.dir}", file=sys.stderr)
        return 2
    if args.base:
        if args.base not in runs:
            print(f"no run {args.base} in {args.dir} (runs: {', '.join(runs)})", file=sys.stderr)
            return 2
        runs.remove(args.base)
        runs.insert(0, args.base)
    table = {}
    totals = {}
    for run in runs:
        cpu_us = float((args.dir / f"{run}.cpu").read_text())
        table[run], totals[run] = times(args.dir / f"{run}.data", cpu_us, args.under)
    names = set().union(*table.values())
    if args.patterns:
        names = {n for n in names if any(p in n for p in args.patterns)}
    base = runs[0]

    def spread(name: str) -> float:
        return max(abs(table[run].get(name, 0.0) - table[base].get(name, 0.0)) for run in runs)

    header = " | ".join(f"{run} µs" for run in runs)
    print(f"| function | {header} |")
    print("| --- |" + " ---: |" * len(runs))
    print("| (all counted samples) | " + " | ".join(f"{totals[run]:.2f}" for run in runs) + " |")
    for name in sorted(names, key=spread, reverse=True)[: args.rows]:
        cells = " | ".join(f"{table[run].get(name, 0.0):.2f}" for run in runs)
        print(f"| `{name[:110]}` | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
