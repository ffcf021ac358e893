"""A stand-in for the Hugging Face Hub's HTTP API on loopback, for tests that
point HF_ENDPOINT at it: the network boundary, nothing of cpuddp replaced.
It answers whoami-v2 (by token: TOKENS), model_info (MODELS), repo creation,
a model card's metadata check and regular (non-LFS) commits, and logs every request as a JSON line, so a
test sees what was asked, and in which order. Run in a thread (`running`) or as a
program in a test host's namespace:

    python tests/helpers/fake_hub.py LOG_FILE PORT_FILE
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

WRITE, READ = "hf_fake_write_token", "hf_fake_read_token"
TOKENS = {WRITE: "write", READ: "read"}
MODELS = {"acme/tiny-bert"}
SHA = "0" * 40


class Hub(BaseHTTPRequestHandler):
    log_file: Path

    def log_message(self, *args):  # quiet: the log file says what was asked
        pass

    def _note(self, extra: dict | None = None) -> None:
        entry = {"method": self.command, "path": self.path, "token": self.headers.get("authorization", ""),
                 **(extra or {})}
        with open(self.log_file, "a") as handle:
            print(json.dumps(entry), file=handle)

    def _send(self, status: int, body: dict, error_code: str | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if error_code:
            self.send_header("X-Error-Code", error_code)
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def do_GET(self):
        self._note()
        token = self.headers.get("authorization", "").removeprefix("Bearer ")
        if self.path == "/api/whoami-v2":
            if token not in TOKENS:
                return self._send(401, {"error": "Invalid credentials in Authorization header"})
            return self._send(200, {"type": "user", "name": "me",
                                    "auth": {"type": "access_token", "accessToken": {"role": TOKENS[token]}}})
        repo = self.path.removeprefix("/api/models/").split("/revision/")[0].split("?")[0]
        if self.path.startswith("/api/models/") and repo in MODELS:
            return self._send(200, {"id": repo, "sha": SHA, "siblings": []})
        self._send(404, {"error": "Repository not found"}, "RepoNotFound")

    def do_POST(self):
        body = self._body()
        if self.path == "/api/repos/create":
            self._note()
            made = json.loads(body)
            repo = "/".join(filter(None, (made.get("organization"), made["name"])))
            return self._send(200, {"url": f"http://{self.headers['host']}/{repo}"})
        if self.path == "/api/validate-yaml":  # a README.md's metadata (the model card)
            self._note()
            return self._send(200, {"warnings": []})
        if "/preupload/" in self.path:
            self._note()
            files = json.loads(body)["files"]
            return self._send(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                              for f in files]})
        if "/commit/" in self.path:
            lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            self._note({"files": sorted(x["value"]["path"] for x in lines if x.get("key") == "file")})
            repo = self.path.removeprefix("/api/models/").split("/commit/")[0]
            return self._send(200, {"commitUrl": f"http://{self.headers['host']}/{repo}/commit/{SHA}",
                                    "commitOid": SHA})
        self._note()
        self._send(404, {"error": "not here"})


def requests(log_file: Path) -> list[dict]:
    return [json.loads(line) for line in log_file.read_text().splitlines()] if log_file.exists() else []


def serve(log_file: Path, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    handler = type("LoggedHub", (Hub,), {"log_file": Path(log_file)})
    return ThreadingHTTPServer((host, 0), handler)


@contextlib.contextmanager
def running(log_file: Path):
    """A fake Hub in a thread of this process; yields its endpoint (for HF_ENDPOINT)."""
    server = serve(log_file)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    server = serve(Path(sys.argv[1]))
    Path(sys.argv[2]).write_text(str(server.server_address[1]))
    server.serve_forever()
