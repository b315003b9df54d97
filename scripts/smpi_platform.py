#!/usr/bin/env python3
"""Writes a SimGrid platform (XML) for simulating drtrain's exchange under SMPI: N hosts
(node-0 .. node-N-1) in a two-level fat tree, each host's link at --gbit Gbit/s and --lat-us
latency, with or without oversubscription at the leaf switches (docs/SIMULATION.md).

  python3 scripts/smpi_platform.py --nodes 64 --gbit 25 --lat-us 2 --oversub 2 -o ft64.xml

Leaves hold up to 16 hosts (the largest divisor of N not above 16 or N/2); a leaf has as many uplinks
(to as many top switches) as hosts for a full-bisection tree, or hosts / --oversub of them.
--flat: one switch instead (every host's own link, nothing shared between them: the emulated
cluster's bridge), 2 to 1024 hosts; a message then crosses two links, so --lat-us is half the
one-way latency."""
import argparse
import sys


def leaf_size(nodes):
    return max(d for d in range(1, min(nodes // 2, 16) + 1) if nodes % d == 0)


def platform_xml(nodes, gbit, lat_us, oversub, speed_flops, flat=False):
    if not (2 if flat else 8) <= nodes <= 1024:
        raise ValueError(f"--nodes {nodes}: choose 8 to 1024 nodes (2 to 1024 with --flat)")
    if not 0.1 <= gbit <= 100 or not 1 <= lat_us <= 10:
        raise ValueError("--gbit must be 0.1..100 and --lat-us 1..10 (the range this generator is for)")
    if oversub < 1:
        raise ValueError(f"--oversub {oversub}: 1 is a full-bisection tree, 2 half the uplinks, ...")
    if flat:  # a <cluster> without topology: private split-duplex links to one crossbar
        return f"""<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<!-- drtrain SMPI platform: {nodes} nodes, {gbit:g} Gbit/s, {lat_us:g} us per link, one switch -->
<platform version="4.1">
  <cluster id="flat" prefix="node-" suffix="" radical="0-{nodes - 1}" speed="{speed_flops / 1e9:g}Gf"
           bw="{gbit:g}Gbps" lat="{lat_us:g}us" loopback_bw="400Gbps" loopback_lat="0us"/>
</platform>
"""
    k = leaf_size(nodes)
    leaves = nodes // k
    up = max(1, round(k / oversub))
    topo = f"2;{k},{leaves};1,{up};1,1"
    # Bandwidth in bytes: SimGrid takes "Gbps" as gigabits per second.
    return f"""<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<!-- drtrain SMPI platform: {nodes} nodes, {gbit:g} Gbit/s, {lat_us:g} us, fat tree {topo} (oversubscription {oversub:g}) -->
<platform version="4.1">
  <cluster id="ft" prefix="node-" suffix="" radical="0-{nodes - 1}" speed="{speed_flops / 1e9:g}Gf"
           bw="{gbit:g}Gbps" lat="{lat_us:g}us" topology="FAT_TREE" topo_parameters="{topo}"
           loopback_bw="400Gbps" loopback_lat="0us"/>
</platform>
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, required=True, help="hosts, 8..1024")
    ap.add_argument("--gbit", type=float, default=25.0, help="each host's link, Gbit/s per direction (1..100)")
    ap.add_argument("--lat-us", type=float, default=2.0, help="each link's latency, microseconds (1..10)")
    ap.add_argument("--oversub", type=float, default=1.0, help="leaf oversubscription: 1 = none")
    ap.add_argument("--flat", action="store_true", help="one switch, no fat tree (2..1024 hosts)")
    ap.add_argument("--speed", type=float, default=1e9, help="host speed, flop/s (pass the same to smpi/host-speed)")
    ap.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")
    args = ap.parse_args()
    try:
        xml = platform_xml(args.nodes, args.gbit, args.lat_us, args.oversub, args.speed, args.flat)
    except ValueError as e:
        sys.exit(f"smpi_platform: {e}")
    if args.output == "-":
        sys.stdout.write(xml)
    else:
        with open(args.output, "w") as f:
            f.write(xml)


if __name__ == "__main__":
    main()
