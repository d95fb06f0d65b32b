"""coord.request_key: every vector of tests/vectors/request-keys.json, the
JCS number formatting (a table node wrote; powers of two and random doubles
checked for the shortest round trip), the same inputs through the C client
(`coordctl key`) for the edges the vectors leave to libcurl and jansson,
and the Python API's own edges."""
import base64
import json
import math
import os
import random
import struct
import subprocess

import pytest

import coord
from coord.requestkey import es_number, jcs
from conftest import COORDCTL, PKG

VECTORS = os.path.join(PKG, "..", "..", "tests", "vectors", "request-keys.json")
with open(VECTORS, encoding="utf-8") as _f:
    _DOC = json.load(_f)


def _args(inp):
    a = dict(inp)
    if "body_base64" in a:
        a["body"] = base64.b64decode(a.pop("body_base64"))
    if "headers" in a:
        a["headers"] = [tuple(h) for h in a["headers"]]
    for k in ("method", "url", "user", "auth_gen"):
        a.setdefault(k, None)
    return a


def test_vector_file_is_the_expected_format():
    assert _DOC["format"] == "coord request-key vectors 1"
    vs = _DOC["vectors"]
    assert sum("error" in v for v in vs) >= 10 and sum("key" in v for v in vs) >= 20


@pytest.mark.parametrize("v", _DOC["vectors"], ids=[v["name"] for v in _DOC["vectors"]])
def test_vector(v):
    a = _args(v["input"])
    if "error" in v:
        with pytest.raises(coord.RequestKeyError) as ei:
            coord.request_key(**a)
        assert ei.value.field == v["error_field"]
        assert str(ei.value.message).startswith(v["error_field"])
        assert isinstance(ei.value, ValueError)
        return
    key, canonical = coord.request_key(**a)
    assert canonical == v["canonical"]
    assert key == v["key"]
    if "body_canonical" in v:
        body = a["body"].encode() if isinstance(a["body"], str) else a["body"]
        assert jcs(body).decode() == v["body_canonical"]


# from node: String(x), bits by Buffer.writeDoubleLE (the C unit test's table)
NUMBERS = [
    (0x0000000000000000, "0"), (0x8000000000000000, "0"), (0x3ff0000000000000, "1"),
    (0xbff0000000000000, "-1"), (0x3ff8000000000000, "1.5"), (0x3fb999999999999a, "0.1"),
    (0x3fd3333333333334, "0.30000000000000004"), (0x3fd5555555555555, "0.3333333333333333"),
    (0x4059000000000000, "100"), (0x4415af1d78b58c40, "100000000000000000000"),
    (0x444b1ae4d6e2ef50, "1e+21"), (0x3eb0c6f7a0b5ed8d, "0.000001"),
    (0x3e7ad7f29abcaf48, "1e-7"), (0x3ea0c6f7a0b5ed8d, "5e-7"), (0x3e8421f5f40d8376, "1.5e-7"),
    (0x3c36b082c2148b8e, "1.23e-18"), (0x441ac53a7e04bcda, "123456789012345680000"),
    (0x4340000000000000, "9007199254740992"), (0x4340000000000001, "9007199254740994"),
    (0x43e0000000000000, "9223372036854776000"), (0x43f0000000000000, "18446744073709552000"),
    (0x0000000000000001, "5e-324"), (0x0010000000000000, "2.2250738585072014e-308"),
    (0x7fefffffffffffff, "1.7976931348623157e+308"), (0x3cb0000000000000, "2.220446049250313e-16"),
    (0x4011666666666666, "4.35"), (0x3eb4b6231abfd271, "0.0000012345"),
    (0x4480f0cf064dd592, "1e+22"), (0x44b52d02c7e14af6, "1e+23"),
    (0x41b3de4355555553, "333333333.3333332"), (0x8000000000000001, "-5e-324"),
    (0x3fe0000000000000, "0.5"), (0x3eb0000000000000, "9.5367431640625e-7"),
    (0x4450000000000000, "1.1805916207174113e+21"), (0x3b90000000000000, "8.470329472543003e-22"),
    (0x7e41eb2d66005835, "1.5e+300"), (0x400921fb54442d18, "3.141592653589793"),
    (0xc05edd2f1a9fbe77, "-123.456"), (0x4341c37937e08000, "10000000000000000"),
    (0x4345ee2a2eb5a5c4, "12345678901234568"), (0x3fe9999999999999, "0.7999999999999999"),
    (0x432ff973cafa8000, "4500000000000000"), (0x447c7e83209e90b2, "8.41e+21"),
    (0x3eb92a737110e454, "0.0000015"), (0x41b1de784a000000, "299792458"),
    (0x44dfe185ca57c517, "6.02214076e+23"), (0x3c07a4da290c1653, "1.602176634e-19"),
    (0x0060000000000000, "7.120236347223045e-307"), (0x0100000000000000, "7.291122019556398e-304"),
    (0x0420000000000000, "8.209073602596753e-289"), (0x0660000000000000, "5.641232424577593e-278"),
    (0x0d70000000000000, "5.858190679279809e-244"),
]


def _double(bits):
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def test_numbers_as_node_writes_them():
    bad = [(hex(b), es_number(_double(b)), js) for b, js in NUMBERS
           if es_number(_double(b)) != js]
    assert bad == []


def _sig_digits(s):
    return len(s.split("e")[0].replace("-", "").replace(".", "").strip("0"))


def _shortest(x, s):
    """s reads back as x and no decimal with one digit less does (the
    correctly rounded one nor the one above it)."""
    if float(s) != x:
        return False
    k = _sig_digits(s)
    if k <= 1:
        return True
    lower = "%.*e" % (k - 2, x)
    mant, e = lower.split("e")
    d = mant.replace(".", "")
    up = str(int(d) + 1)
    upper = f"{up}e{int(e) - (len(d) - 1) }"
    return float(lower) != x and float(upper) != x


def test_shortest_check_can_fail():
    assert _shortest(0.1, "0.1")
    assert not _shortest(0.1, "0.10000000000000001")    # reads back, not shortest
    assert not _shortest(0.1, "0.2")


def test_numbers_shortest_round_trip():
    rnd = random.Random(0x9E3779B97F4A7C15)
    xs = [math.ldexp(1.0, e) for e in range(-1074, 1024)]
    xs += [_double(rnd.getrandbits(64)) for _ in range(20000)]
    bad = []
    for x in xs:
        if not math.isfinite(x):
            continue
        for y in (x, -x):
            s = es_number(y)
            if not _shortest(abs(y), s.lstrip("-")) or (y < 0) != s.startswith("-"):
                bad.append((y, s))
    assert bad[:5] == []


# ---- the same inputs through the C client ----

EDGE_URLS = [
    "http://[::ffff:102:304]/", "http://[::ffff:1.2.3.4]/", "http://[2001:db8:0:0::1]/",
    "http://[2001:0db8::1]/", "http://[0::]/", "http://[1::2:0:0:3]/", "http://[1:2:3]/",
    "http://[1:2:3:4:5:6:1.2.3.4]/", "http://[::1/", "http://[::1]x/", "http://[v1.x]/",
    "http://a!b/", "http://a$b/", "http://a&b/", "http://a'b/", "http://a(b/", "http://a*b/",
    "http://a+b/", "http://a,b/", "http://a;b/", "http://a=b/", "http://a~b/", "http://a_b/",
    "http://1.2.3.4./", "http://1.2.3/", "http://0x/", "http://a.0x1g/", "http://1e5/",
    "http://0/", "http://x./", "http://a..b/", "http://../", "http://%41.com/",
    "http://a%2eb/", "http://ex%2Fample/", "http:///x", "http://h:/", "http://h:0/",
    "http://h:65535/", "http://h:99999999999/", "http://h:a/", "http://h:-1/",
    "http://h:80:80/", "http://h: 80/", "http://h/\x7f", "http://h/a\tb", "http://h\x01/",
    "http://h/%00", "http://h/a?b=%00", "http://h/%4", "http://h/a%", "http://h/a b?c d",
    "http://h/..", "http://h/a/..", "http://h/.", "http://h//x/../y", "http://h?#",
    "http://h/#a?b", "http://h/#%zz", "http://h/a?%zz#", "http://h/@:!$&'()*+,;=",
    "https://h/a?x=%3D&x=%3d&x==", "http://h/%C3%A9?%c3%a9=%e9", "http:/h/", "http:h/",
    "http://@h/", "http://u@h/", "HtTp://H/", "http+x://h/", "http1://h/", "1http://h/",
]

EDGE_BODIES = [
    b"[" * 2048 + b"]" * 2048, b"[" * 2049 + b"]" * 2049, b"[" * 2047 + b"1" + b"]" * 2047,
    b"[" * 2048 + b"1" + b"]" * 2048, b'{"a":' * 2047 + b"1" + b"}" * 2047,
    b'{"a":' * 2048 + b"1" + b"}" * 2048, b"\xef\xbb\xbf{}", b'{"a":1}\xff',
    b'"\xed\xa0\x80"', b"\xc0\xaf", b" ", b"[1,]", b"[1 2]", b"NaN", b"[Infinity]",
    b"[-Infinity]", b"01", b"1.", b".5", b"-", b"[1e400]", b"[-1e400]", b"[1e-400]",
    b'["\\ud800"]', b'["\\udc00x"]', b'["\\ud83d\\ude00"]', b'["\x01"]', b'["\\a"]',
    b'["\x7f\xe2\x80\xa8"]', b'{"\\u0000":1}', b'{"a":"\\u0000"}', b"[1]\x00",
    b'{"a":1,"\\u0061":2}', b"[123456789012345678901234567890]", b"1" * 400, b"1" * 5000,
    b"0." + b"0" * 5000 + b"1", b"[" + b",".join(b"%d" % i for i in range(300)) + b"]",
    b'{"\xee\x80\x80":1,"\\ud83d\\ude00":2,"\xe2\x82\xac":3}', b"\t\r\n 1 \t\r\n",
]


def _ctl_key(args, body=None, tmp=None):
    cmd = [COORDCTL, "--json", "key", "--user", "u", "--auth-gen", "1", *args]
    if body is not None:
        p = os.path.join(tmp, "body")
        with open(p, "wb") as f:
            f.write(body)
        cmd += ["--body-file", p]
    r = subprocess.run(cmd, capture_output=True, timeout=20)
    return json.loads(r.stdout)["key"] if r.returncode == 0 else None


def _py_key(**kw):
    try:
        return coord.request_key(user="u", auth_gen=1, **kw)[0]
    except coord.RequestKeyError:
        return None


def test_urls_as_the_c_client_reads_them():
    diff = []
    for u in EDGE_URLS:
        c = _ctl_key(["--method", "GET", "--url", u])
        p = _py_key(method="GET", url=u)
        if c != p:
            diff.append((u, c, p))
    assert diff == []
    # not all refused: the table has both kinds
    assert any(_py_key(method="GET", url=u) for u in EDGE_URLS)


def test_json_bodies_as_the_c_client_reads_them(tmp_path):
    diff = []
    for b in EDGE_BODIES:
        c = _ctl_key(["--method", "POST", "--url", "http://h/", "--content-type",
                      "application/json"], b, str(tmp_path))
        p = _py_key(method="POST", url="http://h/", content_type="application/json", body=b)
        if c != p:
            diff.append((b[:60], c, p))
    assert diff == []
    assert sum(_py_key(method="POST", url="http://h/", content_type="application/json",
                       body=b) is None for b in EDGE_BODIES) >= 10


def test_fields_as_the_c_client_reads_them():
    rnd = random.Random(5)
    chars = ["a", "|", ",", "=", "%", "\x01", "\t", " ", "é", "\x7f", "X", "none", "*/*", ";"]
    diff = []
    for _ in range(60):
        def f():
            return "".join(rnd.choice(chars) for _ in range(rnd.randint(1, 4)))
        hs = [(rnd.choice(["X-A", "x-a", "X-B", "Cookie", "A B", "é", "x|y"]), f())
              for _ in range(rnd.randint(0, 3))]
        kw = {k: f() for k in rnd.sample(["tenant", "accept", "locale", "api"], 2)}
        args = ["--method", "GET", "--url", "http://h/"]
        for n, v in hs:
            args += ["--header", f"{n}:{v}"]
        for k, v in kw.items():
            args += ["--" + k, v]
        c = _ctl_key(args)
        p = _py_key(method="GET", url="http://h/", headers=hs, **kw)
        if c != p:
            diff.append((hs, kw, c, p))
    assert diff == []


# ---- the Python API ----

def test_api_edges():
    base = dict(method="GET", url="https://example.com/", user="u", auth_gen=1)
    k0, c0 = coord.request_key(**base)
    assert k0.startswith("request-v1:") and len(k0) == 11 + 64
    # str and bytes bodies, list and dict headers are the same request
    a = coord.request_key(**dict(base, body="é", content_type="text/plain"))
    b = coord.request_key(**dict(base, body="é".encode(), content_type="text/plain"))
    assert a == b and c0.split("|")[3] == "body:none"
    assert coord.request_key(**dict(base, headers={"X-A": "1", "X-B": "2"})) == \
        coord.request_key(**dict(base, headers=[("x-b", "2"), ("X-A", " 1 ")]))
    assert coord.request_key(**dict(base, body=bytearray(b"x"))) == \
        coord.request_key(**dict(base, body=memoryview(b"x")))
    for bad, field in ((dict(auth_gen=-1), "auth_gen"), (dict(auth_gen=1 << 53), "auth_gen"),
                       (dict(auth_gen=True), "auth_gen"), (dict(auth_gen="1"), "auth_gen"),
                       (dict(user="a\0b"), "user"), (dict(tenant="\ud800"), "tenant"),
                       (dict(url=b"https://h/"), "url"), (dict(body=1), "body"),
                       (dict(headers=[("X-A",)]), "header"),
                       (dict(headers=[("X-A", None)]), "header"),
                       (dict(body="\udc00", content_type="text/plain"), "body")):
        with pytest.raises(coord.RequestKeyError) as ei:
            coord.request_key(**dict(base, **bad))
        assert ei.value.field == field, bad
    assert coord.request_key(**dict(base, auth_gen=(1 << 53) - 1))[1].count("|auth:9007199254740991|") == 1


# ---- the edges every client decides alike (PROTOCOL.md, vectors) ----

BASE = dict(method="GET", url="https://example.com/", user="u", auth_gen=1)
TEXT_FIELDS = ("method", "url", "user", "tenant", "accept", "locale", "freshness", "api",
               "content_type")


@pytest.mark.parametrize("field", TEXT_FIELDS + ("header name", "header value"))
def test_a_nul_inside_a_text_field_is_refused(field):
    kw = dict(BASE)
    if field == "header name":
        kw["headers"] = [("X-\0A", "1")]
    elif field == "header value":
        kw["headers"] = [("X-A", "a\0b")]
    else:
        kw[field] = {"url": "https://example.com/a\0b", "freshness": "cache-ok\0"}.get(
            field, "a\0b")
    with pytest.raises(coord.RequestKeyError) as ei:
        coord.request_key(**kw)
    assert ei.value.field == ("header" if field.startswith("header") else field)


def test_auth_gen_from_2_to_the_53_is_refused():
    assert coord.request_key(**dict(BASE, auth_gen=(1 << 53) - 1))
    for n in (1 << 53, (1 << 53) + 1, 1 << 63, (1 << 64) - 1):
        with pytest.raises(coord.RequestKeyError) as ei:
            coord.request_key(**dict(BASE, auth_gen=n))
        assert ei.value.field == "auth_gen"


def test_urls_past_the_c_clients_limit_are_refused():
    # libcurl's CURL_MAX_INPUT_LENGTH, 8,000,000 bytes, the C client's limit
    from coord.requestkey import MAX_URL_BYTES
    assert MAX_URL_BYTES == 8_000_000
    head = "https://example.com/"
    at = head + "a" * (MAX_URL_BYTES - len(head))
    assert len(at.encode()) == MAX_URL_BYTES
    assert coord.request_key(**dict(BASE, url=at))[0].startswith("request-v1:")
    for u in (at + "a", head + "é" * (MAX_URL_BYTES // 2)):     # bytes count, not chars
        with pytest.raises(coord.RequestKeyError, match="longer than 8000000 bytes") as ei:
            coord.request_key(**dict(BASE, url=u))
        assert ei.value.field == "url"


@pytest.mark.parametrize("body", [b"1\0", b"true\0", b'"s"\0', b"null\0", b"1.5\0",
                                  b"{}\0", b"[]\0", b"1 \0"])
def test_a_nul_after_a_top_level_json_value_is_refused(body):
    with pytest.raises(coord.RequestKeyError) as ei:
        coord.request_key(**dict(BASE, method="POST", body=body,
                                 content_type="application/json"))
    assert ei.value.field == "body"
    # not JSON: the bytes are hashed as they are
    assert coord.request_key(**dict(BASE, method="POST", body=body, content_type="text/plain"))
