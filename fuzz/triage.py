#!/usr/bin/python3
"""Says whether a fuzz target's crash log shows a known library limitation: a report whose
crashing frame (and allocation frame, when ASan names one) lies inside libhdf5 itself.

usage: fuzz/triage.py LOG        exit 0: inside libhdf5 (prints the top frames); 1: anything else

The frames skipped when looking for the crashing one are the sanitizer and libFuzzer runtime
(frames of the fuzz binary without a source location: interceptors such as memcpy or malloc)
and libc. So a heap overflow that libhdf5 commits in a buffer drtrain allocated is still ours:
its "allocated by" stack reaches drtrain's code first. (ASan's allocation stacks count only
when the bad address lies in or right next to the chunk they describe.)
"""
import re
import sys

FRAME = re.compile(r"^\s+#(\d+) 0x[0-9a-f]+ (?:in (\S+) )?(.*)$")
RUNTIME = re.compile(r"\((/[^()]*?/fuzz/fuzz_[a-z_]+)\+0x[0-9a-f]+\)|/libc\.so|/ld-linux|libclang_rt|libstdc\+\+|libgcc_s"
                     r"|\s(?:\.\./)*(?:string|sysdeps|stdlib|csu|nptl|libio|malloc|posix)/")  # glibc's own sources


def stacks(lines):
    """The error's stacks, in order: the crash first, then 'freed by' / 'allocated by' ones."""
    out, current, started = [], None, False
    for line in lines:
        if "ERROR: AddressSanitizer" in line or "ERROR: libFuzzer" in line or "runtime error:" in line \
                or "ERROR: UndefinedBehaviorSanitizer" in line or "ERROR: LeakSanitizer" in line:
            started = True
            current = []
            out.append(("crash", current))
            continue
        if not started:
            continue
        m = re.match(r"^(freed by|previously allocated by|allocated by) thread", line)
        if m:
            current = []
            out.append((m.group(1), current))
            continue
        f = FRAME.match(line)
        if f and current is not None:
            current.append(line.strip())
    return [(kind, frames) for kind, frames in out if frames]


def first_real(frames):
    for f in frames:
        if not RUNTIME.search(f):
            return f
    return None


def main():
    with open(sys.argv[1], errors="replace") as fh:
        lines = fh.read().splitlines()
    found = stacks(lines)
    if not found:
        print("triage: no stack in the log")
        return 1
    if any("LeakSanitizer" in l for l in lines):
        print("triage: a leak report")
        return 1
    # ASan names the nearest heap chunk; when the address lies beyond it ("located 1150 bytes to
    # the right of ..."), that chunk's stacks say nothing about who owns the bad memory.
    m = re.search(r"is located (\d+) bytes (to the right of|to the left of|inside of)", "\n".join(lines))
    if m and m.group(2) != "inside of" and int(m.group(1)) > 0:
        found = [(kind, frames) for kind, frames in found if kind == "crash"]
    verdict = 0
    for kind, frames in found:
        top = first_real(frames)
        if kind == "freed by":
            continue  # libhdf5 freeing its own object is what a use-after-free in it looks like
        if top is None or "libhdf5" not in top:
            print(f"triage: {kind}: {top or frames[0]} is not inside libhdf5")
            verdict = 1
        else:
            print(f"triage: {kind}: inside libhdf5: {top}")
    return verdict


if __name__ == "__main__":
    sys.exit(main())
