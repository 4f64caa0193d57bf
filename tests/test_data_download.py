"""MovieLens download against a local HTTP server on 127.0.0.1 (never the real site)."""

import hashlib
import http.server
import io
import threading
import zipfile

import pytest

from hamsi.cli import main
from hamsi.data.download import download_movielens
from hamsi.data.readers import load_ratings
from hamsi.errors import InputError

U_DATA = "1\t10\t4\t881250949\n2\t10\t3\t891717742\n2\t20\t5\t878887116\n"


def build_zip(folder="ml-100k", padding=200_000):
    """Return a zip shaped like ml-100k.zip; stored padding makes it large enough to cut."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        bundle.writestr(f"{folder}/u.data", U_DATA)
        bundle.writestr(f"{folder}/README", "x" * padding, compress_type=zipfile.ZIP_STORED)
    return buffer.getvalue()


class Server:
    """Serves `payload` at /ml-100k.zip with Range support; can drop the first response midway."""

    def __init__(self, payload, drop_first=False):
        self.payload, self.drop_first, self.requests = payload, drop_first, []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                owner.requests.append((self.path, self.headers.get("Range")))
                if self.path != "/ml-100k.zip":
                    self.send_error(404)
                    return
                start = 0
                if self.headers.get("Range"):
                    start = int(self.headers["Range"].split("=")[1].split("-")[0])
                body = owner.payload[start:]
                self.send_response(206 if start else 200)
                if start:
                    self.send_header(
                        "Content-Range",
                        f"bytes {start}-{len(owner.payload) - 1}/{len(owner.payload)}",
                    )
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if owner.drop_first and len(owner.requests) == 1:
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def md5(data):
    return hashlib.md5(data).hexdigest()


def test_download_verifies_and_unzips(tmp_path):
    payload = build_zip()
    with Server(payload) as server:
        folder = download_movielens(
            "movielens-100k", tmp_path, base_url=server.url, md5=md5(payload)
        )
        again = download_movielens("100k", tmp_path, base_url=server.url, md5=md5(payload))
    assert folder == again == tmp_path / "ml-100k"
    assert len(server.requests) == 1  # the second call reuses the cache
    assert load_ratings(folder).nnz == 3
    assert (tmp_path / "ml-100k.zip").read_bytes() == payload
    assert not (tmp_path / "ml-100k.zip.part").exists()


def test_dropped_connection_resumes_with_range(tmp_path):
    payload = build_zip()
    with Server(payload, drop_first=True) as server:
        with pytest.raises(OSError, match="run again to resume"):
            download_movielens(
                "movielens-100k", tmp_path, base_url=server.url, md5=md5(payload), attempts=1
            )
        partial = tmp_path / "ml-100k.zip.part"
        kept = partial.stat().st_size
        assert 0 < kept < len(payload)
        assert not (tmp_path / "ml-100k").exists()
        folder = download_movielens(
            "movielens-100k", tmp_path, base_url=server.url, md5=md5(payload)
        )
    assert server.requests[1] == ("/ml-100k.zip", f"bytes={kept}-")
    assert (tmp_path / "ml-100k.zip").read_bytes() == payload
    assert load_ratings(folder).nnz == 3


def test_retries_within_one_call(tmp_path):
    payload = build_zip()
    with Server(payload, drop_first=True) as server:
        download_movielens(
            "movielens-100k", tmp_path, base_url=server.url, md5=md5(payload), attempts=2
        )
    assert len(server.requests) == 2 and server.requests[1][1] is not None


def test_checksum_mismatch_leaves_nothing(tmp_path):
    with Server(build_zip()) as server:
        with pytest.raises(InputError, match="checksum mismatch"):
            download_movielens("movielens-100k", tmp_path, base_url=server.url, md5="0" * 32)
    assert list(tmp_path.iterdir()) == []


def test_unknown_checksum_is_recorded_and_checked_later(tmp_path):
    payload = build_zip()
    with Server(payload) as server:
        download_movielens("movielens-100k", tmp_path, base_url=server.url, md5=None)
    record = tmp_path / "ml-100k.zip.md5"
    assert record.read_text().split()[0] == md5(payload)
    # A cached zip that no longer matches its record is fetched again and checked against it.
    (tmp_path / "ml-100k.zip").write_bytes(b"corrupt")
    import shutil

    shutil.rmtree(tmp_path / "ml-100k")
    with Server(b"tampered") as server:
        with pytest.raises(InputError, match="checksum mismatch"):
            download_movielens("movielens-100k", tmp_path, base_url=server.url, md5=None)


def test_cli_uses_env_url_and_published_checksum(tmp_path, monkeypatch, capsys):
    # The test zip is not the real ml-100k.zip, so the published MD5 must reject it.
    with Server(build_zip()) as server:
        monkeypatch.setenv("HAMSI_MOVIELENS_URL", server.url)
        code = main(["data", "download", "movielens-100k", "--dest", str(tmp_path), "--quiet"])
    error = capsys.readouterr().err
    assert code != 0
    assert "checksum mismatch" in error and "0e33842e24a9c977be4e0107933c0723" in error
    assert "Traceback" not in error
    assert list(tmp_path.iterdir()) == []


def test_http_error_and_unknown_dataset(tmp_path):
    with Server(build_zip()) as server:
        with pytest.raises(OSError, match="HTTP 404"):
            download_movielens("movielens-1m", tmp_path, base_url=server.url, md5=None)
    with pytest.raises(InputError, match="unknown dataset"):
        download_movielens("movielens-5m", tmp_path)
