"""tab.py - the demo's "tab" in Python (client/python), run by demo.py
beside the C, coordctl and Node.js tabs; the same two jobs as tab.c:

    tab.py refresh NAME BASE       single-flight GET BASE/session with
                                   stale-while-revalidate; prints "got VALUE (SOURCE)"
    tab.py outbox NAME BASE OP...  lead the workstream "outbox": reconcile
                                   leader.pending by op id, then claim, send, commit

Results are shared as coordctl's result format 1 (b"\\x01\\x00" + stdout),
so every tab reads every other tab's.  Exit status: 0 done, 1 an error, 3
leadership lost (a late commit FENCED)."""
import os
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "client", "python", "src"))
import coord  # noqa: E402

LEASE = 2.0           # seconds: short, so that a frozen leader is fenced soon
MAX_AGE = 1.0         # a session is fresh this long ...
STALE = 60.0          # ... then served stale this long while one tab revalidates


def http(method, url):
    with urllib.request.urlopen(urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)) as r:
        return r.read().decode()


def refresh(name, base):
    revalidated = []

    def fetch(flight):
        revalidated.append(flight.stale is not None)   # the stale copy it replaces
        return b"\x01\x00" + http("GET", f"{base}/session?tab={name}").encode() + b"\n"

    with coord.Client(client=name) as c:
        r = c.once("session", fetch, keep=MAX_AGE, stale=STALE)
    how = {"owner": "owner, fetched it", "live": "live, from the owner",
           "stale": "stale, served at once", "record": "record"}.get(r.source, r.source)
    if r.source == "owner" and revalidated == [True]:
        how = "owner, revalidated it"
    return bytes(r)[2:].decode().strip(), how


def outbox(name, base, ops):
    c = coord.Client(client=name)
    lead = c.leader("outbox", lease=LEASE)
    lead.campaign()
    print(f"leading the outbox as generation {lead.generation}", flush=True)
    done, skipped = set(), []

    def drain(op):
        if op in done:
            return
        done.add(op)
        claim = lead.claim(op)
        if not claim.claimed:                      # applied or abandoned before
            skipped.append(op)
            return
        if claim.reconcile:
            if http("GET", f"{base}/sent?op={op}") == "applied":
                print(f"{op}: claimed by generation {claim.previous_generation} and never "
                      "committed; the backend has it: commit, do not resend", flush=True)
                lead.commit(op)
                return
            print(f"{op}: claimed by generation {claim.previous_generation}; the backend "
                  "never got it: send it", flush=True)
        answer = http("POST", f"{base}/send?op={op}&tab={name}&gen={lead.generation}")
        try:
            lead.commit(op)
        except coord.Fenced:
            print(f"late commit of {op} refused: FENCED (generation {lead.generation} "
                  "is not the live one)", flush=True)
            raise
        print(f"{op}: sent ({answer}), committed", flush=True)

    try:
        for p in lead.pending():                   # oldest claim first
            print(f"pending from an earlier leader: {p.op_id}", flush=True)
            drain(p.op_id)
        for op in ops:
            drain(op)
    except coord.Fenced:
        os._exit(3)                                # the term is over: nothing to resign
    if skipped:
        print("settled by earlier leaders, skipped: " + " ".join(skipped))
    lead.resign()
    print("outbox drained, resigned")
    c.close()


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "refresh":
        value, how = refresh(sys.argv[2], sys.argv[3])
        print(f"got {value} ({how})")
    elif len(sys.argv) >= 4 and sys.argv[1] == "outbox":
        outbox(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        print("usage: tab.py refresh NAME BASE | outbox NAME BASE OP...", file=sys.stderr)
        sys.exit(2)


main()
