// Unit checks of turnpike.js, run in the browser by browser_test.go against
// a fake WebSocket and a fake fetch. It evaluates to the list of failures.
(async () => {
  const tp = await import('/ui/turnpike.js');
  const failures = [];
  const check = (ok, what) => { if (!ok) failures.push(what); };
  const until = async (cond, what) => {
    for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
    check(cond(), `timed out waiting for ${what}`);
  };
  const show = (v) => JSON.stringify(v);

  class FakeSocket {
    static all = [];
    constructor(url) { this.url = url; this.sent = []; this.readyState = 0; FakeSocket.all.push(this); }
    send(d) { this.sent.push(JSON.parse(d)); }
    close() { if (this.readyState !== 3) { this.readyState = 3; setTimeout(() => this.onclose?.({ code: 1005 }), 0); } }
    open() { this.readyState = 1; this.onopen?.(); }
    recv(f) { this.onmessage?.({ data: JSON.stringify(f) }); }
    drop() { this.readyState = 3; this.onclose?.({ code: 1006 }); }
  }
  const latest = () => FakeSocket.all.at(-1);

  const states = [];
  const c = tp.connect({
    streamURL: 'ws://gw.test/v1/stream', token: 'T0K', WebSocket: FakeSocket,
    backoffMin: 5, backoffMax: 20, onState: (s) => states.push(s),
  });
  const got = [];
  const gaps = [];
  const answers = new tp.Answers();
  const sub = c.subscribe('c1', { onEvent: (ev) => { got.push(ev); answers.apply(ev); }, onGap: (g) => gaps.push(g) });
  check(FakeSocket.all.length === 1, 'subscribe opens one socket');
  const s1 = latest();
  check(new URL(s1.url).searchParams.get('access_token') === 'T0K', `token in the socket URL: ${s1.url}`);
  s1.open();
  check(show(s1.sent) === '[{"op":"subscribe","conversation":"c1"}]', `a live subscribe is sent on open: ${show(s1.sent)}`);
  s1.recv({ type: 'subscribed', conversation: 'c1' });
  await sub.ready;
  check(gaps.length === 0, 'no gap on the first subscription');

  const ev = (type, seq, extra = {}) => ({
    type, conversation: 'c1', request_id: 'r1', run_id: 'runA', seq, ts: 1, cursor: `cur-${seq}`, ...extra,
  });
  s1.recv(ev('run.started', 1));
  s1.recv(ev('token', 2, { delta: 'Hel', agent: 'assistant', role: 'assistant' }));
  s1.recv(ev('token', 2, { delta: 'Hel', agent: 'assistant', role: 'assistant' })); // a duplicate: dropped
  check(answers.get('r1').text === 'Hel', `a duplicated event is applied once: ${show(answers.get('r1'))}`);

  // The socket drops: the client reconnects and resumes after the last cursor.
  s1.drop();
  check(states.includes('reconnecting'), `state reconnecting after a drop: ${show(states)}`);
  await until(() => FakeSocket.all.length === 2, 'the reconnect');
  const s2 = latest();
  s2.open();
  check(show(s2.sent) === '[{"op":"subscribe","conversation":"c1","since":"cur-2"}]', `resubscribe from the last cursor: ${show(s2.sent)}`);
  s2.recv({ type: 'subscribed', conversation: 'c1' });
  s2.recv(ev('token', 3, { delta: 'lo' }));
  check(answers.get('r1').text === 'Hello', `text continues across the reconnect: ${show(answers.get('r1'))}`);

  // A re-run: a new run_id starts the text over; late events of the old run are dropped.
  s2.recv(ev('run.started', 1, { run_id: 'runB', cursor: 'cur-10' }));
  s2.recv(ev('token', 4, { delta: ' stale', cursor: 'cur-11' }));
  s2.recv(ev('token', 2, { run_id: 'runB', delta: 'Hi again', cursor: 'cur-12' }));
  s2.recv(ev('run.completed', 3, { run_id: 'runB', status: 'complete', cursor: 'cur-13' }));
  const a = answers.get('r1');
  check(a.text === 'Hi again' && a.status === 'complete' && a.restarted && a.persisted && !a.needsReload,
    `a re-run replaces the older run's text: ${show(a)}`);
  check(got.map((e) => `${e.type}:${e.run_id}:${e.seq}`).join(' ') ===
    'run.started:runA:1 token:runA:2 token:runA:3 run.started:runB:1 token:runB:2 run.completed:runB:3',
  `events delivered: ${got.map((e) => `${e.type}:${e.run_id}:${e.seq}`).join(' ')}`);
  check(got[3].rerun === true && !got[0].rerun, 'the first event of the new run carries rerun');

  // A duplicate's completion: a fresh run_id, no tokens: the text must be read from history.
  s2.recv(ev('run.completed', 1, { run_id: 'runC', status: 'complete', cursor: 'cur-14' }));
  check(answers.get('r1').needsReload && answers.get('r1').text === '', `a completion without tokens needs a reload: ${show(answers.get('r1'))}`);
  // Joining mid-answer: tokens without run.started.
  s2.recv(ev('token', 5, { request_id: 'r2', run_id: 'runD', delta: 'tail', cursor: 'cur-15' }));
  s2.recv(ev('run.completed', 6, { request_id: 'r2', run_id: 'runD', status: 'incomplete', cursor: 'cur-16' }));
  check(answers.get('r2').joinedLate && answers.get('r2').needsReload, `an answer joined late needs a reload: ${show(answers.get('r2'))}`);
  // Nothing persisted.
  s2.recv(ev('run.completed', 1, { request_id: 'r3', run_id: 'runE', status: 'rejected', cursor: 'cur-17' }));
  check(!answers.get('r3').persisted && !answers.get('r3').needsReload, `rejected is not persisted: ${show(answers.get('r3'))}`);

  // An expired cursor: resubscribe live and report a gap.
  s2.recv({ type: 'error', code: 'cursor_expired', message: 'since: cursor is older than the retained stream' });
  await until(() => FakeSocket.all.length === 3, 'the reconnect after cursor_expired');
  const s3 = latest();
  s3.open();
  check(show(s3.sent) === '[{"op":"subscribe","conversation":"c1"}]', `after cursor_expired, a live subscribe: ${show(s3.sent)}`);
  s3.recv({ type: 'subscribed', conversation: 'c1' });
  check(gaps.length === 1, `cursor_expired reports one gap: ${show(gaps)}`);
  s3.recv(ev('run.started', 1, { request_id: 'r4', run_id: 'runF', cursor: 'cur-20' }));

  // A live subscription that reconnects before its first event may have missed some.
  const gaps2 = [];
  const sub2 = c.subscribe('c2', { onEvent: () => {}, onGap: (g) => gaps2.push(g) });
  check(show(s3.sent.at(-1)) === '{"op":"subscribe","conversation":"c2"}', `a second subscription on the open socket: ${show(s3.sent)}`);
  s3.recv({ type: 'subscribed', conversation: 'c2' });
  await sub2.ready;
  s3.drop();
  await until(() => FakeSocket.all.length === 4, 'the reconnect of two subscriptions');
  const s4 = latest();
  s4.open();
  check(s4.sent.length === 2 && s4.sent.some((f) => f.conversation === 'c1' && f.since === 'cur-20') &&
    s4.sent.some((f) => f.conversation === 'c2' && f.since === undefined), `both resubscribe: ${show(s4.sent)}`);
  s4.recv({ type: 'subscribed', conversation: 'c1' });
  s4.recv({ type: 'subscribed', conversation: 'c2' });
  check(gaps2.length === 1 && gaps.length === 1, `only the live subscription without events reports a gap: ${show([gaps, gaps2])}`);

  // The gateway refuses a subscription: it ends, and ready rejects.
  const errors = [];
  const sub3 = c.subscribe('c3', { onEvent: () => {}, onError: (e) => errors.push(e) });
  s4.recv({ type: 'error', code: 'invalid_argument', message: 'too many subscriptions' });
  let rejected = null;
  await sub3.ready.catch((e) => { rejected = e; });
  check(rejected instanceof tp.TurnpikeError && rejected.code === 'invalid_argument' && errors.length === 1, `a refused subscription rejects: ${rejected}`);

  // Unsubscribing sends the frame; no further events reach it.
  sub2.close();
  check(show(s4.sent.at(-1)) === '{"op":"unsubscribe","conversation":"c2"}', `unsubscribe frame: ${show(s4.sent.at(-1))}`);
  c.close();
  check(states.at(-1) === 'closed', `closed at the end: ${show(states)}`);

  // HTTP.
  const calls = [];
  const answersQueue = [
    [503, { error: { code: 'unavailable', message: 'later' } }, { 'Retry-After': '0' }],
    [202, { request_id: 'i-1', conversation: 'a b', status: 'queued' }],
    [200, { messages: [], next_before: null }],
    [200, { conversations: [], next_before: null }],
    [404, { error: { code: 'not_found', message: 'conversation not found' } }],
    [503, { error: { code: 'unavailable', message: 'down' } }],
  ];
  const fakeFetch = async (url, init) => {
    calls.push({ url, init });
    const [status, body, headers = {}] = answersQueue.shift();
    return new Response(JSON.stringify(body), { status, headers });
  };
  const h = tp.connect({ streamURL: 'ws://gw.test/v1/stream', token: 'T0K', baseURL: 'http://api.test/', fetch: fakeFetch, WebSocket: FakeSocket });
  const res = await h.send('a b', 'hello', { strategy: 'reject', idempotencyKey: 'k1' });
  check(res.request_id === 'i-1' && calls.length === 2, `send retries a 503 with its key: ${show(res)} after ${calls.length} calls`);
  const post = calls[1];
  check(post.url === 'http://api.test/v1/conversations/a%20b/messages' && post.init.method === 'POST', `send URL: ${post.url}`);
  check(post.init.headers['Idempotency-Key'] === 'k1' && post.init.headers.Authorization === 'Bearer T0K' &&
    post.init.body === '{"content":"hello","strategy":"reject"}', `send headers and body: ${show(post.init)}`);
  await h.history('c1', { limit: 5, before: 9 });
  check(calls[2].url === 'http://api.test/v1/conversations/c1/messages?limit=5&before=9', `history URL: ${calls[2].url}`);
  await h.conversations({ before: '1767319445678:x:y' });
  check(calls[3].url === 'http://api.test/v1/conversations?before=1767319445678%3Ax%3Ay', `conversations URL: ${calls[3].url}`);
  let nf = null;
  await h.history('zz').catch((e) => { nf = e; });
  check(nf instanceof tp.TurnpikeError && nf.status === 404 && nf.code === 'not_found', `a 404 is a TurnpikeError: ${nf}`);
  let un = null;
  await h.send('c1', 'x').catch((e) => { un = e; });
  check(un?.code === 'unavailable' && calls.length === 6, `without a key a 503 is not retried: ${un} after ${calls.length} calls`);
  h.close();

  // The gateway closes a socket whose token expired with 4401: the client
  // takes a fresh token from tokenSource and resumes from its cursor.
  let fresh = 0;
  const r = tp.connect({
    streamURL: 'ws://gw.test/v1/stream', token: 'OLD', WebSocket: FakeSocket, backoffMin: 5, backoffMax: 20,
    tokenSource: async () => `NEW${++fresh}`,
  });
  const rGot = [];
  const rSub = r.subscribe('c1', { onEvent: (e) => rGot.push(e.seq) });
  const r1 = latest();
  r1.open();
  r1.recv({ type: 'subscribed', conversation: 'c1' });
  await rSub.ready;
  r1.recv(ev('token', 2, { delta: 'a' }));
  r1.readyState = 3;
  r1.onclose?.({ code: tp.CLOSE_TOKEN_EXPIRED });
  await until(() => latest() !== r1, 'the reconnect after the token expired');
  const r2 = latest();
  check(new URL(r2.url).searchParams.get('access_token') === 'NEW1', `the reconnect uses the fresh token: ${r2.url}`);
  r2.open();
  check(show(r2.sent) === '[{"op":"subscribe","conversation":"c1","since":"cur-2"}]', `resubscribe from the cursor after expiry: ${show(r2.sent)}`);
  r2.recv({ type: 'subscribed', conversation: 'c1' });
  r2.recv(ev('token', 3, { delta: 'b' }));
  check(show(rGot) === '[2,3]', `every event once across the token's expiry: ${show(rGot)}`);
  r.close();
  return failures;
})()
