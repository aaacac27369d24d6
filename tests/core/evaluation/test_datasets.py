"""`populora data download` against a local HTTP server that serves the files in their
published layout (``/<host>/<path>`` of each address, built from the test data): every file
arrives byte for byte and is checked; a corrupted file is refused and named; a transfer
that breaks off is never used and the next attempt resumes it; evaluation names the
command that fetches missing data."""

from __future__ import annotations

import http.server
import shutil
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest

from populora_core.evaluation.benchmarks import fetch_hint
from populora_core.evaluation.datasets import DATASETS, DataUnavailable, download, file_sha256, is_present, require

DATA = Path(__file__).resolve().parents[4] / "shared" / "data"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="needs ../shared/data")


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``files`` (URL path → bytes) with Range support; ``cut`` (URL path → bytes) sends
    only that many bytes of a file, then drops the connection (once)."""

    files: dict[str, bytes]  # set per server by the fixture
    cut: dict[str, int]
    ranges: list[str]

    def do_GET(self) -> None:
        body = self.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        start = 0
        if rng := self.headers.get("Range"):
            self.ranges.append(self.path)
            start = int(rng.removeprefix("bytes=").split("-")[0])
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        limit = self.cut.pop(self.path, None)
        self.wfile.write(body[start:limit] if limit is not None else body[start:])
        if limit is not None:
            self.wfile.flush()
            self.close_connection = True

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def mirror():
    files = {}
    for d in DATASETS.values():
        for f in d.files:
            parts = urllib.parse.urlsplit(f.url)
            files[f"/{parts.netloc}{parts.path}"] = (DATA / f.path).read_bytes()
    handler = type("Handler", (_Handler,), {"files": files, "cut": {}, "ranges": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()


def _key(name: str) -> str:
    url = DATASETS[name].files[0].url
    parts = urllib.parse.urlsplit(url)
    return f"/{parts.netloc}{parts.path}"


def test_every_dataset_arrives_byte_for_byte_and_a_second_run_fetches_nothing(mirror, tmp_path):
    url, handler = mirror
    paths = download([], tmp_path, mirror=url, progress=False)
    assert len(paths) == sum(len(d.files) for d in DATASETS.values())
    for d in DATASETS.values():
        for f in d.files:
            assert file_sha256(tmp_path / f.path) == file_sha256(DATA / f.path) == f.sha256
    assert all(is_present(n, tmp_path) for n in DATASETS)
    handler.files.clear()  # nothing is served any more: nothing is needed
    assert download(["cruxeval"], tmp_path, mirror=url, progress=False) == [tmp_path / "cruxeval/cruxeval.jsonl"]


def test_a_corrupted_file_is_refused_named_and_not_kept(mirror, tmp_path):
    url, handler = mirror
    good = handler.files[_key("cruxeval")]
    handler.files[_key("cruxeval")] = good[:-2] + b"X\n"
    with pytest.raises(DataUnavailable, match=r"cruxeval/cruxeval.jsonl: the file from .* is not the published one"):
        download(["cruxeval"], tmp_path, mirror=url, progress=False)
    assert not (tmp_path / "cruxeval/cruxeval.jsonl").exists()
    assert not (tmp_path / "cruxeval/cruxeval.jsonl.part").exists()
    with pytest.raises(DataUnavailable, match="populora data download cruxeval"):
        require(["cruxeval"], tmp_path)


def test_a_broken_transfer_is_never_used_and_the_next_attempt_resumes_it(mirror, tmp_path):
    url, handler = mirror
    key = _key("gsm8k")
    handler.cut[key] = 300_000
    with pytest.raises(DataUnavailable, match=r"broke off|got 300000 of"):
        download(["gsm8k"], tmp_path, mirror=url, progress=False)
    target = tmp_path / "gsm8k/test.jsonl"
    assert not target.exists() and not is_present("gsm8k", tmp_path)
    assert (tmp_path / "gsm8k/test.jsonl.part").stat().st_size == 300_000
    download(["gsm8k"], tmp_path, mirror=url, progress=False)
    assert handler.ranges == [key]  # the second request asked for the rest only
    assert file_sha256(target) == DATASETS["gsm8k"].files[0].sha256
    assert not (tmp_path / "gsm8k/test.jsonl.part").exists()


def test_the_cli_lists_downloads_and_evaluation_names_the_fetch_command(mirror, tmp_path):
    url, _ = mirror
    populora = str(Path(sys.executable).parent / "populora")
    listed = subprocess.run([populora, "data", "list", "--dir", str(tmp_path)], capture_output=True, text=True)
    assert listed.returncode == 0 and "cruxeval" in listed.stdout and "humanevalplus" in listed.stdout
    got = subprocess.run(
        [populora, "data", "download", "aime24", "amc23", "--dir", str(tmp_path), "--mirror", url],
        capture_output=True,
        text=True,
    )
    assert got.returncode == 0, got.stdout + got.stderr
    assert is_present("aime24", tmp_path) and is_present("amc23", tmp_path)
    unknown = subprocess.run([populora, "data", "download", "nope", "--dir", str(tmp_path)], capture_output=True)
    assert unknown.returncode == 1 and b"unknown dataset 'nope'" in unknown.stdout
    assert fetch_hint(["cruxeval_o", "humanevalplus"], tmp_path) == (
        f"populora data download cruxeval humanevalplus --dir {tmp_path}"
    )
    shutil.rmtree(tmp_path / "aime24")
    assert not is_present("aime24", tmp_path)
