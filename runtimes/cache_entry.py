"""One disk-cache entry as bytes: `encode` writes it, `decode` checks it and reads it back.

The line `LAZYTEN-CACHE 1`, a line with the header's length in bytes, the header (JSON:
kind, the SHA-256 of the key it was written for, the SHA-256 and size of the payload, and
the entry's metadata as plain JSON values), then the payload (raw bytes). Nothing here is
unpickled or executed; `decode` raises ValueError naming what is wrong with a file.
Where entries live and who may write them is runtimes/disk_cache.py.
"""
from __future__ import annotations
import hashlib
import json
from typing import Any

MAGIC = b"LAZYTEN-CACHE 1\n"
MAX_HEADER = 1 << 20      # bytes: a header is a few hundred bytes of JSON plus a source
MAX_ENTRY = 256 << 20     # bytes: no kernel binary comes near this


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def encode(kind: str, key: str, meta: dict, payload: bytes) -> bytes:
    """The bytes of an entry holding `payload` and `meta` for `key`."""
    header = json.dumps({"kind": kind, "key": sha256(key.encode()),
                         "payload": sha256(payload), "size": len(payload),
                         "meta": meta}).encode()
    return MAGIC + b"%d\n" % len(header) + header + payload


def decode(data: bytes, kind: str, key: str) -> tuple[dict, bytes]:
    """(metadata, payload) of an entry file, or ValueError saying what is wrong."""
    if len(data) > MAX_ENTRY:
        raise ValueError("it is larger than any entry lazyten writes")
    if not data.startswith(MAGIC):
        raise ValueError("it is not a lazyten cache entry of this version")
    rest = data[len(MAGIC):]
    line, sep, rest = rest.partition(b"\n")
    if not sep or not line.isdigit() or int(line) > MAX_HEADER or int(line) > len(rest):
        raise ValueError("its header length is missing or wrong")
    try:
        header: Any = json.loads(rest[:int(line)])
    except (ValueError, RecursionError):
        raise ValueError("its header is not valid JSON") from None
    payload = rest[int(line):]
    if not isinstance(header, dict) or header.get("kind") != kind or \
            not isinstance(header.get("meta"), dict):
        raise ValueError("its header is not a header of this kind of entry")
    if header.get("key") != sha256(key.encode()):
        raise ValueError("it was written for another key")
    if header.get("size") != len(payload) or header.get("payload") != sha256(payload):
        raise ValueError("its payload does not match its digest (truncated or damaged)")
    return header["meta"], payload
