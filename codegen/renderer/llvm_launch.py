"""The LLVM IR of the CPU's launchers: Python builtins that call a kernel.

A kernel launched through ctypes costs about 6,000 instructions of marshalling (a call
with no arguments at all costs 5,500), more than the rest of an eager op's launch. A
launcher is instead a C function with CPython's METH_FASTCALL signature,
`PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)`, compiled by
LLVM like the crew's support code; runtimes/cpu_launch.py makes it a builtin function
(PyCFunction_NewEx), so calling it costs what calling `len` does.

`launch_N(kernel, start, end, m0, ..., m{N-1})` calls the kernel at address `kernel`
(a Python int) on N buffers and the thread bounds [start, end); `call_N(kernel, m0, ...)`
calls a kernel without bounds. Each `m` is the CPU allocator's memory, a tuple
`(block, address)`. The GIL is released during the kernel, as ctypes does. A wrong
number of arguments raises TypeError, memory that is not such a tuple raises CPython's
own error (SystemError, IndexError or TypeError), and the kernel is then not called.
The C API is reached through external symbols the runtime resolves to this process's
CPython (`llvm.add_symbol`), so the object code can be cached.

`crew_run(post, finish, mailbox, flags, woken, word, spins, workers, chunks, record,
v0, v1, ...)` runs a job on the worker threads (runtimes/cpu_crew.py) in one call, where
filling the record and two ctypes calls took about 2.5 us: it writes the values v into
the job record at address `record` and the record's address into the mailbox, calls
`crew_post` (at address `post`) and, if no worker was asleep, `crew_finish` (the
caller's share and its wait, without the GIL), returning None; if some were asleep it
returns their count without finishing, and the caller wakes them (Python queues) and
then finishes. A value that is no int raises before anything is posted.
"""
from __future__ import annotations

# (name, LLVM declaration) of what the launchers use from CPython's C API
C_API = (
    ("PyTuple_GetItem", "declare ptr @PyTuple_GetItem(ptr, i64)"),
    ("PyLong_AsVoidPtr", "declare ptr @PyLong_AsVoidPtr(ptr)"),
    ("PyLong_AsSsize_t", "declare i64 @PyLong_AsSsize_t(ptr)"),
    ("PyErr_Occurred", "declare ptr @PyErr_Occurred()"),
    ("PyErr_SetString", "declare void @PyErr_SetString(ptr, ptr)"),
    ("PyEval_SaveThread", "declare ptr @PyEval_SaveThread()"),
    ("PyEval_RestoreThread", "declare void @PyEval_RestoreThread(ptr)"),
    ("Py_IncRef", "declare void @Py_IncRef(ptr)"),
    ("PyLong_FromSsize_t", "declare ptr @PyLong_FromSsize_t(i64)"),
)
C_DATA = (  # (name, declaration) of data: None itself, and the pointer to TypeError
    ("_Py_NoneStruct", "@_Py_NoneStruct = external global i8"),
    ("PyExc_TypeError", "@PyExc_TypeError = external global ptr"),
)


def launcher_name(buffers: int, bounds: bool) -> str:
    return f"{'launch' if bounds else 'call'}_{buffers}"


def _function(buffers: int, bounds: bool) -> list[str]:
    name = launcher_name(buffers, bounds)
    first = 3 if bounds else 1  # the first memory's argument
    nargs = first + buffers
    message = f"{name} takes {nargs} arguments"
    lines = [
        f"@{name}_arity = private unnamed_addr constant [{len(message) + 1} x i8] "
        f'c"{message}\\00"',
        f"define ptr @{name}(ptr %self, ptr %args, i64 %nargs) {{", "entry:",
        f"  %right = icmp eq i64 %nargs, {nargs}",
        "  br i1 %right, label %read, label %arity", "read:",
        "  %kernel_arg = load ptr, ptr %args, align 8",
        "  %kernel = call ptr @PyLong_AsVoidPtr(ptr %kernel_arg)"]
    if bounds:
        for i, bound in ((1, "start"), (2, "end")):
            lines += [f"  %{bound}_p = getelementptr ptr, ptr %args, i64 {i}",
                      f"  %{bound}_arg = load ptr, ptr %{bound}_p, align 8",
                      f"  %{bound} = call i64 @PyLong_AsSsize_t(ptr %{bound}_arg)"]
    lines.append(f"  br label %{'memory0' if buffers else 'check'}")
    for i in range(buffers):  # each memory's address, or the error path
        lines += [f"memory{i}:", f"  %m{i}_p = getelementptr ptr, ptr %args, i64 {first + i}",
                  f"  %m{i} = load ptr, ptr %m{i}_p, align 8",
                  f"  %a{i}_obj = call ptr @PyTuple_GetItem(ptr %m{i}, i64 1)",
                  f"  %a{i}_none = icmp eq ptr %a{i}_obj, null",
                  f"  br i1 %a{i}_none, label %fail, label %address{i}", f"address{i}:",
                  f"  %d{i} = call ptr @PyLong_AsVoidPtr(ptr %a{i}_obj)",
                  f"  br label %{'memory' + str(i + 1) if i + 1 < buffers else 'check'}"]
    args = [f"ptr %d{i}" for i in range(buffers)] + (["i64 %start", "i64 %end"] if bounds else [])
    return lines + [
        "check:", "  %error = call ptr @PyErr_Occurred()",
        "  %failed = icmp ne ptr %error, null",
        "  br i1 %failed, label %fail, label %run", "run:",
        "  %state = call ptr @PyEval_SaveThread()",
        f"  call void %kernel({', '.join(args)})",
        "  call void @PyEval_RestoreThread(ptr %state)",
        "  call void @Py_IncRef(ptr @_Py_NoneStruct)",
        "  ret ptr @_Py_NoneStruct", "arity:",
        "  %type_error = load ptr, ptr @PyExc_TypeError, align 8",
        f"  call void @PyErr_SetString(ptr %type_error, ptr @{name}_arity)",
        "  ret ptr null", "fail:", "  ret ptr null", "}"]


_CREW_ARGS = (("post", "ptr"), ("finish", "ptr"), ("mb", "ptr"), ("flags", "ptr"),
              ("woken", "ptr"), ("word", "i64"), ("spins", "i64"), ("workers", "i64"),
              ("chunks", "i64"), ("record", "ptr"))


def crew_run_ir() -> str:
    """`crew_run`, with its declarations (see the module's docstring)."""
    first = len(_CREW_ARGS)  # the first value of the record
    message = f"crew_run takes more than {first} arguments"
    lines = [d for _, d in C_API] + [d for _, d in C_DATA] + [
        f"@crew_run_arity = private unnamed_addr constant [{len(message) + 1} x i8] "
        f'c"{message}\\00"',
        "define ptr @crew_run(ptr %self, ptr %args, i64 %nargs) {", "entry:",
        f"  %right = icmp sgt i64 %nargs, {first}",
        "  br i1 %right, label %read, label %arity", "read:"]
    for i, (name, ty) in enumerate(_CREW_ARGS):
        convert = "PyLong_AsVoidPtr" if ty == "ptr" else "PyLong_AsSsize_t"
        lines += [f"  %{name}_p = getelementptr ptr, ptr %args, i64 {i}",
                  f"  %{name}_arg = load ptr, ptr %{name}_p, align 8",
                  f"  %{name} = call {ty} @{convert}(ptr %{name}_arg)"]
    return "\n".join(lines + [
        "  br label %fill", "fill:",  # the record's values, one Python int each
        f"  %i = phi i64 [{first}, %read], [%i1, %fill]",
        "  %v_p = getelementptr ptr, ptr %args, i64 %i",
        "  %v_arg = load ptr, ptr %v_p, align 8",
        "  %v = call i64 @PyLong_AsSsize_t(ptr %v_arg)",
        f"  %slot_i = sub i64 %i, {first}",
        "  %slot = getelementptr i64, ptr %record, i64 %slot_i",
        "  store i64 %v, ptr %slot, align 8",
        "  %i1 = add i64 %i, 1", "  %more = icmp slt i64 %i1, %nargs",
        "  br i1 %more, label %fill, label %check", "check:",
        "  %error = call ptr @PyErr_Occurred()", "  %failed = icmp ne ptr %error, null",
        "  br i1 %failed, label %fail, label %post_job", "post_job:",
        "  %jobp = getelementptr i64, ptr %mb, i64 16",
        "  store atomic ptr %record, ptr %jobp monotonic, align 8",
        "  %asleep = call i64 %post(ptr %mb, i64 %word, i64 %spins, ptr %flags, "
        "i64 %workers, ptr %woken)",
        "  %wake = icmp ne i64 %asleep, 0",
        "  br i1 %wake, label %to_wake, label %run", "to_wake:",
        "  %count = call ptr @PyLong_FromSsize_t(i64 %asleep)", "  ret ptr %count", "run:",
        "  %state = call ptr @PyEval_SaveThread()",
        "  call void %finish(ptr %mb, i64 %chunks)",
        "  call void @PyEval_RestoreThread(ptr %state)",
        "  call void @Py_IncRef(ptr @_Py_NoneStruct)",
        "  ret ptr @_Py_NoneStruct", "arity:",
        "  %type_error = load ptr, ptr @PyExc_TypeError, align 8",
        "  call void @PyErr_SetString(ptr %type_error, ptr @crew_run_arity)",
        "  ret ptr null", "fail:", "  ret ptr null", "}"]) + "\n"


def launchers_ir(buffers: int) -> str:
    """`launch_<buffers>` and `call_<buffers>`, with their declarations."""
    declarations = [d for _, d in C_API] + [d for _, d in C_DATA]
    return "\n".join(declarations + _function(buffers, True) + _function(buffers, False)) + "\n"


# the slots of a CUDA launch record (runtimes/cuda_launch.py), in order, each 64 bits
CUDA_RECORD = ("cuLaunchKernel", "cuCtxGetCurrent", "cuCtxSetCurrent", "context", "function",
               "gx", "gy", "gz", "bx", "by", "bz", "values", "params", "arity")


def cuda_launch_ir() -> str:
    """`cuda_launch(record, m0, ..., m{N-1})`: one CUDA kernel launch in one builtin call
    (where ctypes took two or three calls of marshalling, D99). `record` is the address
    of a launch record (CUDA_RECORD's slots: the driver functions' addresses, the
    device's context, the kernel's CUfunction, its grid and block, its argument block's
    values and pointers, and N); each m is a device pointer (a Python int), written into
    the argument block. It makes the context current where another is and calls
    cuLaunchKernel on the default stream, keeping the GIL (cuLaunchKernel only queues the
    launch, and no other thread can refill the argument block before the driver has read
    it); it returns the CUresult as an int (0: launched). A wrong count raises TypeError
    and a value that is no int CPython's error, before anything is launched."""
    slot = {name: i for i, name in enumerate(CUDA_RECORD)}

    def read(name: str, ty: str = "i64") -> list[str]:
        return [f"  %{name}_p = getelementptr i64, ptr %rec, i64 {slot[name]}",
                f"  %{name} = load {ty}, ptr %{name}_p, align 8"]
    message = "cuda_launch takes a launch record and the kernel's buffers"
    dims = ["gx", "gy", "gz", "bx", "by", "bz"]
    lines = [d for _, d in C_API] + [d for _, d in C_DATA] + [
        f"@cuda_launch_arity = private unnamed_addr constant [{len(message) + 1} x i8] "
        f'c"{message}\\00"',
        "define ptr @cuda_launch(ptr %self, ptr %args, i64 %nargs) {", "entry:",
        "  %now = alloca ptr, align 8", "  %some = icmp sgt i64 %nargs, 0",
        "  br i1 %some, label %read, label %wrong", "read:",
        "  %rec_arg = load ptr, ptr %args, align 8",
        "  %rec = call ptr @PyLong_AsVoidPtr(ptr %rec_arg)",
        "  %rec_error = call ptr @PyErr_Occurred()", "  %no_rec = icmp ne ptr %rec_error, null",
        "  br i1 %no_rec, label %fail, label %count", "count:", *read("arity"),
        *read("values", "ptr"), "  %want = add i64 %arity, 1",
        "  %right = icmp eq i64 %nargs, %want",
        "  br i1 %right, label %start, label %wrong", "start:",
        "  %empty = icmp eq i64 %arity, 0", "  br i1 %empty, label %check, label %fill", "fill:",
        "  %i = phi i64 [1, %start], [%i1, %fill]",
        "  %v_p = getelementptr ptr, ptr %args, i64 %i", "  %v_arg = load ptr, ptr %v_p, align 8",
        "  %v = call ptr @PyLong_AsVoidPtr(ptr %v_arg)", "  %slot_i = sub i64 %i, 1",
        "  %slot = getelementptr ptr, ptr %values, i64 %slot_i",
        "  store ptr %v, ptr %slot, align 8", "  %i1 = add i64 %i, 1",
        "  %more = icmp slt i64 %i1, %nargs", "  br i1 %more, label %fill, label %check",
        "check:", "  %error = call ptr @PyErr_Occurred()", "  %failed = icmp ne ptr %error, null",
        "  br i1 %failed, label %fail, label %run", "run:", *read("cuCtxGetCurrent", "ptr"),
        *read("context", "ptr"), "  %got = call i32 %cuCtxGetCurrent(ptr %now)",
        "  %current = load ptr, ptr %now, align 8", "  %same = icmp eq ptr %current, %context",
        "  %read_ok = icmp eq i32 %got, 0", "  %keep = and i1 %same, %read_ok",
        "  br i1 %keep, label %go, label %switch", "switch:", *read("cuCtxSetCurrent", "ptr"),
        "  %set = call i32 %cuCtxSetCurrent(ptr %context)", "  %set_ok = icmp eq i32 %set, 0",
        "  br i1 %set_ok, label %go, label %done", "go:", *read("cuLaunchKernel", "ptr"),
        *read("function", "ptr"), *read("params", "ptr")]
    for name in dims:
        lines += read(f"{name}") + [f"  %{name}32 = trunc i64 %{name} to i32"]
    lines += [
        "  %launched = call i32 %cuLaunchKernel(ptr %function, "
        + ", ".join(f"i32 %{name}32" for name in dims)
        + ", i32 0, ptr null, ptr %params, ptr null)", "  br label %done", "done:",
        "  %status = phi i32 [%set, %switch], [%launched, %go]",
        "  %status64 = sext i32 %status to i64",
        "  %out = call ptr @PyLong_FromSsize_t(i64 %status64)", "  ret ptr %out", "wrong:",
        "  %type_error = load ptr, ptr @PyExc_TypeError, align 8",
        "  call void @PyErr_SetString(ptr %type_error, ptr @cuda_launch_arity)",
        "  ret ptr null", "fail:", "  ret ptr null", "}"]
    return "\n".join(lines) + "\n"
