"""Authlib's own introspection request, unmodified, against the service.

Usage: authlib_introspect.py INTROSPECTION_URL CLIENT_ID CLIENT_SECRET AUTH TOKEN [HINT]

AUTH is Authlib's client authentication method: client_secret_basic or
client_secret_post. Prints the status and the JSON body Authlib received,
as one JSON object.
"""

import json
import sys

from authlib.integrations.requests_client import OAuth2Session


def main() -> None:
    url, client_id, client_secret, auth, token, *rest = sys.argv[1:]
    session = OAuth2Session(
        client_id,
        client_secret,
        token_endpoint_auth_method=auth,
    )
    hint = rest[0] if rest else None
    response = session.introspect_token(url, token=token, token_type_hint=hint)
    print(json.dumps({"status": response.status_code, "body": response.json()}))


if __name__ == "__main__":
    main()
