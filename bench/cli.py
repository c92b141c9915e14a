"""`python -m bench`: parse options, run the child processes, print the table, write JSON.

Order of a run: one child measures every baseline (numpy, torch eager, then
torch.compile); then one child per lazyten workload; then the two start-up children
(cold kernel cache, warm kernel cache). With --paired, torch eager is measured in each
lazyten workload's child instead, in rounds alternating with lazyten. Children run one
at a time, never in parallel. Each child has a time limit; a child past it is stopped
(its process group, which it leads) and what it had measured is kept.
"""
from __future__ import annotations
import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import report
from bench.workloads import WORKLOADS, Workload, select

REPO = Path(__file__).resolve().parent.parent
FULL = {"repeat": 5, "budget": 6.0}
GRACE = 15.0  # seconds a lazyten child may run past its deadline before it is stopped
QUICK = {"repeat": 3, "budget": 2.5}
COMPILE_S = 60.0  # allowance per torch.compile measurement: one compile takes 10-40 s here


def parse(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="lazyten benchmarks against numpy and PyTorch (see docs/benchmarks.md).",
        epilog="workloads: " + ", ".join(w.name for w in WORKLOADS))
    p.add_argument("--json", metavar="PATH", help="write every figure to this JSON file")
    p.add_argument("--only", metavar="NAME[,NAME]",
                   help="run only these workloads (names or groups: matmul, elementwise, "
                        "reduce, conv, train, startup; and, outside the default run, "
                        "softmax_widths, attention, conv3x3, activations, embedding, "
                        "mlp_train, dispatch)")
    p.add_argument("--all", action="store_true",
                   help="also run the groups outside the default run (softmax_widths, "
                        "attention, conv3x3, activations, embedding, mlp_train, dispatch)")
    p.add_argument("--repeat", type=int, metavar="N",
                   help=f"timed calls per measurement (default {FULL['repeat']}, "
                        f"--quick {QUICK['repeat']}); fast workloads get more, up to fill the "
                        "budget/5, slow ones fewer, to stay in the budget")
    p.add_argument("--quick", action="store_true",
                   help="fewer repeats, smaller time budgets and limits, and no matmul_2048 "
                        "unless named in --only")
    p.add_argument("--budget", type=float, metavar="SECONDS",
                   help=f"timed seconds per measurement before stopping early (default "
                        f"{FULL['budget']:g}, --quick {QUICK['budget']:g})")
    p.add_argument("--paired", action="store_true",
                   help="time lazyten and torch eager side by side in one process, in "
                        "alternating rounds, so that the ratio does not depend on how busy the "
                        "machine was when each side ran")
    p.add_argument("--stat", choices=["median", "min"], default="median",
                   help="the time the table and the targets compare: the median call "
                        "(default), or each side's best call, steadier on a busy machine")
    p.add_argument("--device", default="CPU",
                   help="CPU (default), or a GPU (CUDA): lazyten on that device against "
                        "PyTorch on the same card (bench/gpu.py)")
    p.add_argument("--target", metavar="FIELD=N[,...]",
                   help="with a GPU --device: replace fields of its optimiser Target "
                        "for this run (item_tile=16): to try a setting")
    args = p.parse_args(argv)
    defaults = QUICK if args.quick else FULL
    args.repeat = max(1, args.repeat if args.repeat is not None else defaults["repeat"])
    args.budget = args.budget if args.budget is not None else defaults["budget"]
    return args


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def child_env(**extra: str) -> dict:
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(extra)
    return env


def run_child(cmd: list[str], timeout: float, env: dict) -> tuple[int | None, str, str, float]:
    """(returncode or None on timeout, stdout, stderr, seconds). The child leads its own
    process group, so a timeout also stops helpers it started (torch.compile workers)."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        code = None
    return code, out, err, time.monotonic() - start


def run_worker(side: str, names: list[str], args, deadline: float,
               timeout: float, without: str = "") -> tuple[list[dict], str | None]:
    """Run a bench.worker child; (its records, a failure message or None)."""
    with tempfile.TemporaryDirectory(prefix="lazyten-bench-") as tmp:
        out_path = os.path.join(tmp, "records.jsonl")
        cmd = [sys.executable, "-m", "bench.worker", side, ",".join(names), "--out", out_path,
               "--repeat", str(args.repeat), "--budget", str(args.budget),
               "--deadline", str(deadline), "--without", without]
        code, _, err, _ = run_child(cmd, timeout, child_env())
        records = []
        if os.path.exists(out_path):
            with open(out_path) as f:
                records = [json.loads(line) for line in f if line.strip()]
    failure = None
    if code is None:
        failure = f"timeout: stopped after {timeout:.0f} s"
    elif code != 0:
        tail = err.strip().splitlines()[-3:]
        failure = f"child exited with {code}: " + " | ".join(tail)
    return records, failure


def measure_baselines(selected: list[Workload], args, results: dict, meta: dict) -> None:
    paired = _paired(args)
    keys = list(dict.fromkeys(w.key for w in selected if set(w.baselines) - paired))
    if not keys:
        return
    by_key = {w.key: w for w in selected}
    count = sum(len(set(by_key[k].baselines) - paired) for k in keys)
    per = max(3 * args.budget, 10.0)
    compiles = sum("torch_compile" in by_key[k].baselines for k in keys)
    deadline = count * per + compiles * COMPILE_S + 30
    log(f"baselines (numpy, torch eager, torch.compile) for {len(keys)} workloads ...")
    t0 = time.monotonic()
    records, failure = run_worker("baseline", keys, args, deadline, deadline + 120,
                                  without=",".join(paired))
    log(f"  baselines took {time.monotonic() - t0:.0f} s")
    for rec in records:
        if "meta" in rec:
            meta.update(rec["meta"])
            continue
        for w in selected:
            if w.key == rec["workload"]:
                results[w.name][rec["impl"]] = rec
    for w in selected:
        for impl in set(w.baselines) - paired:
            results[w.name].setdefault(impl, {"status": "timeout" if failure and failure.startswith("timeout")
                                              else "error", "reason": failure or "not reported"})
    if failure:
        log(f"baselines: {failure}")


def _paired(args) -> set[str]:
    """The baselines measured beside lazyten (--paired) rather than in the baseline child."""
    return {"torch"} if args.paired else set()


def measure_lazyten(w: Workload, args, results: dict, meta: dict) -> None:
    deadline = w.deadline[1 if args.quick else 0]
    paired = "torch" in w.baselines and "torch" in _paired(args)
    if paired:  # torch's calls too, and its warm-up
        deadline *= 2
    # the child stops timing at its deadline; the grace covers one call that overruns it
    # (a first call slower than the whole limit), which is then reported as a lower bound
    timeout = deadline + GRACE
    records, failure = run_worker("paired" if paired else "lazyten", [w.name], args,
                                  deadline, timeout)
    for rec in records:
        if "meta" in rec:
            meta.update(rec["meta"])
            continue
        results[w.name][rec["impl"]] = rec
    if paired and "torch" not in results[w.name]:
        results[w.name]["torch"] = {"status": "error", "reason": failure or "not reported"}
    if "lazyten" not in results[w.name]:
        if failure and failure.startswith("timeout"):
            results[w.name]["lazyten"] = {"status": "timeout", "lower_bound_s": timeout,
                                          "reason": f"one call takes more than {timeout:.0f} s "
                                                    "(stopped at the time limit)"}
        else:
            results[w.name]["lazyten"] = {"status": "error", "reason": failure or "not reported"}


def measure_startup(selected: list[Workload], args, results: dict) -> None:
    wanted = [w for w in selected if w.group == "startup"]
    if not wanted:
        return
    batch = wanted[0].params["batch"]
    timeout = wanted[0].deadline[1 if args.quick else 0]
    cache = tempfile.mkdtemp(prefix="lazyten-bench-kernels-")
    try:
        env = child_env(CACHEDIR=cache)
        env.pop("DISABLE_CACHE", None)
        for name in ("startup_cold", "startup_warm"):
            log(f"lazyten {name} (CACHEDIR={cache}) ...")
            code, out, err, wall = run_child([sys.executable, "-m", "bench.startup", "--batch", str(batch)],
                                             timeout, env)
            lines = [ln for ln in out.strip().splitlines() if ln.startswith("{")]
            if code is None:
                entry = {"status": "timeout", "reason": f"stopped after {timeout:.0f} s"}
            elif not lines:
                tail = " | ".join(err.strip().splitlines()[-3:])
                entry = {"status": "error", "reason": f"child exited with {code}: {tail}"}
            else:
                rec = json.loads(lines[-1])
                status = rec.pop("status", "error")
                if status == "ok":
                    rec.update(median_s=rec["first_step_s"], min_s=rec["first_step_s"], runs=1,
                               process_s=wall)
                    entry = {"status": "ok", "result": rec}
                else:
                    entry = {"status": status, "reason": rec.get("reason", "")}
            if name in results:
                results[name]["lazyten"] = entry
            if entry["status"] == "ok":
                log(f"  first step {report.fmt_time(entry['result']['first_step_s'])}, "
                    f"process {report.fmt_time(wall)}")
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def git_state() -> dict:
    def git(*a):
        try:
            return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except Exception:
            return ""
    return {"commit": git("rev-parse", "HEAD"), "dirty_files": len(git("status", "--porcelain").splitlines())}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv=None) -> int:
    args = parse(argv)
    if args.device.upper() != "CPU":
        from bench import gpu
        return gpu.main(args)
    try:
        selected = select(args.only, args.all)
    except ValueError as e:
        print(f"python -m bench: {e}", file=sys.stderr)
        return 2
    if any(w.group == "startup" for w in selected):  # the warm run needs the cold one
        names = {w.name for w in selected} | {"startup_cold", "startup_warm"}
        selected = [w for w in WORKLOADS if w.name in names]
    named = set((args.only or "").replace(" ", "").split(","))
    skipped = [w for w in selected if args.quick and not w.quick and w.name not in named]
    import numpy
    start = time.monotonic()
    meta = {
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "args": {"quick": args.quick, "repeat": args.repeat, "budget_s": args.budget,
                 "only": args.only, "all": args.all, "stat": args.stat,
                 "paired": args.paired},
        "python": sys.version.split()[0], "platform": platform.platform(),
        "cpu": cpu_model(), "cpu_count": os.cpu_count(), "numpy": numpy.__version__,
        "env": {k: os.environ[k] for k in ("DEVICE", "THREADS", "OPT", "CACHEDIR", "DISABLE_CACHE",
                                           "OMP_NUM_THREADS") if k in os.environ},
        "git": git_state(),
        "loadavg_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }
    results: dict[str, dict] = {w.name: {} for w in selected}
    for w in skipped:
        for impl in ("lazyten",) + w.baselines:
            results[w.name][impl] = {"status": "skipped", "reason": f"not part of --quick "
                                     f"(slow); run it with --only {w.name}"}
    measured = [w for w in selected if w not in skipped]
    measure_baselines(measured, args, results, meta)
    for w in measured:
        if w.group == "startup":
            continue
        log(f"lazyten {w.name} ...")
        t0 = time.monotonic()
        measure_lazyten(w, args, results, meta)
        e = results[w.name]["lazyten"]
        if e["status"] == "ok":
            log(f"  {report.fmt_time(e['result']['median_s'])} (median of {e['result']['runs']}; "
                f"child took {time.monotonic() - t0:.0f} s)")
        else:
            reason = (e.get("reason") or "").strip().splitlines()
            log(f"  {e['status']}: {reason[0] if reason else ''}")
    measure_startup(measured, args, results)
    meta["loadavg_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    meta["wall_s"] = time.monotonic() - start
    rows = [(w, report.row_data(w, results[w.name], args.stat)) for w in selected]
    stat = "medians" if args.stat == "median" else "each side's best call"
    print(f"lazyten benchmarks  ({meta['cpu']}, {meta['cpu_count']} cpus, python {meta['python']}, "
          f"numpy {meta['numpy']}, torch {meta.get('torch', {}).get('version', 'n/a')}; "
          f"{'quick' if args.quick else 'full'} run, --repeat {args.repeat}; times are {stat}"
          f"{'; lazyten and torch eager timed side by side' if args.paired else ''})")
    print(report.table(rows))
    print(report.details(rows))
    load = meta["loadavg_start"]
    if load and os.cpu_count() and load[0] > 0.5 * os.cpu_count():
        print(f"\nwarning: the machine was busy before the run (1-min load average {load[0]:.1f} "
              f"on {os.cpu_count()} cpus): timings may be noisy")
    print(f"\ntotal {meta['wall_s']:.0f} s")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(report.document(meta, rows))
        print(f"wrote {args.json}")
    return 0
