"""The rollout's endpoint, as a harness process sees it: a unix socket speaking HTTP, with one key.

- `Bridge` runs commands and moves files in the rollout's sandbox (POST /ratchet/exec, read, write, diff).
- `serve_loopback` gives HTTP clients that only speak TCP (litellm, openai) a 127.0.0.1 port inside the
  harness's own network namespace that relays to the socket: the harness has no other network.
- `read_spec` / `print_final` are the runner protocol: the spec arrives as JSON on stdin, the final
  answer leaves as the last stdout line `RATCHET_FINAL {"final": {...}}`.
"""
import http.client
import json
import socket
import sys
import threading


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=600):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


class BridgeError(RuntimeError):
    pass


class Bridge:
    def __init__(self, socket_path, key, workdir):
        self.socket_path = socket_path
        self.key = key
        self.workdir = workdir

    def call(self, route, body, timeout=900):
        conn = UnixHTTPConnection(self.socket_path, timeout=timeout)
        try:
            conn.request("POST", "/ratchet/" + route, json.dumps(body),
                         {"content-type": "application/json", "authorization": "Bearer " + self.key})
            res = conn.getresponse()
            data = json.loads(res.read().decode("utf-8") or "{}")
        finally:
            conn.close()
        if res.status != 200:
            raise BridgeError(f"{route}: {res.status} {data.get('error', {}).get('message', data)}")
        return data

    def exec(self, command, timeout_s=None, cwd=None, stdin=None):
        body = {"command": command, "cwd": cwd or self.workdir}
        if timeout_s:
            body["timeout_s"] = timeout_s
        if stdin is not None:
            body["stdin"] = stdin
        return self.call("exec", body)

    def abspath(self, path):
        return path if path.startswith("/") else self.workdir.rstrip("/") + "/" + path

    def read(self, path):
        return self.call("read", {"path": self.abspath(path)})["content"]

    def write(self, path, content):
        self.call("write", {"path": self.abspath(path), "content": content})

    def diff(self):
        return self.call("diff", {})["diff"]


def _pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve_loopback(socket_path):
    """A 127.0.0.1 port relaying to the endpoint's socket; returns the port."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)

    def accept():
        while True:
            c, _ = srv.accept()
            u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            u.connect(socket_path)
            threading.Thread(target=_pipe, args=(c, u), daemon=True).start()
            threading.Thread(target=_pipe, args=(u, c), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return srv.getsockname()[1]


def read_spec():
    return json.loads(sys.stdin.read())


def print_final(final):
    sys.stdout.write("\nRATCHET_FINAL " + json.dumps({"final": final}) + "\n")
    sys.stdout.flush()
