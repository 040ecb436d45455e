// turnpike.js: Turnpike's browser client. One ES module, no dependencies.
//
//   import { connect, Answers } from '/ui/turnpike.js';
//
//   const tp = connect({ streamURL: 'ws://localhost:8081/v1/stream', token });
//   const answers = new Answers();
//   const sub = tp.subscribe('c1', {
//     onEvent(ev) { const a = answers.apply(ev); if (a) render(a); },
//     onGap() { reloadHistory(); },   // events may have been missed: re-read history
//   });
//   await sub.ready;                  // the gateway confirmed the subscription
//   await tp.send('c1', 'hello', { idempotencyKey: crypto.randomUUID() });
//
// The client keeps one WebSocket to the push gateway for all its
// subscriptions. When it drops, it reconnects with exponential backoff and
// resubscribes every conversation from the cursor of the last event it
// delivered, so no event is lost or delivered twice. A reconnecting socket
// carries the shard hint (?shard=, docs/api.md "Shard hints") the gateway
// named in its subscribed frames, so that an edge routing by shard sends it
// to the replica that reads those conversations' partition; with
// subscriptions of several shards it sends the shard most of them share, and
// the replica it reaches also reads the others' partitions (the cost of one
// socket; open one client per shard to avoid it). It also handles run_id:
// when a request is re-run (a worker failed), the first event of the new run
// carries `rerun: true` and events of the older run that arrive late are
// dropped; Answers applies that to the text it accumulates. A request may
// complete more than once (a redelivery re-announces its outcome in a new
// run without run.started: the turn's artifact.saved, if it saved any, then
// run.completed, same status): the last run wins.
//
// HTTP calls go to the ingest API at baseURL (default: the page's origin).
// They reject with a TurnpikeError carrying the API's error code.
//
// Tokens: with a token provider (getToken), a refused or expired token is
// replaced without the caller noticing: an HTTP 401 fetches a new token and
// retries the call once, and a WebSocket that cannot open (browsers do not
// say why) or is closed with a 4xxx code other than 4008 has its token
// checked over HTTP first, and replaced when the API refuses it. An event
// stream (streamEvents) with a provider reopens with a fresh token from its
// cursor when the gateway ends it because its token expired, or refuses it.

const PERSISTED = new Set(['complete', 'incomplete', 'cancelled', 'interrupted']);
/** The close code of a socket whose token expired. */
export const CLOSE_TOKEN_EXPIRED = 4401;

// The stream event types this client delivers (docs/api.md "Stream events").
// A frame of another type (a newer gateway's event) is skipped; its cursor
// still moves the subscription, so that a resume starts after it.
const EVENT_TYPES = new Set(['run.started', 'token', 'notice', 'agent.transfer', 'run.interrupted', 'state.changed', 'artifact.saved', 'run.completed']);

/** An error answer of the API, or a network failure (status 0, code "network"). */
export class TurnpikeError extends Error {
  /**
   * @param {number} status HTTP status, 0 for a network failure
   * @param {string} code API error code: invalid_argument, unauthenticated, not_found,
   *   payload_too_large, rate_limited, unavailable, internal, or network
   * @param {string} message human-readable text
   * @param {number} retryAfter milliseconds to wait before retrying (Retry-After), or 0
   */
  constructor(status, code, message, retryAfter = 0) {
    super(message);
    this.name = 'TurnpikeError';
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }
}

/**
 * Creates a client. Nothing connects until the first subscribe.
 * @param {object} options
 * @param {string} options.streamURL the push gateway, e.g. "ws://localhost:8081/v1/stream"
 * @param {string} options.token bearer JWT (sent as ?access_token= on the WebSocket)
 * @param {(info: {reason: string, status: number, code: string}) => Promise<string>} [options.getToken]
 *   token provider: called when the API refused the token (reason "unauthenticated", after an
 *   HTTP 401, or reason "expired" when the gateway closed the socket with 4401 because the
 *   token expired) to get a fresh one. One call at a time; a rejection keeps the old token (the
 *   refused call then rejects with its 401).
 * @param {string} [options.baseURL] the ingest API, default "" (the page's origin)
 * @param {(state: string, info: object) => void} [options.onState] connection state changes:
 *   "idle", "connecting", "open", "reconnecting" (info: {attempt, delay, code, unauthenticated}),
 *   "closed"; `unauthenticated` is true when the API refused the token and no provider could
 *   replace it (sign in again)
 * @param {number} [options.backoffMin] first reconnect delay in ms, default 250
 * @param {number} [options.backoffMax] largest reconnect delay in ms, default 10000
 * @param {number} [options.pingInterval] ms between keep-alive pings, default 20000
 * @param {number} [options.pongTimeout] ms without any frame after a ping before the
 *   connection is considered dead and replaced, default 10000
 * @returns {Client}
 */
export function connect(options) {
  return new Client(options);
}

/** A connection to one Turnpike deployment as one identity (the token's). */
export class Client {
  #streamURL;
  #baseURL;
  #token;
  #fetch;
  #WebSocket;
  #opts;
  #onState;
  #state = 'idle';
  #ws = null;
  #subs = new Map(); // conversation -> Subscription
  #pending = []; // subscriptions awaiting their subscribed frame on #ws, in order sent
  #attempt = 0;
  #retryTimer = 0;
  #pingTimer = 0;
  #pongTimer = 0;
  #lastFrame = 0;
  #closed = false;
  #online;
  #getToken;
  #refreshing = null; // the token provider's call in flight
  #opened = false; // the current socket opened
  #unauthenticated = false; // the API refused the token, and no provider replaced it

  constructor({
    streamURL, token, baseURL = '', onState, getToken,
    backoffMin = 250, backoffMax = 10000, pingInterval = 20000, pongTimeout = 10000,
    fetch = globalThis.fetch?.bind(globalThis), WebSocket = globalThis.WebSocket,
  } = {}) {
    if (!streamURL) throw new TypeError('turnpike: streamURL is required');
    if (!token) throw new TypeError('turnpike: token is required');
    this.#streamURL = streamURL;
    this.#baseURL = baseURL.replace(/\/+$/, '');
    this.#token = token;
    this.#fetch = fetch;
    this.#WebSocket = WebSocket;
    this.#onState = onState;
    this.#getToken = getToken;
    this.#opts = { backoffMin, backoffMax, pingInterval, pongTimeout };
    this.#online = () => {
      // The network is back: retry now rather than after the backoff.
      if (this.#retryTimer && !this.#ws) {
        clearTimeout(this.#retryTimer);
        this.#open();
      }
    };
    globalThis.addEventListener?.('online', this.#online);
  }

  /** The connection state: idle, connecting, open, reconnecting or closed. */
  get state() { return this.#state; }

  /** The bearer token in use. */
  get token() { return this.#token; }

  /** Replaces the token (e.g. a fresh one) and reconnects with it. */
  setToken(token) {
    this.#token = token;
    this.#unauthenticated = false;
    if (this.#ws || this.#retryTimer) this.reconnect();
  }

  /**
   * Subscribes to a conversation's events.
   * @param {string} conversation
   * @param {object} [o]
   * @param {string} [o.since] "earliest" (every retained event), a cursor (events after it),
   *   or nothing (events from now on)
   * @param {(ev: object) => void} o.onEvent each stream event, once, in order; the first event of
   *   a re-run request has `rerun: true` (drop what the older run streamed)
   * @param {(info: {reason: string}) => void} [o.onGap] events may have been missed (a reconnect
   *   before any event was seen on a live subscription, or an expired cursor): re-read history
   * @param {(err: TurnpikeError) => void} [o.onError] the gateway refused the subscription; it is over
   * @returns {Subscription}
   */
  subscribe(conversation, { since, onEvent, onGap, onError } = {}) {
    if (this.#closed) throw new Error('turnpike: client is closed');
    if (this.#subs.has(conversation)) throw new Error(`turnpike: already subscribed to ${conversation}`);
    const sub = new Subscription(conversation, since, { onEvent, onGap, onError }, () => this.#unsubscribe(sub));
    this.#subs.set(conversation, sub);
    if (this.#ws?.readyState === 1) this.#sendSubscribe(sub);
    else if (!this.#ws && !this.#retryTimer) this.#open();
    return sub;
  }

  /**
   * Posts a user message. With an idempotencyKey, a 503 or a network failure is retried
   * (up to 2 times) with the same key, which yields the same request at most once.
   * @param {string} conversation
   * @param {string} content
   * @param {object} [o]
   * @param {"enqueue"|"reject"|"interrupt"} [o.strategy]
   * @param {string} [o.idempotencyKey]
   * @param {AbortSignal} [o.signal]
   * @returns {Promise<{request_id: string, conversation: string, status: string}>}
   */
  async send(conversation, content, { strategy, idempotencyKey, signal } = {}) {
    const body = { content };
    if (strategy) body.strategy = strategy;
    const headers = idempotencyKey ? { 'Idempotency-Key': idempotencyKey } : {};
    const path = `/v1/conversations/${encodeURIComponent(conversation)}/messages`;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.#request('POST', path, { body, headers, signal, expect: 202 });
      } catch (err) {
        const retriable = err instanceof TurnpikeError && (err.status === 503 || err.status === 0);
        if (!idempotencyKey || !retriable || attempt >= 2 || signal?.aborted) throw err;
        await sleep(Math.min(err.retryAfter || 500 * 2 ** attempt, 5000));
      }
    }
  }

  /**
   * Cancels the running and every queued request of a conversation, or just
   * `requestId`. The running request completes "cancelled" with its partial
   * answer kept; queued ones complete "cancelled" without running.
   * @returns {Promise<{status: string}>}
   */
  cancel(conversation, { requestId, signal } = {}) {
    const body = requestId ? { request_id: requestId } : {};
    return this.#request('POST', `/v1/conversations/${encodeURIComponent(conversation)}/cancel`, { body, signal, expect: 202 });
  }

  /**
   * Reads one page of a conversation's history: the newest `limit` messages before seq
   * `before`, oldest first. A conversation with no turn yet is a TurnpikeError "not_found".
   * @returns {Promise<{messages: object[], next_before: number|null}>}
   */
  history(conversation, { limit, before, signal } = {}) {
    const q = query({ limit, before });
    return this.#request('GET', `/v1/conversations/${encodeURIComponent(conversation)}/messages${q}`, { signal, expect: 200 });
  }

  /**
   * Lists the caller's conversations, newest activity first. Pass a page's next_before as
   * `before` for the next older page (it is opaque; null on the last page).
   * @returns {Promise<{conversations: {conversation: string, updated_at: string, messages: number}[],
   *   next_before: string|null}>}
   */
  conversations({ limit, before, signal } = {}) {
    return this.#request('GET', `/v1/conversations${query({ limit, before })}`, { signal, expect: 200 });
  }

  /**
   * Lists the artifacts a conversation sees: the newest version of each name, sorted by name.
   * @returns {Promise<{conversation: string, artifacts: {name: string, version: number,
   *   mime_type: string, size: number, conversation: string, saved_at: string}[]}>}
   */
  artifacts(conversation, { signal } = {}) {
    return this.#request('GET', `/v1/conversations/${encodeURIComponent(conversation)}/artifacts`, { signal, expect: 200 });
  }

  /**
   * Reads an artifact's content: the newest version, or `version`. The request carries the
   * token in its Authorization header, so the bytes come back as a Blob typed with the MIME
   * type the tool saved (an <img src> to the route could not send the header). The route's
   * `Content-Security-Policy: sandbox` and `nosniff` do not follow the bytes into a blob: URL,
   * which is of the page's origin: do not `URL.createObjectURL` this blob as it is (a saved
   * text/html or SVG opened from it would run in the page). Retype it first: a raster image
   * (png, jpeg, gif, webp) as its own type to show inline, anything else as
   * `new Blob([blob], {type: 'application/octet-stream'})` behind a link with `download`.
   * @returns {Promise<{blob: Blob, mimeType: string, version: number}>}
   */
  artifact(conversation, name, { version, signal } = {}) {
    const path = `/v1/conversations/${encodeURIComponent(conversation)}/artifacts/${encodeURIComponent(name)}${query({ version })}`;
    return this.#request('GET', path, { signal, expect: 200, blob: true });
  }

  /** Drops the WebSocket and connects again at once; subscriptions resume by cursor. */
  reconnect() {
    if (this.#closed) return;
    clearTimeout(this.#retryTimer);
    this.#retryTimer = 0;
    this.#abandon();
    this.#attempt = 0;
    if (this.#subs.size > 0) this.#open();
  }

  /** Ends every subscription and closes the WebSocket for good. */
  close() {
    if (this.#closed) return;
    this.#closed = true;
    globalThis.removeEventListener?.('online', this.#online);
    clearTimeout(this.#retryTimer);
    for (const sub of this.#subs.values()) sub._end(null);
    this.#subs.clear();
    const ws = this.#ws;
    this.#detach();
    ws?.close(1000, 'client closed');
    this.#setState('closed', {});
  }

  // --- WebSocket ---

  #setState(state, info) {
    this.#state = state;
    this.#onState?.(state, info);
  }

  #open() {
    this.#retryTimer = 0;
    if (this.#closed || this.#subs.size === 0) {
      this.#setState('idle', {});
      return;
    }
    this.#setState(this.#attempt === 0 ? 'connecting' : 'reconnecting', { attempt: this.#attempt, delay: 0 });
    const url = new URL(this.#streamURL, globalThis.location?.href);
    url.searchParams.set('access_token', this.#token);
    const shard = this.#shardHint();
    if (shard !== undefined) url.searchParams.set('shard', String(shard));
    let ws;
    try {
      ws = new this.#WebSocket(url.href);
    } catch {
      this.#retry(1006);
      return;
    }
    this.#ws = ws;
    this.#opened = false;
    ws.onopen = () => {
      this.#opened = true;
      this.#unauthenticated = false; // the gateway took the token
      this.#lastFrame = Date.now();
      this.#setState('open', {});
      for (const sub of this.#subs.values()) this.#sendSubscribe(sub);
      this.#pingTimer = setInterval(() => this.#ping(), this.#opts.pingInterval);
    };
    ws.onmessage = (m) => this.#frame(m.data);
    ws.onclose = (ev) => {
      const opened = this.#opened;
      this.#detach();
      // The gateway closed it because the token expired (4401): get a
      // fresh one now. A socket that never opened may have been refused
      // for its token (browsers hide the 401); another 4xxx close other
      // than 4008 (too slow) may be about the token too: check it before
      // the next attempt.
      if (ev.code === CLOSE_TOKEN_EXPIRED) this.#checkToken(ev.code, true);
      else if (!opened || (ev.code >= 4000 && ev.code < 5000 && ev.code !== 4008)) this.#checkToken(ev.code);
      else this.#retry(ev.code);
    };
    ws.onerror = () => {}; // a close event follows
  }

  // #detach forgets the current socket without waiting for its close event.
  #detach() {
    clearInterval(this.#pingTimer);
    clearTimeout(this.#pongTimer);
    const ws = this.#ws;
    if (ws) ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
    this.#ws = null;
    this.#pending = [];
    for (const sub of this.#subs.values()) sub._socketLost();
  }

  // #abandon drops the current socket now (dead, or replaced) without reconnecting.
  #abandon() {
    const ws = this.#ws;
    this.#detach();
    try { ws?.close(1000, 'reconnecting'); } catch { /* already closed */ }
  }

  // #checkToken asks the API whether the token is still good, after the
  // socket failed with code (with expired, the gateway said it is not, so
  // it is not asked): refused and replaced by the provider, the
  // client reconnects with the new one at once; refused and not replaced,
  // it goes on retrying (with backoff) and says so; otherwise (the API is
  // down too, or the token is fine) it retries with backoff.
  async #checkToken(code, expired = false) {
    const token = this.#token;
    this.#retry(code);
    const timer = this.#retryTimer;
    if (!expired) {
      try {
        await this.#requestOnce('GET', '/v1/conversations?limit=1', token, { expect: 200 });
        this.#unauthenticated = false;
        return;
      } catch (err) {
        if (!(err instanceof TurnpikeError && err.status === 401)) return;
      }
    }
    const info = expired ? { reason: 'expired', status: 0, code: 'token_expired' } : { reason: 'unauthenticated', status: 401, code: 'unauthenticated' };
    const fresh = await this.#refreshToken(token, info);
    if (this.#closed) return;
    if (fresh) {
      // Connect with it now, also in place of an attempt still opening
      // with the refused token.
      if (!this.#ws || !this.#opened) this.reconnect();
    } else if (!this.#ws && this.#retryTimer === timer) {
      this.#setState('reconnecting', { attempt: this.#attempt, delay: 0, code, unauthenticated: true });
    }
  }

  // #retry schedules the next connection attempt, with exponential backoff
  // and jitter, after the socket closed with code.
  #retry(code) {
    if (this.#closed) return;
    if (this.#subs.size === 0) {
      this.#setState('idle', {});
      return;
    }
    const { backoffMin, backoffMax } = this.#opts;
    const base = Math.min(backoffMax, backoffMin * 2 ** this.#attempt);
    const delay = Math.round(base / 2 + Math.random() * base / 2);
    this.#attempt++;
    this.#setState('reconnecting', { attempt: this.#attempt, delay, code, unauthenticated: this.#unauthenticated });
    this.#retryTimer = setTimeout(() => this.#open(), delay);
  }

  #ping() {
    if (this.#ws?.readyState !== 1) return;
    const sent = Date.now();
    this.#write({ op: 'ping' });
    clearTimeout(this.#pongTimer);
    this.#pongTimer = setTimeout(() => {
      if (this.#lastFrame >= sent) return;
      this.#abandon(); // silent for too long: the network is gone
      this.#retry(1006);
    }, this.#opts.pongTimeout);
  }

  #write(frame) {
    this.#ws.send(JSON.stringify(frame));
  }

  #sendSubscribe(sub) {
    const frame = { op: 'subscribe', conversation: sub.conversation };
    const since = sub._resumeFrom();
    if (since) frame.since = since;
    this.#pending.push(sub);
    this.#write(frame);
  }

  #unsubscribe(sub) {
    if (this.#subs.get(sub.conversation) !== sub) return;
    this.#subs.delete(sub.conversation);
    if (this.#ws?.readyState === 1) {
      this.#pending = this.#pending.filter((s) => s !== sub);
      this.#write({ op: 'unsubscribe', conversation: sub.conversation });
    }
    sub._end(null);
    if (this.#subs.size === 0 && this.#retryTimer) {
      clearTimeout(this.#retryTimer);
      this.#retryTimer = 0;
      this.#setState('idle', {});
    }
  }

  // The shard most subscriptions are in, as the gateway named it (the
  // earliest subscription's on a tie); undefined before it named any.
  #shardHint() {
    const counts = new Map();
    let best;
    for (const sub of this.#subs.values()) {
      if (sub.shard === undefined) continue;
      const n = (counts.get(sub.shard) ?? 0) + 1;
      counts.set(sub.shard, n);
      if (best === undefined || n > counts.get(best)) best = sub.shard;
    }
    return best;
  }

  #frame(data) {
    this.#lastFrame = Date.now();
    let f;
    try {
      f = JSON.parse(data);
    } catch {
      return; // not ours to fix; the gateway only sends JSON
    }
    switch (f.type) {
      case 'pong':
        return;
      case 'subscribed': {
        const i = this.#pending.findIndex((s) => s.conversation === f.conversation);
        if (i < 0) return; // unsubscribed meanwhile
        const [sub] = this.#pending.splice(i, 1);
        this.#attempt = 0;
        if (Number.isInteger(f.shard) && f.shard >= 0) sub.shard = f.shard;
        sub._subscribed();
        return;
      }
      case 'error':
        this.#errorFrame(f);
        return;
    }
    const sub = this.#subs.get(f.conversation);
    if (!sub) return;
    if (!EVENT_TYPES.has(f.type)) { // a newer gateway's event: skipped, resumed after
      if (typeof f.cursor === 'string' && f.cursor) sub.cursor = f.cursor;
      return;
    }
    this.#attempt = 0;
    sub._event(f);
  }

  // An error frame answering a subscribe names its conversation (one from a
  // gateway that predates the member is taken as answering the oldest
  // pending subscribe); a failed replay (cursor_expired, unavailable) comes
  // later and ends that subscription on the gateway.
  #errorFrame(f) {
    const err = new TurnpikeError(0, f.code, f.message);
    if (f.code === 'cursor_expired') {
      // Whichever subscription it was resumes live; each one that resumed
      // from a cursor on this socket is told to re-read history.
      for (const sub of this.#subs.values()) sub._cursorExpired();
      this.reconnect();
      return;
    }
    if (f.code === 'unavailable') {
      this.#abandon();
      this.#retry(1011);
      return;
    }
    const i = f.conversation ? this.#pending.findIndex((s) => s.conversation === f.conversation) : 0;
    const [sub] = i < 0 ? [] : this.#pending.splice(i, 1);
    if (!sub) {
      console.warn('turnpike: gateway error', f.code, f.message);
      return;
    }
    if (sub._resumedFromCursor()) {
      // A cursor the gateway refused: subscribe live and re-read history.
      sub._cursorExpired();
      this.#sendSubscribe(sub);
      return;
    }
    this.#subs.delete(sub.conversation);
    sub._end(err);
  }

  // --- HTTP ---

  // #request makes one API call; a 401 gets a fresh token from the provider
  // and the call is made once more with it.
  async #request(method, path, o) {
    const token = this.#token;
    try {
      return await this.#requestOnce(method, path, token, o);
    } catch (err) {
      if (!(err instanceof TurnpikeError && err.status === 401)) throw err;
      const fresh = await this.#refreshToken(token, { reason: 'unauthenticated', status: 401, code: err.code });
      if (!fresh) throw err;
      return this.#requestOnce(method, path, fresh, o);
    }
  }

  // #refreshToken asks the provider for a token to replace refused, once
  // for all the calls that saw it refused. It resolves to the new token, or
  // null when there is none (no provider, it failed, or it gave the same).
  async #refreshToken(refused, info) {
    if (this.#token !== refused) return this.#token; // replaced meanwhile
    if (!this.#getToken || this.#closed) {
      this.#unauthenticated = true;
      return null;
    }
    this.#refreshing ??= (async () => {
      try {
        const t = await this.#getToken(info);
        return typeof t === 'string' && t !== '' && t !== refused ? t : null;
      } catch {
        return null;
      }
    })();
    const p = this.#refreshing;
    const fresh = await p;
    if (this.#refreshing === p) this.#refreshing = null;
    if (!fresh) {
      this.#unauthenticated = true;
      return null;
    }
    if (this.#token === refused) {
      this.#token = fresh;
      this.#unauthenticated = false;
    }
    return this.#token;
  }

  async #requestOnce(method, path, token, { body, headers = {}, signal, expect, blob = false }) {
    const init = {
      method,
      headers: { Authorization: `Bearer ${token}`, ...headers },
      signal,
      cache: 'no-store',
    };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await this.#fetch(this.#baseURL + path, init);
    } catch (err) {
      if (err?.name === 'AbortError') throw err;
      throw new TurnpikeError(0, 'network', `network error: ${err?.message ?? err}`);
    }
    if (blob && res.status === expect) {
      return {
        blob: await res.blob(),
        mimeType: res.headers.get('Content-Type') ?? '',
        version: Number(res.headers.get('X-Artifact-Version')),
      };
    }
    const text = await res.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch { /* not JSON: reported below */ }
    if (res.status !== expect || data === null) {
      const e = data?.error ?? {};
      const retry = Number(res.headers.get('Retry-After'));
      throw new TurnpikeError(res.status, e.code ?? `http_${res.status}`, e.message ?? res.statusText,
        Number.isFinite(retry) && retry > 0 ? retry * 1000 : 0);
    }
    return data;
  }
}

/**
 * One conversation's subscription. Returned by Client.subscribe.
 * `ready` resolves when the gateway first confirms it (and rejects if refused);
 * `cursor` is the cursor of the last event delivered, the resume point;
 * `shard` the conversation's shard from the gateway's last subscribed frame
 * (undefined before one named it), sent as the socket's ?shard= hint when it
 * reconnects.
 */
class Subscription {
  #since;
  #handlers;
  #close;
  #runs = new Map(); // request_id -> {run, seq, old: Set of superseded run ids}
  #everSubscribed = false;
  #sentCursor = false; // the current subscribe frame resumes from a cursor
  #gap = false;
  #resolve;
  #reject;

  constructor(conversation, since, handlers, close) {
    this.conversation = conversation;
    this.cursor = since && since !== 'earliest' ? since : null;
    this.#since = since;
    this.#handlers = handlers;
    this.#close = close;
    this.active = false;
    this.shard = undefined;
    this.ready = new Promise((resolve, reject) => { this.#resolve = resolve; this.#reject = reject; });
    this.ready.catch(() => {}); // onError reports it too
  }

  /** Ends the subscription. */
  close() { this.#close(); }

  // The since of the next subscribe frame: the last cursor; before any
  // event, the original since (nothing was delivered, so replaying from it
  // duplicates nothing); a live subscription that reconnects before its
  // first event may have missed some: live again, and onGap.
  _resumeFrom() {
    this.#sentCursor = false;
    if (this.cursor) {
      this.#sentCursor = true;
      return this.cursor;
    }
    if (this.#since === 'earliest') return 'earliest';
    if (this.#everSubscribed) this.#gap = true;
    return undefined;
  }

  _resumedFromCursor() { return this.#sentCursor; }

  _cursorExpired() {
    if (!this.#sentCursor) return;
    this.cursor = null;
    this.#since = undefined;
    this.#sentCursor = false;
    this.#gap = true;
  }

  _subscribed() {
    this.active = true;
    this.#everSubscribed = true;
    this.#resolve();
    if (this.#gap) {
      this.#gap = false;
      this.#handlers.onGap?.({ reason: 'reconnected without a cursor' });
    }
  }

  _socketLost() { this.active = false; }

  _end(err) {
    this.active = false;
    if (err) {
      this.#reject(err);
      this.#handlers.onError?.(err);
    }
  }

  _event(ev) {
    if (ev.cursor) this.cursor = ev.cursor;
    const r = this.#runs.get(ev.request_id);
    if (!r) {
      this.#remember(ev.request_id, { run: ev.run_id, seq: ev.seq, old: new Set() });
    } else if (r.run === ev.run_id) {
      if (ev.seq <= r.seq) return; // seen already
      r.seq = ev.seq;
    } else if (r.old.has(ev.run_id)) {
      return; // a late event of a superseded run
    } else {
      r.old.add(r.run);
      r.run = ev.run_id;
      r.seq = ev.seq;
      ev.rerun = true;
    }
    this.#handlers.onEvent?.(ev);
  }

  #remember(requestId, r) {
    this.#runs.set(requestId, r);
    if (this.#runs.size > 1024) this.#runs.delete(this.#runs.keys().next().value);
  }
}

/**
 * Folds stream events into answers, one per request:
 * `{requestId, runId, text, agent, status, done, started, joinedLate, restarted,
 *   notices, persisted, needsReload}`.
 * - A re-run (`rerun: true`) starts the text over (`restarted`).
 * - `joinedLate`: tokens arrived without this run's run.started (the
 *   subscription began mid-answer), so `text` lacks its beginning.
 * - `persisted`: run.completed said complete, incomplete or cancelled (a run
 *   cancelled before any content kept nothing).
 * - `needsReload`: persisted, but the text shown may differ from what was
 *   persisted (joined late, a duplicate's completion with no tokens, or
 *   tokens of several agents, which history keeps as one assistant message
 *   per agent's stretch): read the answer from history.
 * Notices are kept on the answer for display only; they are never persisted.
 */
export class Answers {
  #byRequest = new Map();
  #max;

  constructor({ max = 512 } = {}) { this.#max = max; }

  /** The answer of a request, if any event of it was applied. */
  get(requestId) { return this.#byRequest.get(requestId); }

  /** Forgets a request's answer. */
  delete(requestId) { this.#byRequest.delete(requestId); }

  /** Applies one event; returns the updated answer, or null for a frame that is not a stream event. */
  apply(ev) {
    if (!ev || !EVENT_TYPES.has(ev.type) || !ev.request_id) return null;
    let a = this.#byRequest.get(ev.request_id);
    if (!a || ev.rerun) {
      const restarted = Boolean(a && ev.rerun);
      a = {
        requestId: ev.request_id, runId: ev.run_id, text: '', agent: '', tokenAgent: '', severalAgents: false, status: null, done: false,
        started: false, joinedLate: false, restarted, notices: [], persisted: false, needsReload: false,
      };
      this.#byRequest.delete(ev.request_id);
      this.#byRequest.set(ev.request_id, a);
      if (this.#byRequest.size > this.#max) this.#byRequest.delete(this.#byRequest.keys().next().value);
    }
    switch (ev.type) {
      case 'run.started':
        if (a.text === '') a.started = true;
        break;
      case 'token':
        if (!a.started) a.joinedLate = true;
        a.text += ev.delta ?? '';
        // Several agents' text: history keeps one message per agent.
        if (ev.agent && a.tokenAgent && ev.agent !== a.tokenAgent) a.severalAgents = true;
        if (ev.agent) a.agent = a.tokenAgent = ev.agent;
        break;
      case 'notice':
        a.notices.push(ev.message ?? '');
        break;
      case 'agent.transfer':
        a.agent = ev.to ?? a.agent;
        break;
      case 'run.interrupted':
        a.interrupt = ev.interrupt ?? null; // the question the agent asks
        break;
      case 'run.completed':
        a.status = ev.status;
        a.done = true;
        // A run cancelled before any content keeps nothing; a cancelled
        // request seen only by its completion is checked against history.
        a.persisted = PERSISTED.has(ev.status) && !(ev.status === 'cancelled' && a.started && a.text === '');
        a.needsReload = a.persisted && (a.joinedLate || !a.started || a.severalAgents);
        break;
    }
    return a;
  }
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// --- Server-Sent Events ---

/**
 * Follows one conversation over Server-Sent Events (the browser's EventSource) instead of a
 * WebSocket: for networks that pass plain HTTP streams but not WebSocket upgrades, or for one
 * answer (`follow`). EventSource reconnects by itself and resumes with Last-Event-ID, so every
 * event is delivered once, in order, across dropped connections and gateway restarts; re-runs
 * are handled as on the WebSocket (`rerun: true`).
 *
 *   const s = streamEvents('c1', { eventsURL: 'http://localhost:8081', token, onEvent, onGap });
 *   await s.ready;
 *
 * @param {string} conversation
 * @param {object} o
 * @param {string} [o.eventsURL] the push gateway's HTTP base, e.g. "http://localhost:8081";
 *   default: the host of o.streamURL
 * @param {string} [o.streamURL] the gateway's WebSocket URL, used when eventsURL is not given
 * @param {string} o.token bearer JWT (sent as ?access_token=: EventSource sends no header)
 * @param {(info: {reason: string, status: number, code: string}) => Promise<string>} [o.getToken]
 *   token provider, as connect's: called with reason "expired" when the gateway ended the stream
 *   because its token expired (an error event of code unauthenticated), or reason
 *   "unauthenticated" (status 0, code "refused": browsers do not say why) when the EventSource
 *   was refused; the stream then reopens with the new token from the last cursor, losing
 *   nothing. Without it, or when it gives no new token (or the stream is refused again before
 *   the gateway confirmed it), the stream ends with onError.
 * @param {string} [o.since] "earliest", a cursor, or nothing (events from now on)
 * @param {string} [o.follow] a request id: only its events; the stream closes after its
 *   run.completed
 * @param {(ev: object) => void} o.onEvent each stream event, once, in order
 * @param {(info: {reason: string}) => void} [o.onGap] events may have been missed: re-read history
 * @param {(err: TurnpikeError) => void} [o.onError] the gateway refused the stream; it is over
 * @param {(state: string) => void} [o.onState] "connecting", "open", "reconnecting", "closed"
 * @returns {EventStream}
 */
export function streamEvents(conversation, o = {}) {
  return new EventStream(conversation, o);
}

/**
 * One conversation's Server-Sent Events stream. `ready` resolves when the gateway first
 * confirms it; `cursor` is the cursor of the last event delivered; close() ends it.
 */
export class EventStream {
  #sub;
  #es = null;
  #url;
  #o;
  #EventSource;
  #closed = false;
  #getToken;
  #renewed = false; // a fresh token was asked for since the gateway last confirmed the stream

  constructor(conversation, o) {
    const { eventsURL, streamURL, token, since, follow, getToken, EventSource = globalThis.EventSource } = o;
    if (!token) throw new TypeError('turnpike: token is required');
    if (!eventsURL && !streamURL) throw new TypeError('turnpike: eventsURL or streamURL is required');
    let base = eventsURL;
    if (!base) {
      const u = new URL(streamURL, globalThis.location?.href);
      base = `${u.protocol === 'wss:' || u.protocol === 'https:' ? 'https:' : 'http:'}//${u.host}`;
    }
    const url = new URL(`${base.replace(/\/+$/, '')}/v1/conversations/${encodeURIComponent(conversation)}/events`,
      globalThis.location?.href);
    url.searchParams.set('access_token', token);
    if (follow) url.searchParams.set('follow', follow);
    this.#url = url;
    this.#o = o;
    this.#EventSource = EventSource;
    this.#getToken = getToken;
    this.conversation = conversation;
    // follow without a position starts at earliest (as the gateway does), so a
    // reconnection before the first event replays rather than leaves a gap.
    this.#sub = new Subscription(conversation, since ?? (follow ? 'earliest' : undefined), {
      onEvent: (ev) => {
        o.onEvent?.(ev);
        if (follow && ev.type === 'run.completed' && ev.request_id === follow) this.close();
      },
      onGap: o.onGap,
      onError: o.onError,
    }, () => this.close());
    this.ready = this.#sub.ready;
    this.#open(this.#sub._resumeFrom());
  }

  /** The cursor of the last event delivered, or null. */
  get cursor() { return this.#sub.cursor; }

  /** Ends the stream. */
  close() {
    if (this.#closed) return;
    this.#closed = true;
    this.#es?.close();
    this.#es = null;
    this.#sub._end(null);
    this.#o.onState?.('closed');
  }

  // #fail ends the stream with err (onError).
  #fail(err) {
    this.#closed = true;
    this.#es?.close();
    this.#es = null;
    this.#sub._end(err);
    this.#o.onState?.('closed');
  }

  // #renew replaces es, refused or ended for its token, by a stream with a
  // token from the provider, from the last cursor.
  async #renew(es, info) {
    es.close();
    this.#es = null;
    this.#renewed = true;
    this.#sub._socketLost();
    this.#o.onState?.('reconnecting');
    let token = null;
    try {
      token = await this.#getToken(info);
    } catch { /* no new token */ }
    if (this.#closed) return;
    if (typeof token !== 'string' || token === '') {
      this.#fail(new TurnpikeError(401, 'unauthenticated', 'the event stream\'s token was refused and the token provider gave no new one'));
      return;
    }
    this.#url.searchParams.set('access_token', token);
    this.#open(this.#sub._resumeFrom());
  }

  // #open starts an EventSource from since (a cursor, "earliest" or nothing). Later
  // reconnections are EventSource's own, from the last id it saw.
  #open(since) {
    const url = new URL(this.#url);
    if (since) url.searchParams.set('since', since);
    this.#o.onState?.('connecting');
    const es = new this.#EventSource(url.href);
    this.#es = es;
    const frame = (m) => {
      if (es !== this.#es) return;
      let f;
      try { f = JSON.parse(m.data); } catch { return; }
      if (f.type === 'subscribed') {
        this.#renewed = false;
        this.#o.onState?.('open');
        this.#sub._subscribed();
      } else if (EVENT_TYPES.has(f.type) && f.conversation === this.conversation) {
        this.#sub._event(f);
      }
    };
    es.addEventListener('subscribed', frame);
    for (const t of EVENT_TYPES) es.addEventListener(t, frame);
    es.addEventListener('error', (e) => {
      if (es !== this.#es) return;
      if (typeof e.data === 'string') { // the gateway's error event: the stream ends after it
        let f = {};
        try { f = JSON.parse(e.data); } catch { /* reported below */ }
        if (f.code === 'cursor_expired') {
          // Resume live and re-read history (onGap once subscribed).
          this.#sub._cursorExpired();
          es.close();
          this.#open(this.#sub._resumeFrom());
        } else if (f.code === 'unauthenticated' && this.#getToken) {
          // The token expired: reopen with a fresh one (EventSource would
          // retry with the old one, and be refused).
          this.#renew(es, { reason: 'expired', status: 0, code: 'unauthenticated' });
        }
        return; // unavailable: EventSource reconnects after the retry delay
      }
      if (es.readyState === 2) { // CLOSED: refused (a status other than 200), not retried
        if (this.#getToken && !this.#renewed) {
          // Perhaps for an expired token (browsers do not say): once with a fresh one.
          this.#renew(es, { reason: 'unauthenticated', status: 0, code: 'refused' });
          return;
        }
        this.#fail(new TurnpikeError(0, 'refused', 'the gateway refused the event stream (token, origin or position)'));
        return;
      }
      // Reconnecting from the last id seen; without one, a live stream may miss events.
      this.#sub._socketLost();
      this.#sub._resumeFrom();
      this.#o.onState?.('reconnecting');
    });
  }
}
