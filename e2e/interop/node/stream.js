// A Node.js client of the push gateway, written from docs/api.md alone
// ("Push gateway WebSocket", "Push gateway Server-Sent Events", "Stream
// events"): the WebSocket with the npm ws package, the event streams with
// Node's own fetch and a reader of text/event-stream. e2e's
// node_client_test.go runs it and makes every assertion; this script only
// acts and reports.
//
// Why fetch and not the npm eventsource package: Node 20 has no
// EventSource, and the package follows the HTML standard, which hides
// what the test checks. An event without an id: field inherits the last
// id, so "the subscribed event has no id" cannot be seen; it reconnects by
// itself, so "the stream ended" cannot be told from a reconnection; and
// the retry: field is consumed. A reader of the raw stream (below, parsed
// as the standard says) sees every field of every event.
//
//   node stream.js SCENARIO CONFIG_JSON
//
// Each observation is one JSON line on standard output, {"obs": ..., ...}.
// The script exits 0 once its scenario has run, whatever it observed, and
// non-zero only when it could not run it (a refused connection, a POST that
// failed, a time-out).
//
// Scenarios (CONFIG_JSON members in parentheses; "ws" is the gateway's
// ws://host:port, "http" its http://host:port, "ingest" ingest's
// http://host:port):
//   answer     (ws, ingest, token, conversation, content) subscribe, POST,
//              follow the answer to its run.completed.
//   resume     (ws, http, ingest, token, conversation, content, cut, gap)
//              one observer WebSocket follows the whole answer; a second
//              WebSocket and an event stream are cut after `cut` token
//              events, and once the observer has seen `gap` more token
//              events (or its run.completed) they resume from their last
//              cursor (`since`, and Last-Event-ID), and a third resumes an
//              event stream from the WebSocket's cursor.
//   follow     (http, ingest, token, conversation, content) an event
//              stream refused without a token; POST, then follow that
//              request's events to the end of the stream.
//   errors     (ws, token) upgrades without a token, with a bad one and
//              with ?access_token=; bad frames on one connection, then a
//              frame over 64 KiB and a text frame that is not UTF-8 on
//              connections of their own.
//   isolation  (ws, ingest, token, other, conversation) the token's user
//              answers in a conversation; the other user subscribes to the
//              same name, from earliest and from the first user's cursor,
//              then answers there too.
//   expiry     (ws, token, fresh, conversation) a connection whose token
//              expires, a reconnection with the same token, one with a
//              fresh one.
//   shutdown   (ws, token, conversation) reports "ready" once subscribed,
//              then the close the gateway sends when it stops.
'use strict';

const http = require('node:http');
const WebSocket = require('ws');

const emit = (obs, fields) => process.stdout.write(JSON.stringify({ obs, ...fields }) + '\n');

// deadline fails the whole script if a scenario hangs: the Go test then
// sees an exit status and what was observed so far.
function deadline(ms) {
  const t = setTimeout(() => {
    process.stderr.write(`stream.js: still running after ${ms} ms\n`);
    process.exit(3);
  }, ms);
  t.unref();
}

// Conn is one WebSocket to /v1/stream, authenticated with a bearer header
// (a Node backend can set headers; browsers use ?access_token=, which
// query: true does instead), or with no token when token is empty. Frames
// are queued so that a scenario awaits them in order.
class Conn {
  constructor(name, url, token, { query = false } = {}) {
    this.name = name;
    this.frames = [];
    this.waiters = [];
    this.closed = null;
    this.errors = [];
    let target = url + '/v1/stream';
    const headers = {};
    if (token && query) target += '?access_token=' + encodeURIComponent(token);
    else if (token) headers.Authorization = 'Bearer ' + token;
    this.ws = new WebSocket(target, { headers });
    this.opened = new Promise((resolve, reject) => {
      this.ws.once('open', resolve);
      this.ws.once('unexpected-response', (req, res) => {
        let body = '';
        res.on('data', (d) => { body += d; });
        res.on('end', () => {
          emit('refused', {
            conn: name,
            http_status: res.statusCode,
            content_type: res.headers['content-type'],
            www_authenticate: res.headers['www-authenticate'],
            body: tryJSON(body),
          });
          const err = new Error(`upgrade refused: ${res.statusCode}`);
          err.status = res.statusCode;
          reject(err);
        });
      });
      this.ws.once('error', reject);
    });
    this.ws.on('message', (data, isBinary) => {
      const text = data.toString('utf8');
      const frame = isBinary ? { binary: text } : tryJSON(text);
      raw.set(frame, text);
      this.frames.push(frame);
      this.wake();
    });
    this.ws.on('error', (err) => {
      // ws reports here what it finds wrong with the server's frames,
      // close codes included (it fails such a connection with 1002).
      this.errors.push(String(err && err.message));
      emit('ws-error', { conn: name, message: String(err && err.message) });
    });
    this.ws.on('close', (code, reason) => {
      this.closed = { code, reason: reason.toString('utf8') };
      emit('close', { conn: name, code, reason: this.closed.reason, errors: this.errors });
      this.wake();
    });
  }

  wake() {
    const w = this.waiters;
    this.waiters = [];
    w.forEach((f) => f());
  }

  // next resolves to the next frame, or null once the connection closed.
  async next() {
    for (;;) {
      if (this.frames.length > 0) return this.frames.shift();
      if (this.closed) return null;
      await new Promise((resolve) => this.waiters.push(resolve));
    }
  }

  // closedWith resolves to the close once the connection is closed.
  async closedWith() {
    while (!this.closed) await new Promise((resolve) => this.waiters.push(resolve));
    return this.closed;
  }

  send(obj) { this.ws.send(JSON.stringify(obj)); }

  // end closes the connection normally and resolves once it is closed.
  end() {
    this.ws.close(1000);
    return this.closedWith();
  }
}

// raw holds the text of each frame received, for the reports.
const raw = new WeakMap();

function tryJSON(s) {
  try {
    return JSON.parse(s);
  } catch {
    return { unparsed: s };
  }
}

// subscribe sends a subscribe frame and returns the frame that answers it
// (subscribed, or an error frame).
async function subscribe(c, conversation, since) {
  const f = { op: 'subscribe', conversation };
  if (since !== undefined) f.since = since;
  c.send(f);
  const got = await c.next();
  emit('frame', { conn: c.name, frame: got });
  return got;
}

async function post(ingest, token, conversation, content) {
  const res = await fetch(`${ingest}/v1/conversations/${encodeURIComponent(conversation)}/messages`, {
    method: 'POST',
    headers: { Authorization: 'Bearer ' + token, 'Content-Type': 'application/json' },
    body: JSON.stringify({ content }),
  });
  const body = await res.json();
  if (res.status !== 202) throw new Error(`POST messages: ${res.status} ${JSON.stringify(body)}`);
  emit('posted', { request_id: body.request_id, conversation: body.conversation, status: body.status });
  return body.request_id;
}

// follow reports every frame of c until run.completed of requestID, and
// calls each(frame) first; each may return true to stop earlier.
async function follow(c, requestID, each) {
  for (;;) {
    const f = await c.next();
    if (f === null) throw new Error(`${c.name} closed before run.completed`);
    emit('frame', { conn: c.name, frame: f, raw: raw.get(f) });
    if (each && each(f)) return f;
    if (f.type === 'run.completed' && f.request_id === requestID) return f;
  }
}

// SSEStream reads GET /v1/conversations/{c}/events with fetch, parsing
// text/event-stream as the HTML standard does (fields, a leading space
// stripped from values, data lines joined, dispatch on a blank line), and
// reports each event with whether it carried an id: field of its own.
class SSEStream {
  constructor(name, base, token, conversation, lastEventID, query = '') {
    this.name = name;
    this.abort = new AbortController();
    const headers = { Authorization: 'Bearer ' + token };
    if (lastEventID) headers['Last-Event-ID'] = lastEventID;
    this.response = fetch(`${base}/v1/conversations/${encodeURIComponent(conversation)}/events${query}`, {
      headers,
      signal: this.abort.signal,
    });
    this.queue = [];
    this.buf = '';
    this.ended = false;
  }

  async open() {
    const res = await this.response;
    emit('sse-open', {
      conn: this.name,
      http_status: res.status,
      content_type: res.headers.get('content-type'),
      cache_control: res.headers.get('cache-control'),
      x_accel_buffering: res.headers.get('x-accel-buffering'),
    });
    if (res.status !== 200) throw new Error(`${this.name}: status ${res.status}: ${await res.text()}`);
    this.reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  }

  // next resolves to the next event, {id, has_id, event, data, retry}, or
  // null at the end of the stream.
  async next() {
    for (;;) {
      if (this.queue.length > 0) return this.queue.shift();
      if (this.ended) return null;
      const { value, done } = await this.reader.read();
      if (done) {
        this.ended = true;
        continue;
      }
      this.buf += value;
      this.parse();
    }
  }

  parse() {
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this.buf);
      if (!m) return;
      const line = this.buf.slice(0, m.index);
      this.buf = this.buf.slice(m.index + m[0].length);
      this.line(line);
    }
  }

  line(line) {
    this.cur = this.cur || { has_id: false, event: '', data: [], fields: [] };
    if (line === '') {
      const e = this.cur;
      this.cur = null;
      if (e.data.length === 0 && !e.has_id && e.retry === undefined) return; // nothing to dispatch
      this.queue.push({ id: e.id, has_id: e.has_id, event: e.event, data: e.data.join('\n'), retry: e.retry, fields: e.fields });
      return;
    }
    if (line.startsWith(':')) {
      this.cur.fields.push('comment');
      return;
    }
    const colon = line.indexOf(':');
    let name = line;
    let value = '';
    if (colon >= 0) {
      name = line.slice(0, colon);
      value = line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
    }
    this.cur.fields.push(name);
    switch (name) {
      case 'id': this.cur.id = value; this.cur.has_id = true; break;
      case 'event': this.cur.event = value; break;
      case 'data': this.cur.data.push(value); break;
      case 'retry': this.cur.retry = value; break;
      default: break;
    }
  }

  close() { this.abort.abort(); }
}

// sseFollow reports every event of s until run.completed of requestID.
async function sseFollow(s, requestID, each) {
  for (;;) {
    const e = await s.next();
    if (e === null) throw new Error(`${s.name} ended before run.completed`);
    const data = tryJSON(e.data);
    emit('sse', { conn: s.name, event: e, json: data });
    if (each && each(data)) return;
    if (data.type === 'run.completed' && data.request_id === requestID) return;
  }
}

const tokens = (f) => f.type === 'token';

const scenarios = {
  async answer(cfg) {
    const c = new Conn('ws', cfg.ws, cfg.token);
    await c.opened;
    await subscribe(c, cfg.conversation);
    const id = await post(cfg.ingest, cfg.token, cfg.conversation, cfg.content);
    await follow(c, id);
    await c.end();
  },

  async resume(cfg) {
    const observer = new Conn('observer', cfg.ws, cfg.token);
    const ws1 = new Conn('ws1', cfg.ws, cfg.token);
    await Promise.all([observer.opened, ws1.opened]);
    await subscribe(observer, cfg.conversation);
    await subscribe(ws1, cfg.conversation);
    const sse1 = new SSEStream('sse1', cfg.http, cfg.token, cfg.conversation);
    await sse1.open();
    await sseFollow(sse1, '', (d) => d.type === 'subscribed');
    const id = await post(cfg.ingest, cfg.token, cfg.conversation, cfg.content);

    // The observer counts token events; the cut connections wait on it.
    // When the model's tokens leave in fewer events than expected, the
    // observer's run.completed releases them too.
    let seen = 0;
    let done = false;
    const progress = [];
    const reached = (n) => new Promise((resolve) => {
      if (seen >= n || done) resolve();
      else progress.push({ n, resolve });
    });
    const observed = follow(observer, id, (f) => {
      if (tokens(f)) seen++;
      if (f.type === 'run.completed' && f.request_id === id) done = true;
      progress.filter((p) => p.n <= seen || done).forEach((p) => p.resolve());
      return false;
    });

    const wsSide = (async () => {
      let n = 0;
      let last = '';
      await follow(ws1, id, (f) => {
        if (f.cursor) last = f.cursor;
        return tokens(f) && ++n >= cfg.cut;
      });
      ws1.ws.terminate(); // the network drops: no close frame
      await ws1.closedWith();
      const at = seen;
      emit('cut', { conn: 'ws1', cursor: last, observer_tokens: at });
      await reached(at + cfg.gap);
      const ws2 = new Conn('ws2', cfg.ws, cfg.token);
      await ws2.opened;
      emit('resuming', { conn: 'ws2', since: last, observer_tokens: seen });
      // The WebSocket's cursor resumes an event stream too.
      const sse3 = new SSEStream('sse3', cfg.http, cfg.token, cfg.conversation, last);
      await subscribe(ws2, cfg.conversation, last);
      await sse3.open();
      await Promise.all([follow(ws2, id), sseFollow(sse3, id)]);
      sse3.close();
      await ws2.end();
    })();

    const sseSide = (async () => {
      let n = 0;
      let last = '';
      await sseFollow(sse1, id, (d) => {
        if (d.cursor) last = d.cursor;
        return tokens(d) && ++n >= cfg.cut;
      });
      sse1.close();
      const at = seen;
      emit('cut', { conn: 'sse1', cursor: last, observer_tokens: at });
      await reached(at + cfg.gap);
      const sse2 = new SSEStream('sse2', cfg.http, cfg.token, cfg.conversation, last);
      emit('resuming', { conn: 'sse2', since: last, observer_tokens: seen });
      await sse2.open();
      await sseFollow(sse2, id);
      sse2.close();
    })();

    await Promise.all([observed, wsSide, sseSide]);
    await observer.end();
  },

  async follow(cfg) {
    // Refused before any stream: no token.
    const res = await fetch(`${cfg.http}/v1/conversations/${encodeURIComponent(cfg.conversation)}/events`);
    emit('sse-refused', {
      http_status: res.status,
      content_type: res.headers.get('content-type'),
      www_authenticate: res.headers.get('www-authenticate'),
      body: tryJSON(await res.text()),
    });
    // POST first, then follow that request: the whole answer, then the end
    // of the stream.
    const id = await post(cfg.ingest, cfg.token, cfg.conversation, cfg.content);
    const s = new SSEStream('follow', cfg.http, cfg.token, cfg.conversation, '', '?follow=' + encodeURIComponent(id));
    await s.open();
    for (let e = await s.next(); e !== null; e = await s.next()) emit('sse', { conn: s.name, event: e, json: tryJSON(e.data) });
    emit('sse-end', { conn: s.name });
  },

  async errors(cfg) {
    // Upgrades: without a token, with a bad one (refused with the HTTP
    // error shape before any WebSocket exists), with the query token.
    await tryOpen('no-token', cfg.ws, '');
    await tryOpen('bad-token', cfg.ws, cfg.token.slice(0, -2) + 'xx');
    const q = new Conn('query-token', cfg.ws, cfg.token, { query: true });
    await q.opened;
    await subscribe(q, 'c1');
    await q.end();

    const c = new Conn('frames', cfg.ws, cfg.token);
    await c.opened;
    const steps = [
      ['unknown op', JSON.stringify({ op: 'frobnicate', conversation: 'c1' })],
      ['bad json', '{"op":"subscribe",'],
      ['not an object', '["subscribe"]'],
      ['unknown member', JSON.stringify({ op: 'subscribe', conversation: 'c1', user: 'someone-else' })],
      ['missing member', JSON.stringify({ op: 'subscribe' })],
      ['bad conversation', JSON.stringify({ op: 'subscribe', conversation: 'no spaces allowed' })],
      ['bad cursor', JSON.stringify({ op: 'subscribe', conversation: 'c1', since: 'not-a-cursor' })],
      ['ping', JSON.stringify({ op: 'ping' })],
      ['subscribe', JSON.stringify({ op: 'subscribe', conversation: 'c1' })],
      ['subscribe again', JSON.stringify({ op: 'subscribe', conversation: 'c1' })],
      // Nothing answers an unsubscribe that succeeds: the ping's pong is
      // the next frame.
      ['unsubscribe, ping', JSON.stringify({ op: 'unsubscribe', conversation: 'c1' }), JSON.stringify({ op: 'ping' })],
      ['unsubscribe again', JSON.stringify({ op: 'unsubscribe', conversation: 'c1' })],
      ['subscribe after unsubscribe', JSON.stringify({ op: 'subscribe', conversation: 'c1' })],
    ];
    for (const [step, ...texts] of steps) {
      texts.forEach((text) => c.ws.send(text));
      emit('step', { step, frame: await c.next() });
    }
    // Two subscribes at once, one replaying, one refused: the answers may
    // come in either order, and the error names its conversation.
    c.send({ op: 'subscribe', conversation: 'c2', since: 'earliest' });
    c.send({ op: 'subscribe', conversation: 'c1' });
    for (let i = 0; i < 2; i++) emit('step', { step: 'two subscribes', frame: await c.next() });
    await c.end();

    // A frame over 64 KiB.
    const big = new Conn('big', cfg.ws, cfg.token);
    await big.opened;
    big.send({ op: 'subscribe', conversation: 'x'.repeat(70 * 1024) });
    await big.closedWith();

    // A text frame that is not UTF-8. ws sends a Buffer given with
    // binary: false as a text frame, bytes unchecked; a loopback ws server
    // that skips validation first shows what goes on the wire.
    const bad = Buffer.from([0x7b, 0x22, 0x6f, 0x70, 0x22, 0x3a, 0x22, 0xc3, 0x28, 0xff, 0x22, 0x7d]); // {"op":"\xc3(\xff"}
    await selfCheck(bad);
    const u = new Conn('utf8', cfg.ws, cfg.token);
    await u.opened;
    u.ws.send(bad, { binary: false });
    await u.closedWith();
  },

  async isolation(cfg) {
    const a = new Conn('owner', cfg.ws, cfg.token);
    await a.opened;
    await subscribe(a, cfg.conversation);
    const aid = await post(cfg.ingest, cfg.token, cfg.conversation, cfg.content);
    let cursor = '';
    await follow(a, aid, (f) => { if (f.cursor) cursor = f.cursor; return false; });
    emit('owner-cursor', { cursor });

    // The other user, same conversation name: the whole retained stream,
    // then a resume from the owner's cursor on a connection of its own.
    const b = new Conn('other', cfg.ws, cfg.other);
    await b.opened;
    await subscribe(b, cfg.conversation, 'earliest');
    const b2 = new Conn('other-cursor', cfg.ws, cfg.other);
    await b2.opened;
    const got = await subscribe(b2, cfg.conversation, cursor);
    const bid = await post(cfg.ingest, cfg.other, cfg.conversation, cfg.content);
    await follow(b, bid);
    if (got && got.type === 'subscribed') await follow(b2, bid);
    for (const c of [a, b, b2]) {
      await c.end();
    }
  },

  async expiry(cfg) {
    const c = new Conn('expiring', cfg.ws, cfg.token);
    await c.opened;
    await subscribe(c, cfg.conversation);
    await c.closedWith();
    await tryOpen('same-token', cfg.ws, cfg.token);
    const fresh = new Conn('fresh-token', cfg.ws, cfg.fresh);
    await fresh.opened;
    await subscribe(fresh, cfg.conversation);
    await fresh.end();
  },

  async shutdown(cfg) {
    const c = new Conn('stopping', cfg.ws, cfg.token);
    await c.opened;
    await subscribe(c, cfg.conversation);
    emit('ready', {});
    await c.closedWith();
  },
};

// tryOpen opens a connection and reports whether the upgrade succeeded
// (then closes it) or what status refused it.
async function tryOpen(name, url, token) {
  const c = new Conn(name, url, token);
  try {
    await c.opened;
    emit('opened', { conn: name });
    c.ws.close(1000);
  } catch (err) {
    emit('upgrade-failed', { conn: name, http_status: err.status || 0 });
  }
}

// selfCheck sends b as a text frame to a loopback ws server that does not
// validate UTF-8, and reports the opcode and the bytes it received.
async function selfCheck(b) {
  const server = http.createServer();
  const wss = new WebSocket.Server({ server, skipUTF8Validation: true });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const received = new Promise((resolve) => {
    wss.on('connection', (s) => s.on('message', (data, isBinary) => resolve({ data, isBinary })));
  });
  const c = new WebSocket(`ws://127.0.0.1:${server.address().port}`);
  await new Promise((resolve, reject) => { c.once('open', resolve); c.once('error', reject); });
  c.send(b, { binary: false });
  const { data, isBinary } = await received;
  emit('self-check', { sent: b.toString('hex'), received: Buffer.from(data).toString('hex'), text_frame: !isBinary });
  c.terminate();
  wss.close();
  server.close();
}

async function main() {
  const [name, json] = process.argv.slice(2);
  const run = scenarios[name];
  if (!run || !json) throw new Error(`usage: node stream.js ${Object.keys(scenarios).join('|')} CONFIG_JSON`);
  deadline(25000);
  await run(JSON.parse(json));
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`stream.js: ${err.stack || err}\n`);
    process.exit(1);
  },
);
