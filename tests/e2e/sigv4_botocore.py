"""Signs requests with botocore's SigV4 signer, the AWS SDK for Python's own, at a fixed time.

Reads a JSON array of cases on standard input, each
  {"method", "url", "headers": {name: value}, "body_hex", "access_key", "secret_key",
   "session_token" (or null), "region", "service", "time": "YYYYMMDDTHHMMSSZ"}
and writes a JSON array with, for each, the headers botocore adds:
  {"authorization", "x-amz-date", "x-amz-security-token" (or null)}.

The caller puts `X-Amz-Content-SHA256` in `headers` when it wants it signed, as replaygate
does; this script checks that it is the SHA-256 of the body before signing.
"""

import datetime
import hashlib
import json
import sys

import botocore.auth
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


def sign(case):
    body = bytes.fromhex(case["body_hex"])
    headers = dict(case["headers"])
    declared = {k.lower(): v for k, v in headers.items()}.get("x-amz-content-sha256")
    if declared is not None and declared != hashlib.sha256(body).hexdigest():
        raise SystemExit(f"x-amz-content-sha256 {declared} is not the body's SHA-256")
    fixed = datetime.datetime.strptime(case["time"], "%Y%m%dT%H%M%SZ")
    # botocore reads the signing time through this function; pin it for the case.
    botocore.auth.get_current_datetime = lambda *args, **kwargs: fixed
    request = AWSRequest(method=case["method"], url=case["url"], headers=headers, data=body)
    credentials = Credentials(case["access_key"], case["secret_key"], case["session_token"])
    SigV4Auth(credentials, case["service"], case["region"]).add_auth(request)
    return {
        "authorization": request.headers["Authorization"],
        "x-amz-date": request.headers["X-Amz-Date"],
        "x-amz-security-token": request.headers.get("X-Amz-Security-Token"),
    }


def main():
    cases = json.load(sys.stdin)
    json.dump([sign(case) for case in cases], sys.stdout)


if __name__ == "__main__":
    main()
