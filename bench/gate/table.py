#!/usr/bin/env python3
"""Prints the gate benchmark's throughput as a markdown table, from criterion's saved estimates.

    cargo bench --bench gate && python3 bench/gate/table.py [TARGET_DIR]

Reads TARGET_DIR/criterion/GROUP/BENCH/new/{estimates,benchmark}.json (TARGET_DIR defaults to
$CARGO_TARGET_DIR, else ./target) and prints MB/s (10^6 bytes per second, from the mean time) for
each body size and each benchmark of bench/criterion/gate.rs, with gate/floor ratios.
"""

import json
import os
import sys
from pathlib import Path

COLUMNS = ["floor", "parse", "gate", "gate_first_seen"]


def mb_per_s(directory):
    estimates = json.loads((directory / "new" / "estimates.json").read_text())
    benchmark = json.loads((directory / "new" / "benchmark.json").read_text())
    size = benchmark["throughput"]["Bytes"]
    return size / (estimates["mean"]["point_estimate"] * 1e-9) / 1e6


def main():
    target = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CARGO_TARGET_DIR", "target"))
    root = target / "criterion"
    groups = sorted((d for d in root.iterdir() if (d / "floor").is_dir()),
                    key=lambda d: int("".join(c for c in d.name if c.isdigit())) * (1024 if "MiB" in d.name else 1))
    columns = [c for c in COLUMNS if all((g / c).is_dir() for g in groups)]
    print("| body | " + " | ".join(f"{c} MB/s" for c in columns) + " | gate / floor | first seen / floor |")
    print("| --- |" + " ---: |" * (len(columns) + 2))
    for group in groups:
        rates = {c: mb_per_s(group / c) for c in columns}
        ratio = lambda c: f"{rates[c] / rates['floor']:.2f}" if c in rates else "-"
        cells = " | ".join(f"{rates[c]:,.0f}" for c in columns)
        print(f"| {group.name} | {cells} | {ratio('gate')} | {ratio('gate_first_seen')} |")


if __name__ == "__main__":
    main()
