"""lazyten's benchmark suite: `python -m bench` (see docs/benchmarks.md).

Every workload is measured three ways in the same run: lazyten, numpy (where a numpy
form exists) and PyTorch eager / torch.compile (when torch is importable; otherwise the
torch columns read "n/a"). Each lazyten workload runs in its own child process, and all
baselines run in one other child, so that no library's thread pool or allocator state
leaks into another's timings and a runaway workload can be stopped at its time limit.

Modules:
  spec       Workload and Target, the records every registry module builds
  workloads  the registry: names, sizes, work counted (FLOPs / bytes), targets
  layers     the layer-class workloads (softmax widths, attention, 3x3 conv, MLP step,
             dispatch: realize, numpy, a changing scalar), outside the default run:
             their shapes, targets and inputs
  measure    warm-up + repeated timing with a time budget, median of the repeats
  lenet      LeNet parameters and a numpy reference (convs and the training loss)
  reference  numpy forms of the layer workloads (baseline, and float64 reference)
  lazy_side  the lazyten implementation of each workload (imports lazyten)
  lazy_layers  the same for the layer-class workloads
  baselines  the numpy and torch implementations (imports torch only if present)
  base_layers  the same for the layer-class workloads
  worker     the child-process entry point for both sides
  startup    the child that times the first training step (cold / warm kernel cache)
  report     the table and the JSON file
  cli        argument parsing and orchestration (`python -m bench`)
"""
