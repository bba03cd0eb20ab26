"""Benchmark reports: number formats, aggregation over seeds, markdown tables and plots.

The runner (``_harness.py``) produces one record per (arm, seed) -- a learning
curve plus the per-run numbers it derives -- and every benchmark script turns
those records into its report with the functions here. Nothing here runs
anything: a saved ``results/*.json`` can be re-reported (``--replot``) on any
machine.
"""
from __future__ import annotations

import math
import statistics
from typing import Any, Dict, Iterable, List, Optional, Sequence

FOREIGN_FLAG = 0.25  # flag runs during which other processes used more than this many cores

def not_a_number(x: Any) -> bool:
    """True for NaN and for anything that is not a number (a missing value)."""
    try:
        return math.isnan(float(x))
    except (TypeError, ValueError):
        return True


# ---------------------------------------------------------------------------
# aggregation, tables
# ---------------------------------------------------------------------------
def fmt_num(x: Any, nd: int = 1) -> str:
    if x is None or not_a_number(x):
        return "–"
    return f"{x:,.{nd}f}"


def _short(x: Any, tenths_below: float) -> str:
    """1.23M / 45k / 4.5k (one decimal for thousands below ``tenths_below``) / 123."""
    if x is None or not_a_number(x):
        return "–"
    x = float(x)
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k" if x < tenths_below else f"{x / 1e3:.0f}k"
    return f"{x:.0f}"


def fmt_steps(x: Any) -> str:
    return _short(x, tenths_below=1e3)


def fmt_sps(x: Any) -> str:
    return _short(x, tenths_below=1e4)


def median(xs: Iterable[float]) -> Optional[float]:
    xs = [x for x in xs if x is not None and not not_a_number(x)]
    return statistics.median(xs) if xs else None


def aggregate_learn(records: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One row per learn arm: medians over seeds (time/steps to target over the
    seeds that reached it, with the count)."""
    rows: Dict[str, Dict[str, Any]] = {}
    for r in records:
        if r["mode"] != "learn":
            continue
        row = rows.setdefault(r["key"], dict(key=r["key"], label=r["label"], family=r["family"],
                                             num_envs=r["num_envs"], runs=[], notes=r.get("notes", {}),
                                             target=r["target"], budget_s=r["budget_s"]))
        row["runs"].append(r)
    out = []
    for row in rows.values():
        runs = row["runs"]
        hit = [r for r in runs if r.get("reached")]
        row["n_runs"], row["n_reached"] = len(runs), len(hit)
        row["t_reach"] = median(r["reached"]["t"] for r in hit)
        row["t_reach_all"] = [r["reached"]["t"] if r.get("reached") else None for r in runs]
        row["steps_reach"] = median(r["reached"]["steps"] for r in hit)
        row["sps_overall"] = median(r.get("sps_overall") for r in runs)
        row["sps_sampling"] = median(r.get("sps_sampling") for r in runs)
        row["startup_s"] = median(r.get("startup_s") for r in runs)
        row["rss_proc"] = max((r.get("peak_rss_proc_mb") or 0) for r in runs) or None
        row["rss_tree"] = max((r.get("peak_rss_tree_mb") or 0) for r in runs) or None
        bests = [r["best_return"] for r in runs if r.get("best_return") is not None]
        row["best_return"] = max(bests) if bests else None
        row["cpu_reach"] = median(r["reached"].get("cpu") for r in hit)
        row["foreign"] = max((r.get("foreign_cpu_cores") or 0.0) for r in runs)
        row["status"] = ",".join(sorted({r["status"] for r in runs}))
        out.append(row)
    return out


def aggregate_throughput(records: Sequence[Dict[str, Any]]) -> Dict[str, Dict[int, Dict[str, Any]]]:
    """family -> num_envs -> throughput record."""
    out: Dict[str, Dict[int, Dict[str, Any]]] = {}
    for r in records:
        if r["mode"] == "throughput":
            out.setdefault(r["family"], {})[int(r["num_envs"])] = r
    return out


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: Optional[str] = None) -> str:
    align = align or ("l" + "r" * (len(headers) - 1))
    sep = ["---:" if a == "r" else ":---" if a == "l" else ":---:" for a in align]
    lines = ["| " + " | ".join(str(h) for h in headers) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def learn_table(rows: Sequence[Dict[str, Any]]) -> str:
    headers = ["arm", "N", "reached", "time to target (s)", "env steps at target", "env-steps/s overall",
               "env-steps/s sampling", "CPU s to target", "startup (s)", "peak RSS MB (proc)", "peak RSS MB (tree)",
               "other load (cores)"]
    body = []
    for r in rows:
        t = fmt_num(r["t_reach"]) if r["n_reached"] else f"not reached ({fmt_num(r['budget_s'], 0)} s cap)"
        if r["n_runs"] > 1 and r["n_reached"]:
            ts = [x for x in r["t_reach_all"] if x is not None]
            t += f" [{min(ts):.1f}–{max(ts):.1f}]"
        reached = f"{r['n_reached']}/{r['n_runs']}"
        if not r["n_reached"]:
            reached += f" (best {fmt_num(r['best_return'], 0)})" if r["best_return"] is not None else " (no return)"
        body.append([r["label"], r["num_envs"] or "–", reached, t,
                     fmt_steps(r["steps_reach"]) if r["n_reached"] else "–",
                     fmt_sps(r["sps_overall"]), fmt_sps(r["sps_sampling"]),
                     fmt_num(r["cpu_reach"]) if r["n_reached"] else "–", fmt_num(r["startup_s"]),
                     fmt_num(r["rss_proc"], 0), fmt_num(r["rss_tree"], 0),
                     fmt_num(r["foreign"], 2)])
    return markdown_table(headers, body)


def throughput_table(tp: Dict[str, Dict[int, Dict[str, Any]]], ns: Sequence[int]) -> str:
    headers = ["arm"] + [f"N={n}: overall / sampling / per CPU-s" for n in ns]
    body = []
    for fam, by_n in tp.items():
        row = [fam]
        for n in ns:
            r = by_n.get(n)
            if r is None:
                row.append("n/a")
            elif r.get("tput_overall") is None:
                row.append(f"failed ({r['status']})")
            else:
                busy = " \\*" if (r.get("foreign_cpu_cores") or 0.0) > FOREIGN_FLAG else ""
                row.append(f"{fmt_sps(r['tput_overall'])} / {fmt_sps(r.get('tput_sampling'))} / "
                           f"{fmt_sps(r.get('tput_per_cpu_s'))}{busy}")
        body.append(row)
    return markdown_table(headers, body)


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None or b is None or not_a_number(a) or not_a_number(b) or b == 0:
        return None
    return a / b


def fmt_ratio(x: Optional[float]) -> str:
    return "–" if x is None else f"{x:.2f}x"


# ---------------------------------------------------------------------------
# plot
# ---------------------------------------------------------------------------
def plot(records: Sequence[Dict[str, Any]], path: str, *, target: float, title: str,
         throughput_ns: Sequence[int] = ()) -> None:
    """Three panels: return vs wall-clock and vs env steps for every learn run
    (one colour per family, one line style per N; o = reached, x = capped),
    and grouped bars of env-steps/s per family and N (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    learn = [r for r in records if r["mode"] == "learn" and r["points"]]
    tp = aggregate_throughput(records)
    cmap = plt.get_cmap("tab10")
    families = list(dict.fromkeys([r["family"] for r in records]))
    fam_color = {f: cmap(i % 10) for i, f in enumerate(families)}
    styles = ["-", "--", ":", "-."]
    fam_ns: Dict[str, List[Any]] = {}
    for r in learn:
        fam_ns.setdefault(r["family"], [])
        if r["num_envs"] not in fam_ns[r["family"]]:
            fam_ns[r["family"]].append(r["num_envs"])
    fig, axes = plt.subplots(1, 3, figsize=(19, 5.8), gridspec_kw=dict(width_ratios=[1.15, 1.15, 1.0]))
    for ax, xkey, xlabel in ((axes[0], "t", "wall-clock s from algorithm construction (log)"),
                             (axes[1], "steps", "env steps (log)")):
        drawn = set()
        for r in learn:
            pts = [p for p in r["points"] if p["ret"] is not None and p[xkey] > 0]
            xs, ys = [p[xkey] for p in pts], [p["ret"] for p in pts]
            c = fam_color[r["family"]]
            ls = styles[fam_ns[r["family"]].index(r["num_envs"]) % len(styles)]
            lab = r["label"] if r["label"] not in drawn else None
            drawn.add(r["label"])
            ax.plot(xs, ys, color=c, ls=ls, lw=1.5, alpha=0.85, label=lab)
            if r.get("reached"):
                ax.plot([r["reached"][xkey]], [target], "o", color=c, ms=5)
            elif xs:
                ax.plot([xs[-1]], [ys[-1]], "x", color=c, ms=8, mew=2)
        ax.axhline(target, color="k", ls="--", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("mean return, last 100 episodes")
        ax.set_ylim(0, 520)
        ax.grid(alpha=0.3, which="major")
    axes[0].set_title("return vs wall-clock (o: reached target, x: time cap)")
    axes[1].set_title("return vs env steps")
    axes[0].legend(fontsize=8, loc="upper left")
    ax = axes[2]
    fams = [f for f in families if f in tp]
    ns = list(throughput_ns) or sorted({n for by in tp.values() for n in by})
    width = 0.8 / max(1, len(fams))
    labelled = set()
    for j, n in enumerate(ns):
        here = [f for f in fams if tp[f].get(n) and tp[f][n].get("tput_overall")]
        for i, fam in enumerate(here):  # bars of the families measured at this N, centred on the tick
            y = tp[fam][n]["tput_overall"]
            x = j + (i - (len(here) - 1) / 2) * width
            ax.bar([x], [y], width=width, color=fam_color[fam], label=None if fam in labelled else fam)
            labelled.add(fam)
            ax.text(x, y * 1.1, fmt_sps(y), ha="center", va="bottom", fontsize=7, rotation=90)
    ax.set_yscale("log")
    ax.set_xticks(range(len(ns)))
    ax.set_xticklabels([f"N={n}" for n in ns])
    ax.set_ylabel("env-steps/s of train() iterations (log)")
    ax.set_title("throughput, matched PPO settings")
    vals = [r["tput_overall"] for by in tp.values() for r in by.values() if r.get("tput_overall")]
    if vals:
        ax.set_ylim(min(vals) / 4, max(vals) * 12)
    handles, names = ax.get_legend_handles_labels()
    order = sorted(range(len(names)), key=lambda k: fams.index(names[k]) if names[k] in fams else 99)
    ax.legend([handles[k] for k in order], [names[k] for k in order], fontsize=8, loc="upper left")
    ax.grid(alpha=0.3, axis="y")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


