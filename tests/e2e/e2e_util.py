"""Helpers of the end-to-end test scripts (checkpoint_files.py, train_hdf5.py): run a command and
check its exit status, and check that a text holds a line's worth of expected output."""
import subprocess


def run(cmd, expect_ok=True, env=None, timeout=120):
    """Runs cmd (stdout and stderr together); expect_ok True/False checks the exit status (None: no
    check). Returns (exit status, output)."""
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=env, timeout=timeout)
    if expect_ok is not None and (p.returncode == 0) != expect_ok:
        print(p.stdout)
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {p.returncode}, expected {'0' if expect_ok else 'non-zero'}")
    return p.returncode, p.stdout


def expect(text, needle, what):
    if needle not in text:
        print(text)
        raise SystemExit(f"FAIL: {what}: '{needle}' not in the output")
