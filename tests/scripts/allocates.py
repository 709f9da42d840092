"""Allocate host memory steadily (about 200 MB every 0.1 s, up to 8 GB), writing every page so it is resident."""

import time

CHUNK = 200 * 1024 * 1024
LIMIT = 8 * 1024 * 1024 * 1024

chunks = []
while len(chunks) * CHUNK < LIMIT:
    # Repeating a one-byte bytearray fills the new buffer with memset, so every page is touched;
    # bytearray(n) alone may get untouched zero pages that never count as resident.
    chunks.append(bytearray(b"\x01") * CHUNK)
    print(f"allocated {len(chunks) * CHUNK // 2**20} MB", flush=True)
    time.sleep(0.1)
print("allocated everything")
