// examples/request-key.js - one single-flight key per HTTP request, the same
// in every coord client (C, Python, Node.js, `coordctl key`).
import { connect, requestKey } from 'coord-client';

const request = {
  method: 'post',
  url: 'HTTPS://API.example.com:443/v1/search?b=2&a=1#results',
  contentType: 'application/json; charset=utf-8',
  body: '{ "query": "coord", "limit": 10 }',
  headers: [['Accept-Language', 'de-CH']],
  user: 'user-42',
  authGen: 3,                              // bump it when the user's credentials change
};
const { key, canonical } = requestKey(request);
console.log(key);
console.log(canonical);

const client = await connect();
const r = await client.once(client.requestKey(request).key, async () => ({ hits: 3 }));
console.log(`${r.source}: ${JSON.stringify(r.value)}`);
await client.close();
