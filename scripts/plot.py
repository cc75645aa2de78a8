#!/usr/bin/python3
"""Pictures from tokamax JSON output.

  plot.py roofline BENCH.json -o roofline.png   # from `tokamax bench --json`
  plot.py tune TUNE.json -o tune.png            # from `tokamax tune --json`

roofline: log-log arithmetic intensity (flop/byte) vs achieved GFLOP/s, with the measured
memory slope (bandwidth * intensity) and compute ceilings (f32 FMA; bf16 = max of native dot
and f32) from `tokamax.ceilings`, one point per successful case, marked by implementation.

tune: one subplot per tuned case with the sorted times of its `ok` candidates; the heuristics
config and the winner are highlighted as points and the failure counts (invalid, error, crash,
timeout, numerics) are in the title.

Exit status: 0 on success, 2 on bad usage or malformed input.
"""

import argparse
import json
import math
import sys

MAX_TUNE_PLOTS = 12


class InputError(Exception):
    pass


def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}")
    except json.JSONDecodeError as e:
        raise InputError(f"{path} is not valid JSON: {e}")


def number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def label_points(fig, ax, points):
    """Labels each spec once (at its fastest point), trying a few offsets to avoid overlaps."""
    renderer = fig.canvas.get_renderer()
    dots = [ax.transData.transform((p[2], p[3])) for p in points]
    taken = []  # display-space boxes of placed labels
    frame = ax.get_window_extent(renderer)
    offsets = [((6, -10), "left"), ((6, 4), "left"), ((-7, 4), "right"), ((-7, -10), "right"),
               ((6, -20), "left"), ((6, 14), "left")]
    labelled = set()
    for _, spec, x, y in sorted(points, key=lambda p: -p[3]):
        if spec in labelled:
            continue
        labelled.add(spec)
        best = None
        for offset, ha in offsets:
            text = ax.annotate(spec, (x, y), textcoords="offset points", xytext=offset, ha=ha, fontsize=7)
            box = text.get_window_extent(renderer).expanded(1.05, 1.15)
            clashes = sum(box.overlaps(b) for b in taken)
            clashes += sum(box.x0 <= dx <= box.x1 and box.y0 - 4 <= dy <= box.y1 + 4 for dx, dy in dots)
            clashes += 0 if (frame.x0 <= box.x0 and box.x1 <= frame.x1) else 5
            if best is None or clashes < best[0]:
                if best is not None:
                    best[1].remove()
                best = (clashes, text, box)
            else:
                text.remove()
            if clashes == 0:
                break
        taken.append(best[2])


def plot_roofline(path, out, dpi):
    doc = load_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("tokamax"), dict):
        raise InputError(f"{path}: no top-level 'tokamax' object (expected `tokamax bench --json` output)")
    tk = doc["tokamax"]
    cases = tk.get("cases")
    if not isinstance(cases, list):
        raise InputError(f"{path}: 'tokamax.cases' is missing or not a list")
    ceilings = tk.get("ceilings") if isinstance(tk.get("ceilings"), dict) else {}

    points = []  # (impl, spec, intensity, gflops)
    for case in cases:
        if not isinstance(case, dict):
            raise InputError(f"{path}: a 'tokamax.cases' entry is not an object")
        if case.get("ok") is False:
            continue
        flops, nbytes, gflops = case.get("flops"), case.get("bytes"), case.get("gflops")
        if not (number(flops) and number(nbytes) and number(gflops)) or nbytes <= 0 or gflops <= 0:
            continue
        points.append((str(case.get("impl", "?")), str(case.get("spec", "?")), flops / nbytes, gflops))
    if not points:
        raise InputError(f"{path}: no successful case with flops, bytes and gflops to plot")

    bw = ceilings.get("bandwidth_gbps")
    f32 = ceilings.get("f32_fma_gflops")
    bf16 = ceilings.get("bf16_dot_gflops")
    compute = []
    if number(f32) and f32 > 0:
        compute.append(("f32 FMA", f32, "tab:red", "--"))
    if number(bf16) and bf16 > 0:
        bf16_peak = max(bf16, f32) if number(f32) else bf16
        compute.append(("bf16", bf16_peak, "tab:purple", "-."))

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    xs = [p[2] for p in points]
    ys = [p[3] for p in points]
    x_lo, x_hi = min(xs) / 4, max(xs) * 4
    peak = max([c[1] for c in compute] + ys)
    if number(bw) and bw > 0:
        x_lo = min(x_lo, min(c[1] for c in compute) / bw / 4) if compute else x_lo
        x_hi = max(x_hi, peak / bw * 4)
    ax.set_xscale("log")
    ax.set_yscale("log")

    if number(bw) and bw > 0:
        ridge = peak / bw
        ax.plot([x_lo, ridge], [bw * x_lo, peak], color="tab:gray", lw=1.5,
                label=f"memory {bw:.1f} GB/s")
    for name, value, color, style in compute:
        start = value / bw if number(bw) and bw > 0 else x_lo
        ax.plot([start, x_hi], [value, value], color=color, ls=style, lw=1.5,
                label=f"{name} {value:.0f} GFLOP/s")

    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    impls = sorted({p[0] for p in points})
    for i, impl in enumerate(impls):
        sel = [p for p in points if p[0] == impl]
        ax.scatter([p[2] for p in sel], [p[3] for p in sel], marker=markers[i % len(markers)],
                   s=45, zorder=3, label=impl, color=f"C{i}", edgecolors="black", linewidths=0.5)
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(min(ys + ([bw * x_lo] if number(bw) and bw > 0 else [])) / 2, peak * 2.5)
    if len(points) <= 20:
        label_points(fig, ax, points)

    ax.set_xlabel("arithmetic intensity (flop/byte)")
    ax.set_ylabel("achieved GFLOP/s")
    device = ceilings.get("device_id") or ""
    ax.set_title("Measured roofline" + (f": {device}" if device else ""), fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)


def fmt_time(seconds):
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def plot_tune(path, out, dpi):
    doc = load_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise InputError(f"{path}: no 'results' list (expected `tokamax tune --json` output)")
    if doc.get("kind") not in (None, "tokamax-tune"):
        raise InputError(f"{path}: kind is {doc.get('kind')!r}, not 'tokamax-tune'")
    results = []
    for entry in doc["results"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("candidates"), list):
            raise InputError(f"{path}: a result has no 'candidates' list")
        if entry["candidates"]:
            results.append(entry)
    if not results:
        raise InputError(f"{path}: no result with candidates to plot")
    dropped = max(0, len(results) - MAX_TUNE_PLOTS)
    results = results[:MAX_TUNE_PLOTS]

    plt = pyplot()
    from matplotlib.ticker import FuncFormatter, MaxNLocator
    n = len(results)
    cols = min(n, 2)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)

    for ax, entry in zip(axes.flat, results):
        counts = {}
        ok = []  # (time, is_heuristics, config)
        for c in entry["candidates"]:
            if not isinstance(c, dict):
                raise InputError(f"{path}: a candidate is not an object")
            status = c.get("status", "?")
            counts[status] = counts.get(status, 0) + 1
            if status == "ok" and number(c.get("time_s")):
                ok.append((c["time_s"], bool(c.get("heuristics")), c.get("config")))
        ok.sort(key=lambda t: t[0])
        winner_config = entry.get("config")
        key = entry.get("key") if isinstance(entry.get("key"), dict) else {}
        name = entry.get("spec") or (entry.get("metadata") or {}).get("spec") or "?"
        impl = key.get("impl", "")
        bad = ", ".join(f"{counts.get(s, 0)} {s}" for s in ("invalid", "error", "crash", "timeout", "numerics"))
        ax.set_title(f"{name} [{impl}]: {len(ok)} ok, {bad}", fontsize=9)
        if not ok:
            ax.text(0.5, 0.5, "no ok candidate", ha="center", va="center", transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        win_idx = next((i for i, t in enumerate(ok) if winner_config is not None and t[2] == winner_config), 0)
        xs = list(range(len(ok)))
        times_us = [t[0] * 1e6 for t in ok]
        ax.plot(xs, times_us, color="tab:blue", lw=0.8, alpha=0.6, zorder=1)
        ax.scatter(xs, times_us, color="tab:blue", s=14, zorder=2)
        heur = [i for i, t in enumerate(ok) if t[1]]
        if heur:
            ax.scatter([heur[0]], [times_us[heur[0]]], color="tab:orange", s=70, marker="D",
                       edgecolors="black", linewidths=0.6, zorder=3)
        ax.scatter([win_idx], [times_us[win_idx]], color="tab:green", s=110, marker="*",
                   edgecolors="black", linewidths=0.6, zorder=4)
        ax.set_yscale("log")
        ax.set_xlabel("ok candidates, fastest first", fontsize=8)
        ax.set_ylabel("time (us)", fontsize=8)
        ax.tick_params(which="both", labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        # label the 2x and 5x minor ticks too, so a plot within one decade still has numbers
        ax.yaxis.set_minor_formatter(FuncFormatter(
            lambda v, _: f"{v:g}" if round(v / 10 ** math.floor(math.log10(v) + 1e-9), 6) in (2, 5) else ""))
        ax.set_xlim(-0.8, len(ok) - 0.2)
        ax.set_ylim(min(times_us) / 1.6, max(times_us) * 1.6)
        win_t = ok[win_idx][0]
        note = f"winner {fmt_time(win_t)}"
        if heur:
            h_t = ok[heur[0]][0]
            if heur[0] == win_idx:
                note += "\nheuristics config is the winner"
            elif win_t > 0:
                note += f"\nheuristics {fmt_time(h_t)} ({h_t / win_t:.2f}x slower)"
        else:
            note += "\nheuristics config not among the ok candidates"
        ax.text(0.02, 0.96, note, transform=ax.transAxes, fontsize=7, va="top",
                bbox=dict(boxstyle="round", facecolor="white", alpha=0.85, edgecolor="0.7"))
        ax.grid(True, axis="y", which="both", alpha=0.25)

    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color="tab:green", marker="*", ls="", markersize=11, markeredgecolor="black",
                      label="winner"),
               Line2D([], [], color="tab:orange", marker="D", ls="", markersize=7, markeredgecolor="black",
                      label="heuristics config"),
               Line2D([], [], color="tab:blue", marker="o", ls="", markersize=5, label="other ok candidate")]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False)
    title = "Autotuning candidates"
    if dropped:
        title += f" (first {MAX_TUNE_PLOTS} cases; {dropped} more not shown)"
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    fig.savefig(out, dpi=dpi)
    plt.close(fig)


def main(argv):
    parser = argparse.ArgumentParser(description="Plot tokamax bench/tune JSON output.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, helptext in (("roofline", "roofline from `tokamax bench --json` output"),
                           ("tune", "candidate times from `tokamax tune --json` output")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("input", help="JSON file")
        p.add_argument("-o", "--output", required=True, help="PNG file to write")
        p.add_argument("--dpi", type=int, default=100)
    args = parser.parse_args(argv)  # exits 2 on bad usage
    try:
        if args.command == "roofline":
            plot_roofline(args.input, args.output, args.dpi)
        else:
            plot_tune(args.input, args.output, args.dpi)
    except InputError as e:
        print(f"plot.py {args.command}: error: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"plot.py: error: matplotlib is needed ({e}); apt-get install python3-matplotlib",
              file=sys.stderr)
        return 2
    except OSError as e:
        print(f"plot.py {args.command}: error: cannot write {args.output}: {e.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
