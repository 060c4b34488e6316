"""Every kernel this CPU can run serves the same words, bit for bit.

The kernels are meant to compute identical integers and the same float operations in the same
order, so forcing each one with BRAID_KERNEL must reproduce the pinned greedy output (text,
tokens and logprobs) exactly; and a kernel the CPU lacks must stop the server at start with a
message that names it, never fall back to another one silently.
"""

import json
import os
import subprocess

import pytest
import requests
from conftest import BIN, MODEL, Server
from test_greedy_golden import assert_serves_the_pinned_output


def info() -> dict:
    out = subprocess.run([BIN, "info", "--json", "--model", MODEL], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


INFO = info() if os.path.exists(BIN) else {"supported_kernels": [], "kernels": []}
SUPPORTED = INFO["supported_kernels"]
UNSUPPORTED = [k["name"] for k in INFO["kernels"] if not k["supported"]]


def test_this_cpu_runs_more_than_the_reference_kernel():
    # Every x86-64 or aarch64 CPU braid targets has a vector kernel; if detection broke, the
    # suite would otherwise pass while serving everything on the slow portable path.
    assert "portable" in SUPPORTED
    assert len(SUPPORTED) >= 2, SUPPORTED


@pytest.mark.parametrize("kernel", SUPPORTED)
def test_each_kernel_serves_the_pinned_greedy_output(kernel):
    server = Server(env={"BRAID_KERNEL": kernel})
    try:
        metrics = requests.get(server.url + "/metrics", timeout=10).text
        assert f'kernel="{kernel}"' in metrics, "braid_build_info does not name the forced kernel"
        # The portable kernel, the reference every other is checked against bit for bit
        # (crates/braid-kernels), is several times slower: a few of the requests show it serves.
        assert_serves_the_pinned_output(server.url, first=4 if kernel == "portable" else None)
    finally:
        server.stop()


@pytest.mark.skipif(not UNSUPPORTED, reason="this CPU runs every kernel")
def test_a_kernel_the_cpu_lacks_stops_the_server_with_a_clear_error():
    kernel = UNSUPPORTED[0]
    proc = subprocess.run(
        [BIN, "serve", "--host", "127.0.0.1", "--port", "0", "--model", MODEL],
        env={**os.environ, "BRAID_KERNEL": kernel},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert kernel in proc.stderr and "this CPU does not have" in proc.stderr, proc.stderr


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86 intrinsics only")
def test_no_kernel_calls_an_intrinsic_out_of_line():
    # An intrinsic is one instruction only where it is inlined into code compiled with its
    # features. A closure handed to `map`/`from_fn` or kept out of line by the compiler loses
    # the entry point's `#[target_feature]`s, and each intrinsic inside it becomes a call to
    # a function of a few instructions: the code still gives the right bits, only slower (it
    # once cost AVX2 decode a fifth of its time). The release binary must hold no call to a
    # `core::arch` function whose call site lies in braid's own source.
    disassembly = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", BIN], capture_output=True, text=True, timeout=300, check=True
    ).stdout
    sites = [
        line.split(":")[0].strip()
        for line in disassembly.splitlines()
        if "call" in line and "core9core_arch" in line and "xgetbv" not in line
    ]
    if not sites:
        return
    frames = subprocess.run(
        ["addr2line", "-i", "-f", "-C", "-e", BIN, *(f"0x{a}" for a in sites)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.splitlines()
    ours = sorted({f for f in frames if "/crates/braid-" in f})
    assert not ours, "intrinsics called out of line from:\n" + "\n".join(ours)
