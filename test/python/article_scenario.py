#!/usr/bin/env python3
"""The scenario of "How to do distributed locking", against the fenced HTTP gateway, from Python.

Client 1 takes a lease and reads; then it starts its write while the lease is valid, and the network
delays the write (here: its body) until the lease has expired. Client 2 takes the lease, reads, and
writes with its fence credential and If-Match. Client 1's write arrives: every check a clock can make
passed when it left, and the storage refuses the stale token (409 stale-token). Client 1, paused past
its lease like a process in a long GC pause, then writes again: its credential has ended with its lease
(403 credential-expired). Client 2's data stays as it was.

Standard library only. Prints one JSON object per line for each step. Usage:

    FENCED_GATEWAY_KEY=<API key> python3 article_scenario.py --gateway http://127.0.0.1:8080 \\
        --store records --resource articles/42 --key articles/42/draft --ttl-ms 1000

Exit status 0 when every step answered as the gateway's API document says it must, 1 otherwise.
"""

import argparse
import http.client
import json
import os
import sys
import time
import urllib.parse


class Gateway:
    """One API key's view of the gateway: JSON in and out, problems returned rather than raised."""

    def __init__(self, base_url, api_key):
        url = urllib.parse.urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError("--gateway must be an http(s) URL, got %r" % base_url)
        self.scheme, self.host, self.port = url.scheme, url.hostname, url.port
        self.api_key = api_key

    def request(self, method, path, headers=None, body=None):
        connection_class = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        connection = connection_class(self.host, self.port, timeout=30)
        try:
            all_headers = {"Authorization": "Bearer " + self.api_key}
            all_headers.update(headers or {})
            connection.request(method, path, body=body, headers=all_headers)
            response = connection.getresponse()
            data = response.read()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, data
        finally:
            connection.close()

    def start(self, method, path, headers, body):
        """Sends a request's headers now and returns what sends its body and reads the answer later."""
        connection_class = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        connection = connection_class(self.host, self.port, timeout=30)
        connection.putrequest(method, path, skip_accept_encoding=True)
        all_headers = {"Authorization": "Bearer " + self.api_key, "Content-Length": str(len(body))}
        all_headers.update(headers)
        for name, value in all_headers.items():
            connection.putheader(name, value)
        connection.endheaders()

        def finish():
            try:
                connection.send(body)
                response = connection.getresponse()
                data = response.read()
                return response.status, {k.lower(): v for k, v in response.getheaders()}, data
            finally:
                connection.close()

        return finish

    def post_json(self, path, document):
        return self.request("POST", path, {"Content-Type": "application/json"}, json.dumps(document).encode("utf-8"))


def key_path(store, key):
    # Each segment percent-encoded as UTF-8; the slashes between them stay slashes.
    return "/v1/%s/%s" % (store, urllib.parse.quote(key, safe="/"))


def parsed(headers, data):
    """A JSON or problem+json body as a dict, anything else as text."""
    media = headers.get("content-type", "").split(";")[0].strip()
    if media == "application/json" or media.endswith("+json"):
        return json.loads(data.decode("utf-8"))
    return data.decode("utf-8", errors="replace")


def emit(**fields):
    print(json.dumps(fields, sort_keys=True), flush=True)


class Client:
    """A client of the article: it takes a lease, reads, writes — and may be paused at any moment."""

    def __init__(self, name, gateway, store, resource, key, ttl_ms):
        self.name, self.gw, self.store = name, gateway, store
        self.resource, self.key, self.ttl_ms = resource, key, ttl_ms
        self.lease = None

    def take_lease(self):
        # register: the fence is registered with every store at once, so every older holder is
        # refused from now on, also on keys this lease will never write.
        status, headers, data = self.gw.post_json("/v1/leases", {"resource": self.resource, "ttlMs": self.ttl_ms, "register": True})
        body = parsed(headers, data)
        if status == 201:
            self.lease = body
            emit(client=self.name, step="lease", status=status, token=body["token"], holder=body["holder"], valid_until=body["validUntil"])
        else:
            emit(client=self.name, step="lease", status=status, problem=body)
        return status

    def read(self):
        status, headers, data = self.gw.request("GET", key_path(self.store, self.key))
        if status == 200:
            etag = headers.get("etag")
            value = parsed(headers, data) if self.store == "records" else data.decode("utf-8")
            emit(client=self.name, step="read", status=status, etag=etag, token=headers.get("fencing-token"), value=value)
            return etag, value
        emit(client=self.name, step="read", status=status, problem=parsed(headers, data))
        return None, None

    def write_request(self, value, if_match):
        # The credential is the whole fence: resource, token and holder come from it, and only from it.
        headers = {"Fencing-Credential": self.lease["fence"]}
        if if_match is not None:
            headers["If-Match"] = if_match
        if self.store == "records":
            headers["Content-Type"] = "application/json"
            body = json.dumps(value).encode("utf-8")
        else:
            headers["Content-Type"] = "text/plain; charset=utf-8"
            body = value.encode("utf-8")
        return headers, body

    def answered(self, status, answer_headers, data, if_match):
        answer = parsed(answer_headers, data)
        emit(client=self.name, step="write", status=status, token=self.lease["token"], if_match=if_match, etag=answer_headers.get("etag"), answer=answer)
        return status, answer

    def write(self, value, if_match):
        headers, body = self.write_request(value, if_match)
        status, answer_headers, data = self.gw.request("PUT", key_path(self.store, self.key), headers, body)
        return self.answered(status, answer_headers, data, if_match)

    def start_write(self, value, if_match):
        """Sends the write's headers now; the returned function sends its body and reads the answer."""
        headers, body = self.write_request(value, if_match)
        finish = self.gw.start("PUT", key_path(self.store, self.key), headers, body)
        emit(client=self.name, step="write sent", token=self.lease["token"], if_match=if_match)
        return lambda: self.answered(*finish(), if_match)

    def release(self):
        status, _, _ = self.gw.post_json("/v1/leases/release", {"leaseId": self.lease["leaseId"]})
        emit(client=self.name, step="release", status=status)
        return status


def scenario(gateway, store, resource, key, ttl_ms):
    """Runs the article's scenario once; returns the list of what went wrong (empty: as it must)."""
    wrong = []

    def expect(what, actual, expected):
        if actual != expected:
            wrong.append("%s: expected %r, got %r" % (what, expected, actual))

    def value_of(writer):
        return {"article": key, "text": "written by " + writer} if store == "records" else "written by %s\n" % writer

    # Setup: a first version, so that both clients read one and can make their writes conditional on it.
    setup = Client("setup", gateway, store, resource, key, ttl_ms)
    expect("setup lease", setup.take_lease(), 201)
    expect("setup write", setup.write(value_of("setup"), None)[0], 200)
    expect("setup release", setup.release(), 204)

    client1 = Client("client1", gateway, store, resource, key, ttl_ms)
    client2 = Client("client2", gateway, store, resource, key, ttl_ms)

    expect("client1 lease", client1.take_lease(), 201)
    etag1, _ = client1.read()
    expect("client1 read", etag1 is not None, True)

    # The write leaves while the lease is valid; the network delays it longer than the lease.
    finish_write1 = client1.start_write(value_of("client1"), etag1)
    pause_ms = ttl_ms + 500
    emit(client="client1", step="pause", ms=pause_ms)
    time.sleep(pause_ms / 1000.0)

    expect("client2 lease", client2.take_lease(), 201)
    if client1.lease is None or client2.lease is None:
        return wrong
    expect("client2 token above client1's", int(client2.lease["token"]) > int(client1.lease["token"]), True)
    etag2, _ = client2.read()
    expect("client2 read the version client1 read", etag2, etag1)
    status2, answer2 = client2.write(value_of("client2"), etag2)
    expect("client2 write", status2, 200)

    emit(client="client1", step="wake")
    # The delayed write arrives: no clock could refuse it, the storage's ratchet does.
    status1, answer1 = finish_write1()
    expect("client1 delayed write (stale)", status1, 409)
    if isinstance(answer1, dict):
        expect("client1 problem type", answer1.get("type"), "/problems/stale-token")
        expect("client1 problem highest", answer1.get("highest"), client2.lease["token"])
    # Written again after the pause: the credential ended with the lease.
    status1, answer1 = client1.write(value_of("client1"), etag1)
    expect("client1 write after its lease (expired)", status1, 403)
    if isinstance(answer1, dict):
        expect("client1 problem type", answer1.get("type"), "/problems/credential-expired")

    final_etag, final_value = client2.read()
    expect("client2's data intact", final_value, value_of("client2"))
    if isinstance(answer2, dict):
        expect("version after the refused write", final_etag, '"%s"' % answer2.get("version"))
    expect("client2 release", client2.release(), 204)
    return wrong


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateway", required=True, help="the gateway's base URL, e.g. http://127.0.0.1:8080")
    parser.add_argument("--store", choices=("records", "objects"), required=True)
    parser.add_argument("--resource", required=True, help="the lock resource both clients lease")
    parser.add_argument("--key", required=True, help="the record's or object's key (the resource's API key must cover it)")
    parser.add_argument("--ttl-ms", type=int, default=1000, help="lease TTL; client 1 sleeps 500 ms longer")
    args = parser.parse_args()
    # From the environment, not the command line: a command line is visible to every user of the machine.
    api_key = os.environ.get("FENCED_GATEWAY_KEY")
    if not api_key:
        parser.error("set FENCED_GATEWAY_KEY to the API key")
    wrong = scenario(Gateway(args.gateway, api_key), args.store, args.resource, args.key, args.ttl_ms)
    emit(step="done", store=args.store, ok=not wrong, wrong=wrong)
    return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
