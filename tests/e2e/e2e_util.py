"""Helpers of the end-to-end test scripts (checkpoint_files.py, train_hdf5.py, sync_modes.py): run a
command and check its exit status, check that a text holds a line's worth of expected output, and
run a job in the background until the test tells it to stop.

Every failure prints what the test saw (the command's output so far) before the verdict. Timeouts
here are hang guards, far above what a run takes on a loaded 2-core machine: no test passes or
fails by how fast it ran."""
import os
import signal
import subprocess
import time

# A run that takes longer than this has hung (the slowest single run of the suite, 1500 steps
# under MPICH + UBSan, takes about a minute).
HANG_GUARD_S = 300


def _kill_group(proc):
    """Ends the process group the test started (the launcher and the ranks it forked)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run(cmd, expect_ok=True, env=None, timeout=HANG_GUARD_S):
    """Runs cmd (stdout and stderr together); expect_ok True/False checks the exit status (None: no
    check). Returns (exit status, output). A run beyond `timeout` is ended (the whole process group)
    and fails the test with the output it had printed."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, _ = proc.communicate()
        print(out)
        raise SystemExit(f"FAIL: {' '.join(cmd)} did not end within {timeout} s (a hang guard; its output is above)")
    if expect_ok is not None and (proc.returncode == 0) != expect_ok:
        print(out)
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {proc.returncode}, expected {'0' if expect_ok else 'non-zero'}")
    return proc.returncode, out


def drtrain_ranks(marker):
    """PIDs of the drtrain processes whose command line holds `marker`."""
    ranks = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"/drtrain") and marker.encode() in argv:
            ranks.append(int(pid))
    return ranks


def expect(text, needle, what):
    if needle not in text:
        print(text)
        raise SystemExit(f"FAIL: {what}: '{needle}' not in the output")


class Job:
    """A command in the background, its output going to `log` (a file: a pipe nobody reads would
    fill up and stop the job). For tests that act on a job while it runs: the job must run until
    the test stops it (pass it enough --epochs), and the test notices if it ends early."""

    def __init__(self, cmd, log, env=None):
        self.cmd, self.log = cmd, log
        with open(log, "w") as f:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)

    def output(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def fail(self, message, directory=None):
        """Ends the job if it still runs, prints its output (and `directory`'s listing), fails."""
        if self.proc.poll() is None:
            _kill_group(self.proc)
        print(f"$ {' '.join(self.cmd)}\n{self.output()}")
        if directory is not None:
            print(f"{directory}: {sorted(os.listdir(directory)) if os.path.isdir(directory) else 'does not exist'}")
        raise SystemExit(f"FAIL: {message}")

    def wait_for(self, ready, what, timeout=HANG_GUARD_S, directory=None):
        """Polls ready() until it holds; fails at once if the job ends first, or after `timeout`
        (a hang guard)."""
        deadline = time.time() + timeout
        while not ready():
            if self.proc.poll() is not None:
                self.fail(f"the job ended (exit status {self.proc.returncode}) before {what}", directory)
            if time.time() > deadline:
                self.fail(f"still waiting for {what} after {timeout} s (a hang guard)", directory)
            time.sleep(0.05)

    def finish(self, timeout=HANG_GUARD_S, directory=None):
        """Waits for the job to end; returns (exit status, output)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.fail(f"the job did not end within {timeout} s (a hang guard)", directory)
        return self.proc.returncode, self.output()

    def finish_killed(self, marker, grace=30, timeout=HANG_GUARD_S, directory=None):
        """finish() for a job one of whose ranks the test killed. Open MPI 4.1's mpiexec can hang
        for good when a rank dies while the ranks are still starting: every rank has exited, and
        mpiexec waits on a futex after "PMIX ERROR: UNREACHABLE" (reproduced: 1 in 40 kills within
        0.6 s of the ranks' start on a loaded host). No drtrain code runs any more then, so once no
        rank of the job (drtrain_ranks(marker)) has been left for `grace` s, the launcher is ended
        and the run returns exit status None (a failed run). Ranks alive at `timeout` still fail
        the test (a hang guard)."""
        deadline, gone_since = time.time() + timeout, None
        while True:
            try:
                self.proc.wait(timeout=0.5)
                return self.proc.returncode, self.output()
            except subprocess.TimeoutExpired:
                pass
            if drtrain_ranks(marker):
                gone_since = None
            elif gone_since is None:
                gone_since = time.time()
            elif time.time() - gone_since > grace:
                print(f"every rank had exited {grace} s ago but the launcher had not: ended it (Open MPI's "
                      f"start-up race, above); the run counts as failed")
                _kill_group(self.proc)
                return None, self.output()
            if time.time() > deadline:
                self.fail(f"the job did not end within {timeout} s (a hang guard)", directory)
