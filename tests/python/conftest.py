"""Starts a real sluice server on 127.0.0.1:<free port> with the real model."""
import contextlib
import os
import socket
import subprocess
import tempfile
import time

import httpx
import pytest
from openai import OpenAI


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(*args):
    """A sluice server with these extra flags, on a free port; yields its base URL once
    it answers (any status: a server with --api-key answers 401 to /v1/models)."""
    binary = os.environ["SLUICE_BIN"]
    port = free_port()
    # The log goes to a file: a pipe nobody reads fills up and blocks the server.
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [binary, "serve", "--port", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    try:
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError("sluice exited: " + log.read().decode(errors="replace"))
            try:
                if httpx.get(url + "/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                raise RuntimeError("sluice did not start in time")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="session")
def base_url():
    with serve("--slots", "8", "--context", "1024") as url:
        yield url


@pytest.fixture(scope="session")
def client(base_url):
    return OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="session")
def model(client):
    return client.models.list().data[0].id
