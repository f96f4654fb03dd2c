#!/usr/bin/env python3
"""Writes the load benchmark's "default" configuration: the repository's own proxy.toml as users
run it, with only what a benchmark on loopback must change.

    bench/load/default_config.py PROXY_TOML PORT ADMIN_PORT UPSTREAM_PORT STATE_DIR > OUT.toml

Everything of PROXY_TOML is kept as written ([gate], [log], [ledger], [state]'s backend, every
provider and route, the `openai` provider's item_profile), except:

- `[server] listen`: 127.0.0.1:PORT, the port the load generator posts to;
- `[admin] listen`: 127.0.0.1:ADMIN_PORT, so the run can read the ledger's counts in /metrics;
- `[providers.openai] base_url`: the local upstream (http://127.0.0.1:UPSTREAM_PORT/v1), and
  its `auth` "none" (the upstream wants no key; the repository's names an environment variable);
- `[state] path`: STATE_DIR, in the run's temporary directory, not beside the checkout.

Where the log lines go is not the file's business: replaygate writes them to its standard
output, which bench/load/run sends to a file. The keys are rewritten in place, line by line, so
the output reads like the file it came from; then both are parsed (tomllib) and compared: a key
other than those above that differs, or one of them that did not take, is an error. One line on
standard error says what the benchmark runs: the ledger, the state backend, the log level and
the openai item profile, as the repository's file has them.
"""

import copy
import json
import re
import sys
import tomllib
from pathlib import Path

HEADER = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")
ARRAY_HEADER = re.compile(r"^\s*\[\[([^\[\]]+)\]\]\s*(#.*)?$")
KEY = re.compile(r"^\s*([A-Za-z0-9_-]+)\s*=")


def toml_string(text):
    """A TOML basic string (its escapes are JSON's for what a path or a URL holds)."""
    return json.dumps(text)


def rewrites(port, admin_port, upstream_port, state_dir):
    """(table, key) -> the new value, as TOML."""
    return {
        ("server", "listen"): toml_string(f"127.0.0.1:{port}"),
        ("admin", "listen"): toml_string(f"127.0.0.1:{admin_port}"),
        ("providers.openai", "base_url"): toml_string(f"http://127.0.0.1:{upstream_port}/v1"),
        ("providers.openai", "auth"): toml_string("none"),
        ("state", "path"): toml_string(state_dir),
    }


def rewrite(text, changes):
    """`text` with each (table, key) of `changes` set: its line replaced where the table has it
    (a one-line value), else a line added under the table's header. A table the text lacks is
    added at the end."""
    lines = text.splitlines()
    out, table, seen, headers = [], "", set(), {}
    for line in lines:
        array = ARRAY_HEADER.match(line)
        header = HEADER.match(line)
        if array:
            table = array.group(1).strip() + "[]"
        elif header:
            table = header.group(1).strip()
            headers[table] = len(out)
        else:
            key = KEY.match(line)
            if key and (table, key.group(1)) in changes:
                name = key.group(1)
                seen.add((table, name))
                out.append(f"{name} = {changes[(table, name)]}")
                continue
        out.append(line)
    # Keys the file leaves out: under their table's header, from the last table up so the
    # recorded positions stay right; tables it lacks, at the end.
    missing = [(t, k) for (t, k) in changes if (t, k) not in seen]
    for t, k in sorted(missing, key=lambda tk: -headers.get(tk[0], -1)):
        if t in headers:
            out.insert(headers[t] + 1, f"{k} = {changes[(t, k)]}")
    for t in dict.fromkeys(t for t, _ in missing if t not in headers):
        out += ["", f"[{t}]"] + [f"{k} = {changes[(t2, k)]}" for t2, k in missing if t2 == t]
    return "\n".join(out) + "\n"


def without(config, changes):
    """`config` (parsed) without the keys of `changes` (and a table left empty by that)."""
    config = copy.deepcopy(config)
    for table, key in changes:
        *parents, last = table.split(".")
        node = config
        for part in parents:
            node = node.get(part, {})
        node.get(last, {}).pop(key, None)
        if node.get(last) == {}:
            del node[last]
    return config


def lookup(config, table, key):
    node = config
    for part in table.split("."):
        node = node.get(part, {})
    return node.get(key)


def derive(text, port, admin_port, upstream_port, state_dir):
    """The benchmark's configuration from proxy.toml's `text`; raises ValueError when the
    result differs from it in more than the rewritten keys."""
    changes = rewrites(port, admin_port, upstream_port, state_dir)
    if "openai" not in tomllib.loads(text).get("providers", {}):
        raise ValueError("proxy.toml has no [providers.openai]")
    out = rewrite(text, changes)
    before, after = tomllib.loads(text), tomllib.loads(out)
    for (table, key), value in changes.items():
        if lookup(after, table, key) != tomllib.loads(f"v = {value}")["v"]:
            raise ValueError(f"[{table}] {key} did not take")
    if without(before, changes) != without(after, changes):
        raise ValueError("the rewrite changed more than the benchmark's keys")
    return out


def summary(text):
    """What the benchmark runs, as proxy.toml says (a key it leaves out: the built-in default,
    which the file's header says it writes down)."""
    config = tomllib.loads(text)
    ledger = config.get("ledger", {}).get("enabled", True)
    state = config.get("state", {}).get("backend", "embedded")
    log = config.get("log", {})
    profile = config["providers"]["openai"].get("item_profile", "none")
    return (f"ledger {'on' if ledger else 'off'}, state {state}, log level "
            f"{log.get('level', 'info')} ({log.get('format', 'text')}), openai item profile "
            f"{json.dumps(profile)}")


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    source, port, admin_port, upstream_port, state_dir = sys.argv[1:]
    text = Path(source).read_text()
    try:
        out = derive(text, int(port), int(admin_port), int(upstream_port), state_dir)
    except ValueError as error:
        sys.exit(f"default_config.py: {source}: {error}")
    sys.stdout.write(out)
    print(f"default configuration from {source}: {summary(text)}", file=sys.stderr)


if __name__ == "__main__":
    main()
