"""Schemathesis hooks (loaded through SCHEMATHESIS_HOOKS by .ci/schemathesis/run):
a webhook receiver on loopback, so that registering a webhook can succeed,
and live grants, so that the token endpoint can issue tokens.

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

The token endpoint, likewise, could only refuse what Schemathesis sends as
valid data: a code or refresh token it generates was never issued, and
client credentials it generates belong to no app. So, in the cases generated
as valid, the grant is made live: the code is one the demo account has just
approved (issued with the PKCE challenge of the case's verifier, when it
sends one that is well formed, and a malformed verifier is dropped), the
refresh token one just issued, and client credentials and redirect URI sent
in the body the demo app's. Whatever else was generated stays, so the
checks now see the endpoint's answers to real grants. Cases generated as
invalid, and valid ones whose grant conflicts (a code and a refresh token
at once), are left alone.
"""

import base64
import hashlib
import itertools
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests
import schemathesis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokens import Dialog  # noqa: E402 (beside this file, not installed)

WEBHOOKS = "/integrations/webhooks"
WEBHOOK = "/integrations/webhooks/{uuid}"
TOKEN = "/auth/token"
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


def point_webhook_at_receiver(case):
    """Points a valid registration's or update's URL at the receiver."""
    body = case.body
    if not isinstance(body, dict) or not isinstance(body.get("url"), str):
        return
    if not WELL_FORMED.match(body["url"]):
        return
    body["url"] = f"{RECEIVER_BASE}/{next(NEXT_PATH)}"
    if case.operation.method.upper() == "POST":
        keep_room_for_one_more(os.environ["CG_BASE_URL"])


DIALOG = None
# RFC 7636 section 4.1: 43 to 128 characters of the unreserved set.
PKCE_VERIFIER = re.compile(r"^[A-Za-z0-9._~-]{43,128}$")


def dialog():
    """The demo account's dialog session, signed in at its first use."""
    global DIALOG
    if DIALOG is None:
        DIALOG = Dialog(os.environ["CG_BASE_URL"], os.environ["CG_DEMO_CREDENTIALS"])
    return DIALOG


def sent(value):
    """What the service counts as sent: a non-empty string (RFC 6749
    section 3.1; JSON's null is absent)."""
    return isinstance(value, str) and value != ""


def make_grant_live(case):
    """Gives a token request generated as valid a grant the service issued."""
    meta = case.meta
    if meta is not None and meta.generation.mode.is_negative:
        return
    body = case.body if isinstance(case.body, dict) else None
    params = body if body is not None else {}
    query = case.query if isinstance(case.query, dict) else {}
    grant_type = params.get("grant_type")
    has_refresh = sent(params.get("refresh_token"))
    wants_code = grant_type == "authorization_code" or (not sent(grant_type) and not has_refresh)
    wants_refresh = grant_type == "refresh_token" or (not sent(grant_type) and has_refresh)
    if wants_code and not has_refresh:
        verifier = params.get("code_verifier")
        challenge = None
        if sent(verifier) and PKCE_VERIFIER.match(verifier):
            digest = hashlib.sha256(verifier.encode("ascii")).digest()
            challenge = base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
        elif sent(verifier):
            del params["code_verifier"]
        code = dialog().code(challenge)
        if sent(query.get("code")):
            query["code"] = code
        if sent(params.get("code")) or not sent(query.get("code")):
            if body is None:
                case.query = {**query, "code": code}
            else:
                body["code"] = code
        if sent(params.get("redirect_uri")):
            params["redirect_uri"] = dialog().demo["redirect_uri"]
    elif wants_refresh and not sent(params.get("code")) and body is not None:
        body["refresh_token"] = dialog().tokens()["refresh_token"]
    else:
        # Refused as it must be: a code and a refresh token at once, a
        # grant type the service does not support, or a refresh token
        # anywhere but in the body.
        return
    if sent(params.get("client_id")):
        params["client_id"] = dialog().demo["client_id"]
    if sent(params.get("client_secret")):
        params["client_secret"] = dialog().demo["client_secret"]


@schemathesis.hook
def before_call(context, case, **kwargs):
    operation = (case.operation.method.upper(), case.operation.path)
    if operation in {("POST", WEBHOOKS), ("PUT", WEBHOOK)}:
        point_webhook_at_receiver(case)
    elif operation == ("POST", TOKEN):
        make_grant_live(case)
