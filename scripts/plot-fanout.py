#!/usr/bin/env python3
"""Plots hearth-bench fan-out results as an SVG: notification latency (p50, p99) against the
number of listeners, one pair of lines per labelled series.

    python3 scripts/plot-fanout.py OUT.svg LABEL=RESULTS.jsonl [LABEL=RESULTS.jsonl ...]

Each RESULTS.jsonl holds `hearth-bench fanout` JSON lines; lines of other benchmarks are
skipped. Several lines for one listener count are reduced to their median.
"""

import json
import math
import statistics
import sys


def load(path):
    points = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            d = json.loads(line)
            if d.get("bench") != "fanout" or "notify_ms" not in d:
                continue
            n = d["params"]["listeners"]
            points.setdefault(n, []).append((d["notify_ms"]["p50"], d["notify_ms"]["p99"]))
    return {
        n: (statistics.median(p for p, _ in v), statistics.median(q for _, q in v))
        for n, v in sorted(points.items())
    }


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = sys.argv[1]
    series = []
    for arg in sys.argv[2:]:
        label, _, path = arg.partition("=")
        series.append((label, load(path)))
    xs = sorted({n for _, pts in series for n in pts})
    top = max(q for _, pts in series for _, q in pts.values())
    step = 25 if top <= 150 else 50 if top <= 300 else 100
    ymax = step * math.ceil(top * 1.1 / step)
    w, h, left, right, y0, y1 = 720, 420, 70, 490, 360, 50
    lx = lambda n: left + (right - left) * (math.log10(n) - math.log10(xs[0])) / max(
        1e-9, math.log10(xs[-1]) - math.log10(xs[0])
    )
    ly = lambda v: y0 - (y0 - y1) * v / ymax
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    s = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="280" y="24" text-anchor="middle" font-size="15" font-weight="bold">'
        f"Fan-out: write sent -&gt; listener snapshot</text>",
    ]
    for v in range(0, ymax + 1, step):
        s.append(f'<line x1="{left}" y1="{ly(v):.1f}" x2="{right}" y2="{ly(v):.1f}" stroke="#ddd"/>')
        s.append(f'<text x="{left - 6}" y="{ly(v) + 4:.1f}" text-anchor="end">{v}</text>')
    s.append(f'<line x1="{left}" y1="{y1}" x2="{left}" y2="{y0}" stroke="black"/>')
    s.append(f'<line x1="{left}" y1="{y0}" x2="{right}" y2="{y0}" stroke="black"/>')
    for n in xs:
        label = f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)
        s.append(f'<line x1="{lx(n):.1f}" y1="{y0}" x2="{lx(n):.1f}" y2="{y0 + 5}" stroke="black"/>')
        s.append(f'<text x="{lx(n):.1f}" y="{y0 + 19}" text-anchor="middle">{label}</text>')
    s.append(f'<text x="{(left + right) / 2}" y="{y0 + 40}" text-anchor="middle">listening connections (log scale)</text>')
    s.append(f'<text x="18" y="{(y0 + y1) / 2}" text-anchor="middle" transform="rotate(-90 18 {(y0 + y1) / 2})">latency, ms</text>')
    legend_y = 70
    for i, (label, pts) in enumerate(series):
        c = colors[i % len(colors)]
        for k, dash, name in [(0, "", "p50"), (1, ' stroke-dasharray="6 4"', "p99")]:
            path = " ".join(f"{lx(n):.1f},{ly(v[k]):.1f}" for n, v in pts.items())
            s.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
            for n, v in pts.items():
                s.append(f'<circle cx="{lx(n):.1f}" cy="{ly(v[k]):.1f}" r="3" fill="{c}"/>')
            s.append(f'<line x1="505" y1="{legend_y}" x2="535" y2="{legend_y}" stroke="{c}" stroke-width="2"{dash}/>')
            s.append(f'<text x="541" y="{legend_y + 4}">{label} {name}</text>')
            legend_y += 20
    s.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(s) + "\n")


if __name__ == "__main__":
    main()
