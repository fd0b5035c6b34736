#!/usr/bin/env python3
"""A SASL front for a Kafka-compatible broker, for rankpulse's secured-broker tests.

Why it exists: the standalone broker of the test tier (Tansu 0.6.0, memory
storage) cannot check credentials. Its in-memory store keeps no SCRAM
credentials (every SCRAM login answers "unknown-user"), its PLAIN handshake
closes the connection, and it has no OAUTHBEARER. So the tests put this
gateway in front of it, the way stunnel puts TLS in front of it: a client
speaks the Kafka SASL exchange to the gateway (SaslHandshake v1 and
SaslAuthenticate v0/v1, as Apache Kafka brokers answer them); once the client
is authenticated, the gateway pipes the connection to the broker unchanged,
whatever the API (the state store's CreateTopics, DescribeConfigs and
InitProducerId pass as Fetch and Produce do). ApiVersions before
authentication is forwarded to the broker, so the client sees the broker's
own API versions.

Mechanisms, each checked as Apache Kafka checks it:
  PLAIN            authzid NUL user NUL password (RFC 4616)
  SCRAM-SHA-256/512 RFC 5802 / RFC 7677 server side: salted password by
                   PBKDF2, client proof verified against the stored key, the
                   server signature sent back in the final message
  OAUTHBEARER      RFC 7628 client response with a JWT (HS256) that this
                   gateway's token endpoint issued: signature, "exp" and "sub"
                   are checked
A failed login is answered with error 58 (SASL_AUTHENTICATION_FAILED) and the
broker's message text, then the connection is closed.

The token endpoint (--token-port) is an OAuth 2 client-credentials endpoint
(RFC 6749 4.4): POST grant_type=client_credentials with HTTP Basic client
authentication; it answers {"access_token": <JWT>, "token_type": "bearer",
"expires_in": 3600}. librdkafka's `sasl.oauthbearer.method=oidc` uses it.

Test support only: it binds to 127.0.0.1 and is started and killed by the
tests (tests/it/secure_broker.rs).
"""

import argparse
import asyncio
import base64
import hashlib
import hmac
import json
import os
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SASL_AUTHENTICATION_FAILED = 58
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
SCRAM_ITERATIONS = 4096


def log(*parts):
    print("gateway:", *parts, file=sys.stderr, flush=True)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue_jwt(secret: bytes, subject: str, lifetime_s: int) -> str:
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    now = int(time.time())
    payload = b64url(json.dumps({"sub": subject, "iat": now, "exp": now + lifetime_s}).encode())
    signature = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{b64url(signature)}"


def verify_jwt(secret: bytes, token: str):
    """The token's subject if its HS256 signature and expiry hold, else None."""
    try:
        header, payload, signature = token.split(".")
        expected = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
        if not hmac.compare_digest(expected, b64url_decode(signature)):
            return None
        claims = json.loads(b64url_decode(payload))
        if claims.get("exp", 0) <= time.time() or not claims.get("sub"):
            return None
        return claims["sub"]
    except (ValueError, KeyError, json.JSONDecodeError):
        return None


class Scram:
    """Server side of one SCRAM exchange (RFC 5802), for SHA-256 or SHA-512."""

    def __init__(self, mechanism, users):
        self.hash = hashlib.sha256 if mechanism == "SCRAM-SHA-256" else hashlib.sha512
        self.mechanism = mechanism
        self.users = users
        self.client_first_bare = None
        self.server_first = None
        self.nonce = None
        self.salted = None

    def hmac(self, key, msg):
        return hmac.new(key, msg, self.hash).digest()

    def step(self, message: bytes):
        """Returns (done, ok, reply)."""
        text = message.decode("utf-8", "replace")
        if self.server_first is None:
            parts = text.split(",", 2)
            if len(parts) != 3 or not parts[0] in ("n", "y"):
                return True, False, b""
            self.client_first_bare = parts[2]
            attrs = dict(kv.split("=", 1) for kv in self.client_first_bare.split(",") if "=" in kv)
            user, client_nonce = attrs.get("n"), attrs.get("r")
            password = self.users.get(user)
            if password is None or not client_nonce:
                return True, False, b""
            salt = hashlib.sha256(f"salt-{user}".encode()).digest()[:16]
            self.salted = hashlib.pbkdf2_hmac(self.hash().name, password.encode(), salt, SCRAM_ITERATIONS)
            self.nonce = client_nonce + b64url(os.urandom(18))
            self.server_first = f"r={self.nonce},s={base64.b64encode(salt).decode()},i={SCRAM_ITERATIONS}"
            return False, True, self.server_first.encode()
        without_proof, sep, proof = text.rpartition(",p=")
        attrs = dict(kv.split("=", 1) for kv in without_proof.split(",") if "=" in kv)
        if not sep or attrs.get("r") != self.nonce:
            return True, False, b""
        auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
        client_key = self.hmac(self.salted, b"Client Key")
        stored_key = self.hash(client_key).digest()
        signature = self.hmac(stored_key, auth_message)
        try:
            claimed_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof), signature))
        except ValueError:
            return True, False, b""
        if not hmac.compare_digest(self.hash(claimed_key).digest(), stored_key):
            return True, False, b""
        server_key = self.hmac(self.salted, b"Server Key")
        return True, True, b"v=" + base64.b64encode(self.hmac(server_key, auth_message))


def kafka_string(s):
    if s is None:
        return struct.pack(">h", -1)
    data = s.encode()
    return struct.pack(">h", len(data)) + data


class Gateway:
    def __init__(self, args):
        self.args = args
        self.upstream_host, port = args.upstream.rsplit(":", 1)
        self.upstream_port = int(port)
        self.plain = dict(u.split(":", 1) for u in args.plain)
        self.scram = dict(u.split(":", 1) for u in args.scram)
        self.oauth_secret = args.oauth_secret.encode() if args.oauth_secret else None
        self.mechanisms = []
        if self.plain:
            self.mechanisms.append("PLAIN")
        if self.scram:
            self.mechanisms += ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        if self.oauth_secret:
            self.mechanisms.append("OAUTHBEARER")

    async def handle(self, reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        except OSError as e:
            log("upstream unreachable:", e)
            writer.close()
            return
        try:
            if await self.authenticate(reader, writer, up_reader, up_writer):
                await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            up_writer.close()

    async def authenticate(self, reader, writer, up_reader, up_writer):
        mechanism, scram = None, None
        while True:
            size_bytes = await reader.readexactly(4)
            body = await reader.readexactly(struct.unpack(">i", size_bytes)[0])
            api_key, api_version, correlation = struct.unpack(">hhi", body[:8])
            if api_key == API_VERSIONS:
                up_writer.write(size_bytes + body)
                await up_writer.drain()
                size = await up_reader.readexactly(4)
                writer.write(size + await up_reader.readexactly(struct.unpack(">i", size)[0]))
                await writer.drain()
                continue
            client_id_len = struct.unpack(">h", body[8:10])[0]
            at = 10 + max(client_id_len, 0)
            if api_key == SASL_HANDSHAKE:
                n = struct.unpack(">h", body[at : at + 2])[0]
                mechanism = body[at + 2 : at + 2 + n].decode()
                ok = mechanism in self.mechanisms and api_version >= 1
                reply = struct.pack(">ih", correlation, 0 if ok else UNSUPPORTED_SASL_MECHANISM)
                reply += struct.pack(">i", len(self.mechanisms)) + b"".join(kafka_string(m) for m in self.mechanisms)
                await send(writer, reply)
                if not ok:
                    log("refused mechanism", mechanism)
                    return False
                if mechanism.startswith("SCRAM-"):
                    scram = Scram(mechanism, self.scram)
                continue
            if api_key != SASL_AUTHENTICATE or mechanism is None:
                log("request", api_key, "before authentication: closing")
                return False
            n = struct.unpack(">i", body[at : at + 4])[0]
            token = body[at + 4 : at + 4 + n]
            if mechanism == "PLAIN":
                fields = token.split(b"\0")
                done = True
                ok = len(fields) == 3 and self.plain.get(fields[1].decode("utf-8", "replace")) == fields[2].decode(
                    "utf-8", "replace"
                )
                out = b""
            elif mechanism == "OAUTHBEARER":
                done, out = True, b""
                bearer = [p for p in token.split(b"\x01") if p.startswith(b"auth=Bearer ")]
                subject = verify_jwt(self.oauth_secret, bearer[0][len(b"auth=Bearer ") :].decode()) if bearer else None
                ok = subject is not None
            else:
                done, ok, out = scram.step(token)
            error = 0 if ok else SASL_AUTHENTICATION_FAILED
            message = None if ok else (
                "Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {mechanism}"
            )
            reply = struct.pack(">ih", correlation, error) + kafka_string(message)
            reply += struct.pack(">i", len(out)) + out
            if api_version >= 1:
                reply += struct.pack(">q", 0)
            await send(writer, reply)
            if not ok:
                log("authentication failed:", mechanism)
                return False
            if done:
                log("authenticated:", mechanism)
                return True


async def send(writer, payload):
    writer.write(struct.pack(">i", len(payload)) + payload)
    await writer.drain()


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


def serve_tokens(port, clients, secret):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            auth = self.headers.get("Authorization", "")
            try:
                client_id, client_secret = base64.b64decode(auth.removeprefix("Basic ")).decode().split(":", 1)
            except ValueError:
                client_id, client_secret = None, None
            if "grant_type=client_credentials" not in body or clients.get(client_id) != client_secret:
                log("token refused for", client_id)
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"error":"invalid_client"}')
                return
            token = issue_jwt(secret, client_id, 3600)
            reply = json.dumps({"access_token": token, "token_type": "bearer", "expires_in": 3600}).encode()
            log("token issued for", client_id)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()


async def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", type=int, required=True, help="port on 127.0.0.1")
    p.add_argument("--upstream", required=True, help="the broker, host:port")
    p.add_argument("--plain", action="append", default=[], metavar="USER:PASSWORD")
    p.add_argument("--scram", action="append", default=[], metavar="USER:PASSWORD")
    p.add_argument("--oauth-secret", help="HS256 key of the tokens the token endpoint issues")
    p.add_argument("--token-port", type=int, help="port of the OAuth client-credentials token endpoint")
    p.add_argument("--oauth-client", action="append", default=[], metavar="CLIENT_ID:SECRET")
    args = p.parse_args()
    gateway = Gateway(args)
    if args.token_port:
        serve_tokens(args.token_port, dict(c.split(":", 1) for c in args.oauth_client), args.oauth_secret.encode())
    server = await asyncio.start_server(gateway.handle, "127.0.0.1", args.listen)
    log("listening on", args.listen, "mechanisms", gateway.mechanisms)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
