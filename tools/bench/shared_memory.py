"""Shared memory in use on the machine, as the benchmarks count it: /proc/meminfo's Shmem, which
holds /dev/shm and iod's private huge-page file on a tmpfs of its own (iod --shm), where the
bytes in use on /dev/shm miss the latter. One definition for the footprint harness and for the
peer kits' measure.py, which counted /dev/shm:

    python3 tools/bench/shared_memory.py rewrite-measure KIT/measure.py OUT/measure.py

writes a copy of the kit's measure.py whose shm_used() reads Shmem (the peer engines keep no
shared memory: the same count for both). Python 3 standard library only."""

import sys

SHMEM_BODY = ('    with open("/proc/meminfo") as f:\n'
              '        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("Shmem:"))\n')
KIT_BODY = '    s = os.statvfs("/dev/shm")\n    return (s.f_blocks - s.f_bfree) * s.f_frsize\n'


def shmem_bytes():
    """Bytes of shared memory in use on the machine (/proc/meminfo Shmem)."""
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("Shmem:"))


def rewrite_measure(src, dst):
    text = open(src).read()
    if KIT_BODY not in text:
        sys.exit(f"shared_memory: {src}: shm_used() is not the one this rewrites")
    with open(dst, "w") as f:
        f.write(text.replace(KIT_BODY, SHMEM_BODY))


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "rewrite-measure":
        sys.exit("usage: shared_memory.py rewrite-measure KIT/measure.py OUT/measure.py")
    rewrite_measure(sys.argv[2], sys.argv[3])
