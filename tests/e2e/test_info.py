"""`braid info` and the kernel choice from the command line: what it reports, and the refusal of
a kernel that does not exist or that the CPU cannot run."""

import json
import os
import subprocess

from conftest import BIN, MODEL

ENV = {k: v for k, v in os.environ.items() if k != "BRAID_KERNEL"}


def run(*args, env=None):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=120, env={**ENV, **(env or {})})


def test_info_json_names_a_supported_kernel_and_the_model():
    out = run("info", "--json", "--model", MODEL)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["kernel"] in info["supported_kernels"]
    assert info["kernel_forced_by_env"] is False
    # Fastest first: with nothing forced, the first supported kernel is the one chosen.
    assert info["supported_kernels"][0] == info["kernel"]
    assert "portable" in info["supported_kernels"]
    selected = [k["name"] for k in info["kernels"] if k["selected"]]
    assert selected == [info["kernel"]]
    assert info["threads"] >= 1
    m = info["model"]
    assert m["found"] and m["architecture"] == "llama" and m["layers"] == 30 and m["vocab"] == 49152, m


def test_info_text_says_a_kernel_was_forced_and_a_missing_model_is_a_line():
    out = run("info", "--model", "/nonexistent/model.gguf", env={"BRAID_KERNEL": "portable"})
    assert out.returncode == 0, out.stderr
    assert "portable    supported: yes  <- selected (forced by BRAID_KERNEL)" in out.stdout, out.stdout
    assert "model: /nonexistent/model.gguf does not exist" in out.stdout, out.stdout


def test_an_unknown_or_unsupported_kernel_is_refused_by_name():
    for args in (["info"], ["serve", "--port", "0", "--model", MODEL]):
        out = run(*args, env={"BRAID_KERNEL": "nonsense"})
        assert out.returncode != 0, out
        assert 'BRAID_KERNEL="nonsense"' in out.stderr, out.stderr
    info = json.loads(run("info", "--json", "--model", "/nonexistent").stdout)
    unsupported = [k["name"] for k in info["kernels"] if not k["supported"]]
    if unsupported:
        out = run("info", env={"BRAID_KERNEL": unsupported[0]})
        assert out.returncode != 0, out
        assert f"the {unsupported[0]} kernel needs" in out.stderr, out.stderr
        out = run("bench-engine", "--model", MODEL, "--kernel", unsupported[0])
        assert out.returncode != 0, out
        assert f"the {unsupported[0]} kernel needs" in out.stderr, out.stderr
    out = run("bench-engine", "--model", MODEL, "--kernel", "nonsense")
    assert out.returncode != 0 and "nonsense" in out.stderr, out.stderr
