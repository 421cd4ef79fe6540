#!/usr/bin/env python3
"""Draws an autopar timeline (Chrome Trace Event JSON from `autopar plan
--trace`) as an SVG picture: one band per pipeline stage with its forward,
backward and optimizer passes, and thin lanes for gradient sync and sends.

usage: scripts/trace_svg.py timeline.json timeline.svg [--title TEXT]

Python 3 standard library only, so that the docs' picture can be redrawn
anywhere the project builds.
"""
import json
import math
import sys
from xml.sax.saxutils import escape

WIDTH = 960
LEFT = 150
RIGHT = 20
TOP = 44
BAND = 34        # height of the pass track of a stage
LANE = 7         # height of a gradient-sync or send lane
GAP = 12
COLOURS = {
    "forward": "#4e79a7",
    "backward": "#59a14f",
    "optimizer": "#9c755f",
    "grad_sync": "#f28e2b",
    "p2p": "#b07aa1",
}


def load(path):
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    names = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e["args"]["name"]
    return events, names, trace.get("otherData", {})


def layout(events):
    """Rows: per stage, the pass track, then its sync and send lanes."""
    stages = sorted({e["pid"] for e in events})
    lanes = {pid: sorted({e["tid"] for e in events if e["pid"] == pid and e["tid"] > 0})
             for pid in stages}
    y, rows = TOP, {}
    for pid in stages:
        rows[(pid, 0)] = (y, BAND)
        y += BAND + 2
        for tid in lanes[pid]:
            rows[(pid, tid)] = (y, LANE)
            y += LANE + 2
        y += GAP
    return stages, rows, y


def ticks(span_ms):
    """Round tick values, between 4 and 10 of them."""
    step = 10 ** math.floor(math.log10(span_ms)) if span_ms > 0 else 1
    for factor in (1, 0.5, 0.2, 0.1):
        if span_ms / (step * factor) >= 4:
            step *= factor
            break
    n = int(span_ms / step + 1e-9)
    return [round(k * step, 10) for k in range(n + 1)]


def draw(events, names, meta, title):
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    scale = (WIDTH - LEFT - RIGHT) / (end - start)
    stages, rows, height = layout(events)
    height += 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
           f'<text x="{LEFT}" y="20" font-size="13" font-weight="bold">{escape(title)}</text>']
    for pid in stages:
        y, h = rows[(pid, 0)]
        label = names.get(pid, f"stage {pid}").split(":")[0]
        out.append(f'<text x="8" y="{y + h / 2 + 4:.1f}">{escape(label)}</text>')
        sub = names.get(pid, "").split(": ", 1)[-1]
        out.append(f'<text x="8" y="{y + h / 2 + 16:.1f}" font-size="9" fill="#555">'
                   f'{escape(sub)}</text>')
    for e in events:
        y, h = rows[(e["pid"], e["tid"])]
        x = LEFT + (e["ts"] - start) * scale
        w = max(e["dur"] * scale, 0.3)
        colour = COLOURS.get(e.get("cat"), "#bab0ac")
        out.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{h}" fill="{colour}" '
                   f'stroke="white" stroke-width="0.6"><title>{escape(e["name"])}</title></rect>')
        if e["tid"] == 0 and w > 34:
            out.append(f'<text x="{x + w / 2:.2f}" y="{y + h / 2 + 4}" fill="white" '
                       f'text-anchor="middle" font-size="9">{escape(e["name"])}</text>')
    axis = height - 30
    out.append(f'<line x1="{LEFT}" y1="{axis}" x2="{WIDTH - RIGHT}" y2="{axis}" stroke="#333"/>')
    span_ms = (end - start) / 1000
    for t in ticks(span_ms):
        x = LEFT + t * 1000 * scale
        out.append(f'<line x1="{x:.2f}" y1="{axis}" x2="{x:.2f}" y2="{axis + 4}" stroke="#333"/>')
        out.append(f'<text x="{x:.2f}" y="{axis + 15}" text-anchor="middle">{t:g} ms</text>')
    legend_x = LEFT
    for cat, name in [("forward", "forward"), ("backward", "backward"),
                      ("p2p", "send/recv"), ("grad_sync", "gradient sync"),
                      ("optimizer", "optimizer")]:
        out.append(f'<rect x="{legend_x}" y="28" width="10" height="10" fill="{COLOURS[cat]}"/>')
        out.append(f'<text x="{legend_x + 14}" y="37">{name}</text>')
        legend_x += 110
    if "step_time_s" in meta:
        out.append(f'<text x="{WIDTH - RIGHT}" y="20" text-anchor="end">predicted step '
                   f'{meta["step_time_s"] * 1000:.1f} ms</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) not in (3, 5) or (len(argv) == 5 and argv[3] != "--title"):
        sys.stderr.write(__doc__)
        return 2
    events, names, meta = load(argv[1])
    if not events:
        sys.stderr.write(f"{argv[1]}: no events to draw\n")
        return 2
    title = argv[4] if len(argv) == 5 else (
        f'{meta.get("model", "plan")} on {meta.get("gpus", "?")} GPUs')
    with open(argv[2], "w", encoding="utf-8") as f:
        f.write(draw(events, names, meta, title))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
