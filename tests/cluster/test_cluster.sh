#!/usr/bin/env bash
# drtrain across an emulated cluster (tests/cluster/emulated_cluster.sh): 2 nodes x 2 ranks over
# TCP between network namespaces, 1 Gbit/s per node. Registered in tests/CMakeLists.txt as
# cluster.<mpi>.<case>; exits 77 (ctest: Skipped) where namespaces cannot be made.
#
#   test_cluster.sh CASE BIN_DIR WORK_DIR MPI
#     MPI    openmpi | mpich (the library the build uses)
#     CASE   train[:OSC]  a deterministic job across the nodes (per-node PS placement); its final
#                         checkpoint must be bitwise equal to the same job on one host. OSC
#                         (Open MPI only): "default" leaves OMPI_MCA_osc unset (the system's
#                         configuration, and drtrain's choice), otherwise OMPI_MCA_osc=OSC.
#            train-bf16   the same with --wire bf16 (16-bit Puts and Gets), bitwise equal to
#                         the single-host run with --wire bf16.
#            train-gpt    the same with a small GPT (gpt:2-2-32, context 32, AdamW, clipping by the
#                         global norm across both PS) on bytes of Python's documentation
#                         (python3.11-doc's tutorial, converted by drtrain-data), bitwise equal to one host.
#            train-relaxed  the job across the nodes with --sync-mode backup:0 (per-worker slots,
#                         the relaxed modes' read locks and versions over TCP, waiting for every
#                         worker), bitwise equal to the single-host --deterministic run.
#            no-window    Open MPI with OMPI_MCA_osc=rdma (cannot run over TCP in Open MPI 4):
#                         every rank must stop at once with a message that says what to set.
#            kill-node    every rank of node 2 is killed (SIGKILL) mid-run (the job runs until
#                         then): the job must end, not hang, and a message must name node 2
#                         (drtrain's naming a rank there, or the launcher's naming its address).
#            link-down    node 2's link goes down mid-run (ip link set eth0 down): the same; under
#                         MPICH, whose launcher notices nothing, drtrain's message must name it.
set -euo pipefail

case_spec=$1 bin=$2 work=$3 mpi=$4
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
work=$(cd "$work" && pwd)
test_case=${case_spec%%:*}
osc=${case_spec#*:}; [ "$osc" = "$case_spec" ] && osc=default
wire=fp32
sync_flags=(--deterministic)
if [ "$test_case" = train-bf16 ]; then test_case=train; wire=bf16; fi
if [ "$test_case" = train-relaxed ]; then test_case=train; sync_flags=(--sync-mode backup:0); fi
model_flags=()  # the default: the MLP on Fashion-MNIST
if [ "$test_case" = train-gpt ]; then
  test_case=train
  model_flags=(--dataset hdf5 --data-file "$work/text.h5" --context 32 --model gpt:2-2-32 --optimizer adamw
               --lr 3e-3 --warmup-steps 5 --lr-schedule cosine --grad-clip 1.0)
fi

fail() { echo "FAIL: $*" >&2; exit 1; }

# ---- inside the emulated cluster (re-entered below)
if [ "${DRT_CLUSTER_TEST_INNER:-}" = 1 ]; then
  job=("$bin/drtrain" --num-ps 2 --ps-placement per-node --threads 1 --eval false --batch-size 64)
  case $test_case in
    train)
      [ "$osc" != default ] && export OMPI_MCA_osc=$osc
      rm -rf "$work/cluster-ckpt"
      DRT_LOG_LEVEL=debug "$here/cluster_mpirun.sh" "$mpi" --env DRT_LOG_LEVEL -- "${job[@]}" "${sync_flags[@]}" \
        ${model_flags[@]+"${model_flags[@]}"} \
        --wire "$wire" --max-steps 30 --hang-timeout 60 --checkpoint-dir "$work/cluster-ckpt" > "$work/cluster.log" 2>&1 \
        || { cat "$work/cluster.log"; fail "the job across 2 nodes failed"; }
      cat "$work/cluster.log"
      ;;
    no-window)
      export OMPI_MCA_osc=rdma
      set +e
      timeout 60 "$here/cluster_mpirun.sh" "$mpi" -- "${job[@]}" --max-steps 5 > "$work/cluster.log" 2>&1
      echo "exit status $?" >> "$work/cluster.log"
      set -e
      cat "$work/cluster.log"
      ;;
    kill-node|link-down)
      # Open MPI's daemons notice a lost peer through TCP keepalive; its defaults (300 s + 9 x 20 s)
      # outlast --hang-timeout's 300 s default, so job scripts shorten them (README); here 4+3x2 s.
      export OMPI_MCA_oob_tcp_keepalive_time=4 OMPI_MCA_oob_tcp_keepalive_intvl=2 OMPI_MCA_oob_tcp_keepalive_probes=3
      node2_net=$("$DRT_CLUSTER_AGENT" node2 readlink /proc/self/ns/net)
      # The job runs until node 2 is struck (--epochs: an epoch here takes seconds on a fast
      # machine).
      set +e
      "$here/cluster_mpirun.sh" "$mpi" -- "${job[@]}" --epochs 100000 --hang-timeout 20 --log-every 100000 \
        > "$work/cluster.log" 2>&1 &
      launcher=$!
      # Wait until training runs (the set-up lines are out), then strike node 2 while it still does.
      while ! grep -q "^PS memory" "$work/cluster.log" 2>/dev/null; do
        kill -0 $launcher 2>/dev/null || { cat "$work/cluster.log"; fail "the job ended before training started"; }
        sleep 0.1
      done
      sleep 2
      kill -0 $launcher 2>/dev/null || { cat "$work/cluster.log"; fail "the job ended before node 2 was struck"; }
      struck=$(date +%s)
      if [ "$test_case" = kill-node ]; then
        for p in $(pgrep -x drtrain); do
          [ "$(readlink "/proc/$p/ns/net" 2>/dev/null)" = "$node2_net" ] && kill -9 "$p"
        done
      else
        "$DRT_CLUSTER_AGENT" node2 ip link set eth0 down
      fi
      # A hang guard, far above the 20 s hang timeout (+ its survey, or the watchdog's margin).
      for _ in $(seq 1 1800); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
      if kill -0 $launcher 2>/dev/null; then
        kill -TERM $launcher
        for _ in $(seq 1 50); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
        kill -KILL $launcher 2>/dev/null
        wait $launcher
        status=124
      else
        wait $launcher
        status=$?
      fi
      set -e
      echo "exit status $status, $(( $(date +%s) - struck )) s after node 2 was struck" >> "$work/cluster.log"
      cat "$work/cluster.log"
      ;;
    *) fail "unknown case '$test_case'" ;;
  esac
  exit 0
fi

# ---- on the host
flags=()
[ "$mpi" = openmpi ] && flags=(--oversubscribe --allow-run-as-root)
launcher=mpiexec; [ "$mpi" = mpich ] && launcher=mpiexec.mpich

if [ "$test_case" = train ]; then
  if [ ${#model_flags[@]} -gt 0 ]; then  # train-gpt: the tutorial, 0.3 MB of text
    "$bin/drtrain-data" convert --text /usr/share/doc/python3.11/html/_sources/tutorial --test-fraction 0.05 \
      "$work/text.h5" > "$work/convert.log" 2>&1 || { cat "$work/convert.log"; fail "converting the text failed"; }
  fi
  # The same job on one host (dedicated PS ranks 0 and 1; roles are numbered the same way).
  rm -rf "$work/host-ckpt"
  "$launcher" -n 4 "${flags[@]}" "$bin/drtrain" --num-ps 2 --ps-placement first --threads 1 --eval false \
    --batch-size 64 --deterministic ${model_flags[@]+"${model_flags[@]}"} \
    --wire "$wire" --max-steps 30 --checkpoint-dir "$work/host-ckpt" > "$work/host.log" 2>&1 \
    || { cat "$work/host.log"; fail "the single-host reference job failed"; }
fi

set +e
DRT_CLUSTER_TEST_INNER=1 "$here/emulated_cluster.sh" --nodes 2 --rate 1gbit -- "$0" "$@"
status=$?
set -e
[ $status -eq 77 ] && exit 77
[ $status -eq 0 ] || fail "the emulated-cluster run failed (status $status)"
log=$work/cluster.log

case $test_case in
  train)
    grep -q "rank(s) on 2 node(s): PS \[0 2\], workers \[1 3\]" "$log" \
      || fail "per-node placement across 2 nodes should put the PS on world ranks 0 and 2 (see the layout above)"
    grep -q "worker 1 (world rank 3 on node2): node-local worker 0" "$log" \
      || fail "worker 1 is the first worker of node 2 (node-local index 0, which picks its GPUs)"
    a=$(ls "$work/cluster-ckpt"/ckpt-*.h5 | tail -1)
    b=$(ls "$work/host-ckpt"/ckpt-*.h5 | tail -1)
    "$bin/drtrain-ckpt" diff "$a" "$b" || fail "$a differs from the single-host run's $b"
    grep -q "wire $wire" "$log" || fail "the chief should report 'wire $wire' in the exchange set-up"
    grep -q "MPI_Finalize did not return" "$log" && fail "a rank hung in MPI_Finalize (see comm/mpi_session.cpp)"
    [ "$(grep -c "^PS [01] (world rank" "$log")" = 2 ] || fail "a rank's last lines are missing from the log"
    echo "PASS: 2 nodes ($mpi, osc $osc, wire $wire): final checkpoint bitwise equal to the single-host run"
    ;;
  no-window)
    grep -q "exit status 124" "$log" && fail "the job hung instead of stopping"
    grep -q "exit status 0" "$log" && fail "the job should have failed: osc/rdma cannot make windows over TCP"
    grep -q "OMPI_MCA_osc=pt2pt" "$log" || fail "the error should say what to set (OMPI_MCA_osc=pt2pt ...)"
    echo "PASS: no usable RMA component: a clear error, no hang"
    ;;
  kill-node|link-down)
    # What names node 2: drtrain's message naming a rank there (the rank that gave up names the
    # rank it cannot reach, or the one its MPI call waits on; docs/FAILURES.md, "Watching a
    # run"), or the launcher's naming the node's address (processes that died; Open MPI's lost
    # daemon, whose keepalive here ends before --hang-timeout). With the link cut under MPICH no
    # process dies and Hydra notices nothing: there drtrain's message is the one.
    drtrain_names='^drtrain: fatal error on .*world rank [0-9]+ on node2'
    launcher_names='RUNNING AT 10\.231\.0\.2|on node 10\.231\.0\.2'
    line=$(grep "^exit status" "$log")
    [[ $line == "exit status 0,"* ]] && fail "the job succeeded although node 2 was lost"
    [[ $line == "exit status 124,"* ]] && fail "the job hung after node 2 was lost (hang timeout 20 s; ended by the test after 180 s)"
    if [ "$test_case-$mpi" = link-down-mpich ]; then
      grep -qE "$drtrain_names" "$log" || fail "no drtrain error names a rank on node 2 (expected: $drtrain_names)"
    else
      grep -qE "$drtrain_names|$launcher_names" "$log" \
        || fail "no message names node 2 (expected drtrain's '$drtrain_names' or the launcher's '$launcher_names')"
    fi
    echo "PASS: $test_case: the job ended ${line#exit status *, }, naming node 2:"
    grep -E "$drtrain_names|$launcher_names" "$log" | head -3
    ;;
esac
