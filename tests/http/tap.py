"""A logging pass-through HTTP proxy: shows what a real MCP client sends over Streamable
HTTP and what the server answers, without touching either. A debugging aid, not a test.

Usage: tap.py LISTEN_PORT UPSTREAM_URL LOG.jsonl
Two JSON lines per exchange in LOG, joined by "id": one when the answer's head arrives
(method, path, request headers, request body's first 2 KiB, status, response headers),
one when its body ends (first 2 KiB of it; SSE bodies are streamed through as they
arrive, so a long-lived GET stream shows up at once). Prints "tap: listening on PORT" on stderr when ready.
"""

import http.client
import json
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-connection"}
HEAD = 2048


def main(port, upstream, log_path):
    up = urllib.parse.urlsplit(upstream)
    lock = threading.Lock()
    log = open(log_path, "a", buffering=1)
    ids = iter(range(1, 1 << 62))

    def record(entry):
        with lock:
            log.write(json.dumps(entry) + "\n")

    class Tap(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def relay(self):
            n = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(n) if n else b""
            entry = {
                "id": next(ids),
                "method": self.command,
                "path": self.path,
                "req_headers": {k.lower(): v for k, v in self.headers.items()},
                "req_body": body[:HEAD].decode("utf-8", "replace"),
            }
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=600)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP | {"host"}}
            headers["Host"] = up.netloc
            try:
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
            except OSError as e:
                entry["error"] = str(e)
                record(entry)
                self.send_error(502)
                return
            entry["status"] = resp.status
            entry["resp_headers"] = {k.lower(): v for k, v in resp.getheaders()}
            record(entry)
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in HOP | {"content-length"}:
                    self.send_header(k, v)
            # Close-delimited body: streams SSE as it comes without re-chunking.
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            seen = b""
            try:
                while True:
                    chunk = resp.read1(65536)
                    if not chunk:
                        break
                    if len(seen) < HEAD:
                        seen += chunk[: HEAD - len(seen)]
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except OSError:
                entry = {"id": entry["id"], "aborted": True}
            else:
                entry = {"id": entry["id"]}
            entry["resp_body"] = seen.decode("utf-8", "replace")
            record(entry)
            conn.close()

        do_GET = do_POST = do_DELETE = do_PUT = do_OPTIONS = relay

    srv = ThreadingHTTPServer(("127.0.0.1", port), Tap)
    srv.daemon_threads = True
    print(f"tap: listening on {srv.server_address[1]}", file=sys.stderr, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
