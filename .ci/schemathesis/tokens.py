"""The demo account of a running service, signed in on the consent dialog:
codes and tokens for Schemathesis, as a user approving the demo app would
get them.

Run as a script, it prints a fresh access token, what Schemathesis
authenticates its bearer-token requests with. hooks.py imports `Dialog` to
give the token endpoint codes and refresh tokens the service really issued.

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


class Dialog:
    """A browser session of the demo account on the authorization dialog,
    signed in once; each `code()` is one more approval of the demo app."""

    def __init__(self, base: str, credentials_path: str):
        with open(credentials_path, encoding="utf-8") as file:
            self.demo = json.load(file)
        self.base = base
        self.session = requests.Session()
        query = self._query(None)
        self._decide(
            {
                "action": "login",
                "query": query,
                "csrf": self._csrf(query),
                "email": self.demo["email"],
                "password": self.demo["password"],
            },
            303,
        )

    def _csrf(self, query):
        """The CSRF token of the dialog's page for `query` (sign-in or consent)."""
        page = self.session.get(f"{self.base}/auth/dialog?{query}", timeout=10)
        page.raise_for_status()
        return hidden_csrf(page.text)

    def _decide(self, form, expected):
        """Posts `form` to the dialog; its redirect, which must be `expected`."""
        answer = self.session.post(
            f"{self.base}/auth/dialog", data=form, allow_redirects=False, timeout=30
        )
        if answer.status_code != expected:
            raise SystemExit(f"{form['action']} answered {answer.status_code}: {answer.text[:500]}")
        return answer

    def _query(self, challenge):
        params = {"client_id": self.demo["client_id"], "redirect_uri": self.demo["redirect_uri"]}
        if challenge is not None:
            params.update(code_challenge=challenge, code_challenge_method="S256")
        return urlencode(params)

    def code(self, challenge=None) -> str:
        """A new authorization code for the demo app, issued with the PKCE
        S256 `challenge` when one is given."""
        query = self._query(challenge)
        decided = self._decide(
            {
                "action": "consent",
                "query": query,
                "csrf": self._csrf(query),
                "decision": "allow",
            },
            302,
        )
        return parse_qs(urlparse(decided.headers["location"]).query)["code"][0]

    def tokens(self) -> dict:
        """A new grant's tokens: a code exchanged as the demo app."""
        issued = requests.post(
            f"{self.base}/auth/token",
            json={
                "grant_type": "authorization_code",
                "client_id": self.demo["client_id"],
                "client_secret": self.demo["client_secret"],
                "code": self.code(),
                "redirect_uri": self.demo["redirect_uri"],
            },
            timeout=10,
        )
        issued.raise_for_status()
        return issued.json()


def main() -> int:
    print(Dialog(sys.argv[1], sys.argv[2]).tokens()["access_token"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
