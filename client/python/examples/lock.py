"""Run a job under a lock; another process waiting gets Timeout, never the block."""
import coord

with coord.Client(client="lock-example") as c:
    with c.lock("nightly-build", timeout=5.0, lease=30.0) as lk:
        print("holding nightly-build, fencing token", lk.token > 0)
        lk.check()                       # raises coord.LockLost if stolen/expired
    busy = c.lock("nightly-build")
    busy.acquire()
    with coord.Client() as other:
        try:
            with other.lock("nightly-build", timeout=0.1):
                print("never printed")
        except coord.Timeout:
            print("busy: Timeout raised, block skipped")
        print("try_lock:", other.try_lock("nightly-build"))
    busy.release()
