"""Schemathesis hooks (loaded through SCHEMATHESIS_HOOKS by .ci/schemathesis/run):
a webhook receiver on loopback, so that registering a webhook can succeed.

Registering or re-pointing a webhook makes the service call its URL first
and refuse (401) a URL that does not answer 2xx (COMPAT.md). The URLs
Schemathesis generates are the schema's example and random URIs, whose hosts
do not resolve in the run's network namespace: without this, every
registration was refused, none was ever stored, and the operations on one
webhook (GET, PUT, DELETE /integrations/webhooks/{uuid}) only ever met 404.

So every well-formed http(s) URL in a registration's or update's body is
pointed at a receiver started here, on a path of its own (one URL per
account and event type is allowed), and the service is started with
--webhooks-allow-private. Malformed URLs are left as generated, so their
refusal is still tested. Before each registration, the demo account is kept
under the service's limit of webhooks by deleting its oldest ones: what
Schemathesis sends as valid data must be accepted, and a full account would
refuse it.
"""

import itertools
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests
import schemathesis

WEBHOOKS = "/integrations/webhooks"
WEBHOOK = "/integrations/webhooks/{uuid}"
# The service's MAX_WEBHOOKS_PER_ACCOUNT is 20; room is kept for the
# stateful phase's registrations between two checks.
KEEP_AT_MOST = 15
# Only URLs that are valid URIs (RFC 3986's characters) are replaced: one
# that Schemathesis made invalid on purpose stays, and must be refused.
WELL_FORMED = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~!$&'()*+,;=:@/%?#-]*)?$")


class Receiver(BaseHTTPRequestHandler):
    """Answers every validation call and delivery with 204."""

    def do_POST(self):  # noqa: N802 (the name http.server calls)
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


RECEIVER = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
threading.Thread(target=RECEIVER.serve_forever, daemon=True).start()
RECEIVER_BASE = f"http://127.0.0.1:{RECEIVER.server_address[1]}/hooks"
NEXT_PATH = itertools.count()


def keep_room_for_one_more(base_url):
    """Deletes the demo account's oldest webhooks beyond KEEP_AT_MOST - 1."""
    headers = {"Authorization": f"Bearer {os.environ['CG_ACCESS_TOKEN']}"}
    listed = requests.get(f"{base_url}{WEBHOOKS}", headers=headers, timeout=10)
    listed.raise_for_status()
    webhooks = listed.json()["webhooks"]  # oldest first
    for webhook in webhooks[: max(0, len(webhooks) - (KEEP_AT_MOST - 1))]:
        requests.delete(f"{base_url}{WEBHOOKS}/{webhook['uuid']}", headers=headers, timeout=10)


@schemathesis.hook
def before_call(context, case, **kwargs):
    operation = case.operation
    if (operation.method.upper(), operation.path) not in {("POST", WEBHOOKS), ("PUT", WEBHOOK)}:
        return
    body = case.body
    if not isinstance(body, dict) or not isinstance(body.get("url"), str):
        return
    if not WELL_FORMED.match(body["url"]):
        return
    body["url"] = f"{RECEIVER_BASE}/{next(NEXT_PATH)}"
    if operation.method.upper() == "POST":
        keep_room_for_one_more(os.environ["CG_BASE_URL"])
