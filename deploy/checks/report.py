"""Collects the outcome of every expectation and prints one line each, then a summary."""

import sys


class Report:
    """Expectations grouped by topic; a missing tool is a skip, or a failure when strict."""

    def __init__(self, strict):
        self.strict = strict
        self.passed = 0
        self.failed = 0
        self.skipped = 0
        self.group = ""

    def section(self, name):
        self.group = name
        print(f"== {name}", flush=True)

    def expect(self, ok, what, detail=""):
        """Records one expectation; `detail` explains a failure."""
        if ok:
            self.passed += 1
            print(f"ok    {what}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL  {what}" + (f": {detail}" if detail else ""), flush=True)
        return bool(ok)

    def equal(self, actual, expected, what):
        return self.expect(actual == expected, what, f"got {actual!r}, want {expected!r}")

    def skip(self, what, why):
        """A check that cannot run here (a tool is missing). Strict runs (CI) fail instead."""
        if self.strict:
            self.expect(False, what, f"{why} (REPLAYGATE_DEPLOY_STRICT=1: every tool is required)")
        else:
            self.skipped += 1
            print(f"skip  {what}: {why}", flush=True)

    def summary(self):
        """Prints the closing line; returns the exit code."""
        print(f"deploy: {self.passed} passed, {self.failed} failed, {self.skipped} skipped")
        sys.stdout.flush()
        return 1 if self.failed else 0
