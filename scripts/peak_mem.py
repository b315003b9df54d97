#!/usr/bin/env python3
"""peak_mem.py OUT -- CMD...: runs CMD; samples its process tree's memory every 0.2 s and writes
'wall_s W peak_pss_mib P peak_rss_mib R' to OUT (Pss counts a page shared N ways as 1/N of it,
so folded memory is counted once; RSS counts every mapping of it)."""
import os, subprocess, sys, time

def tree(pid):
    kids = {}
    for d in os.listdir('/proc'):
        if d.isdigit():
            try:
                with open(f'/proc/{d}/stat') as f:
                    ppid = int(f.read().rsplit(')', 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except OSError:
                pass
    out, pending = [], [pid]
    while pending:
        p = pending.pop()
        out.append(p)
        pending += kids.get(p, [])
    return out

def mem(pids):
    pss = rss = 0
    for p in pids:
        try:
            with open(f'/proc/{p}/smaps_rollup') as f:
                for line in f:
                    if line.startswith('Pss:'): pss += int(line.split()[1])
                    elif line.startswith('Rss:'): rss += int(line.split()[1])
        except OSError:
            pass
    return pss, rss

out, cmd = sys.argv[1], sys.argv[3:]
t0 = time.time()
proc = subprocess.Popen(cmd)
peak_pss = peak_rss = 0
while proc.poll() is None:
    pss, rss = mem(tree(proc.pid))
    peak_pss, peak_rss = max(peak_pss, pss), max(peak_rss, rss)
    time.sleep(0.2)
with open(out, 'w') as f:
    f.write(f'wall_s {time.time() - t0:.2f} peak_pss_mib {peak_pss // 1024} peak_rss_mib {peak_rss // 1024}\n')
sys.exit(proc.returncode)
