#!/usr/bin/env python3
"""Dev helper for the chat page: serves src/ui from disk (re-read on every request, so
edits show on reload) at the paths the binary uses, and forwards everything else to a
running sluice, streaming responses through. Plain python3 stdlib.

    sluice serve --port 18080 &
    scripts/ui-dev-proxy.py --port 8081 --upstream http://127.0.0.1:18080
    # open http://127.0.0.1:8081/
"""
import argparse
import http.client
import http.server
import pathlib
import urllib.parse

UI = pathlib.Path(__file__).resolve().parent.parent / "src" / "ui"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/ui/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/ui/markdown.js": ("markdown.js", "text/javascript; charset=utf-8"),
    "/ui/style.css": ("style.css", "text/css; charset=utf-8"),
}
HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
       "proxy-authorization", "proxy-authenticate", "host", "content-length"}


class Handler(http.server.BaseHTTPRequestHandler):
    upstream = None  # urllib.parse.SplitResult, set in main

    def do_GET(self):
        path = urllib.parse.urlsplit(self.path).path
        if path in FILES:
            name, kind = FILES[path]
            body = (UI / name).read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-cache")
            if path == "/":
                self.send_header("Content-Security-Policy", CSP)
            self.end_headers()
            self.wfile.write(body)
        else:
            self.forward()

    def do_POST(self):
        self.forward()

    do_PUT = do_DELETE = do_OPTIONS = do_PATCH = do_HEAD = do_POST

    def forward(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=600)
        try:
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                res = conn.getresponse()
            except OSError as e:
                self.send_error(502, f"upstream: {e}")
                return
            self.send_response(res.status, res.reason)
            for k, v in res.getheaders():
                if k.lower() not in HOP:
                    self.send_header(k, v)
            # No length: the body ends when this connection closes.
            self.send_header("Connection", "close")
            self.end_headers()
            while chunk := res.read1(65536):
                self.wfile.write(chunk)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser went away (e.g. the stop button): closing upstream cancels
        finally:
            conn.close()
            self.close_connection = True

    def log_message(self, fmt, *args):
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8081)
    ap.add_argument("--upstream", default="http://127.0.0.1:18080")
    args = ap.parse_args()
    Handler.upstream = urllib.parse.urlsplit(args.upstream)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"chat page on http://127.0.0.1:{args.port}/ -> {args.upstream}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
