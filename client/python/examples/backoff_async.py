"""asyncio: a rate-limited upstream (RetryAfter → Backoff for everyone
else), the kill switch, and running locally when there is no broker."""
import asyncio

import coord


async def call_upstream(flight):
    raise coord.RetryAfter(30, "429 Too Many Requests")


async def main():
    async with coord.aio.Client() as c:
        try:
            await c.once("quota", call_upstream)
        except coord.RetryAfter as e:
            print("owner: upstream said retry after", e.retry_after)
        try:
            await c.once("quota", call_upstream)        # does not call upstream
        except coord.Backoff as e:
            print(f"joiner: backoff, {e.retry_after:.0f} s left")

        await c.flight.disable("debug/")                # no dedup for debug/...
        r = await c.once("debug/x", lambda f: _value(b"fresh"))
        print("kill switch:", r.source, await c.flight.disabled())
        await c.flight.enable("debug/")

    nobody = coord.aio.Client("/nonexistent/coord.sock", autostart=False)
    r = await nobody.once("k", lambda f: _value(b"computed here"), fallback="run")
    print("fallback:", bytes(r), r.source)


async def _value(v):
    return v

asyncio.run(main())
