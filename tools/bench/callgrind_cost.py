#!/usr/bin/env python3
"""The cost of one round trip from two callgrind profiles of the same program (--dump-instr=yes)
that differ only in their number of round trips: instructions per round trip, and the hot code
(the distinct 64-byte lines of instructions that each round trip runs), over every object the
process ran.

    callgrind_cost.py MORE.out FEWER.out ROUND_TRIPS_APART

prints "ir RT_IR lines LINES kib KIB", where an instruction is hot when it ran in at least every
other round trip (MORE ran it at least ROUND_TRIPS_APART / 2 times more than FEWER). Hot code is
what competes for the instruction cache and the decoded-op cache: code that each message runs
once, spread over many lines, pays for every line it touches, which instruction counts alone do
not show.
"""

import collections
import re
import sys

_NAMED = re.compile(r"\((\d+)\)(?: (.*))?")


def _position(token, last):
    """One position of callgrind's compressed format: absolute, +N/-N relative, or * (same)."""
    if token == "*":
        return last
    if token[0] in "+-":
        step = int(token[1:], 16) if token[1:].startswith("0x") else int(token[1:])
        return last + step if token[0] == "+" else last - step
    return int(token, 16) if token.startswith("0x") else int(token)


def instruction_costs(path):
    """{(object, address): instructions run there} and the profile's total."""
    costs = collections.Counter()
    objects = {}
    obj = None
    addr = 0
    after_call = False
    total = None
    columns = 1  # position columns before the cost: "positions: instr line" has two
    with open(path) as f:
        for line in f:
            if line.startswith("positions:"):
                kinds = line.split()[1:]
                if "instr" not in kinds:
                    sys.exit(f"{path}: no instruction addresses (run callgrind with --dump-instr=yes)")
                columns = len(kinds)
                continue
            if line.startswith(("ob=", "cob=")):
                key, _, rest = line.rstrip("\n").partition("=")
                m = _NAMED.match(rest)
                if m.group(2):
                    objects[m.group(1)] = m.group(2)
                if key == "ob":
                    obj = objects[m.group(1)]
                continue
            if line.startswith("calls="):
                after_call = True  # the next cost line is the call's inclusive cost
                continue
            if line.startswith(("totals:", "summary:")):
                total = int(line.split()[1])
                continue
            if not line or line[0] not in "0123456789+-*":
                continue
            fields = line.split()
            addr = _position(fields[0], addr)
            if after_call:
                after_call = False
                continue
            if len(fields) > columns:
                costs[(obj, addr)] += int(fields[columns])
    if total is None:
        sys.exit(f"{path}: no totals line (not a callgrind profile?)")
    return costs, total


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: callgrind_cost.py MORE.out FEWER.out ROUND_TRIPS_APART")
    more, more_total = instruction_costs(sys.argv[1])
    fewer, fewer_total = instruction_costs(sys.argv[2])
    trips = int(sys.argv[3])
    if trips <= 0:
        sys.exit("ROUND_TRIPS_APART must be positive")
    lines = set()
    for (obj, addr), n in more.items():
        if 2 * (n - fewer.get((obj, addr), 0)) >= trips:
            lines.add((obj, addr // 64))
    print(f"ir {(more_total - fewer_total) / trips:.0f} lines {len(lines)} kib {len(lines) * 64 / 1024:.1f}")


if __name__ == "__main__":
    main()
