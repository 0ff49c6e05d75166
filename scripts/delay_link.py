#!/usr/bin/env python3
"""A TCP relay that delays every byte by DELAY_MS each way, in order: a stand-in for netem
where the kernel has no netem qdisc. Each connection to LISTEN is joined to TARGET; what
is read on one side is written to the other DELAY_MS after it was read.

usage: scripts/delay_link.py LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_MS
"""
import asyncio
import sys
import time


async def pump(reader, writer, delay):
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

    sender = asyncio.create_task(deliver())
    try:
        while data := await reader.read(1 << 16):
            queue.put_nowait((time.monotonic() + delay, data))
    except ConnectionError:
        pass
    queue.put_nowait((0, None))
    await sender


async def main(listen, target, delay):
    (lh, lp), (th, tp) = listen.rsplit(":", 1), target.rsplit(":", 1)

    async def join(r1, w1):
        try:
            r2, w2 = await asyncio.open_connection(th, int(tp))
        except OSError:
            w1.close()
            return
        for w in (w1, w2):
            sock = w.get_extra_info("socket")
            sock.setsockopt(__import__("socket").IPPROTO_TCP, __import__("socket").TCP_NODELAY, 1)
        await asyncio.gather(pump(r1, w2, delay), pump(r2, w1, delay), return_exceptions=True)

    server = await asyncio.start_server(join, lh, int(lp))
    print(f"delaying {listen} -> {target} by {delay * 1e3:.1f} ms each way", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3]) / 1e3))
