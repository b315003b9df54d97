#!/usr/bin/env bash
# Runs the Slurm batch scripts of jobs/ on a real, private, single-node Slurm that this test
# starts and stops (tests/slurm/local_slurm.sh): each script shrunk by options (one node, three
# tasks, a few steps), checked for exit status and output. Also: a requeue of
# jobs/slurm_requeue.sbatch resumes from its checkpoint, and a launcher/MPI mismatch fails loudly.
#   test_slurm_jobs.sh BUILD_BIN WORK_DIR
# Exit 77 (ctest: Skipped) when Slurm or munge is not installed, with the reason.
set -uo pipefail
bin=$(cd "$1" && pwd)
work=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
for tool in munged slurmctld slurmd sbatch scontrol srun; do
  if ! command -v "$tool" > /dev/null; then
    echo "SKIPPED: $tool is not installed (Debian: slurmctld slurmd slurm-client munge libpmix-dev)"
    exit 77
  fi
done
drtrain="$bin/drtrain"
# (not grep -q: it exits at the first match, ldd then dies of SIGPIPE and pipefail fails the test)
if ldd "$drtrain" | grep libmpich >/dev/null; then mpi=pmi2 flavour=MPICH; else mpi=pmix flavour="Open MPI"; fi
echo "testing the jobs/ scripts with $drtrain ($flavour, srun --mpi=$mpi)"

rm -rf "$work"
mkdir -p "$work/out"
source "$root/tests/slurm/local_slurm.sh"
trap slurm_stop EXIT
slurm_start "$work/slurm" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Few steps; the recipes' cosine schedule needs more steps than its warmup, so a constant rate.
short=(--max-steps 20 --log-every 10 --eval false --lr-schedule constant --warmup-steps 0)
common="ALL,DRTRAIN=$drtrain,CONFIG=$root/jobs/configs/mlp.ini,MPI=$mpi"

# job_state ID: JobState=... of the job, or nothing when scontrol did not answer (a busy
# slurmctld times out now and then on a loaded machine: that is not the job's end).
job_state() { scontrol show job "$1" 2>/dev/null | grep -o "JobState=[A-Z_]*"; }
# ended STATE: true for the states a job does not leave (a requeued job goes back to PENDING).
ended() {
  case $1 in *COMPLETED*|*FAILED*|*CANCELLED*|*TIMEOUT*|*NODE_FAIL*|*OUT_OF_MEMORY*|*BOOT_FAIL*|*DEADLINE*) return 0 ;; esac
  return 1
}
# wait_job ID: polls until the job ends (sbatch --wait polls every 10 s); prints JobState=...
wait_job() {
  local state=""
  for _ in $(seq 1 1200); do
    state=$(job_state "$1")
    ended "$state" && break
    sleep 0.25
  done
  echo "$state"
}

# run_job NAME SBATCH_OPTIONS... -- SCRIPT ARGS...: submit, wait, check state and summary.
run_job() {
  local name=$1; shift
  local opts=()
  while [ "$1" != "--" ]; do opts+=("$1"); shift; done; shift
  local out="$work/out/$name.out"
  local start=$SECONDS
  local id state
  id=$(sbatch --parsable --nodes=1 --overcommit --output="$out" "${opts[@]}" "$@")
  state=$(wait_job "$id")
  if [[ $state != *COMPLETED* ]]; then fail "$name: job ended as $state"; tail -20 "$out"; return; fi
  if ! grep -q '{"summary":true' "$out"; then fail "$name: no summary line"; tail -20 "$out"; return; fi
  echo "ok: $name ($((SECONDS - start)) s): $(grep -o '"ranks":[0-9]*,"ps":[0-9]*,"workers":[0-9]*,"towers":[0-9]*' "$out")"
}

run_job cpu --ntasks=3 --export="$common,CHECKPOINT_DIR=$work/ck/cpu" \
  -- "$root/jobs/slurm_cpu.sbatch" "${short[@]}"
run_job dedicated_ps --ntasks-per-node=3 --export="$common,NUM_PS=1,CHECKPOINT_DIR=$work/ck/dedicated" \
  -- "$root/jobs/slurm_multinode_dedicated_ps.sbatch" "${short[@]}"
run_job colocated_ps --ntasks-per-node=3 --export="$common,CHECKPOINT_DIR=$work/ck/colocated" \
  -- "$root/jobs/slurm_multinode_colocated_ps.sbatch" "${short[@]}"
run_job gpu_worker_per_node --ntasks-per-node=2 --gres=none --cpus-per-task=1 \
  --export="$common,GPUS_PER_NODE=2,DEVICE=auto,CHECKPOINT_DIR=$work/ck/gpu_node" \
  -- "$root/jobs/slurm_gpu_worker_per_node.sbatch" "${short[@]}"
run_job gpu_worker_per_gpu --ntasks-per-node=3 --gres=none --cpus-per-task=1 \
  --export="$common,DEVICE=auto,CHECKPOINT_DIR=$work/ck/gpu_each" \
  -- "$root/jobs/slurm_gpu_worker_per_gpu.sbatch" "${short[@]}"

# Requeue: the time-limit warning must reach the first run while it trains, whatever the
# machine's speed. So the chief (world rank 1) stops itself (SIGSTOP, test-only fault hook) before
# step 30, after the checkpoint of step 20, which holds the others in their exchange; the test
# then sends the batch script the warning, waits until srun has passed it on (USR1 pending at
# the stopped chief) and lets the chief go on. The requeued run resumes past step 30.
requeue_out="$work/out/requeue.out"
requeue_dir="$work/ck/requeue"
requeue_metrics="$work/out/requeue.jsonl"
id=$(sbatch --parsable --nodes=1 --ntasks=3 --overcommit --output="$requeue_out" \
  --export="$common,CHECKPOINT_DIR=$requeue_dir,CHECKPOINT_SECS=3600,DRT_TEST_FAULT=stop:1:30" \
  "$root/jobs/slurm_requeue.sbatch" --max-steps 300 --checkpoint-every 20 --log-every 10 --eval false \
  --lr-schedule constant --warmup-steps 0 --dataset synthetic --model cnn --metrics "$requeue_metrics" \
  --checkpoint-dir "$requeue_dir" --num-ps 1)  # the script passes these two too: the last value wins
# ranks_of DIR: PIDs of the drtrain processes whose command line names DIR (this job's ranks).
ranks_of() {
  local p
  for p in $(pgrep -x drtrain); do tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q -- " $1 " && echo "$p"; done
}
# stopped_chief: the PID of this job's rank that is stopped (state T), if any.
stopped_chief() {
  local p
  for p in $(ranks_of "$requeue_dir"); do grep -q '^State:.*T (stopped)' "/proc/$p/status" 2>/dev/null && echo "$p"; done
}
# usr1_pending PID: SIGUSR1 (10: bit 9) is pending at PID.
usr1_pending() { (( 0x$(awk '/^ShdPnd:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0) & 0x200 )); }
chief=""
for _ in $(seq 1 1200); do  # a hang guard (the job has to start and train 30 steps)
  chief=$(stopped_chief)
  [ -n "$chief" ] && break
  ended "$(job_state "$id")" && break  # not "neither RUNNING nor PENDING": scontrol may not answer
  sleep 0.25
done
if [ -z "$chief" ]; then
  fail "requeue: the chief never stopped at step 30 (DRT_TEST_FAULT=stop:1:30)"; tail -20 "$requeue_out"
fi
scancel --batch --signal=USR1 "$id"
if [ -n "$chief" ]; then
  for _ in $(seq 1 600); do usr1_pending "$chief" && break; sleep 0.1; done
  usr1_pending "$chief" || fail "requeue: SIGUSR1 never reached the stopped chief within 60 s"
  kill -CONT "$chief"  # in any case: the job must not stay stopped
fi
# Slurm holds a requeued job back for a couple of minutes (BeginTime); once it is pending again,
# let it start sooner, but not at once: slurmd still holds the first run's revoked credential for
# a moment and refuses a start right away ("Job credential revoked").
for _ in $(seq 1 200); do scontrol show job "$id" | grep "JobState=PENDING" >/dev/null && break; sleep 0.1; done
scontrol update JobId="$id" StartTime=now+10 > /dev/null 2>&1
state=$(wait_job "$id")
if [[ $state != *COMPLETED* ]]; then
  fail "requeue: job ended as $state"; tail -20 "$requeue_out"
else
  # The first run stops on USR1 after some step K, saves, exits 75; the second resumes after
  # exactly K updates (nothing lost, nothing trained twice) and finishes.
  stopped=$(grep -o '"steps":[0-9]*,.*"stopped_by":"SIGUSR1"' "$requeue_out" | head -1 | grep -o '^"steps":[0-9]*' | cut -d: -f2)
  if [ -z "$stopped" ] || ! grep -q "requeueing job $id" "$requeue_out" \
     || ! grep -q "^resuming from $work/ck/requeue/ckpt-0*$stopped.h5 after $stopped updates: step $((stopped + 1)) of 300" "$requeue_out" \
     || ! grep -q '{"summary":true.*"steps":300' "$requeue_out"; then
    fail "requeue: the job did not stop on USR1, requeue, resume at the step it stopped and finish"
    grep -E "requeue|resum|summary|error|stopping" "$requeue_out"
  else
    echo "ok: requeue: stopped by SIGUSR1 after step $stopped, requeued, resumed at step $((stopped + 1)), finished 300 steps"
  fi
  # The requeued run appended to --metrics: the first run's records (segment 0, its summary with
  # the stop) are still there, then segment 1's, which starts where the checkpoint was.
  if /usr/bin/python3 - "$requeue_metrics" "$stopped" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
first = [r for r in records if r.get("segment") == 0]
second = [r for r in records if r.get("segment") == 1]
assert any(r.get("summary") and r.get("stopped_by") == "SIGUSR1" for r in first), "segment 0's summary is gone"
assert any("ms_per_step" in r for r in first), "segment 0's progress records are gone"
start = [r for r in second if r.get("start")]
assert start and start[0]["updates"] == int(sys.argv[2]), start
assert any(r.get("summary") and r.get("steps") == 300 for r in second), "segment 1's summary is missing"
PY
  then
    echo "ok: requeue: --metrics kept the first run's records and appended the requeued run's (segment 1)"
  else
    fail "requeue: the metrics file lost the records of before the requeue"; head -c 2000 "$requeue_metrics"
  fi
fi

# srun's exit status on a stop (jobs/README.md): SIGUSR1 to srun reaches every task, drtrain stops
# at a step boundary, saves and exits 75, and srun exits 75, so a wrapper of its own can requeue.
# The job waits for the first checkpoint (LATEST) before it signals: no assumption about speed.
srun_out="$work/out/srun_stop.out"
srun_dir="$work/ck/srun_stop"
id=$(sbatch --parsable --nodes=1 --ntasks=3 --overcommit --output="$srun_out" --wrap \
  "srun --mpi=$mpi $drtrain --num-ps 1 --expect-ranks 3 --config $root/jobs/configs/mlp.ini --epochs 1000 \
   --log-every 50 --eval false --lr-schedule constant --warmup-steps 0 --checkpoint-every 20 \
   --checkpoint-dir $srun_dir & p=\$!; while [ ! -e $srun_dir/LATEST ] && kill -0 \$p 2>/dev/null; do sleep 0.2; done;
   kill -USR1 \$p; wait \$p; echo srun-exit=\$?")
wait_job "$id" > /dev/null
newest=$(ls "$srun_dir"/ckpt-*.h5 2>/dev/null | tail -1)
if ! grep -q "^srun-exit=75$" "$srun_out" || ! grep -q '"stopped_by":"SIGUSR1"' "$srun_out" \
   || [ -z "$newest" ] || ! "$bin/drtrain-ckpt" verify "$newest" > /dev/null; then
  fail "srun-stop: SIGUSR1 to srun did not end with exit 75 and a verified checkpoint"; tail -20 "$srun_out"
else
  echo "ok: srun-stop: SIGUSR1 to srun: the tasks stopped, saved $(basename "$newest"), srun exited 75"
fi

# A launcher that does not match the MPI library must not train N single-rank jobs.
if [ "$flavour" = MPICH ]; then wrong=pmix; else wrong=pmi2; fi
mismatch_out="$work/out/mismatch.out"
id=$(sbatch --parsable --nodes=1 --ntasks=3 --overcommit --output="$mismatch_out" \
  --wrap "srun --mpi=$wrong $drtrain --num-ps 1 --expect-ranks 3 ${short[*]}")
if [[ $(wait_job "$id") == *COMPLETED* ]]; then
  fail "mismatch: $flavour under srun --mpi=$wrong succeeded"
elif [ "$flavour" = MPICH ] && ! grep -q "MPI reports 1 rank(s) but --expect-ranks is 3" "$mismatch_out"; then
  fail "mismatch: no message naming the mismatch"; cat "$mismatch_out"
elif [ "$flavour" != MPICH ] && ! grep -q "MPI_INIT" "$mismatch_out"; then
  fail "mismatch: Open MPI did not stop in MPI_Init"; cat "$mismatch_out"
else
  echo "ok: $flavour under srun --mpi=$wrong fails: $(grep -m1 -iE 'error|abort' "$mismatch_out" | cut -c1-120)"
fi

[ $failures -eq 0 ] && echo "all Slurm job tests passed" || echo "$failures Slurm job test(s) failed"
exit $((failures > 0))
