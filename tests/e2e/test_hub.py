"""Models named on a hub (--hf-repo/--hf-file): found in a hub cache laid out the way the hub
clients lay it out, offline; downloaded into that cache from HF_ENDPOINT (a fake hub on
loopback stands in for the real one, which is not reachable here); a missing repository is a
clear error and a non-zero exit."""

import hashlib
import http.server
import os
import re
import subprocess
import threading
from pathlib import Path

import requests

from conftest import BIN, MODEL, Server, complete

REPO = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
COMMIT = "4f1b2d0c9e8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def lay_out_cache(cache: Path) -> Path:
    """models--OWNER--NAME/{refs/main, snapshots/<commit>/FILE -> ../../blobs/<sha256>}."""
    repo = cache / ("models--" + REPO.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "snapshots" / COMMIT).mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    (repo / "blobs" / SHA256).symlink_to(Path(MODEL).resolve())  # no 98 MB copy
    (repo / "snapshots" / COMMIT / FILE).symlink_to(Path("../../blobs") / SHA256)
    return repo


def hub_flags(repo: str = REPO, file: str = FILE) -> list[str]:
    return ["--hf-repo", repo, "--hf-file", file]


def test_a_model_in_the_hub_cache_is_served_offline(make_server, tmp_path):
    lay_out_cache(tmp_path)
    env = {"HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    s = make_server(*hub_flags(), env=env)
    models = requests.get(s.url + "/v1/models", timeout=10).json()["data"]
    assert [m["id"] for m in models] == ["SmolLM2-135M-Instruct.Q4_1"]
    text = complete(s.url, prompt="The capital of France is", max_tokens=4, temperature=0)["choices"][0]["text"]
    assert "Paris" in text
    assert f"{FILE} from {REPO}@main" in s.log_all()


def run_to_exit(*args: str, env: dict) -> tuple[int, str]:
    cmd = [BIN, "serve", "--host", "127.0.0.1", "--port", "0", *args]
    p = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def test_a_missing_repository_is_a_clear_error(tmp_path):
    lay_out_cache(tmp_path)
    env = {"HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    code, out = run_to_exit(*hub_flags("nobody/missing", "x.gguf"), env=env)
    assert code != 0
    assert "x.gguf of nobody/missing (revision main) is not in the hub cache" in out, out
    assert "models--nobody--missing does not exist" in out, out
    assert "HF_HUB_OFFLINE is set" in out, out
    code, out = run_to_exit(*hub_flags(REPO, "other.gguf"), env=env)
    assert code != 0 and f"has no other.gguf (it holds {FILE})" in out, out
    code, out = run_to_exit("--hf-repo", "not-a-repo-id", "--hf-file", FILE, env=env)
    assert code != 0 and "is not a repository id" in out, out


class FakeHub(http.server.ThreadingHTTPServer):
    """Answers GET /OWNER/NAME/resolve/REV/FILE the way the hub does for hf-hub's client: the
    metadata probe (Range: bytes=0-0) gets the ETag and X-Repo-Commit headers, the download a
    ranged body; anything else is 404."""

    def __init__(self, files: dict[str, bytes]):
        self.files = files
        self.requests: list[str] = []
        super().__init__(("127.0.0.1", 0), FakeHubHandler)


class FakeHubHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.requests.append(self.path)
        body = self.server.files.get(self.path)
        if body is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", "bytes=0-"))
        start = int(m.group(1))
        end = int(m.group(2)) if m.group(2) else len(body) - 1
        chunk = body[start : end + 1]
        self.send_response(206)
        self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
        self.send_header("Content-Length", str(len(chunk)))
        self.end_headers()
        self.wfile.write(chunk)


def test_a_model_not_cached_is_downloaded_into_the_cache(make_server, tmp_path):
    hub = FakeHub({f"/{REPO}/resolve/main/{FILE}": Path(MODEL).read_bytes()})
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    try:
        cache = tmp_path / "hub"
        env = {"HF_HUB_CACHE": str(cache), "HF_ENDPOINT": f"http://127.0.0.1:{hub.server_port}"}
        s = make_server(*hub_flags(), env=env)
        assert complete(s.url, prompt="Hello", max_tokens=2)["usage"]["completion_tokens"] == 2
        s.stop()
        assert hub.requests, "the hub was asked"
        repo = cache / ("models--" + REPO.replace("/", "--"))
        assert (repo / "refs" / "main").read_text() == COMMIT
        blob = repo / "blobs" / SHA256
        assert blob.stat().st_size == Path(MODEL).stat().st_size
        assert (repo / "snapshots" / COMMIT / FILE).resolve() == blob.resolve()
        # Cached now: served offline without asking the hub again.
        asked = len(hub.requests)
        offline = make_server(*hub_flags(), env={**env, "HF_HUB_OFFLINE": "1"})
        assert complete(offline.url, prompt="Hello", max_tokens=2)["usage"]["completion_tokens"] == 2
        assert len(hub.requests) == asked
        # Online, a repository the hub does not have is a clear error naming the endpoint.
        code, out = run_to_exit(*hub_flags("nobody/missing", "x.gguf"), env=env)
        assert code != 0 and f"cannot download x.gguf of nobody/missing (revision main) from http://127.0.0.1:{hub.server_port}" in out, out
    finally:
        hub.shutdown()
