"""One token refresh for many callers: only one runs fetch(), all get its result."""
import concurrent.futures as cf

import coord

calls = []


def fetch(flight):
    calls.append(flight.fence)           # the owner's fence; flight.aborted is an Event
    return b"token-abc"


with coord.Client() as c:
    with cf.ThreadPoolExecutor(4) as pool:
        clients = [coord.Client() for _ in range(4)]
        results = list(pool.map(lambda cl: cl.once("oauth-token", fetch, ttl=10.0, keep=60.0),
                                clients))
        for cl in clients:
            cl.close()
    print(results[0], "runs:", len(calls))
    rec = c.records.get("oauth-token")
    print("record:", rec.status, rec.result)
    print("purged:", c.records.purge("oauth-token"))
