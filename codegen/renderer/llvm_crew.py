"""The LLVM IR of the CPU's worker threads (runtimes/cpu_crew.py runs it): one job at a
time, a kernel's outer loop cut into pieces, posted to a mailbox in memory.

Functions: `piece_N(record, k)` runs piece k of a kernel with N buffers; `crew_take(mb)`
takes pieces while any are left; `crew_serve(mb, flag, serving, spinner)` is a worker's life
between two sleeps (take pieces, spin polling the mailbox, then say "asleep");
`crew_work(...)` a worker's whole life where it sleeps in native code (D133: serve, then
sleep on a futex until woken, and serve again), else it returns after each serve, to
sleep in Python; `crew_post(...)` publishes a job, wakes the workers asleep in native
code and says which others were asleep; `crew_finish(mb, chunks)` is the caller's share
and its wait.

The mailbox (i64 slots, three cache lines): [0] the job word, `(seq << 32) | pieces
left`; [8] pieces finished; [16] the address of the job record `[piece_N, kernel, n,
chunks | threads << 32, data0, ...]`; [17] how many polls an idle worker spins before it
sleeps; [18] the address of the C library's `syscall` where workers sleep on a futex (0:
they sleep in Python), [19] the futex system call's number. A
thread reads the record, then takes piece `chunks - left` with a compare-and-swap of the
whole word. If the swap succeeds, the record it read was this job's: the caller
rewrites it only after every piece of the job is finished. A thread that read a record
half-rewritten for the next job fails the swap and looks again. So a worker that wakes
late never runs a finished job's piece, and no record may ever be freed.
"""
from __future__ import annotations

LEFT = (1 << 32) - 1  # the job word's low half: pieces left to take


def _slot(index: int, name: str, ty: str) -> list[str]:
    """Load slot `index` of the job record as %name."""
    return [f"  %{name}p = getelementptr i64, ptr %job, i64 {index}",
            f"  %{name} = load {ty}, ptr %{name}p, align 8"]


def _left(word: str, name: str) -> list[str]:
    """%name: the pieces left in %word; %name_some: whether there are any."""
    return [f"  %{name} = and i64 %{word}, {LEFT}", f"  %{name}_some = icmp ne i64 %{name}, 0"]


def piece_ir(buffers: int) -> str:
    """`piece_N(ptr record, i64 j)`: run the j-th piece taken of the record's kernel (N
    buffers): block k of the outer loop, rows [n*k/chunks, n*(k+1)/chunks); an empty
    piece (chunks > n) runs nothing, since a kernel's loops run at least once. Where the
    record's slot 3 names T threads besides the chunks (`chunks | T << 32`) and T divides
    them, the j-th piece taken is block (j % T) * (chunks / T) + j // T: threads that take
    pieces in turn each walk one contiguous share, the same in every call (the rows a
    kernel wrote stay in its core's cache for the next), and a thread that is late or
    slow still leaves its pieces to the others (64 x 1000 softmax, 8 pieces on 2 cores:
    18.7 -> 14.5 us)."""
    data = [line for i in range(buffers) for line in _slot(4 + i, f"d{i}", "ptr")]
    args = ", ".join([f"ptr %d{i}" for i in range(buffers)] + ["i64 %start", "i64 %end"])
    return "\n".join([
        f"define void @piece_{buffers}(ptr %job, i64 %j) {{", "entry:",
        *_slot(1, "kernel", "ptr"), *_slot(2, "n", "i64"), *_slot(3, "word", "i64"),
        f"  %chunks = and i64 %word, {LEFT}", "  %t = lshr i64 %word, 32",
        "  %many = icmp ugt i64 %t, 1", "  %tt = select i1 %many, i64 %t, i64 1",
        "  %share = udiv i64 %chunks, %tt", "  %rest = urem i64 %chunks, %tt",
        "  %whole = icmp eq i64 %rest, 0", "  %turn = urem i64 %j, %tt",
        "  %round = udiv i64 %j, %tt", "  %from = mul i64 %turn, %share",
        "  %shared = add i64 %from, %round", "  %k = select i1 %whole, i64 %shared, i64 %j",
        "  %lo = mul i64 %k, %n", "  %start = sdiv i64 %lo, %chunks",
        "  %k1 = add i64 %k, 1", "  %hi = mul i64 %k1, %n", "  %end = sdiv i64 %hi, %chunks",
        "  %empty = icmp sge i64 %start, %end",
        "  br i1 %empty, label %out, label %call", "call:", *data,
        f"  call void %kernel({args})", "  br label %out", "out:", "  ret void", "}"]) + "\n"


def _spin_hint(triple: str) -> tuple[str, str]:
    """(the call a spin loop makes each poll, its declaration) for this machine: x86
    `pause`, AArch64 `yield`, nothing elsewhere."""
    if triple.startswith(("x86_64", "i386", "i686")):
        return "  call void @llvm.x86.sse2.pause()", "declare void @llvm.x86.sse2.pause()"
    if triple.startswith(("aarch64", "arm64")):
        return "  call void @llvm.aarch64.hint(i32 1)", "declare void @llvm.aarch64.hint(i32)"
    return "", ""


_TAKE = [
    "define void @crew_take(ptr %mb) {", "entry:",
    "  %finished = getelementptr i64, ptr %mb, i64 8",
    "  %jobp = getelementptr i64, ptr %mb, i64 16", "  br label %look", "look:",
    "  %w = load atomic i64, ptr %mb acquire, align 8", *_left("w", "left"),
    "  br i1 %left_some, label %try, label %out", "try:",
    "  %job = load atomic ptr, ptr %jobp monotonic, align 8",
    "  %piece = load atomic ptr, ptr %job monotonic, align 8",
    "  %chunksp = getelementptr i64, ptr %job, i64 3",
    "  %chunksw = load atomic i64, ptr %chunksp monotonic, align 8",
    f"  %chunks = and i64 %chunksw, {LEFT}",
    "  %w1 = sub i64 %w, 1",
    "  %swap = cmpxchg ptr %mb, i64 %w, i64 %w1 seq_cst seq_cst",
    "  %won = extractvalue { i64, i1 } %swap, 1",
    "  br i1 %won, label %run, label %look", "run:",
    "  %k = sub i64 %chunks, %left", "  call void %piece(ptr %job, i64 %k)",
    "  %f = atomicrmw add ptr %finished, i64 1 release", "  br label %look",
    "out:", "  ret void", "}"]

FUTEX_WAIT, FUTEX_WAKE = 128, 129  # FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE (Linux)

_POST = [
    "define i64 @crew_post(ptr %mb, i64 %word, i64 %spins, ptr %flags, i64 %workers, "
    "ptr %woken) {", "entry:", "  %finished = getelementptr i64, ptr %mb, i64 8",
    "  store atomic i64 0, ptr %finished monotonic, align 8",
    "  %spinsp = getelementptr i64, ptr %mb, i64 17",
    "  store atomic i64 %spins, ptr %spinsp monotonic, align 8",
    "  %sysp = getelementptr i64, ptr %mb, i64 18",
    "  %sys = load atomic ptr, ptr %sysp monotonic, align 8",
    "  %native = icmp ne ptr %sys, null",
    "  %nrp = getelementptr i64, ptr %mb, i64 19", "  %nr = load i64, ptr %nrp, align 8",
    "  store atomic i64 %word, ptr %mb seq_cst, align 8",
    "  %none = icmp sle i64 %workers, 0", "  br i1 %none, label %out, label %loop",
    "loop:", "  %i = phi i64 [0, %entry], [%i1, %count]",
    "  %n = phi i64 [0, %entry], [%n1, %count]",
    "  %flag = getelementptr i64, ptr %flags, i64 %i",
    "  %old = atomicrmw xchg ptr %flag, i64 0 seq_cst",
    # a worker asleep on its futex is woken here; one asleep in Python is counted, and
    # the caller wakes it
    "  %was = icmp ne i64 %old, 0", "  %by_futex = and i1 %was, %native",
    "  br i1 %by_futex, label %wake, label %count", "wake:",
    f"  %r = call i64 (i64, ...) %sys(i64 %nr, ptr %flag, i64 {FUTEX_WAKE}, i64 1)",
    "  br label %count", "count:",
    "  %asleep = select i1 %native, i64 0, i64 %old",
    "  %slot = getelementptr i64, ptr %woken, i64 %i", "  store i64 %asleep, ptr %slot",
    "  %n1 = add i64 %n, %asleep", "  %i1 = add i64 %i, 1",
    "  %more = icmp slt i64 %i1, %workers", "  br i1 %more, label %loop, label %out",
    "out:", "  %total = phi i64 [0, %entry], [%n1, %count]", "  ret i64 %total", "}"]

# `crew_work(mb, flag, serving, spinner)`: serve; then, where the mailbox names the C
# library's `syscall` ([18]), sleep on the futex *flag while it says "asleep" (a poster
# sets it to 0, then wakes the futex; a wake-up that finds it still 1 sleeps again) and
# serve again; where it names none (never set, or cleared by the crew's exit handler:
# a worker is woken to see it), return, to sleep in Python (D133)
_WORK = [
    "define void @crew_work(ptr %mb, ptr %flag, ptr %serving, i64 %spinner) {", "entry:",
    "  %sysp = getelementptr i64, ptr %mb, i64 18",
    "  %nrp = getelementptr i64, ptr %mb, i64 19", "  br label %serve", "serve:",
    "  call void @crew_serve(ptr %mb, ptr %flag, ptr %serving, i64 %spinner)",
    "  br label %sleep", "sleep:",
    "  %sys = load atomic ptr, ptr %sysp seq_cst, align 8",
    "  %native = icmp ne ptr %sys, null", "  br i1 %native, label %check, label %out",
    "check:", "  %f = load atomic i64, ptr %flag seq_cst, align 8",
    "  %asleep = icmp eq i64 %f, 1", "  br i1 %asleep, label %wait, label %serve", "wait:",
    "  %nr = load i64, ptr %nrp, align 8",
    f"  %r = call i64 (i64, ...) %sys(i64 %nr, ptr %flag, i64 {FUTEX_WAIT}, i64 1, ptr null)",
    "  br label %sleep", "out:", "  ret void", "}"]


def _serve(hint: str) -> list[str]:
    """`crew_serve(mb, flag, serving, spinner)`: take pieces; when none are left, poll
    (spinner: 1 or 0) times the posted spin count; then say "asleep" in *flag and return
    (to crew_work, or to Python).
    While it runs, *serving is 1: a caller reads it to know whether a job now would find
    the worker ready or have to wait for it to wake (and take the GIL back in Python: a
    worker woken but not yet serving has 0 there too), D97. It writes those two and the
    mailbox, nothing else (the serving flag was once found at a fixed distance after
    *flag: a caller that gave one int64 had its heap overwritten)."""
    return [
        "define void @crew_serve(ptr %mb, ptr %flag, ptr %serving, i64 %spinner) {",
        "entry:", "  %spinsp = getelementptr i64, ptr %mb, i64 17",
        "  store atomic i64 1, ptr %serving monotonic, align 8",
        "  br label %work", "work:", "  call void @crew_take(ptr %mb)", "  br label %wait",
        "wait:", "  %idle = phi i64 [0, %work], [%idle1, %poll]",
        "  %w = load atomic i64, ptr %mb acquire, align 8", *_left("w", "left"),
        "  br i1 %left_some, label %work, label %poll", "poll:", hint,
        # read each poll: the crew's exit handler sets it to 0 to end every spin at once
        "  %posted = load atomic i64, ptr %spinsp monotonic, align 8",
        "  %spins = mul i64 %posted, %spinner",
        "  %idle1 = add i64 %idle, 1", "  %more = icmp slt i64 %idle1, %spins",
        "  br i1 %more, label %wait, label %sleep", "sleep:",
        # say "asleep", then look once more: crew_post stores the job, then reads the flag
        # (both seq_cst), so either this sees the job or the poster sees the flag
        "  store atomic i64 0, ptr %serving monotonic, align 8",
        "  store atomic i64 1, ptr %flag seq_cst, align 8",
        "  %w2 = load atomic i64, ptr %mb seq_cst, align 8", *_left("w2", "late"),
        "  br i1 %late_some, label %cancel, label %out", "cancel:",
        "  %was = atomicrmw xchg ptr %flag, i64 0 seq_cst",  # a wake-up may come anyway
        "  store atomic i64 1, ptr %serving monotonic, align 8",
        "  br label %work", "out:", "  ret void", "}"]


def _finish(hint: str) -> list[str]:
    """`crew_finish(mb, chunks)`: take pieces, then wait for every piece to finish."""
    return [
        "define void @crew_finish(ptr %mb, i64 %chunks) {", "entry:",
        "  call void @crew_take(ptr %mb)",
        "  %finished = getelementptr i64, ptr %mb, i64 8", "  br label %wait", "wait:",
        "  %f = load atomic i64, ptr %finished acquire, align 8",
        "  %done = icmp sge i64 %f, %chunks", "  br i1 %done, label %out, label %spin",
        "spin:", hint, "  br label %wait", "out:", "  ret void", "}"]


def support_ir(triple: str, buffers: int) -> str:
    """The crew's functions and piece_1 .. piece_<buffers>, for the machine `triple`."""
    hint, declaration = _spin_hint(triple)
    functions = [declaration, *_TAKE, *_serve(hint), *_POST, *_WORK, *_finish(hint)]
    return "\n".join(functions) + "\n" + "".join(piece_ir(n) for n in range(1, buffers + 1))
