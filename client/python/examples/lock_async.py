"""The same with asyncio; a cancelled waiter sends the protocol's cancel."""
import asyncio

import coord


async def main():
    async with coord.aio.Client() as c, coord.aio.Client() as other:
        async with c.lock("cache-dir", lease=10.0) as lk:
            waiter = asyncio.create_task(other.lock("cache-dir").acquire())
            await asyncio.sleep(0.05)
            waiter.cancel()                   # sends cancel; nothing stays queued
            try:
                await waiter
            except asyncio.CancelledError:
                print("waiter cancelled, pending:", len((await c.locks()).pending))
            print("held by us:", lk.held)


asyncio.run(main())
