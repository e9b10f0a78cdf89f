"""Two requests to glibc's allocator (malloc), for the memory a long CPU command holds beyond what it uses.

glibc raises its mmap threshold each time a large block is freed; past that, a batch's activations come from the
heap, which fragments as the batches' shapes vary and keeps what is freed: a command's resident size then grows
with what it has freed, not with what it uses (docs/results.md, "Memory"). Under another C library (musl, macOS)
both are no-ops.
"""
import ctypes

M_MMAP_THRESHOLD, GLIBC_DEFAULT_MMAP_THRESHOLD = -3, 128 * 1024  # glibc's mallopt parameter, and its default


def _libc():
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def keep_large_blocks_out_of_the_heap() -> None:
    """Hold the mmap threshold at glibc's default, so that every block past 128 KiB is mapped apart and given back
    when freed. For a command that only predicts (a file's prediction grew by some 100 MB a chunk without it: 1.8 GB
    for 100,000 lines, 0.7 GB with it); a training run pays for it in system time, each step's blocks mapped and
    zeroed afresh."""
    libc = _libc()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(M_MMAP_THRESHOLD, GLIBC_DEFAULT_MMAP_THRESHOLD)


def give_back_free_memory() -> None:
    """Return the heap's free pages to the system (malloc_trim): between the phases of a run (after training,
    before its finish's test predictions), when what the last phase freed will not be reused at once.
    Milliseconds."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
