#!/usr/bin/env python3
"""The SMPI CI check (docs/SIMULATION.md): runs bench/smpi_exchange.sh on 8 simulated nodes, twice.

Exact run: fails unless the bench's exactness check passed (it exits non-zero otherwise, before
timing) and the simulated ring allreduce lies within 5 % of its alpha-beta floor, 2 G (W-1) / W /
link (SMPI_NOTES: 2.29 ms against 2.24 ms at 2 PS + 6 workers, 4 MiB, 25 Gbit/s).
Folded run (--fold, memory folding: values are meaningless, so not checked): fails unless the bench
says it was folded, its allreduce is on the same floor, and every exchange took at least the link
floor (folding must leave the simulated transfers as they were)."""
import json
import subprocess
import sys

script, build = sys.argv[1], sys.argv[2]


def simulate(*extra):
    run = subprocess.run([script, "--nodes", "8", "--ps", "2", "--gbit", "25", "--lat-us", "1", "--build", build,
                          *extra, "--", "--sizes-mib", "4", "--iters", "5", "--warmup", "1",
                          "--schemes", "passive,fence"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(run.stdout)
    what = " ".join(extra) or "exact"
    if run.returncode != 0:
        sys.exit(f"check_exchange: the simulated bench ({what}) failed (status {run.returncode}); its output is above")
    lines = [l for l in run.stdout.splitlines() if l.startswith('{"bench":"exchange"')]
    if not lines:
        sys.exit(f"check_exchange: no JSON line from the bench ({what}) in the output above")
    result = json.loads(lines[-1])
    row = result["rows"][0]
    ratio = row["allreduce_ms"] / row["allreduce_link_floor_ms"]
    print(f"check_exchange ({what}): allreduce {row['allreduce_ms']:.3f} ms, ring floor "
          f"{row['allreduce_link_floor_ms']:.3f} ms, ratio {ratio:.3f}")
    if not 0.98 <= ratio <= 1.05:
        sys.exit(f"check_exchange ({what}): the simulated allreduce is {ratio:.3f}x its alpha-beta floor, outside "
                 "0.98-1.05: the SMPI settings (smpi/allreduce:lr, CM02) or the platform no longer give a ring on "
                 "plain links")
    return result


exact = simulate()
if exact["folded"]:
    sys.exit("check_exchange: the exact run says its memory was folded: DRT_SMPI_FOLD leaked into it")
folded = simulate("--fold")
if not folded["folded"]:
    sys.exit("check_exchange: the --fold run says its memory was not folded (DRT_SMPI_FOLD=1 not seen)")
row = folded["rows"][0]
for scheme, ms in row["exchange_ms"].items():
    print(f"check_exchange (--fold): {scheme} {ms:.3f} ms (exact run {exact['rows'][0]['exchange_ms'][scheme]:.3f}), "
          f"link floor {row['link_floor_ms']:.3f} ms")
    if ms < row["link_floor_ms"]:
        sys.exit(f"check_exchange (--fold): {scheme} took {ms:.3f} ms, under the link floor "
                 f"{row['link_floor_ms']:.3f} ms: folding skipped simulated transfers")
