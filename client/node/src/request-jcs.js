// request-jcs.js - RFC 8785 JSON Canonicalization Scheme (JCS) for the JSON
// bodies of canonical request keys, refusing what libcoord refuses
// (client/request-jcs.c, which parses with jansson).
//
// JSON.parse is not used: it silently keeps the last of two members of one
// name, reads "__proto__" specially and accepts lone surrogates.  This is a
// small recursive-descent parser of RFC 8259 that builds [name, value] pairs
// and refuses, as the C client does (nothing here recurses: the parser and
// the serializer keep their own stacks, so no input can exhaust the JS
// stack; every refusal is a RequestKeyError):
//   - bytes that are not UTF-8 (a BOM is not white space either);
//   - a duplicate member name, compared after unescaping ("a" and "\u0061"
//     are one name);
//   - a number beyond the double range (1e400; 1e-400 reads as 0);
//   - a lone surrogate escape ("\ud800", "\udc00", "\ud800x");
//   - U+0000 in a member name (jansson cannot hold one); in a string value
//     it is fine;
//   - nesting deeper than 2048 values (jansson's JSON_PARSER_MAX_DEPTH,
//     counted per value: 2048 nested arrays holding a scalar are refused,
//     2048 empty ones are not);
//   - anything after the value but white space.
// Serialization: no white space; strings escape only `"` `\` \b \f \n \r \t
// and other controls (\u00xx, lower-case hex); numbers are ECMAScript's
// Number.prototype.toString (which is RFC 8785's number format; -0 is "0");
// members sorted by their names as UTF-16 code units (JavaScript's own
// string order).
import { RequestKeyError } from './errors.js';

// jansson's JSON_PARSER_MAX_DEPTH.
const MAX_DEPTH = 2048;

const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

class Parser {
  constructor(text) {
    this.s = text;
    this.i = 0;
    this.depth = 0;
  }

  fail(why) {
    return new RequestKeyError('body', `body: JSON refused at character ${this.i}: ${why}`);
  }

  ws() {
    const s = this.s;
    while (this.i < s.length) {
      const c = s.charCodeAt(this.i);
      if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) break;
      this.i++;
    }
  }

  // One value, with the containers still open on an explicit stack (no
  // recursion).  Depth is counted per value as jansson does: the value
  // being started is at depth stack.length + 1.
  value() {
    const s = this.s;
    const stack = [];              // open containers: {t: 'a', v: items} | {t: 'o', v: members, names, name}
    let v;
    let state = 'value';
    for (;;) {
      if (state === 'value') {
        if (stack.length + 1 > MAX_DEPTH) throw this.fail('maximum parsing depth reached');
        this.ws();
        const c = s[this.i];
        if (c === '{' || c === '[') {
          const close = c === '{' ? '}' : ']';
          this.i++;
          this.ws();
          if (s[this.i] === close) {
            this.i++;
            v = { t: c === '{' ? 'o' : 'a', v: [] };
            state = 'done';
          } else if (c === '{') {
            stack.push({ t: 'o', v: [], names: new Set(), name: '' });
            state = 'key';
          } else {
            stack.push({ t: 'a', v: [] });
          }
          continue;
        }
        if (c === '"') v = { t: 's', v: this.string() };
        else if (c === 't' || c === 'f' || c === 'n') v = this.literal();
        else if (c === '-' || (c >= '0' && c <= '9')) v = this.number();
        else throw this.fail(c === undefined ? 'unexpected end' : 'invalid token');
        state = 'done';
      } else if (state === 'key') {
        const top = stack[stack.length - 1];
        this.ws();
        if (s[this.i] !== '"') throw this.fail('string or \'}\' expected');
        const name = this.string();
        if (name.includes('\0')) throw this.fail('U+0000 in a member name is refused');
        if (top.names.has(name)) throw new RequestKeyError('body', 'body: JSON refused: duplicate member name');
        top.names.add(name);
        this.ws();
        if (s[this.i++] !== ':') throw this.fail("':' expected");
        top.name = name;
        state = 'value';
      } else {                     // 'done': v is complete
        if (!stack.length) return v;
        const top = stack[stack.length - 1];
        if (top.t === 'a') top.v.push(v);
        else top.v.push([top.name, v]);
        this.ws();
        const c = s[this.i++];
        if (c === (top.t === 'a' ? ']' : '}')) {
          stack.pop();
          v = { t: top.t, v: top.v };
        } else if (c === ',') {
          state = top.t === 'a' ? 'value' : 'key';
        } else {
          throw this.fail(top.t === 'a' ? "']' expected" : "'}' expected");
        }
      }
    }
  }

  literal() {
    for (const w of ['true', 'false', 'null']) {
      if (this.s.startsWith(w, this.i)) {
        this.i += w.length;
        return { t: 'l', v: w };
      }
    }
    throw this.fail('invalid token');
  }

  number() {
    NUMBER.lastIndex = this.i;
    const m = NUMBER.exec(this.s);
    if (!m) throw this.fail('invalid token');
    // what the grammar leaves ("01", "1.", "1e") is refused by the caller
    const x = Number(m[0]);
    if (!Number.isFinite(x)) throw this.fail('real number overflow');
    this.i += m[0].length;
    return { t: 'n', v: x };
  }

  string() {
    const s = this.s;
    this.i++;                        // the opening quote
    let out = '';
    let run = this.i;
    for (;;) {
      if (this.i >= s.length) throw this.fail('premature end of input');
      const c = s.charCodeAt(this.i);
      if (c === 0x22) {
        out += s.slice(run, this.i);
        this.i++;
        return out;
      }
      if (c < 0x20) throw this.fail(`control character 0x${c.toString(16)}`);
      if (c !== 0x5c) {
        this.i++;
        continue;
      }
      out += s.slice(run, this.i);
      const e = s[this.i + 1];
      this.i += 2;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          const u = this.hex4();
          if (u >= 0xdc00 && u <= 0xdfff) throw this.fail('lone surrogate');
          if (u >= 0xd800 && u <= 0xdbff) {
            if (s[this.i] !== '\\' || s[this.i + 1] !== 'u') throw this.fail('lone surrogate');
            this.i += 2;
            const l = this.hex4();
            if (l < 0xdc00 || l > 0xdfff) throw this.fail('lone surrogate');
            out += String.fromCharCode(u, l);
          } else {
            out += String.fromCharCode(u);
          }
          break;
        }
        default:
          throw this.fail('invalid escape');
      }
      run = this.i;
    }
  }

  hex4() {
    const h = this.s.slice(this.i, this.i + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(h)) throw this.fail('invalid \\u escape');
    this.i += 4;
    return parseInt(h, 16);
  }
}

/** A JCS string literal (JSON.stringify escapes exactly these for a well-formed string). */
const jcsString = (s) => JSON.stringify(s);

// The text of a parsed value, with an explicit stack (no recursion).
function serialize(root) {
  const out = [];
  const stack = [{ v: root, i: -1, list: null }];
  while (stack.length) {
    const f = stack[stack.length - 1];
    const { v } = f;
    if (v.t === 'l') { out.push(v.v); stack.pop(); continue; }
    if (v.t === 's') { out.push(jcsString(v.v)); stack.pop(); continue; }
    if (v.t === 'n') { out.push(String(v.v)); stack.pop(); continue; }   // String(-0) is "0"
    if (f.i < 0) {
      out.push(v.t === 'a' ? '[' : '{');
      f.list = v.t === 'a' ? v.v : [...v.v].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
      f.i = 0;
    }
    if (f.i >= f.list.length) {
      out.push(v.t === 'a' ? ']' : '}');
      stack.pop();
      continue;
    }
    if (f.i > 0) out.push(',');
    const item = f.list[f.i++];
    if (v.t === 'a') {
      stack.push({ v: item, i: -1, list: null });
    } else {
      out.push(`${jcsString(item[0])}:`);
      stack.push({ v: item[1], i: -1, list: null });
    }
  }
  return out.join('');
}

/** The RFC 8785 text of a JSON body (bytes); throws RequestKeyError('body'). */
export function canonicalJson(bytes) {
  let text;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw new RequestKeyError('body', 'body: JSON refused: not UTF-8');
  }
  const p = new Parser(text);
  const v = p.value();
  p.ws();
  if (p.i !== text.length) throw p.fail('end of file expected');
  return serialize(v);
}
