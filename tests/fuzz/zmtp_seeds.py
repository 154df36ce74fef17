#!/usr/bin/env python3
"""Writes the seeds of fuzz_zmtp (tests/fuzz/corpus/zmtp): byte 0 the side
(0 NULL router, 1 CURVE router, 2 NULL dealer), then what a peer sends.

    tests/fuzz/zmtp_seeds.py tests/fuzz/corpus/zmtp
"""
import os
import struct
import sys


def greeting(mech, as_server):
    g = bytearray(64)
    g[0], g[9], g[10], g[11] = 0xFF, 0x7F, 3, 0
    g[12:12 + len(mech)] = mech
    g[32] = 1 if as_server else 0
    return bytes(g)


def frame(body, flags=0):
    if len(body) > 255:
        return bytes([flags | 2]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


def prop(name, value):
    return bytes([len(name)]) + name + struct.pack(">I", len(value)) + value


def ready(socket_type, identity=b""):
    return frame(b"\x05READY" + prop(b"Socket-Type", socket_type) + prop(b"Identity", identity), 4)


def main(out):
    os.makedirs(out, exist_ok=True)
    seeds = {
        "router_null_messages": b"\0" + greeting(b"NULL", False) + ready(b"DEALER") + frame(b"hello")
        + frame(bytes(range(256)) * 3) + frame(b"a", 1) + frame(b"bb") + frame(b"\x04PING\x00\x0actx", 4),
        "router_null_identity": b"\0" + greeting(b"NULL", False) + ready(b"DEALER", b"worker-7") + frame(b"x"),
        "router_null_many_frames": b"\0" + greeting(b"NULL", False) + ready(b"REQ") + b"".join(frame(b"p", 1) for _ in range(8)) + frame(b"end"),
        "router_bad_type": b"\0" + greeting(b"NULL", False) + ready(b"PUB") + frame(b"x"),
        "router_short_greeting": b"\0" + greeting(b"NULL", False)[:30],
        "router_zmtp2": b"\0" + bytes([0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 1, 5]),
        "router_huge_frame": b"\0" + greeting(b"NULL", False) + ready(b"DEALER") + bytes([2]) + struct.pack(">Q", 1 << 40),
        "router_curve_hello": b"\1" + greeting(b"CURVE", False) + frame(b"\x05HELLO\x01\x00" + bytes(192), 4),
        "router_curve_plain_peer": b"\1" + greeting(b"NULL", False) + ready(b"DEALER"),
        "dealer_null": b"\2" + greeting(b"NULL", True) + ready(b"ROUTER") + frame(b"welcome") + frame(b"\x05ERROR\x03400", 4),
        "dealer_error": b"\2" + greeting(b"NULL", True) + frame(b"\x05ERROR\x03400", 4),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


main(sys.argv[1] if len(sys.argv) > 1 else "tests/fuzz/corpus/zmtp")
