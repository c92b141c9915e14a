"""The results table (stdout) and the JSON document (--json).

Ratios are speed ratios, baseline time / lazyten time: above 1.0x lazyten is faster.
"""
from __future__ import annotations
import json

from bench.workloads import Workload

IMPLS = ("lazyten", "numpy", "torch", "torch_compile")
BASELINES = ("numpy", "torch", "torch_compile")


STATS = {"median": "median_s", "min": "min_s"}  # --stat: which time the table compares
# median / best call above this is noted: on a quiet machine calls vary by well under 2x,
# while torch's 2-thread eager ops on a busy 2-core machine were seen 20-100x slower
SPREAD = 2.0


def seconds(entry: dict | None, stat: str = "median") -> float | None:
    if entry and entry.get("status") == "ok":
        return entry["result"][STATS[stat]]
    return None


def lower_bound(entry: dict | None) -> float | None:
    """For a lazyten child stopped at its time limit: the time one call exceeds."""
    if entry and entry.get("status") == "timeout":
        return entry.get("lower_bound_s")
    return None


def fmt_time(s: float | None) -> str:
    if s is None:
        return "n/a"
    if s < 1e-5:
        return f"{s * 1e6:.2g} us"
    if s < 1e-3:
        return f"{s * 1e6:.0f} us"
    if s < 1.0:
        return f"{s * 1e3:.2f} ms" if s < 0.1 else f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s" if s < 100 else f"{s:.0f} s"


def fmt_cell(entry: dict | None, applies: bool, stat: str = "median") -> str:
    if not applies:
        return "-"
    if entry is not None and entry.get("status") == "skipped":
        return "skipped"
    if entry is None:
        return "n/a"
    status = entry.get("status")
    if status == "ok":
        return fmt_time(seconds(entry, stat))
    if status == "timeout" and entry.get("lower_bound_s"):
        return "> " + fmt_time(entry["lower_bound_s"])
    return {"timeout": "timeout", "error": "error", "skipped": "skipped"}.get(status, "n/a")


def fmt_ratio(r: float | None, bound: bool = False) -> str:
    if r is None:
        return "n/a"
    text = f"{r:.2f}x" if r < 100 else f"{r:.0f}x"
    if bound:
        return "< " + (text if r >= 0.01 else "0.01x")
    return text if r >= 0.01 or r == 0 else f"{r:.2g}x"


def fmt_rate(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a" if unit else "-"
    return f"{value:.3g} {unit}" if value < 1000 else f"{value:.0f} {unit}"


def row_data(w: Workload, impls: dict[str, dict], stat: str = "median") -> dict:
    """Everything the table and the JSON say about one workload; ratios and targets compare
    the `stat` time ("median", or "min": each side's best call) of every side."""
    lazy = seconds(impls.get("lazyten"), stat)
    bound = lower_bound(impls.get("lazyten"))
    rate, unit = w.rate(lazy)
    ratios = {}
    for b in BASELINES:
        if b in w.baselines:
            base, ref = seconds(impls.get(b), stat), lazy or bound
            ratios[b] = base / ref if (base is not None and ref) else None
    targets = []
    for t in w.targets:
        value, ok = t.evaluate(lazy or bound,
                               seconds(impls.get(t.against), stat) if t.against else None,
                               lower_bound=lazy is None and bound is not None)
        targets.append({"text": t.text, "kind": t.kind, "against": t.against,
                        "threshold": t.threshold, "value": value, "pass": ok,
                        "bound": lazy is None and value is not None})
    data = {"name": w.name, "group": w.group, "desc": w.desc, "stat": stat,
            "flops": w.flops or None,
            "bytes": w.nbytes or None, "items": w.items or None,
            "rate": {"value": rate, "unit": unit}, "ratios": ratios,
            "ratios_are_upper_bounds": lazy is None and bound is not None, "targets": targets}
    for impl in IMPLS:
        if impl == "lazyten" or impl in w.baselines:
            data[impl] = impls.get(impl) or {"status": "n/a", "reason": "not measured"}
    return data


def table(rows: list[tuple[Workload, dict]]) -> str:
    header = ["workload", "lazyten", "lazyten rate", "numpy", "torch", "torch.compile",
              "vs numpy", "vs torch", "vs compile", "target"]
    lines = []
    for w, d in rows:
        verdicts = [t["pass"] for t in d["targets"]]
        if not verdicts:
            target = "-"
        elif False in verdicts:
            target = "MISS"
        elif all(v is True for v in verdicts):
            target = "PASS"
        else:
            target = "n/a" if all(v is None for v in verdicts) else "PASS?"  # some n/a
        lines.append([
            w.name, fmt_cell(d.get("lazyten"), True, d["stat"]),
            fmt_rate(d["rate"]["value"], d["rate"]["unit"]),
            *[fmt_cell(d.get(b), b in w.baselines, d["stat"]) for b in BASELINES],
            *[fmt_ratio(d["ratios"][b], d["ratios_are_upper_bounds"]) if b in d["ratios"] else "-"
              for b in BASELINES],
            target])
    widths = [max(len(r[i]) for r in [header] + lines) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(wd) if i == 0 else c.rjust(wd)  # noqa: E731
                              for i, (c, wd) in enumerate(zip(r, widths)))
    out = [fmt(header), "  ".join("-" * wd for wd in widths)] + [fmt(r) for r in lines]
    return "\n".join(out)


def details(rows: list[tuple[Workload, dict]]) -> str:
    """Target verdicts, then notes: n/a reasons, errors, failed checks, single runs."""
    out = ["", "targets (speed ratio = baseline time / lazyten time):"]
    for _, d in rows:
        for t in d["targets"]:
            if t["kind"] == "seconds":
                val = ("> " if t["bound"] else "") + fmt_time(t["value"])
                goal = f"< {t['threshold']:g} s"
            else:
                val = fmt_ratio(t["value"], t["bound"])
                goal = f">= {t['threshold']:.2f}x {t['against']}"
            verdict = {True: "PASS", False: "MISS", None: "n/a"}[t["pass"]]
            out.append(f"  {verdict:4s}  {t['text']:<58s} {val:>9s}  (goal {goal})")
    notes = []
    missing: dict[str, list[str]] = {}  # one line per distinct reason, listing workloads
    for w, d in rows:
        skipped = d.get("lazyten", {}).get("status") == "skipped"
        for impl in IMPLS:
            e = d.get(impl)
            if not e or (skipped and impl != "lazyten"):
                continue
            if e.get("status") != "ok":
                reason = (e.get("reason") or "").strip().splitlines()
                text = f"{e.get('status')}: {reason[0] if reason else ''}"
                if e.get("status") == "n/a":
                    missing.setdefault(f"[{impl}] {text}", []).append(w.name)
                else:
                    notes.append(f"  {w.name} [{impl}]: {text}")
                continue
            r = e["result"]
            chk = r.get("check")
            if chk is not None and not chk.get("ok"):
                notes.append(f"  {w.name} [{impl}]: RESULT CHECK FAILED vs numpy reference: "
                             f"{json.dumps({k: v for k, v in chk.items() if k != 'ok'})}")
            if r.get("note"):
                notes.append(f"  {w.name} [{impl}]: {r['note']}")
            if r.get("min_s") and r["median_s"] > SPREAD * r["min_s"]:
                notes.append(f"  {w.name} [{impl}]: calls vary: median {fmt_time(r['median_s'])}, "
                             f"best {fmt_time(r['min_s'])} (a busy machine? see --stat min)")
            if impl == "torch_compile" and r.get("compile_s") is not None:
                notes.append(f"  {w.name} [torch.compile]: first call (compile) {fmt_time(r['compile_s'])}")
            if w.group == "startup":
                extra = ", ".join(f"{k} {fmt_time(r[k]) if k.endswith('_s') else r[k]}"
                                  for k in ("import_s", "second_step_s", "process_s",
                                            "kernels_compiled_first_step") if r.get(k) is not None)
                notes.append(f"  {w.name}: {extra}")
    notes += [f"  {text} ({', '.join(names)})" for text, names in missing.items()]
    if notes:
        out += ["", "notes:"] + notes
    return "\n".join(out)


def document(meta: dict, rows: list[tuple[Workload, dict]]) -> str:
    return json.dumps({"meta": meta, "workloads": [d for _, d in rows]}, indent=2,
                      default=str)
