#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora from tests/fixtures/seed-vectors.json.

gate_check seeds are one byte choosing the provider (0 bedrock, 1 openai) and the body;
proxy_handle seeds are one byte choosing POST, a path, headers, a blank line and the body.
The seeds are rewritten on every run (fuzz/seeds/ is not committed)."""

import json
import pathlib

FUZZ = pathlib.Path(__file__).resolve().parent
VECTORS = FUZZ.parent / "tests" / "fixtures" / "seed-vectors.json"
PROVIDERS = {"bedrock": 0, "openai": 1}
PATHS = ["/v1/responses", "/bedrock/v1/responses", "/responses/compact"]


def main() -> None:
    cases = json.loads(VECTORS.read_text())["cases"]
    gate = FUZZ / "seeds" / "gate_check"
    proxy = FUZZ / "seeds" / "proxy_handle"
    for folder in (gate, proxy):
        folder.mkdir(parents=True, exist_ok=True)
    for number, case in enumerate(cases):
        body = json.dumps(case["body"], separators=(",", ":")).encode()
        selector = PROVIDERS.get(case.get("provider"), 2)
        (gate / f"{number:03}-{case['name']}").write_bytes(bytes([selector]) + body)
        path = PATHS[number % len(PATHS)]
        head = f"{path}\ncontent-type: application/json\n\n".encode()
        (proxy / f"{number:03}-{case['name']}").write_bytes(b"\x00" + head + body)
    print(f"{len(cases)} seeds each in {gate.relative_to(FUZZ.parent)} and {proxy.relative_to(FUZZ.parent)}")


if __name__ == "__main__":
    main()
