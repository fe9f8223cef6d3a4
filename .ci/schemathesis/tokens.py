"""Signs in as the demo account of a running service, approves the demo
app, and prints a fresh access token: what Schemathesis authenticates its
bearer-token requests with.

Usage: tokens.py BASE_URL DEMO_CREDENTIALS_JSON
"""

import json
import re
import sys
from urllib.parse import parse_qs, urlencode, urlparse

import requests

CSRF = re.compile(r'name="csrf"\s+value="([^"]+)"')


def hidden_csrf(html: str) -> str:
    found = CSRF.search(html)
    if not found:
        raise SystemExit("no CSRF field on the page:\n" + html[:2000])
    return found.group(1)


def main() -> int:
    base, credentials = sys.argv[1], sys.argv[2]
    with open(credentials, encoding="utf-8") as file:
        demo = json.load(file)
    query = urlencode({"client_id": demo["client_id"], "redirect_uri": demo["redirect_uri"]})
    session = requests.Session()
    page = session.get(f"{base}/auth/dialog?{query}", timeout=10)
    page.raise_for_status()
    signed_in = session.post(
        f"{base}/auth/dialog",
        data={
            "action": "login",
            "query": query,
            "csrf": hidden_csrf(page.text),
            "email": demo["email"],
            "password": demo["password"],
        },
        allow_redirects=False,
        timeout=30,
    )
    if signed_in.status_code != 303:
        raise SystemExit(f"sign-in answered {signed_in.status_code}: {signed_in.text[:500]}")
    consent = session.get(f"{base}/auth/dialog?{query}", timeout=10)
    consent.raise_for_status()
    decided = session.post(
        f"{base}/auth/dialog",
        data={
            "action": "consent",
            "query": query,
            "csrf": hidden_csrf(consent.text),
            "decision": "allow",
        },
        allow_redirects=False,
        timeout=10,
    )
    if decided.status_code != 302:
        raise SystemExit(f"consent answered {decided.status_code}: {decided.text[:500]}")
    code = parse_qs(urlparse(decided.headers["location"]).query)["code"][0]
    tokens = requests.post(
        f"{base}/auth/token",
        json={
            "grant_type": "authorization_code",
            "client_id": demo["client_id"],
            "client_secret": demo["client_secret"],
            "code": code,
            "redirect_uri": demo["redirect_uri"],
        },
        timeout=10,
    )
    tokens.raise_for_status()
    print(tokens.json()["access_token"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
