// Unit checks of turnpike.js's streamEvents, run in the browser by
// sse_browser_test.go against a fake EventSource. It evaluates to the list
// of failures.
(async () => {
  const tp = await import('/ui/turnpike.js');
  const failures = [];
  const check = (ok, what) => { if (!ok) failures.push(what); };
  const show = (v) => JSON.stringify(v);

  // FakeSource behaves as EventSource does: named events go to their
  // listeners; a dropped connection fires a plain 'error' while
  // readyState is CONNECTING (0); a refusal leaves it CLOSED (2).
  class FakeSource {
    static all = [];
    constructor(url) { this.url = url; this.readyState = 0; this.listeners = {}; this.closed = false; FakeSource.all.push(this); }
    addEventListener(type, fn) { (this.listeners[type] ??= []).push(fn); }
    close() { this.closed = true; this.readyState = 2; }
    emit(type, data) { for (const fn of this.listeners[type] ?? []) fn({ type, data: data === undefined ? undefined : JSON.stringify(data) }); }
    drop() { this.readyState = 0; this.emit('error'); }
    refuse() { this.readyState = 2; this.emit('error'); }
  }
  const ev = (type, seq, extra = {}) => ({
    type, conversation: 'c1', request_id: 'r1', run_id: 'runA', seq, ts: 1, cursor: `1-0-${seq}`, ...extra,
  });

  // A live stream, its URL, events once, a reconnection before any event.
  const got = [], gaps = [], states = [];
  const s = tp.streamEvents('c 1', {
    streamURL: 'wss://gw.test/v1/stream', token: 'T0K', EventSource: FakeSource,
    onEvent: (e) => got.push(e), onGap: (g) => gaps.push(g), onState: (st) => states.push(st),
  });
  const a = FakeSource.all[0];
  const u = new URL(a.url);
  check(u.origin === 'https://gw.test' && u.pathname === '/v1/conversations/c%201/events', `stream URL from streamURL: ${a.url}`);
  check(u.searchParams.get('access_token') === 'T0K' && !u.searchParams.has('since'), `live stream query: ${u.search}`);
  a.emit('subscribed', { type: 'subscribed', conversation: 'c 1' });
  await s.ready;
  a.drop(); // before any event: the live stream may have missed some
  a.emit('subscribed', { type: 'subscribed', conversation: 'c 1' });
  check(gaps.length === 1, `a live stream reconnected before its first event reports a gap: ${show(gaps)}`);
  check(states.includes('reconnecting'), `states: ${show(states)}`);
  s.close();
  check(a.closed && states.at(-1) === 'closed', 'close closes the EventSource');

  // Resume: events once (a duplicate dropped), cursor_expired goes live with onGap.
  const got2 = [], gaps2 = [];
  const r = tp.streamEvents('c1', {
    eventsURL: 'http://gw.test/', token: 'T', since: '1-0-1', EventSource: FakeSource,
    onEvent: (e) => got2.push(e), onGap: (g) => gaps2.push(g),
  });
  const b = FakeSource.all.at(-1);
  check(new URL(b.url).searchParams.get('since') === '1-0-1', `since in the URL: ${b.url}`);
  b.emit('subscribed', { type: 'subscribed', conversation: 'c1' });
  b.emit('token', ev('token', 2, { delta: 'a' }));
  b.emit('token', ev('token', 2, { delta: 'a' }));
  b.emit('token', { ...ev('token', 3), conversation: 'other' }); // not this stream's: ignored
  check(got2.length === 1 && r.cursor === '1-0-2', `events once, cursor follows: ${got2.length} ${r.cursor}`);
  b.drop();
  b.emit('error', { type: 'error', code: 'cursor_expired', message: 'gone' });
  const c = FakeSource.all.at(-1);
  check(b.closed && c !== b && !new URL(c.url).searchParams.has('since'), `cursor_expired reopens live: ${c.url}`);
  c.emit('subscribed', { type: 'subscribed', conversation: 'c1' });
  check(gaps2.length === 1, `cursor_expired reports a gap once live: ${show(gaps2)}`);
  r.close();

  // follow: only that request, and closed after its run.completed.
  const got3 = [], gaps3 = [];
  const f = tp.streamEvents('c1', {
    eventsURL: 'http://gw.test', token: 'T', follow: 'r1', EventSource: FakeSource,
    onEvent: (e) => got3.push(e), onGap: (g) => gaps3.push(g),
  });
  const d = FakeSource.all.at(-1);
  check(new URL(d.url).searchParams.get('follow') === 'r1', `follow in the URL: ${d.url}`);
  d.emit('subscribed', { type: 'subscribed', conversation: 'c1' });
  d.drop(); // before any event: the stream replays from earliest, no gap
  d.emit('subscribed', { type: 'subscribed', conversation: 'c1' });
  d.emit('run.completed', ev('run.completed', 4, { status: 'complete' }));
  check(got3.length === 1 && d.closed, 'a followed stream closes after its run.completed');
  check(gaps3.length === 0, `a followed stream reconnected before its first event has no gap: ${show(gaps3)}`);
  f.close();

  // A refusal (not 200) ends the stream with onError.
  const errs = [];
  const g = tp.streamEvents('c1', { eventsURL: 'http://gw.test', token: 'bad', EventSource: FakeSource, onError: (e) => errs.push(e) });
  FakeSource.all.at(-1).refuse();
  let rejected = null;
  await g.ready.catch((e) => { rejected = e; });
  check(errs.length === 1 && rejected instanceof tp.TurnpikeError && rejected.code === 'refused', `a refusal: ${show(errs)} ${rejected}`);

  // With a token provider, an expired token's error event and a refusal each
  // reopen the stream with a fresh token from the last cursor: every event
  // once, in order. Refused again before the gateway confirms it, it is over.
  const until = async (cond) => { for (let i = 0; i < 200 && !cond(); i++) await new Promise((res) => setTimeout(res, 0)); };
  const asked = [], got4 = [], errs4 = [];
  let issued = 0;
  const h = tp.streamEvents('c1', {
    eventsURL: 'http://gw.test', token: 'T0', EventSource: FakeSource,
    getToken: async (info) => { asked.push(info); return `T${++issued}`; },
    onEvent: (e) => got4.push(e.seq), onError: (e) => errs4.push(e.code),
  });
  const h1 = FakeSource.all.at(-1);
  h1.emit('subscribed', { type: 'subscribed', conversation: 'c1' });
  h1.emit('token', ev('token', 1));
  h1.emit('token', ev('token', 2));
  h1.emit('error', { type: 'error', code: 'unauthenticated', message: 'token expired: reconnect with a fresh token and Last-Event-ID' });
  check(h1.closed, 'the stream of an expired token is closed: EventSource would retry it with that token');
  await until(() => FakeSource.all.at(-1) !== h1);
  const h2 = FakeSource.all.at(-1), u2 = new URL(h2.url);
  check(asked.length === 1 && asked[0].reason === 'expired', `getToken after the expiry: ${show(asked)}`);
  check(h2 !== h1 && u2.searchParams.get('access_token') === 'T1' && u2.searchParams.get('since') === '1-0-2',
    `reopened with the fresh token from the last cursor: ${h2.url}`);
  h2.emit('subscribed', { type: 'subscribed', conversation: 'c1' });
  h2.emit('token', ev('token', 2)); // replayed: not delivered twice
  h2.emit('token', ev('token', 3));
  h2.refuse(); // an EventSource reconnection with the expired token, refused
  await until(() => FakeSource.all.at(-1) !== h2);
  const h3 = FakeSource.all.at(-1), u3 = new URL(h3.url);
  check(asked.length === 2 && asked[1].reason === 'unauthenticated', `getToken after a refusal: ${show(asked)}`);
  check(h3 !== h2 && u3.searchParams.get('access_token') === 'T2' && u3.searchParams.get('since') === '1-0-3',
    `reopened after the refusal from the last cursor: ${h3.url}`);
  h3.refuse(); // refused again, fresh token or not: the stream is over
  await until(() => errs4.length > 0);
  check(show(got4) === '[1,2,3]' && h.cursor === '1-0-3', `every event once, in order: ${show(got4)} ${h.cursor}`);
  check(show(errs4) === '["refused"]' && asked.length === 2, `a second refusal ends the stream: ${show(errs4)} ${show(asked)}`);

  // A provider that gives no token ends the stream as unauthenticated.
  const errs5 = [];
  tp.streamEvents('c1', {
    eventsURL: 'http://gw.test', token: 'T0', EventSource: FakeSource, getToken: async () => '', onError: (e) => errs5.push(e),
  });
  const k = FakeSource.all.at(-1);
  k.emit('subscribed', { type: 'subscribed', conversation: 'c1' });
  k.emit('error', { type: 'error', code: 'unauthenticated', message: 'token expired' });
  await until(() => errs5.length > 0);
  check(errs5.length === 1 && errs5[0].status === 401 && errs5[0].code === 'unauthenticated' && FakeSource.all.at(-1) === k,
    `no fresh token: ${show(errs5.map((e) => e.code))}`);
  return failures;
})()
