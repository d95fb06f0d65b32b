"""One key for one HTTP request, the same in C, Python and Node.js."""
import coord

key, canonical = coord.request_key(
    method="post", url="HTTPS://API.example.com:443/v1/search?b=2&a=1#top",
    content_type="application/json", body='{"q": "coord", "limit": 10.0}',
    headers=[("Accept-Language", "de-CH")], user="alice", auth_gen=7)
print(canonical)
print(key)
try:
    coord.request_key(method="GET", url="https://x/", user="alice", auth_gen=7,
                      headers={"Authorization": "Bearer secret"})
except coord.RequestKeyError as e:
    print("refused:", e.field)

with coord.Client() as c:
    print("once:", c.once(key, lambda f: b"search results", keep=60).source)
