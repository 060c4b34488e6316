"""End-to-end fixtures: the real braid binary, on the real model, on a real loopback socket.

scripts/test.sh runs the files two at a time (pytest-xdist: `-n 2 --dist loadfile`): each worker
runs whole files and starts its own session `server`, so a file meets the same servers as in a
serial run. A busy server uses both cores, so the second worker gains only the gaps (start-ups,
the Python clients, fixed waits): 380 s against 405 s for the whole suite on 2 cores. A file that loads the whole machine for a while, or whose checks lean on timing, is marked
`alone` (`pytestmark = pytest.mark.alone`): its tests wait until the other worker's current test
ends, and hold the other worker off until they end. The longest files are handed out first so
that the short ones fill in beside them. `scripts/test.sh -n 0` runs everything in one process."""

import fcntl
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("BRAID_BIN", str(ROOT / "target" / "release" / "braid"))
MODEL = os.environ.get("BRAID_MODEL", str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
# The second model (a base model without a chat template); `scripts/fetch-model.sh gemma3-270m`.
GEMMA_MODEL = os.environ.get("BRAID_GEMMA_MODEL", str(ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"))
# The embedding model (a sentence-transformers directory); `scripts/fetch-model.sh all-minilm-l6-v2`.
EMBEDDING_MODEL = os.environ.get("BRAID_EMBEDDING_MODEL", str(ROOT / "models" / "all-MiniLM-L6-v2"))


# Sixteen different short prompts, for tests that need many distinct requests.
PROMPTS = [
    "Once upon a time, there was a little",
    "def fibonacci(n):",
    "In 1969, astronauts",
    "My favorite food is",
    "The sun rises in the",
    "Dear Sir or Madam,",
    "The moon is",
    "Q: What is 7 times 8?\nA:",
    "The history of the printing press",
    "Water boils at",
    "The best way to learn a language is",
    "In the middle of the forest",
    "Photosynthesis is the process",
    "The first computer",
    "Rain falls when",
    "My grandmother always said",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `braid serve` process; stopped with SIGTERM so every test run also exercises draining.
    `model` is the GGUF given as `--model`: None for the default (MODEL), "" for no `--model`
    flag at all (an embedding-only server, given `--embedding-model DIR` in `args`)."""

    def __init__(self, *args: str, env: dict | None = None, model: str | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"braid-e2e-{self.port}.log"
        self.log = open(self.log_path, "w")
        model_args = [] if model == "" else ["--model", MODEL if model is None else model]
        cmd = [BIN, "serve", "--host", "127.0.0.1", "--port", str(self.port), *model_args, *args]
        env = {**os.environ, **(env or {})}
        if model == "":
            env.pop("BRAID_MODEL", None)  # the flag's environment variable would name one
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.wait_ready()

    def wait_ready(self, timeout: float = 180.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"braid exited with {self.proc.returncode}:\n{self.log_text()}")
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"braid not ready after {timeout}s:\n{self.log_text()}")

    def log_text(self) -> str:
        """The log's tail, for failure messages."""
        return self.log_all()[-5000:]

    def log_all(self) -> str:
        """The whole log, for what a test looks for in it (a line can lie beyond the tail)."""
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> dict[str, float]:
        text = requests.get(self.url + "/metrics", timeout=10).text
        out = {}
        for line in text.splitlines():
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$", line)
            if m:
                out[m.group(1)] = float(m.group(2))
        return out

    def wait_idle(self, what: str, timeout: float = 60.0):
        """Waits until no request runs or waits; fails saying `what` is still held."""
        deadline = time.time() + timeout
        while True:
            m = self.metrics()
            if m["braid_num_requests_running"] == 0 and m["braid_num_requests_waiting"] == 0:
                return
            assert time.time() < deadline, f"{what} still held after {timeout:.0f} s"
            time.sleep(0.05)

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


# Handed out first, in this order; the other files follow in collection order. The files that
# run alone come first: started together they wait only for each other, where later one would
# wait for the other worker's current test (test_kernels' portable run takes a minute). Then
# the longest (a serial run on 2 cores, Zen 4: kernels 69 s, serving 65 s, tools 30 s,
# structured outputs 26 s, faults 21 s, lm-eval 14 s; every other file under 13 s).
LONGEST_FILES = [
    "test_soak.py",
    "test_replicas.py",
    "test_vllm_router.py",
    "test_kernels.py",
    "test_serving.py",
    "test_tools.py",
    "test_structured_outputs.py",
    "test_faults.py",
    "test_lm_eval.py",
]


def pytest_configure(config):
    config.addinivalue_line("markers", "alone: runs while no other test runs (see the module doc)")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(autouse=True)
def share_the_machine(request, tmp_path_factory):
    """Under xdist, a shared lock on the run's `running` file for every test and an exclusive one
    for a test marked `alone`. The `turnstile` lock is taken before it and held while waiting,
    so a test that waits to run alone is not overtaken by the other worker's next tests."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    run_dir = tmp_path_factory.getbasetemp().parent  # the run's, shared by its workers
    mode = fcntl.LOCK_EX if request.node.get_closest_marker("alone") else fcntl.LOCK_SH
    with open(run_dir / "turnstile.lock", "a") as turnstile, open(run_dir / "running.lock", "a") as running:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(running, mode)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    assert s.stop() == 0, s.log_text()


@pytest.fixture
def make_server():
    started = []

    def make(*args, **kw):
        s = Server(*args, **kw)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


def read_until_closed(sock: socket.socket, until: float | None = None) -> bytes:
    """Everything the peer sends until it closes or resets the connection (or, given `until`,
    a time.time() deadline, until then)."""
    out = b""
    try:
        while until is None or time.time() < until:
            chunk = sock.recv(65536)
            if not chunk:
                break
            out += chunk
    except ConnectionResetError:
        pass
    return out


def complete(url: str, **body) -> dict:
    r = requests.post(url + "/v1/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def stream_text(url: str, **body) -> tuple[str, str | None]:
    """Text and finish reason of a streamed completion, read as raw SSE."""
    import json

    body["stream"] = True
    text, finish = "", None
    with requests.post(url + "/v1/completions", json=body, stream=True, timeout=300) as r:
        assert r.status_code == 200, r.text
        for line in r.iter_lines():
            if not line or not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                break
            chunk = json.loads(data)
            for choice in chunk.get("choices", []):
                text += choice.get("text") or ""
                finish = choice.get("finish_reason") or finish
    return text, finish
