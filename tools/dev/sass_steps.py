#!/usr/bin/env python3
"""What a kernel's SASS does per loop trip (cuobjdump -sass output; see
tools/dev/sass_offline.sh). For each loop (a backward branch) with matrix
instructions: its length and instruction mix. For the warp-specialized
kernels (flash_tma, flash_wgmma), each key step of the innermost such loop
(from one named-barrier sync to the next): its mix, and where the wait for
the step's P V (WARPGROUP.DEPBAR.LE gsb0, 0x0) falls: the exponentials
(MUFU) before it run while P V does; those after it do not.

    python3 tools/dev/sass_steps.py kernel.sass
"""
import collections
import re
import sys


def read(path):
    ins = []
    for line in open(path):
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2)))
    return ins


def opcode(text):
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0]


def mix(body, top=14):
    c = collections.Counter(opcode(t) for _, t in body)
    return " ".join("%s %d" % kv for kv in c.most_common(top))


def loops(ins):
    at = {a: i for i, (a, _) in enumerate(ins)}
    found = []
    for i, (a, t) in enumerate(ins):
        m = re.search(r"\bBRA (0x[0-9a-f]+)", t)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in at:
            body = ins[at[int(m.group(1), 16)]:i + 1]
            mma = sum(1 for _, x in body if re.match(r"(@\S+\s+)?[HI]?[GM]MMA|HGMMA|HMMA", x))
            if mma:
                found.append((body, mma))
    return found


def steps(body):
    parts, cur = [], []
    for a, t in body:
        if opcode(t) == "BAR" and ".SYNC" in t and cur:
            parts.append(cur)
            cur = []
        cur.append((a, t))
    parts.append(cur)
    return parts


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    ins = read(sys.argv[1])
    if not ins:
        sys.exit("%s: no SASS instructions" % sys.argv[1])
    found = loops(ins)
    print("%d instructions; %d loops with matrix instructions" % (len(ins), len(found)))
    for body, mma in found:
        print("  loop %#x..%#x: %d instructions, %d MMA: %s" % (body[0][0], body[-1][0], len(body), mma,
                                                               mix(body, 10)))
    # the key loop: both GEMMs of a step, S (shared-memory operands) and
    # P V (registers and a transposed B); the wait loops' retry blocks at the
    # function's end branch back across everything and are longer
    wgmma = [(b, n) for b, n in found
             if any("HGMMA" in t and "tnspB" in t for _, t in b)
             and any("HGMMA" in t and "tnspB" not in t for _, t in b)]
    if not wgmma:
        return
    body = min(wgmma, key=lambda x: len(x[0]))[0]
    print("key steps of the innermost loop (%#x..%#x), between named-barrier syncs:" % (body[0][0], body[-1][0]))
    for part in steps(body):
        hg = sum(1 for _, t in part if "HGMMA" in t)
        if not hg:
            continue
        wait0 = next((k for k, (_, t) in enumerate(part) if "DEPBAR.LE gsb0, 0x0" in t), None)
        before = part[:wait0] if wait0 is not None else part
        after = part[wait0:] if wait0 is not None else []
        mufu_before = sum(1 for _, t in before if opcode(t) == "MUFU")
        mufu_after = sum(1 for _, t in after if opcode(t) == "MUFU")
        print("  %#x: %d instructions, %d HGMMA; exponentials before the wait for P V %d, after it %d"
              % (part[0][0], len(part), hg, mufu_before, mufu_after))
        print("      %s" % mix(part))


if __name__ == "__main__":
    main()
