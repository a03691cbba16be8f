#!/usr/bin/env python3
"""Static issue cycles of a SASS address range, from ptxas's control codes.

Usage: sass-static-stalls.py LISTING START END [-v]

LISTING is `cuobjdump -sass` output of one function (sm_70 and later: each
instruction is 128 bits, printed as two 64-bit words on two lines). START and
END are hexadecimal addresses (inclusive), for example a loop's first
instruction and its backward branch.

ptxas encodes in each instruction's high word how many cycles the warp waits
before issuing its next instruction (bits 41-44 of that word). Their sum over a
loop body is the fewest cycles one warp needs for an iteration when no
variable-latency result (memory, MUFU, shuffles) keeps it waiting longer: a
floor that no number of resident warps lowers for that warp.

Prints the instruction count, the sum, and the sum by opcode; with -v, every
instruction with its stall count and write-barrier index (7: none).
"""

import collections
import re
import sys


def parse(path):
    lines = open(path).read().split("\n")
    pattern = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s+/\* (0x[0-9a-f]+) \*/")
    for i, line in enumerate(lines):
        m = pattern.match(line)
        if not m:
            continue
        high = re.search(r"/\* (0x[0-9a-f]+) \*/", lines[i + 1])
        if not high:
            raise SystemExit(f"{path}:{i + 2}: no second word after the instruction at {m.group(1)}")
        yield int(m.group(1), 16), m.group(2), int(high.group(1), 16)


def opcode(text):
    words = text.split()
    op = words[1] if words[0].startswith("@") else words[0]
    return op.split(".")[0]


def main(argv):
    if len(argv) not in (4, 5) or (len(argv) == 5 and argv[4] != "-v"):
        raise SystemExit(__doc__)
    path, start, end = argv[1], int(argv[2], 16), int(argv[3], 16)
    verbose = len(argv) == 5
    count, total, by_op = 0, 0, collections.Counter()
    for address, text, high in parse(path):
        if not start <= address <= end:
            continue
        control = high >> 41
        stall, write_barrier = control & 0xF, (control >> 5) & 0x7
        count += 1
        total += stall
        by_op[opcode(text)] += stall
        if verbose:
            print(f"{address:05x} stall {stall:2d} wb {write_barrier}  {text}")
    if count == 0:
        raise SystemExit(f"no instruction between {argv[2]} and {argv[3]} in {path}")
    print(f"instructions {count}, static issue cycles {total}")
    print("by opcode:", ", ".join(f"{op} {cycles}" for op, cycles in by_op.most_common()))


if __name__ == "__main__":
    main(sys.argv)
