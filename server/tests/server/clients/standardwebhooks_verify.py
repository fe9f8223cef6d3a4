"""Verifies one webhook delivery with the Standard Webhooks reference
library (PyPI: standardwebhooks), which nobody here wrote.

Usage: standardwebhooks_verify.py SECRET HEADERS_JSON BODY_FILE
Prints the verified payload as JSON; exits non-zero if verification fails.
"""

import json
import sys

from standardwebhooks.webhooks import Webhook


def main() -> int:
    secret, headers_json, body_file = sys.argv[1:4]
    with open(body_file, "rb") as body:
        payload = body.read()
    headers = json.loads(headers_json)
    verified = Webhook(secret).verify(payload, headers)
    print(json.dumps(verified))
    return 0


if __name__ == "__main__":
    sys.exit(main())
