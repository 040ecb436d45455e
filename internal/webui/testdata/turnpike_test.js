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
  check(!new URL(s1.url).searchParams.has('shard'), `no shard hint before the gateway named one: ${s1.url}`);
  s1.recv({ type: 'subscribed', conversation: 'c1', shard: 3 });
  await sub.ready;
  check(sub.shard === 3, `the subscription keeps its shard: ${sub.shard}`);
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
  check(new URL(s2.url).searchParams.get('shard') === '3', `the reconnect carries the shard hint: ${s2.url}`);
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

  // state.changed is delivered; a type this client does not know is not,
  // but the subscription's cursor moves past it.
  s2.recv(ev('state.changed', 1, { request_id: 'r6', run_id: 'runG', keys: { conversation: ['cart'] }, cursor: 'cur-13a' }));
  s2.recv(ev('future.event', 2, { request_id: 'r6', run_id: 'runG', cursor: 'cur-13b' }));
  s2.recv({ type: 'future.frame', conversation: 'c9', cursor: 'cur-x' }); // another conversation's: c1's cursor stays
  check(got.at(-1).type === 'state.changed' && show(got.at(-1).keys) === '{"conversation":["cart"]}',
    `state.changed is delivered with its keys: ${show(got.at(-1))}`);
  check(got.filter((e) => e.type.startsWith('future.')).length === 0, `an unknown type is not delivered: ${show(got.at(-1))}`);
  check(sub.cursor === 'cur-13b', `the cursor moves past an unknown event: ${sub.cursor}`);

  // A duplicate's completion: a fresh run_id, no tokens: the text must be read from history.
  s2.recv(ev('run.completed', 1, { run_id: 'runC', status: 'complete', cursor: 'cur-14' }));
  check(answers.get('r1').needsReload && answers.get('r1').text === '', `a completion without tokens needs a reload: ${show(answers.get('r1'))}`);
  // Joining mid-answer: tokens without run.started.
  s2.recv(ev('token', 5, { request_id: 'r2', run_id: 'runD', delta: 'tail', cursor: 'cur-15' }));
  s2.recv(ev('run.completed', 6, { request_id: 'r2', run_id: 'runD', status: 'incomplete', cursor: 'cur-16' }));
  check(answers.get('r2').joinedLate && answers.get('r2').needsReload, `an answer joined late needs a reload: ${show(answers.get('r2'))}`);
  // Tokens of two agents: history holds one message per agent, read it.
  s2.recv(ev('run.started', 1, { request_id: 'r4', run_id: 'runF', cursor: 'cur-15a' }));
  s2.recv(ev('token', 2, { request_id: 'r4', run_id: 'runF', delta: 'ORD-7 left', agent: 'orders', cursor: 'cur-15b' }));
  s2.recv(ev('token', 3, { request_id: 'r4', run_id: 'runF', delta: 'On its way.', agent: 'desk', cursor: 'cur-15c' }));
  s2.recv(ev('run.completed', 4, { request_id: 'r4', run_id: 'runF', status: 'complete', cursor: 'cur-15d' }));
  check(answers.get('r4').severalAgents && answers.get('r4').needsReload, `an answer of two agents needs a reload: ${show(answers.get('r4'))}`);
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
  s3.recv({ type: 'subscribed', conversation: 'c2', shard: 1 });
  await sub2.ready;
  s3.drop();
  await until(() => FakeSocket.all.length === 4, 'the reconnect of two subscriptions');
  const s4 = latest();
  check(new URL(s4.url).searchParams.get('shard') === '3', `two shards, one each: the earliest subscription's hint: ${s4.url}`);
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

  // Two subscribes pending: the error names the one refused, and may come
  // before the other's subscribed (a replaying subscribe is answered later).
  const refusedSubs = [];
  const sub4 = c.subscribe('c4', { onEvent: () => {}, onError: () => refusedSubs.push('c4') });
  const sub5 = c.subscribe('c5', { onEvent: () => {}, onError: () => refusedSubs.push('c5') });
  s4.recv({ type: 'error', code: 'rate_limited', message: 'too many subscribes', conversation: 'c5' });
  s4.recv({ type: 'subscribed', conversation: 'c4' });
  await sub4.ready;
  let rejected5 = null;
  await sub5.ready.catch((e) => { rejected5 = e; });
  check(rejected5?.code === 'rate_limited' && show(refusedSubs) === '["c5"]', `the error ends the subscription it names: ${rejected5}, ${show(refusedSubs)}`);
  sub4.close();

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

  // A token provider: an HTTP 401 gets a fresh token and the call is made once more.
  const tcalls = [];
  const tq = [
    [401, { error: { code: 'unauthenticated', message: 'token expired' } }],
    [200, { conversations: [], next_before: null }],
    [401, { error: { code: 'unauthenticated', message: 'bad signature' } }], // the check after a failed open
    [200, { conversations: [], next_before: null }], // the check after a 4001 close
    [401, { error: { code: 'unauthenticated', message: 'refused' } }], // a provider that fails
    [401, { error: { code: 'unauthenticated', message: 'refused' } }], // and the check of its socket
  ];
  const tfetch = async (url, init) => {
    tcalls.push({ url, init });
    const [status, body] = tq.shift();
    return new Response(JSON.stringify(body), { status });
  };
  const reasons = [];
  let minted = 0;
  let provide = async (info) => { reasons.push(info.reason); return `NEW${++minted}`; };
  const rstates = [];
  const r = tp.connect({
    streamURL: 'ws://gw.test/v1/stream', token: 'OLD', baseURL: 'http://api.test', fetch: tfetch, WebSocket: FakeSocket,
    backoffMin: 5, backoffMax: 20, getToken: (info) => provide(info), onState: (s, info) => rstates.push([s, info]),
  });
  const auth = (call) => call.init.headers.Authorization;
  await r.conversations();
  check(tcalls.length === 2 && auth(tcalls[0]) === 'Bearer OLD' && auth(tcalls[1]) === 'Bearer NEW1' && r.token === 'NEW1' &&
    show(reasons) === '["unauthenticated"]', `a 401 is retried once with a fresh token: ${show(tcalls.map(auth))} ${show(reasons)}`);
  // A socket that cannot open: its token is checked, refused, replaced, and the client connects with the new one.
  const tokenOf = (ws) => new URL(ws.url).searchParams.get('access_token');
  const rsub = r.subscribe('c9', { onEvent: () => {} });
  check(tokenOf(latest()) === 'NEW1', `the socket opens with the current token: ${latest().url}`);
  latest().drop();
  await until(() => tokenOf(latest()) === 'NEW2', 'a socket with the token that replaced the refused one');
  check(tcalls[2]?.url === 'http://api.test/v1/conversations?limit=1' && auth(tcalls[2]) === 'Bearer NEW1',
    `the refused socket's token is checked over HTTP: ${show(tcalls[2])}`);
  const w2 = latest();
  w2.open();
  w2.recv({ type: 'subscribed', conversation: 'c9' });
  await rsub.ready;
  // Too slow (4008): reconnect without checking the token.
  w2.readyState = 3;
  w2.onclose?.({ code: 4008 });
  await until(() => latest() !== w2, 'a reconnect after 4008');
  check(tcalls.length === 3 && tokenOf(latest()) === 'NEW2', `a 4008 close does not check the token: ${tcalls.length} calls`);
  const w3 = latest();
  w3.open();
  w3.recv({ type: 'subscribed', conversation: 'c9' });
  // A 4xxx close other than 4008 and 4401: the token is checked; still good, it is kept.
  w3.readyState = 3;
  w3.onclose?.({ code: 4001 });
  await until(() => latest() !== w3 && tcalls.length === 4, 'a reconnect and a token check after 4001');
  check(tokenOf(latest()) === 'NEW2' && minted === 2, `a token the API accepts is kept: ${latest().url}, minted ${minted}`);
  // A provider that fails: the 401 stands, and the client says it is unauthenticated.
  provide = async () => { throw new Error('no way to sign in'); };
  r.setToken('STALE');
  let refused = null;
  await r.history('c9').catch((e) => { refused = e; });
  latest().drop();
  await until(() => rstates.some(([, info]) => info?.unauthenticated), 'the unauthenticated state');
  check(refused?.status === 401 && r.token === 'STALE', `without a fresh token the 401 stands: ${refused}`);
  r.close();

  // The gateway closes a socket whose token expired with 4401: the client
  // asks the token provider for a fresh one at once (no HTTP check:
  // the token is known to be stale) and resumes from its cursor.
  let fresh = 0;
  const why = [];
  const x = tp.connect({
    streamURL: 'ws://gw.test/v1/stream', token: 'OLD', WebSocket: FakeSocket, backoffMin: 5, backoffMax: 20,
    getToken: async (info) => { why.push(info.reason); return `NEW${++fresh}`; },
  });
  const xGot = [];
  const xSub = x.subscribe('c1', { onEvent: (e) => xGot.push(e.seq) });
  const x1 = latest();
  x1.open();
  x1.recv({ type: 'subscribed', conversation: 'c1' });
  await xSub.ready;
  x1.recv(ev('token', 2, { delta: 'a' }));
  x1.readyState = 3;
  x1.onclose?.({ code: tp.CLOSE_TOKEN_EXPIRED });
  await until(() => latest() !== x1, 'the reconnect after the token expired');
  const x2 = latest();
  check(new URL(x2.url).searchParams.get('access_token') === 'NEW1', `the reconnect uses the fresh token: ${x2.url}`);
  x2.open();
  check(show(x2.sent) === '[{"op":"subscribe","conversation":"c1","since":"cur-2"}]', `resubscribe from the cursor after expiry: ${show(x2.sent)}`);
  x2.recv({ type: 'subscribed', conversation: 'c1' });
  x2.recv(ev('token', 3, { delta: 'b' }));
  check(show(xGot) === '[2,3]' && show(why) === '["expired"]', `every event once across the token's expiry: ${show(xGot)} ${show(why)}`);
  x.close();
  return failures;
})()
