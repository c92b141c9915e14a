"""Start-up latency child: `python -m bench.startup --batch 64`.

Run by the suite in a fresh process with CACHEDIR pointing at a kernel cache directory
(empty for the cold figure, the one the cold run filled for the warm figure). Prints one
JSON line: the time to import lazyten, the time of the first LeNet training step
(building the model and optimiser, the step's graph, scheduling, compiling or loading
kernels, running them; realized), the time of a second step, and the kernels compiled.

The step is the plain (non-jitted) step: lazyten.jit runs its first call unjitted anyway.
"""
from __future__ import annotations
import argparse
import json
import os
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.startup")
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args(argv)
    record: dict = {"cachedir": os.environ.get("CACHEDIR")}
    t0 = time.perf_counter()
    try:
        import lazyten  # noqa: F401
        from bench import lazy_side
    except Exception as e:
        record.update(status="error", reason=f"import failed: {type(e).__name__}: {e}")
        print(json.dumps(record))
        return 0
    record["import_s"] = time.perf_counter() - t0
    compiled = lazy_side.compiled_counter()
    try:
        t1 = time.perf_counter()
        run, info, reference = lazy_side.make_train_step(args.batch, use_jit=False)
        loss = run()
        lazy_side.sync()
        record["first_step_s"] = time.perf_counter() - t1
        first_loss = float(loss.numpy())
        if compiled:
            record["kernels_compiled_first_step"] = compiled()
        t2 = time.perf_counter()
        run()
        lazy_side.sync()
        record["second_step_s"] = time.perf_counter() - t2
        record.update(info)
        ref = reference()
        record["check"] = {"ok": abs(first_loss - ref) <= 1e-4 * max(1.0, abs(ref)),
                           "loss": first_loss, "reference_loss": ref}
        record["status"] = "ok"
    except lazy_side.Unavailable as e:
        record.update(status="n/a", reason=str(e))
    except Exception as e:
        record.update(status="error", reason=f"{type(e).__name__}: {e}")
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
