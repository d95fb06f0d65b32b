"""Who reads the blocking client's socket (client.py, ``_Conn``'s comment):
a caller waiting for its reply reads it itself while nobody else reads,
other callers then wait for it, and the reader thread reads while no call
is in flight.  Each test fails if one of those roles drops a frame or
leaves nobody reading: many threads on one client while one of its locks
is stolen (and another stolen while nobody calls), a reader whose
deadline passes while others wait behind it, a reader whose deadline
passes in the middle of a frame, a reader interrupted (SIGINT) while it
waits.  ``callers_read`` keeps the reader thread from taking the socket
over for being idle, so that the callers read in those tests.
"""
import os
import signal
import threading
import time

import pytest

import coord
from conftest import wait_until
from fakebroker import FakeBroker, frame


@pytest.fixture
def callers_read(monkeypatch):
    monkeypatch.setattr(coord.client, "_IDLE", 5.0)


def test_threads_cycle_locks_while_one_is_stolen(broker):
    with broker.client() as c, broker.client() as d:
        victim = c.lock("victim")
        assert victim.acquire()
        stop = threading.Event()
        errors = []
        cycles = [0] * 8

        def worker(i):
            try:
                while not stop.is_set():
                    # own names (callers reading their own replies), a shared
                    # one (grants that wait: their callers read for the rest)
                    with c.lock(f"own-{i}"):
                        pass
                    with c.lock("shared", timeout=10):
                        pass
                    c.ping()
                    cycles[i] += 1
            except BaseException as e:          # reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        wait_until(lambda: min(cycles) >= 5, 20, "every thread cycling")
        stolen = d.lock("victim", steal=True)
        assert stolen.acquire()
        # read by whichever thread reads at that moment
        assert victim.lost.wait(10) and victim.lost_reason == "stolen"
        before = list(cycles)
        wait_until(lambda: all(n > b for n, b in zip(cycles, before)), 20,
                   "every thread cycling after the steal")
        stop.set()
        for t in threads:
            t.join(20)
            assert not t.is_alive(), "a caller never got its reply"
        assert errors == []
        stolen.release()

        # nobody calls c now: its reader thread must hear of the steal
        idle = c.lock("idle")
        assert idle.acquire()
        time.sleep(0.1)
        with d.lock("idle", steal=True):
            assert idle.lost.wait(10) and idle.lost_reason == "stolen"
        assert c.connected
        # and callers read their own replies again after it
        leads = c._conn._leads
        for _ in range(20):
            with c.lock("again"):
                pass
        assert c._conn._leads > leads
        assert d.locks().held == []


def test_a_reader_whose_deadline_passes_hands_reading_on(broker, callers_read):
    with broker.client(request_timeout=0.3) as c, broker.client() as d:
        c.ping()
        os.kill(broker.proc.pid, signal.SIGSTOP)
        try:
            out = {}

            def reader():
                try:
                    c.ping()                # reads for both, gives up after 0.3 s
                except coord.Timeout as e:
                    out["a"] = e

            def follower():
                lk = c.lock("x", timeout=10)
                out["b"] = lk.acquire()     # waits behind the reader
                lk.release()

            leads = c._conn._leads
            a = threading.Thread(target=reader)
            a.start()
            wait_until(lambda: c._conn._leads > leads, what="the caller reading")
            b = threading.Thread(target=follower)
            b.start()
            a.join(10)
            assert isinstance(out.get("a"), coord.Timeout)
        finally:
            os.kill(broker.proc.pid, signal.SIGCONT)
        # nobody calls: the reader thread, woken for the follower, reads
        b.join(3)
        assert out.get("b") is True, "the call behind the reader never got its reply"
        assert c.ping() >= 0                # the late ping reply completed nothing
        with c.lock("x"):
            assert d.locks().held[0].name == "x"


def test_a_deadline_in_the_middle_of_a_frame_keeps_the_frame(callers_read):
    resume = threading.Event()

    def handler(peer):
        peer.hello()
        req = peer.request()
        whole = frame(peer.reply(req, pong=1))
        peer.send(whole[:7])                # the length and part of the body
        resume.wait(10)
        peer.send(whole[7:])
        peer.serve()

    with FakeBroker(handler) as fb:
        with coord.Client(fb.socket, autostart=False, request_timeout=0.3) as c:
            with pytest.raises(coord.Timeout):
                c.ping()
            resume.set()
            # the first reply's rest comes first: the stream is still whole
            assert c.ping() >= 0
            assert c.call("ping")["ok"] is True
            assert c.connected


def test_a_reader_interrupted_while_it_waits(broker, callers_read):
    with broker.client() as c, broker.client() as d:
        held = d.lock("a")
        assert held.acquire()
        lk = c.lock("a")
        main = threading.main_thread().ident
        t = threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT))
        t.start()
        leads = c._conn._leads
        try:
            with pytest.raises(KeyboardInterrupt):
                lk.acquire()                # the main thread reads, in poll
        finally:
            t.join()
        assert c._conn._leads > leads
        assert c.connected and not lk.held
        wait_until(lambda: d.locks().pending == [], what="the cancel")
        held.release()
        with c.lock("a"):
            assert c.ping() >= 0


def test_an_interrupt_as_the_grant_comes_hands_it_back(broker, callers_read, monkeypatch):
    """Ctrl-C landing just as the grant is read (here: SIGINT raised in the
    main thread right after the grant registered the lock, where a real
    one can land): KeyboardInterrupt, the block never runs, and the grant
    is released.  It stayed held on the broker: the interrupted grant's
    call was never completed (the interrupt left its hook), so the
    hand-back that waits for it never ran, and with a completed call
    the interrupted waiter handed back nothing."""
    granted = coord.client.Lock._granted

    def interrupted(self, conn, r, arrived):
        granted(self, conn, r, arrived)
        if r.ok and r.get("granted") and threading.current_thread() is threading.main_thread():
            signal.raise_signal(signal.SIGINT)
    with broker.client() as c, broker.client() as d:
        monkeypatch.setattr(coord.client.Lock, "_granted", interrupted)
        lk = c.lock("a")
        with pytest.raises(KeyboardInterrupt):
            with lk:
                pytest.fail("ran after the interrupt")
        monkeypatch.undo()
        wait_until(lambda: d.locks().held == [], what="the grant to be released")
        assert not lk.held and c.connected
        with c.lock("a", timeout=5):
            assert d.locks().held[0].name == "a"


def test_mixed_calls_steals_and_idle_spells(broker):
    """Six threads mix lock cycles, waits that time out, pings, lease locks
    and pauses (so the reader thread takes the socket over and hands it
    back), while another connection steals their locks: every thread keeps
    making progress and nothing but Timeout and LockLost is raised."""
    import random
    with broker.client() as c, broker.client() as d:
        stop = threading.Event()
        done = [0] * 6
        bad = []

        def worker(i):
            r = random.Random(i)
            while not stop.is_set():
                k = r.random()
                try:
                    if k < 0.35:
                        with c.lock(f"own-{i}"):
                            pass
                    elif k < 0.6:
                        with c.lock(f"shared-{r.randrange(3)}",
                                    timeout=r.choice([0, 0.001, 0.01, 0.05])):
                            pass
                    elif k < 0.8:
                        c.ping()
                    elif k < 0.9:
                        time.sleep(r.choice([0.001, 0.015, 0.03]))   # idle spells
                    else:
                        lk = c.lock(f"victim-{i}", lease=0.3, timeout=1)
                        if lk.acquire():
                            lk.lost.wait(r.choice([0, 0.02]))
                            lk.release()
                except (coord.Timeout, coord.LockLost):
                    pass
                except BaseException as e:      # reported below
                    bad.append(e)
                done[i] += 1

        def thief():
            r = random.Random(99)
            while not stop.is_set():
                name = r.choice([f"victim-{r.randrange(6)}", f"shared-{r.randrange(3)}"])
                with d.lock(name, steal=True):
                    pass
                stop.wait(r.random() * 0.01)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
        threads.append(threading.Thread(target=thief))
        for t in threads:
            t.start()
        try:
            for _ in range(3):                  # three windows of progress
                before = list(done)
                wait_until(lambda: all(n >= b + 20 for n, b in zip(done, before)), 20,
                           "every thread making progress")
        finally:
            stop.set()
            for t in threads:
                t.join(20)
        assert not any(t.is_alive() for t in threads), "a caller never got its reply"
        assert bad == []
        assert c.connected
