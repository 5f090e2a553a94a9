#!/usr/bin/env python3
"""How well `metafork tune`'s ranking orders configurations that were timed on a GPU.

Usage: bench/rank_check.py MEASURED.tsv TUNE.yaml [MEASURED.tsv TUNE.yaml ...]

MEASURED.tsv is a tuning harness's cache (`./harness --all --cache FILE`: device, program,
sizes, parameters, answer, median ms, difference); TUNE.yaml is `metafork tune ... -o FILE` for
the same program, sizes and device profile. Only configurations whose answer matched the serial
program count. For each pair it prints one table row: configurations joined, Spearman's rank
correlation between the model's estimated time and the measured one, the fastest's rank in the
model's order, the model's #1 over the fastest, and the best of the model's top 10 over the
fastest (what the harness's default search starts from). Needs python3 with PyYAML only.
"""
import sys

import yaml


def measured(path):
    """{schedule: {parameters: median ms}} for the configurations whose answer matched."""
    times = {}
    for line in open(path):
        cols = line.rstrip("\n").split("\t")
        if len(cols) < 6 or cols[4] != "matches":
            continue
        times.setdefault(cols[1], {})[cols[3]] = float(cols[5])
    return times


def model(path):
    """{schedule: the model's order, best first: parameters as the harness writes them}."""
    doc = yaml.safe_load(open(path))
    return {s["schedule"]: [" ".join(f"{k}={v}" for k, v in sorted(c["parameters"].items())) for c in s["admissible"]] for s in doc}


def ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(xs, ys):
    rx, ry = ranks(xs), ranks(ys)
    n = len(xs)
    mx, my = sum(rx) / n, sum(ry) / n
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx) ** 0.5
    vy = sum((b - my) ** 2 for b in ry) ** 0.5
    return cov / (vx * vy) if vx and vy else float("nan")


def main(args):
    if len(args) < 2 or len(args) % 2:
        sys.exit(__doc__)
    print("| measured | joined | Spearman (model time vs measured) | fastest's model rank | #1 / fastest | best of top 10 / fastest |")
    print("|---|---|---|---|---|---|")
    for tsv, tune in zip(args[0::2], args[1::2]):
        orders = model(tune)
        for schedule, times in sorted(measured(tsv).items()):
            shown = tsv if len(orders) == 1 else f"{tsv} ({schedule})"
            order = [k for k in orders.get(schedule, []) if k in times]
            if not order:
                print(f"| {shown} | 0 | | | | |")
                continue
            fastest = min(times[k] for k in order)
            rank = 1 + next(i for i, k in enumerate(order) if times[k] == fastest)
            rho = spearman(list(range(len(order))), [times[k] for k in order])
            top10 = min(times[k] for k in order[:10])
            print(f"| {shown} | {len(order)} | {rho:.2f} | {rank} | {times[order[0]] / fastest:.2f} | {top10 / fastest:.2f} |")

if __name__ == "__main__":
    main(sys.argv[1:])
