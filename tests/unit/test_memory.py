"""Long-running processes stay bounded: thousands of distinct graphs (new shapes every
step) make the in-process caches (programs, schedules, views, freed device blocks) evict,
so memory levels off. 628e35f grew by about 40 MB per 1000 such steps.

Two processes run the same program: the first compiles every kernel and fills the disk
cache, the second finds them there. Compiling costs about 60 KB per kernel inside LLVM in
the compiling process (llvmlite 0.50 keeps it whatever is closed or freed; docs/decisions.md, D47),
so the first one compiles COMPILE_HERE_MAX kernels itself and the rest in worker processes
that are replaced every COMPILE_WORKER_JOBS compiles. Both must level off."""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROGRAM = """
import os, numpy as np
from lazyten import Tensor
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
marks = []
for i in range(1, 1001):
    x = Tensor(np.ones(i + 5, np.float32))   # a new shape each step: a new graph
    (x * 2 + 1).realize()
    (x.reshape(1, -1).expand(2, -1) * 3).realize()
    if i % 250 == 0:
        marks.append(rss())
print(*marks)
"""


def test_memory_levels_off_over_thousands_of_distinct_graphs(tmp_path):
    env = dict(os.environ, CACHEDIR=str(tmp_path / "cache"), PROGRAM_CACHE="32",
               SCHEDULE_CACHE="32", VIEW_CACHE="256", ALLOC_CACHE_MB="2",
               COMPILE_HERE_MAX="100", COMPILE_WORKER_JOBS="500")
    for run in ("compiling", "from the disk cache"):
        done = subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        marks = list(map(float, done.stdout.split()))
        # the caches fill during the first 250 graphs; after that, memory stays put
        # (without the compile limits the compiling run grew by about 45 MB here)
        assert marks[-1] - marks[1] < 4, (f"{run}: RSS after every 250 distinct graphs "
                                          f"(MB): {marks}; it should level off")


def test_allocator_reuses_blocks_by_size_and_gives_back_the_oldest_first():
    from runtimes.base import Allocator

    class Counting(Allocator):
        def __init__(self):
            super().__init__()
            self.made, self.freed = 0, []
            self.limit = 100

        def _alloc(self, nbytes):
            self.made += 1
            return (nbytes, self.made)

        def _free(self, opaque):
            self.freed.append(opaque)

    mem = Counting()
    a, b, c = mem.alloc(40), mem.alloc(40), mem.alloc(20)
    for block, size in ((a, 40), (c, 20), (b, 40)):
        mem.free(block, size)
    assert mem.freed == [] and mem.cached_bytes == 100 and mem.live == 0
    assert mem.alloc(40) == b and mem.made == 3  # the newest block of its size
    mem.free(b, 40)
    d = mem.alloc(30)  # a new size: made
    mem.free(d, 30)  # 130 bytes cached: the oldest (a), then c, go back
    assert mem.freed == [a] and mem.cached_bytes == 90
    mem.free(mem.alloc(50), 50)
    assert mem.freed == [a, c, b] and mem.cached_bytes == 80
