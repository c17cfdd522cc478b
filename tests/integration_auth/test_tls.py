"""TLS on kboxd's listener (tls_cert_file/tls_key_file): a self-signed
certificate made with the openssl CLI, Python's ssl and http.client as the
client, bearer tokens on top, the pair re-read on SIGHUP, and the 503 a
connection past max_connections gets."""
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import warnings

import pytest

from test_auth import ALICE, CONFIG, TOKENS, Kboxd, auth, it, wait_for



def make_certificate(directory, name):
    """A self-signed certificate for 127.0.0.1 and its key; returns their paths."""
    cert = os.path.join(directory, name + ".crt")
    key = os.path.join(directory, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=kbox-test-" + name, "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", key, "-out", cert],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return cert, key


def client_context(cafile, **versions):
    context = ssl.create_default_context(cafile=cafile)  # verifies chain and IP
    for attr, value in versions.items():
        setattr(context, attr, value)
    return context


def https_get(port, path, context, headers=None):
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=context)
    try:
        conn.request("GET", path, headers=headers or {})
        res = conn.getresponse()
        return res.status, res.read(), conn.sock.getpeercert(binary_form=True)
    finally:
        conn.close()


def served_certificate(port):
    """The DER certificate kboxd presents now (not verified: it may be either one)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        with context.wrap_socket(raw) as tls:
            return tls.getpeercert(binary_form=True)


def der(cert_path):
    with open(cert_path) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


@pytest.fixture(scope="module")
def tls_kboxd(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("kbox-tls"))
    pki = os.path.join(root, "pki")
    os.makedirs(pki)
    cert, key = make_certificate(pki, "first")
    d = Kboxd(root, "tls", config=CONFIG + 'tls_cert_file: "%s"\ntls_key_file: "%s"\n' % (cert, key),
              tokens=TOKENS)
    d.cert, d.key, d.pki = cert, key, pki
    if d.port is None:
        d.stop()
        pytest.fail("kboxd did not start:\n%s\n%s" % ("\n".join(d.seen), d.stderr()),
                    pytrace=False)
    assert "listening on https://127.0.0.1:" in d.line, d.line
    yield d
    assert d.stop() == 0, d.stderr()[-4000:]


def test_https_with_a_verified_certificate_and_a_token(tls_kboxd):
    context = client_context(tls_kboxd.cert)
    status, body, _ = https_get(tls_kboxd.port, "/healthz", context)
    assert status == 200 and b'"ok"' in body
    status, _, _ = https_get(tls_kboxd.port, "/v1/info", context)
    assert status == 401
    status, body, _ = https_get(tls_kboxd.port, "/v1/info", context, auth(ALICE))
    assert status == 200 and b'"token_name": "alice"' in body.replace(b'":"', b'": "'), body


def test_the_python_client_over_https_with_a_ca_file(tls_kboxd):
    import sys
    sys.path.insert(0, os.path.join(it.REPO, "clients", "python"))
    from kbox_client import Client, KboxError, RetryPolicy
    url = "https://127.0.0.1:%d" % tls_kboxd.port
    once = RetryPolicy(max_attempts=1, max_infra_retries=0)
    assert Client(url, token=ALICE, ca_file=tls_kboxd.cert).info()["token_name"] == "alice"
    # Without the CA the self-signed certificate is refused; verify=False takes it.
    with pytest.raises(KboxError):
        Client(url, token=ALICE, retry=once).info()
    assert Client(url, token=ALICE, verify=False).info()["token_name"] == "alice"


def test_the_cli_over_https_with_a_ca_file(tls_kboxd, tmp_path):
    kbox = os.path.join(it.bin_dir(), "kbox")
    token = tmp_path / "token"
    token.write_text(ALICE + "\n")
    url = "https://127.0.0.1:%d" % tls_kboxd.port
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBOX_")}

    def cli(*args, **extra_env):
        return subprocess.run([kbox, *args], capture_output=True, text=True, timeout=60,
                              env=dict(env, **extra_env))

    ok = cli("info", "--server", url, "--token-file", str(token), "--ca-file", tls_kboxd.cert)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["token_name"] == "alice", ok.stdout
    # The CA file from the environment, as the Python client reads it.
    listed = cli("jobs", "--server", url, "--token-file", str(token), KBOX_CA_FILE=tls_kboxd.cert)
    assert listed.returncode == 0, listed.stderr
    assert isinstance(json.loads(listed.stdout).get("jobs", []), list), listed.stdout
    # A self-signed certificate without its CA is refused, and the message says what to do.
    refused = cli("info", "--server", url, "--token-file", str(token))
    assert refused.returncode == 3, refused
    assert "TLS handshake" in refused.stderr and "--ca-file" in refused.stderr, refused.stderr
    # The certificate names 127.0.0.1, not localhost: the name is checked too.
    wrong_name = cli("info", "--server", "https://localhost:%d" % tls_kboxd.port,
                     "--token-file", str(token), "--ca-file", tls_kboxd.cert)
    assert wrong_name.returncode == 3 and "TLS handshake" in wrong_name.stderr, wrong_name


def test_plain_http_gets_no_answer(tls_kboxd):
    raw, _ = it.raw_exchange(tls_kboxd.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert it.status_of(raw) is None, raw[:200]


def test_tls_before_1_2_is_refused(tls_kboxd):
    with warnings.catch_warnings():  # Python deprecates these versions, as kboxd refuses them
        warnings.simplefilter("ignore", DeprecationWarning)
        context = client_context(tls_kboxd.cert, minimum_version=ssl.TLSVersion.TLSv1,
                                 maximum_version=ssl.TLSVersion.TLSv1_1)
    context.set_ciphers("ALL:@SECLEVEL=0")  # let this client offer the old protocols at all
    with pytest.raises((ssl.SSLError, ConnectionError)):
        https_get(tls_kboxd.port, "/healthz", context)
    context = client_context(tls_kboxd.cert, minimum_version=ssl.TLSVersion.TLSv1_2,
                             maximum_version=ssl.TLSVersion.TLSv1_2)
    assert https_get(tls_kboxd.port, "/healthz", context)[0] == 200


def test_sighup_reloads_the_certificate_and_a_bad_pair_keeps_the_old_one(tls_kboxd):
    d = tls_kboxd
    assert served_certificate(d.port) == der(d.cert)
    new_cert, new_key = make_certificate(d.pki, "second")
    os.replace(new_cert, d.cert)
    os.replace(new_key, d.key)
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: served_certificate(d.port) == der(d.cert), "the new certificate")
    assert https_get(d.port, "/healthz", client_context(d.cert))[0] == 200

    second = der(d.cert)
    with open(d.cert, "w") as f:
        f.write("not a certificate\n")
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "ERROR: TLS certificate not reloaded, keeping the old one: tls_cert_file "
             + d.cert in d.stderr(), "the reload error in kboxd's log")
    assert served_certificate(d.port) == second


# -- past max_connections ------------------------------------------------------------------------

SMALL_MAX_CONNECTIONS = 4
REFUSAL_HEADER_TIMEOUT_S = 5
TLS_REFUSALS_AT_ONCE = 64  # kMaxTlsRefusals in daemon/http_server.h
CLOSE_SLACK_S = 3.0        # how late a loaded 2-core CI machine may close a connection


def idle_connection(port):
    """A TCP connection that never starts a handshake."""
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def seconds_until_closed(sock):
    """Waits for the server to close `sock` (EOF or reset); returns how long that took."""
    t0 = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except ConnectionError:
        pass
    return time.monotonic() - t0


def test_a_tls_connection_past_max_connections_gets_503(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("kbox-tls-small"))
    cert, key = make_certificate(root, "small")
    config = (CONFIG + 'tls_cert_file: "%s"\ntls_key_file: "%s"\n' % (cert, key)
              + "max_connections: %d\nheader_timeout_s: %d\nread_timeout_s: 30\n"
              % (SMALL_MAX_CONNECTIONS, REFUSAL_HEADER_TIMEOUT_S))
    d = Kboxd(root, "tls-small", config=config, tokens=TOKENS)
    assert d.port is not None, "%s\n%s" % ("\n".join(d.seen), d.stderr())
    context = client_context(cert)
    try:
        # Connections that never handshake hold their places for read_timeout_s (the handshake's
        # bound); the accept loop sees them in order, so the next one is over the limit.
        held = [idle_connection(d.port) for _ in range(SMALL_MAX_CONNECTIONS)]
        try:
            conn = http.client.HTTPSConnection("127.0.0.1", d.port, timeout=30, context=context)
            try:
                conn.request("GET", "/healthz")
                res = conn.getresponse()
                body = json.loads(res.read())
                assert res.status == 503, body
                assert res.getheader("Retry-After") == "1"
                assert res.getheader("Connection", "").lower() == "close"
                assert body["code"] == 503 and body["field"] == "connection", body
                assert "max_connections" in body["message"], body
            finally:
                conn.close()

            # A client past the limit that never handshakes is closed at header_timeout_s.
            with idle_connection(d.port) as idle:
                took = seconds_until_closed(idle)
            assert REFUSAL_HEADER_TIMEOUT_S - 1 <= took <= REFUSAL_HEADER_TIMEOUT_S + CLOSE_SLACK_S

            # At most TLS_REFUSALS_AT_ONCE are answered at once; the next is closed at once,
            # so a flood past the limit holds a bounded number of sockets.
            waiting = [idle_connection(d.port) for _ in range(TLS_REFUSALS_AT_ONCE)]
            try:
                with idle_connection(d.port) as extra:
                    took = seconds_until_closed(extra)
                assert took < REFUSAL_HEADER_TIMEOUT_S / 2, took
            finally:
                for s in waiting:
                    s.close()
        finally:
            for s in held:
                s.close()
        # Their places come back as soon as kboxd sees them closed.
        # Not https_get: a 503 while still over the limit closes the
        # connection, and with it the socket (and peer certificate) it reads.
        def healthy():
            conn = http.client.HTTPSConnection("127.0.0.1", d.port, timeout=30, context=context)
            try:
                conn.request("GET", "/healthz")
                return conn.getresponse().status == 200
            except (OSError, http.client.HTTPException):  # ssl.SSLError is an OSError
                return False
            finally:
                conn.close()
        wait_for(healthy, "a place to come back")
    finally:
        assert d.stop() == 0, d.stderr()[-4000:]
