"""A compile worker process: `python -m runtimes.compile_worker MODULE:CLASS ARGS...`.

It makes a compiler as `CLASS(*ARGS)` and compiles each source read from stdin until
stdin closes (runtimes/compile_pool.py starts and feeds it). It imports only what that
class needs (the CPU's: runtimes/llvm_build.py, llvmlite alone), so it starts in about
0.2 s. Protocol on stdin/stdout: a little-endian u32 length, then the bytes; the request
is the source, the reply is b"K" + binary or b"E" + the error text.
"""
from __future__ import annotations
import importlib
import os
import signal
import struct
import sys


def send(stream, data: bytes) -> None:
    stream.write(struct.pack("<I", len(data)) + data)
    stream.flush()


def receive(stream) -> bytes | None:
    header = stream.read(4)
    if len(header) < 4:
        return None
    size = struct.unpack("<I", header)[0]
    data = stream.read(size)
    return data if len(data) == size else None


def main(argv: list[str]) -> int:
    """The worker: compile each source read from stdin until stdin closes, with a
    compiler made as `CLASS(*ARGS)` from `MODULE:CLASS ARGS...`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, not into the replies
    module, _, cls = argv[0].partition(":")
    compiler = getattr(importlib.import_module(module), cls)(*argv[1:])
    while (request := receive(sys.stdin.buffer)) is not None:
        try:
            reply = b"K" + compiler.compile(request.decode())
        except Exception as e:  # noqa: BLE001 - every failure goes back to the parent
            reply = b"E" + f"{type(e).__name__}: {e}".encode()
        send(out, reply)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
