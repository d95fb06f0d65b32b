"""The sans-I/O core alone: framing, the rid table, events, bad input."""
import struct

import msgpack
import pytest

from coord import core, errors, messages as m


def frame(d):
    b = msgpack.packb(d, use_bin_type=True)
    return struct.pack(">I", len(b)) + b


def test_request_frame_and_reply_matching():
    c = core.Core()
    rid1, f1 = c.request("ping", {"skip": None}, "h1")
    rid2, f2 = c.request("lock.acquire", {"name": b"\x00a"}, "h2")
    assert rid1 != rid2 and rid1 > 0
    n, = struct.unpack(">I", f1[:4])
    assert msgpack.unpackb(f1[4:]) == {"op": "ping", "rid": rid1}      # None left out
    assert msgpack.unpackb(f2[4:], raw=False)["name"] == b"\x00a"       # bytes as bin
    data = frame({"rid": rid2, "ok": True, "granted": True}) + frame({"ev": "lock.lost"}) \
        + frame({"rid": rid1, "ok": False, "code": "TIMEOUT", "message": "x"})
    got = []
    for i in range(len(data)):                 # one byte at a time
        got += c.receive(data[i:i + 1])
    # wire order: the event between the two replies stays between them
    assert [h for h, _ in got] == ["h2", None, "h1"]
    assert isinstance(got[2][1].error(), errors.Timeout)
    assert isinstance(got[2][1].error(), TimeoutError)
    ev = got[1][1]
    assert isinstance(ev, core.Event) and ev.name == "lock.lost"
    assert len(c) == 0


def test_close_returns_waiting_handles_and_bye():
    c = core.Core()
    c.request("lock.acquire", {"name": "a"}, "waiting")
    c.receive(frame({"rid": 0, "ok": False, "code": "SHUTTING_DOWN", "message": "bye"}))
    assert c.close() == ["waiting"]
    assert "SHUTTING_DOWN" in str(c.close_error())


@pytest.mark.parametrize("bad", [
    b"\x00\x00\x00\x00",                                   # zero length
    struct.pack(">I", 2) + b"\x91\x01",                    # not a map
    struct.pack(">I", 3) + b"\x80\x80\x80",                # trailing bytes
    frame({"rid": 99, "ok": True}),                        # rid not waiting
    frame({"x": 1}),                                       # neither rid nor ev
    struct.pack(">I", 1 << 30),                            # too long
])
def test_bad_frames_raise_protocol_error(bad):
    with pytest.raises(errors.ProtocolError):
        core.Core().receive(bad)


def test_names_and_times():
    assert m.name("é") == "é" and m.name(bytearray(b"\xff")) == b"\xff"
    assert m.name_key("a") == m.name_key(b"a")
    with pytest.raises(TypeError):
        m.name(3)
    assert m.ms(0.0001, "t") == 1 and m.ms(None, "t") is None and m.ms(0, "t") == 0
    with pytest.raises(ValueError):
        m.ms(-1, "t")
    assert isinstance(errors.from_reply("FENCED", ""), errors.FencedError)
    e = errors.from_reply("NEW_CODE", "m")
    assert type(e) is errors.CoordError and e.code == "NEW_CODE"
    for code in errors.WIRE_CODES:
        assert errors.from_reply(code, "").code == code
