#!/usr/bin/env python3
"""tests/hosts/delay_proxy.py LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_MS

A TCP proxy that holds every byte DELAY_MS milliseconds in each direction
before passing it on: added latency without a throughput limit (bytes read
while earlier ones wait are queued, not blocked), for the network-fault
tests (tests/hosts/test_faults.sh). The kernel's netem qdisc would do this
in one line, but the kernels of our machines are built without it.

Prints "listening" once it accepts connections. Each accepted connection
gets its own connection to the target; either side closing closes both.
"""
import asyncio
import sys
import time


def split(hostport):
    host, port = hostport.rsplit(":", 1)
    return host, int(port)


async def pump(reader, writer, delay_s):
    """Copies reader to writer, each piece DELAY after it was read."""
    queue = asyncio.Queue()

    async def deliver():
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.ensure_future(deliver())
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            queue.put_nowait((time.monotonic() + delay_s, data))
    except (ConnectionError, OSError):
        pass
    queue.put_nowait((0, None))
    try:
        await sender
    except (ConnectionError, OSError):
        pass


async def serve(listen, target, delay_s):
    async def on_client(c_reader, c_writer):
        try:
            t_reader, t_writer = await asyncio.open_connection(*target)
        except OSError:
            c_writer.close()
            return
        await asyncio.gather(pump(c_reader, t_writer, delay_s), pump(t_reader, c_writer, delay_s))

    server = await asyncio.start_server(on_client, *listen)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: delay_proxy.py LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_MS")
    asyncio.run(serve(split(sys.argv[1]), split(sys.argv[2]), float(sys.argv[3]) / 1000))


if __name__ == "__main__":
    main()
