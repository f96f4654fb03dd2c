#!/usr/bin/env python3
"""The load benchmark's upstream: prints bench/load/upstream.conf for nginx, with its port, its
prefix (the run's directory for it) and its answer, bench/load/response.json.

    bench/load/upstream_conf.py PORT PREFIX > PREFIX/nginx.conf

Every id in the answer (the response's and each output item's) carries a tag nginx fills in for
each request: by default the request's own `$request_id` (32 random hex digits), so each answer
is a new response with new items, as a provider's are, and a ledger records a new entry each
time rather than rewriting one. So does each function call's `call_id` (`call_` then the tag
before response.json's own), as a provider gives each call its own: a growing session
(examples/session_load.rs) that replays many answers holds many calls, each answered once. A
request with the header `x-load-fixed-ids: 1` gets the ids of response.json as they are: the
answer the continuation bodies (`bodies.py --continue`) continue.
"""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
# What every id of response.json starts with after its prefix (`resp_`, `rs_`, `fc_`, `msg_`).
FIXED_TAG = "68af2c"


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    port, prefix = sys.argv[1:]
    answer = (HERE / "response.json").read_text().strip()
    if "'" in answer or "$" in answer:
        sys.exit("response.json must hold no ' and no $ (nginx reads it as a quoted string)")
    tagged = answer.replace("\\", "\\\\").replace(f'_{FIXED_TAG}', "_${answer_tag}")
    if tagged.count("${answer_tag}") < 2:
        sys.exit(f"response.json's ids no longer start with {FIXED_TAG}")
    tagged = tagged.replace('"call_id":"call_', '"call_id":"call_${call_tag}')
    if "${call_tag}" not in tagged:
        sys.exit("response.json's function call has no call_id starting with call_")
    conf = (HERE / "upstream.conf").read_text()
    conf = conf.replace("@PORT@", port).replace("@PREFIX@", prefix)
    conf = conf.replace("@FIXED_TAG@", FIXED_TAG).replace("@RESPONSE@", tagged)
    sys.stdout.write(conf)


if __name__ == "__main__":
    main()
