#!/usr/bin/env python3
"""Prints N free TCP ports on 127.0.0.1, space-separated: `ports.py N`."""

import socket
import sys

sockets = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    sockets.append(s)
print(" ".join(str(s.getsockname()[1]) for s in sockets))
