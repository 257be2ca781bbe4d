"""A loopback stand-in for the Hugging Face hub's download API (``HF_ENDPOINT``): one repo's files, at one
commit, as huggingface_hub's ``snapshot_download`` asks for them; each request's path and token are kept."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SHA = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self, repo: str, folder: Path):
        self.repo, self.files = repo, {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
        self.requests: list[tuple[str, str]] = []  # (path, Authorization header)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _file(self) -> bytes | None:
                prefix = f"/{hub.repo}/resolve/"
                if not self.path.startswith(prefix):
                    return None
                name = self.path[len(prefix):].split("/", 1)[-1].split("?")[0]
                return hub.files.get(name)

            def _send(self, status: int, body: bytes, headers: dict, head: bool = False):
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def do_HEAD(self):
                self._serve(head=True)

            def do_GET(self):
                self._serve(head=False)

            def _serve(self, head: bool):
                hub.requests.append((self.path, self.headers.get("Authorization", "")))
                if self.path.startswith(f"/api/models/{hub.repo}/tree/"):
                    body = json.dumps([{"type": "file", "path": n, "size": len(d), "oid": hashlib.sha1(d).hexdigest()}
                                       for n, d in sorted(hub.files.items())]).encode()
                    return self._send(200, body, {"Content-Type": "application/json"}, head)
                if self.path.startswith(f"/api/models/{hub.repo}/revision/"):
                    body = json.dumps({"id": hub.repo, "sha": SHA, "private": True,
                                       "siblings": [{"rfilename": n} for n in sorted(hub.files)]}).encode()
                    return self._send(200, body, {"Content-Type": "application/json"}, head)
                data = self._file()
                if data is None:
                    return self._send(404, b"{}", {"X-Error-Code": "EntryNotFound"}, head)
                etag = hashlib.sha256(data).hexdigest()
                self._send(200, data, {"X-Repo-Commit": SHA, "ETag": f'"{etag}"'}, head)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
