#!/usr/bin/env python3
"""The SMPI CI check (docs/SIMULATION.md): runs bench/smpi_exchange.sh on 8 simulated nodes and
fails unless the bench's exactness check passed (it exits non-zero otherwise, before timing) and
the simulated ring allreduce lies within 5 % of its alpha-beta floor, 2 G (W-1) / W / link
(SMPI_NOTES: 2.29 ms against 2.24 ms at 2 PS + 6 workers, 4 MiB, 25 Gbit/s)."""
import json
import subprocess
import sys

script, build = sys.argv[1], sys.argv[2]
run = subprocess.run([script, "--nodes", "8", "--ps", "2", "--gbit", "25", "--lat-us", "1", "--build", build,
                      "--", "--sizes-mib", "4", "--iters", "5", "--warmup", "1", "--schemes", "passive,fence"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
print(run.stdout)
if run.returncode != 0:
    sys.exit(f"check_exchange: the simulated bench failed (status {run.returncode}); its output is above")
lines = [l for l in run.stdout.splitlines() if l.startswith('{"bench":"exchange"')]
if not lines:
    sys.exit("check_exchange: no JSON line from the bench in the output above")
row = json.loads(lines[-1])["rows"][0]
ratio = row["allreduce_ms"] / row["allreduce_link_floor_ms"]
print(f"check_exchange: allreduce {row['allreduce_ms']:.3f} ms, ring floor {row['allreduce_link_floor_ms']:.3f} ms, "
      f"ratio {ratio:.3f}")
if not 0.98 <= ratio <= 1.05:
    sys.exit(f"check_exchange: the simulated allreduce is {ratio:.3f}x its alpha-beta floor, outside 0.98-1.05: "
             "the SMPI settings (smpi/allreduce:lr, CM02) or the platform no longer give a ring on plain links")
