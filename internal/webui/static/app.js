// The demo chat page. It uses only turnpike.js and the DOM.
//
// Flow: sign in (a devstack token for a picked user, or a pasted token),
// list the user's conversations, open one: subscribe to its stream first,
// then read its history, so nothing falls between the two. Live events of
// requests already in that history are ignored; events that arrive before
// the history is drawn wait for it. A message sent here shows at once and
// is matched to its stream by the request id of the 202; events of a
// request id not yet known wait while a send is in flight.
//
// Nothing typed is lost: the message box is kept as a draft, and a message
// sent is kept in an outbox (both in sessionStorage, per user and
// conversation) until the API accepted it. A send that fails because the
// server cannot be reached is retried, with the same idempotency key, when
// the connection is back; one the API refuses goes back into the message
// box with the reason. A refused token is replaced by turnpike.js's token
// provider (the devstack mints a new one); without one, signing in again
// brings the draft and the outbox back.
import { connect, Answers, TurnpikeError } from './turnpike.js';

const ID_RULE = /^[A-Za-z0-9._:@-]{1,128}$/;
const TOKEN_KEY = 'turnpike.token';
const STREAM_KEY = 'turnpike.streamURL';
const DRAFT_KEY = 'turnpike.draft:'; // + user/conversation: the message box
const OUTBOX_KEY = 'turnpike.outbox:'; // + user/conversation: messages not yet accepted
const HISTORY_PAGE = 50;

const $ = (id) => document.getElementById(id);
const meta = (name) => document.querySelector(`meta[name="${name}"]`)?.content ?? '';

const config = {
  streamTemplate: meta('turnpike-stream-url') || 'ws://{host}:8081/v1/stream',
  devTokens: meta('turnpike-dev-tokens') === 'on',
};

// The page's state. One conversation is open at a time; epoch changes with
// it, so answers to requests made for another conversation are dropped.
const state = {
  client: null,
  user: '',
  conversation: null,
  epoch: 0,
  sub: null,
  answers: new Answers(),
  turns: new Map(), // request_id -> Turn
  fromHistory: new Set(), // request ids whose persisted turn is shown
  loading: false, // history is being (re)loaded: events wait in buffered
  buffered: [],
  sending: 0, // POSTs in flight
  orphans: new Map(), // request_id -> events that came before their POST's 202
  nextBefore: null,
  convNext: null,
  waiting: [], // {item, turn}: sends that failed for want of the server, in order
  retryTimer: 0,
  artifacts: new Map(), // name -> {version, url (the blob: URL shown, or ''), el}: the conversation's artifacts shown
};

// ---------- Turns: one user message and its answer ----------

class Turn {
  constructor(requestId) {
    this.requestId = requestId;
    this.el = el('div', { class: 'turn' });
    if (requestId) this.el.dataset.requestId = requestId;
    this.user = null;
    this.assistant = null; // the answer's last (or only) message
    this.earlier = []; // the answer's other messages: one per agent that spoke before the last
    this.done = false; // its answer completed (or came from history)
    this.stopRequested = false; // Stop was pressed on it
    this.interruptedBy = false; // a message sent with "interrupt" came after it
  }

  setRequestId(id) {
    this.requestId = id;
    this.el.dataset.requestId = id;
  }

  setUser(text, { pending = false, status = '' } = {}) {
    if (!this.user) {
      this.user = message('user', 'You');
      this.el.prepend(this.user.el);
    }
    this.user.text.textContent = text;
    this.user.status.textContent = pending ? 'sending…' : status;
    if (!status) delete this.user.el.dataset.kept;
  }

  // setAnswer shows the assistant's text; status null while it streams.
  setAnswer(text, status, { agent = '' } = {}) {
    if (!this.assistant) {
      this.assistant = message('assistant', 'Assistant');
      const after = this.earlier.at(-1)?.el ?? this.user?.el ?? null;
      if (after) after.after(this.assistant.el);
      else this.el.prepend(this.assistant.el);
    }
    const a = this.assistant;
    a.who.textContent = whoOf(agent);
    a.text.textContent = text;
    a.el.setAttribute('aria-busy', status ? 'false' : 'true');
    a.el.dataset.status = status ?? 'streaming';
    a.status.textContent = status === 'incomplete' || status === 'cancelled' || status === 'interrupted' ? status : '';
    a.status.hidden = a.status.textContent === '';
    if (status) this.done = true;
    this.showCancel(!status);
  }

  // setEarlier shows the answer's messages before its last one, each with
  // its agent's name (history: one assistant message per agent that spoke).
  setEarlier(messages) {
    for (const m of this.earlier) m.el.remove();
    this.earlier = messages.map((m) => {
      const e = message('assistant', whoOf(m.agent));
      e.text.textContent = m.content;
      e.el.dataset.status = m.status ?? 'complete';
      e.el.setAttribute('aria-busy', 'false');
      return e;
    });
    let after = this.user?.el ?? null;
    for (const e of this.earlier) {
      if (after) after.after(e.el);
      else this.el.prepend(e.el);
      after = e.el;
    }
    if (this.assistant && after) after.after(this.assistant.el);
  }

  // cancelReason says why a cancelled answer stopped, as far as this page knows.
  cancelReason(kept) {
    const what = kept ? 'The part shown is kept.' : 'Nothing was kept.';
    if (this.stopRequested) return `Stopped at your request. ${what}`;
    if (this.interruptedBy) return `Interrupted by your newer message (“interrupt it”). ${what}`;
    return `Cancelled by a cancel request for this conversation. ${what}`;
  }

  // showCancel offers to stop the answer while it streams.
  showCancel(on) {
    if (!on || !this.requestId) {
      this.cancelButton?.remove();
      this.cancelButton = null;
      return;
    }
    if (this.cancelButton) return;
    const b = el('button', { type: 'button', class: 'cancel', 'aria-label': 'Stop this answer' }, 'Stop');
    b.addEventListener('click', async () => {
      this.stopRequested = true;
      b.disabled = true;
      b.textContent = 'Stopping…';
      try {
        await state.client.cancel(state.conversation, { requestId: this.requestId });
      } catch (err) {
        this.stopRequested = false;
        if (!handleAuthError(err)) {
          b.disabled = false;
          b.textContent = 'Stop';
          this.line('system', `Could not stop: ${err.message}`);
        }
      }
    });
    this.cancelButton = b;
    this.assistant?.el.append(b);
  }

  removeAnswer() {
    this.showCancel(false);
    this.setEarlier([]);
    this.assistant?.el.remove();
    this.assistant = null;
  }

  // notKept marks the user message as not persisted, with a short reason.
  notKept(reason) {
    if (this.user) {
      this.user.el.dataset.kept = 'false';
      this.user.status.textContent = 'not kept';
    }
    this.line('system', reason);
  }

  line(kind, text) {
    const p = el('p', { class: kind }, text);
    if (kind === 'notice') p.setAttribute('role', 'note');
    this.el.append(p);
  }

  clearLines() {
    for (const p of this.el.querySelectorAll('.notice, .system')) p.remove();
  }
}

// whoOf names an assistant message's author.
function whoOf(agent) {
  return agent && agent !== 'assistant' ? `Assistant (${agent})` : 'Assistant';
}

function message(role, who) {
  const m = { el: el('div', { class: `msg msg-${role}`, 'data-role': role }) };
  const head = el('div', { class: 'msg-meta' });
  m.who = el('span', {}, who);
  m.status = el('span', { class: role === 'assistant' ? 'mark' : '' });
  m.status.hidden = role === 'assistant';
  head.append(m.who, m.status);
  m.text = el('p', { class: 'msg-text' });
  m.el.append(head, m.text);
  return m;
}

function el(tag, attrs = {}, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== '') e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// ---------- Rendering the log ----------

const log = $('log');

function atBottom() {
  return log.scrollHeight - log.scrollTop - log.clientHeight < 40;
}

function keepBottom(wasAtBottom) {
  if (wasAtBottom) log.scrollTop = log.scrollHeight;
}

// turnsOf groups history messages (oldest first) by request id.
function turnsOf(messages) {
  const groups = [];
  for (const m of messages) {
    const last = groups.at(-1);
    if (last && last.requestId === m.request_id) last.messages.push(m);
    else groups.push({ requestId: m.request_id, messages: [m] });
  }
  return groups;
}

// fillFromHistory shows a turn's persisted messages: the user's, then one
// assistant message per agent that spoke, each with its agent's name.
function fillFromHistory(turn, messages) {
  turn.done = true;
  const answers = [];
  for (const m of messages) {
    if (m.role === 'user') turn.setUser(m.content);
    else answers.push(m);
  }
  if (answers.length === 0) return;
  const last = answers.at(-1);
  turn.setEarlier(answers.slice(0, -1));
  turn.setAnswer(last.content, last.status ?? 'complete', { agent: last.agent });
}

// drawHistory replaces the log with a history page; turns shown live and
// not in the page (still running, or sending) stay after it.
function drawHistory(page) {
  const inPage = new Set(page.messages.map((m) => m.request_id));
  const live = [...log.children].filter((e) => {
    const id = e.dataset.requestId;
    return !id || (!state.fromHistory.has(id) && !inPage.has(id));
  });
  const turns = new Map();
  for (const e of live) {
    const t = state.turns.get(e.dataset.requestId);
    if (t) turns.set(t.requestId, t);
  }
  log.replaceChildren();
  state.turns = turns;
  state.fromHistory.clear();
  for (const g of turnsOf(page.messages)) {
    const t = new Turn(g.requestId);
    fillFromHistory(t, g.messages);
    state.turns.set(g.requestId, t);
    state.fromHistory.add(g.requestId);
    log.append(t.el);
  }
  log.append(...live);
  state.nextBefore = page.next_before;
  $('older').hidden = state.nextBefore == null;
  log.scrollTop = log.scrollHeight;
}

// drawOlder puts an older history page above the log.
function drawOlder(page) {
  const height = log.scrollHeight;
  const groups = turnsOf(page.messages);
  const first = log.firstElementChild;
  const firstTurn = first && state.turns.get(first.dataset.requestId);
  // A page boundary may split a turn: its user message is on the older page.
  if (firstTurn && groups.at(-1)?.requestId === firstTurn.requestId) {
    const g = groups.pop();
    for (const m of g.messages) if (m.role === 'user') firstTurn.setUser(m.content);
  }
  const frag = document.createDocumentFragment();
  for (const g of groups) {
    if (state.turns.has(g.requestId)) continue;
    const t = new Turn(g.requestId);
    fillFromHistory(t, g.messages);
    state.turns.set(g.requestId, t);
    state.fromHistory.add(g.requestId);
    frag.append(t.el);
  }
  log.prepend(frag);
  log.scrollTop += log.scrollHeight - height;
  state.nextBefore = page.next_before;
  $('older').hidden = state.nextBefore == null;
}

// ---------- Stream events ----------

function onEvent(epoch, ev) {
  if (epoch !== state.epoch) return;
  if (ev.type === 'artifact.saved') showArtifact(epoch, ev.artifact);
  if (state.loading) {
    state.buffered.push(ev);
    return;
  }
  applyEvent(ev);
}

function applyEvent(ev) {
  // An artifact.saved is shown by onEvent, and the page keeps no session
  // state to refresh on a state.changed: only one that starts a new run of
  // its request (a re-announcement) matters to the answer.
  if ((ev.type === 'artifact.saved' || ev.type === 'state.changed') && !ev.rerun) return;
  if (state.fromHistory.has(ev.request_id)) return; // persisted, shown from history
  let turn = state.turns.get(ev.request_id);
  if (!turn) {
    if (state.sending > 0) {
      // Perhaps the answer to a POST whose 202 is still on its way.
      const q = state.orphans.get(ev.request_id) ?? [];
      q.push(ev);
      state.orphans.set(ev.request_id, q);
      return;
    }
    // A request sent elsewhere (another tab, the CLI): its user message
    // comes from history once it completes.
    turn = new Turn(ev.request_id);
    state.turns.set(ev.request_id, turn);
    log.append(turn.el);
  }
  const bottom = atBottom();
  const a = state.answers.apply(ev);
  if (!a) return;
  if (ev.type === 'run.interrupted' && ev.interrupt?.question) {
    turn.line('system', `The assistant asks: ${ev.interrupt.question} (answer with POST …/resume)`);
  }
  if (ev.type === 'notice') {
    turn.line('notice', ev.message); // shown, never persisted
  } else if (ev.rerun) {
    turn.clearLines();
  }
  if (!a.done) {
    if (ev.type !== 'notice') turn.setAnswer(a.text, null, { agent: a.agent });
  } else if (a.persisted) {
    turn.setAnswer(a.text, a.status, { agent: a.agent });
    if (a.status === 'cancelled') turn.line('system', turn.cancelReason(true));
    if (a.needsReload || !turn.user) reloadTurn(state.epoch, turn, a.status);
    refreshConversations();
  } else {
    turn.done = true;
    turn.removeAnswer();
    turn.notKept(a.status === 'cancelled' ? turn.cancelReason(false) : outcomeText(a.status));
    refreshConversations();
  }
  keepBottom(bottom);
}

function outcomeText(status) {
  switch (status) {
    case 'rejected': return 'Rejected: another request of this conversation was running or queued. Nothing was kept.';
    case 'discarded': return 'No reply: the model produced no content. Nothing was kept.';
    case 'failed': return 'Failed: the request could not be processed. Nothing was kept.';
    case 'cancelled': return 'Cancelled before it ran. Nothing was kept.';
    default: return `Ended ${status}. Nothing was kept.`;
  }
}

// reloadTurn shows a completed turn as persisted: for an answer joined
// mid-way, a re-run's duplicate completion, or a request sent elsewhere.
async function reloadTurn(epoch, turn, status) {
  let page;
  try {
    page = await state.client.history(state.conversation, { limit: HISTORY_PAGE });
  } catch (err) {
    if (!handleAuthError(err)) console.warn('turnpike: reload turn', err);
    return;
  }
  if (epoch !== state.epoch) return;
  const messages = page.messages.filter((m) => m.request_id === turn.requestId);
  const bottom = atBottom();
  if (messages.length === 0) {
    turn.removeAnswer();
    turn.notKept(outcomeText(status));
  } else {
    fillFromHistory(turn, messages);
  }
  keepBottom(bottom);
}

// ---------- Artifacts: the files the conversation's tools saved ----------

// loadArtifacts lists the conversation's artifacts and shows each.
async function loadArtifacts(epoch) {
  let list;
  try {
    list = await state.client.artifacts(state.conversation);
  } catch (err) {
    if (epoch !== state.epoch || handleAuthError(err)) return;
    if (!(err instanceof TurnpikeError && err.code === 'not_found')) console.warn('turnpike: artifacts', err);
    return;
  }
  if (epoch !== state.epoch) return;
  for (const a of list.artifacts ?? []) showArtifact(epoch, a);
}

// RASTER_TYPES are the types shown inline: raster images only. An SVG is
// a document that can hold scripts, so it is a download like any other
// file (see showArtifact).
const RASTER_TYPES = new Set(['image/png', 'image/jpeg', 'image/gif', 'image/webp']);

// rasterType is mime's raster image type (lower case, no parameters), or
// '' when mime is not one of RASTER_TYPES.
function rasterType(mime) {
  const t = String(mime ?? '').split(';')[0].trim().toLowerCase();
  return RASTER_TYPES.has(t) ? t : '';
}

// showArtifact shows version a.version of artifact a.name, unless a newer
// one (or the same: artifact.saved is at least once) is shown already.
//
// The artifact route answers with `Content-Security-Policy: sandbox` and
// `nosniff`, but a blob: URL made here is of the page's origin and keeps
// none of that: a blob typed text/html or image/svg+xml opened from the
// page would run in it. So only a raster image (RASTER_TYPES) is shown
// inline, through a blob typed with that image type; every other file
// (SVG included) is a download link whose blob is typed
// application/octet-stream, and its bytes are fetched only when the link
// is clicked (a conversation may hold 100 files of 8 MiB). The bytes are
// fetched with the token in the Authorization header, which a plain link
// to the route could not send.
async function showArtifact(epoch, a) {
  if (!a?.name || !Number.isInteger(a.version)) return;
  const shown = state.artifacts.get(a.name);
  if (shown && shown.version >= a.version) return;
  const entry = shown ?? { version: 0, url: '', el: null };
  const before = entry.version;
  entry.version = a.version; // claimed: an older fetch that ends later does not replace it
  state.artifacts.set(a.name, entry);
  const image = rasterType(a.mime_type);
  if (!image) {
    placeArtifact(entry, fileItem(epoch, entry, a));
    return;
  }
  let got;
  try {
    got = await state.client.artifact(state.conversation, a.name, { version: a.version });
  } catch (err) {
    if (entry.version === a.version) entry.version = before; // a later event or reload may try again
    if (epoch !== state.epoch || handleAuthError(err)) return;
    console.warn('turnpike: artifact', a.name, err);
    return;
  }
  if (epoch !== state.epoch || entry.version !== a.version) return;
  const item = el('li', { class: 'artifact' });
  item.dataset.name = a.name;
  item.dataset.version = String(a.version);
  const label = `${a.name} (version ${a.version}, ${sizeText(got.blob.size)})`;
  if (image && rasterType(got.mimeType) === image) {
    item.dataset.kind = 'image';
    const url = URL.createObjectURL(new Blob([got.blob], { type: image }));
    item.append(el('img', { src: url, alt: label }), el('span', { class: 'artifact-caption' }, label));
    placeArtifact(entry, item);
  } else {
    // The route served another type than the listing said: a file.
    placeArtifact(entry, fileItem(epoch, entry, a, got.blob));
  }
}

// fileItem is the list item of a file that is not shown inline: a link
// that downloads it. Its bytes (blob, if fetched already) are fetched on
// the link's first click, then kept in an application/octet-stream blob
// for the next clicks.
function fileItem(epoch, entry, a, blob) {
  const item = el('li', { class: 'artifact' });
  item.dataset.name = a.name;
  item.dataset.version = String(a.version);
  item.dataset.kind = 'file';
  const size = blob ? blob.size : a.size;
  const label = Number.isInteger(size) ? `${a.name} (version ${a.version}, ${sizeText(size)})` : `${a.name} (version ${a.version})`;
  const link = el('a', { href: '#', download: a.name.replace(/^user:/, '') }, label);
  item.append(link);
  const keep = (b) => {
    link.href = URL.createObjectURL(new Blob([b], { type: 'application/octet-stream' }));
  };
  if (blob) keep(blob);
  let fetching = false;
  link.addEventListener('click', async (ev) => {
    if (link.href.startsWith('blob:')) return; // the bytes are here: the browser downloads them
    ev.preventDefault();
    if (fetching) return;
    fetching = true;
    let got;
    try {
      got = await state.client.artifact(state.conversation, a.name, { version: a.version });
    } catch (err) {
      if (epoch !== state.epoch || handleAuthError(err)) return;
      console.warn('turnpike: artifact', a.name, err);
      return;
    } finally {
      fetching = false;
    }
    if (epoch !== state.epoch || entry.el !== item) return; // another conversation, or a newer version
    keep(got.blob);
    entry.url = link.href; // nothing was kept before: placeArtifact saw no blob: URL
    link.click();
  });
  return item;
}

// placeArtifact shows item as entry's, in place of the one shown before
// (whose blob: URL is revoked; item's, if it holds one, is kept).
function placeArtifact(entry, item) {
  const url = item.querySelector('img')?.src ?? item.querySelector('a')?.href ?? '';
  if (entry.url) URL.revokeObjectURL(entry.url);
  entry.url = url.startsWith('blob:') ? url : '';
  if (entry.el) entry.el.replaceWith(item);
  else insertArtifact(item, item.dataset.name);
  entry.el = item;
  $('artifacts').hidden = false;
}

// insertArtifact keeps the list sorted by name.
function insertArtifact(item, name) {
  const list = $('artifact-list');
  const next = [...list.children].find((li) => li.dataset.name > name);
  list.insertBefore(item, next ?? null);
}

function clearArtifacts() {
  for (const a of state.artifacts.values()) if (a.url) URL.revokeObjectURL(a.url);
  state.artifacts.clear();
  $('artifact-list').replaceChildren();
  $('artifacts').hidden = true;
}

function sizeText(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

// ---------- Opening a conversation ----------

// openConversation shows conversation name. A fresh one (just started here,
// not listed) has no history to read yet.
async function openConversation(name, { fresh = false } = {}) {
  if (state.sub) state.sub.close();
  const epoch = ++state.epoch;
  clearTimeout(state.retryTimer);
  Object.assign(state, {
    conversation: name, sub: null, answers: new Answers(), loading: true, buffered: [],
    sending: 0, nextBefore: null, waiting: [], retryTimer: 0,
  });
  state.turns.clear();
  state.fromHistory.clear();
  state.orphans.clear();
  clearArtifacts();
  log.replaceChildren();
  $('older').hidden = true;
  $('chat-title').textContent = name;
  document.title = `${name} · Turnpike chat`;
  setComposer(true);
  restoreDraft();
  markCurrent();
  closeNav();

  const sub = state.client.subscribe(name, {
    onEvent: (ev) => onEvent(epoch, ev),
    onGap: () => reloadHistory(epoch),
    onError: (err) => showComposerError(`The stream refused this conversation: ${err.message}`),
  });
  state.sub = sub;
  // History is read once the subscription stands, so no event falls between
  // the two. If the stream is slow to come, show history anyway, and read it
  // again when the subscription stands.
  const ready = await Promise.race([sub.ready.then(() => true, () => true), sleep(3000).then(() => false)]);
  if (epoch !== state.epoch) return;
  if (fresh) {
    drawHistory({ messages: [], next_before: null });
    flushBuffered();
  } else {
    loadArtifacts(epoch);
    await reloadHistory(epoch);
    if (!ready) sub.ready.then(() => reloadHistory(epoch), () => {});
  }
  await resendOutbox(epoch); // what an earlier page could not send
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// reloadHistory draws the newest history page, then the events that came
// meanwhile.
async function reloadHistory(epoch) {
  if (epoch !== state.epoch) return;
  state.loading = true;
  let page = null;
  try {
    page = await state.client.history(state.conversation, { limit: HISTORY_PAGE });
  } catch (err) {
    if (epoch !== state.epoch || handleAuthError(err)) return;
    if (err instanceof TurnpikeError && err.code === 'not_found') page = { messages: [], next_before: null };
    else showComposerError(`Could not load the history: ${err.message}`);
  }
  if (epoch !== state.epoch) return;
  if (page) drawHistory(page);
  flushBuffered();
}

function flushBuffered() {
  state.loading = false;
  const events = state.buffered;
  state.buffered = [];
  for (const ev of events) applyEvent(ev);
}

async function loadOlder() {
  if (state.nextBefore == null) return;
  const epoch = state.epoch;
  const button = $('older');
  button.disabled = true;
  try {
    const page = await state.client.history(state.conversation, { limit: HISTORY_PAGE, before: state.nextBefore });
    if (epoch === state.epoch) drawOlder(page);
  } catch (err) {
    if (!handleAuthError(err)) showComposerError(`Could not load older messages: ${err.message}`);
  } finally {
    button.disabled = false;
  }
}

// ---------- Sending ----------

async function send(event) {
  event.preventDefault();
  const input = $('message');
  const content = input.value.trim(); // as chat boxes do: no leading or trailing blank lines
  if (!state.conversation || content === '') return;
  showComposerError('');
  const item = { content, strategy: $('strategy').value, key: randomKey(), box: outbox.key() };
  outbox.add(item); // kept until the API accepted it
  input.value = '';
  saveDraft();
  const turn = new Turn(null);
  log.append(turn.el);
  log.scrollTop = log.scrollHeight;
  if (state.waiting.length > 0) {
    // Keep the order: it goes after the messages still waiting.
    turn.setUser(item.content, { status: 'not sent yet' });
    turn.line('system', 'Waiting for the server: it is sent after your earlier message.');
    reveal(turn);
    state.waiting.push({ item, turn });
    return;
  }
  await deliver(item, turn);
}

// deliver posts an outbox item shown as turn. A failure for want of the
// server keeps it waiting (retried when the connection is back); a refusal
// puts its text back into the message box, with the reason.
async function deliver(item, turn) {
  const epoch = state.epoch;
  turn.setUser(item.content, { pending: true });
  turn.clearLines();
  reveal(turn);
  // The answers this one would interrupt, marked before the POST: their
  // cancellation may arrive before its 202.
  const interrupts = item.strategy === 'interrupt' ? [...state.turns.values()].filter((t) => !t.done && !t.interruptedBy) : [];
  for (const t of interrupts) t.interruptedBy = true;
  state.sending++;
  try {
    const res = await state.client.send(state.conversation, item.content, {
      strategy: item.strategy,
      idempotencyKey: item.key,
    });
    outbox.remove(item);
    if (epoch !== state.epoch) return;
    if (state.fromHistory.has(res.request_id)) {
      turn.el.remove(); // a history reload has shown it already
      return;
    }
    turn.setRequestId(res.request_id);
    turn.setUser(item.content);
    state.turns.set(res.request_id, turn);
  } catch (err) {
    if (epoch !== state.epoch) return;
    for (const t of interrupts) t.interruptedBy = false; // it did not go
    if (err instanceof TurnpikeError && err.status === 401) {
      // No new token could be had: the message stays in the outbox, for
      // after signing in again.
      turn.setUser(item.content, { status: 'not sent yet' });
      handleAuthError(err);
      return;
    }
    if (retriable(err)) {
      turn.setUser(item.content, { status: 'not sent yet' });
      turn.line('system', `Not sent yet: ${sendProblem(err)} It is kept, and sent as soon as the server answers again.`);
      reveal(turn);
      wait(item, turn, err.retryAfter);
      return;
    }
    outbox.remove(item);
    turn.setUser(item.content, { status: 'not sent' });
    turn.user.el.dataset.kept = 'false';
    turn.line('system', `Not sent: ${err.message}. Your text is back in the message box.`);
    reveal(turn);
    const input = $('message');
    input.value = input.value.trim() === '' ? item.content : `${item.content}\n${input.value}`;
    saveDraft();
  } finally {
    if (epoch === state.epoch) {
      state.sending--;
      flushOrphans();
    }
  }
}

// reveal keeps the newest of the user's own messages in view.
function reveal(turn) {
  if (turn.el === log.lastElementChild) log.scrollTop = log.scrollHeight;
}

// retriable says whether a failed send may succeed later unchanged: the
// server could not be reached, was unavailable, or asked to slow down.
function retriable(err) {
  return err instanceof TurnpikeError && [0, 429, 502, 503, 504].includes(err.status);
}

function sendProblem(err) {
  switch (err.status) {
    case 0: return 'the server cannot be reached (restarting, or the network is down).';
    case 429: return 'too many messages at once.';
    default: return `the server is unavailable (${err.status}).`;
  }
}

// wait keeps a failed send for later: it is retried when the stream
// connection opens again, or after retryAfter (or a while), whichever
// comes first.
function wait(item, turn, retryAfter = 0) {
  state.waiting.push({ item, turn });
  clearTimeout(state.retryTimer);
  state.retryTimer = setTimeout(retryWaiting, Math.max(retryAfter, 5000));
}

// retryWaiting sends the waiting messages again, in order.
async function retryWaiting() {
  clearTimeout(state.retryTimer);
  state.retryTimer = 0;
  const waiting = state.waiting;
  state.waiting = [];
  const epoch = state.epoch;
  for (const { item, turn } of waiting) {
    if (epoch !== state.epoch) return;
    await deliver(item, turn);
  }
}

// The outbox and the draft of the open conversation, in sessionStorage:
// they survive a reload, a restart of the server and signing in again.
// Each item names its box (user and conversation) itself.
const outbox = {
  key: () => OUTBOX_KEY + state.user + '/' + state.conversation,
  items(box = this.key()) {
    try {
      return JSON.parse(sessionStorage.getItem(box) ?? '[]');
    } catch {
      return [];
    }
  },
  save(box, items) {
    if (items.length) sessionStorage.setItem(box, JSON.stringify(items));
    else sessionStorage.removeItem(box);
  },
  add(item) { this.save(item.box, [...this.items(item.box), item]); },
  remove(item) { this.save(item.box, this.items(item.box).filter((i) => i.key !== item.key)); },
};

function saveDraft() {
  if (!state.conversation) return;
  const key = DRAFT_KEY + state.user + '/' + state.conversation;
  const text = $('message').value;
  if (text.trim()) sessionStorage.setItem(key, text);
  else sessionStorage.removeItem(key);
}

function restoreDraft() {
  $('message').value = sessionStorage.getItem(DRAFT_KEY + state.user + '/' + state.conversation) ?? '';
}

// resendOutbox sends what an earlier page left unsent (its idempotency
// keys make a message the API did accept count once).
async function resendOutbox(epoch) {
  for (const item of outbox.items()) {
    if (epoch !== state.epoch) return;
    const turn = new Turn(null);
    log.append(turn.el);
    await deliver(item, turn);
  }
}

// flushOrphans applies events that waited for their POST's 202: those of
// known requests now, and, once no POST is in flight, the others as
// requests sent elsewhere.
function flushOrphans() {
  for (const [id, events] of [...state.orphans]) {
    if (state.turns.has(id) || state.sending === 0) {
      state.orphans.delete(id);
      for (const ev of events) applyEvent(ev);
    }
  }
}

function randomKey() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return 'k-' + [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
}

function setComposer(enabled) {
  for (const id of ['message', 'strategy', 'send']) $(id).disabled = !enabled;
}

function showComposerError(text) {
  $('composer-error').textContent = text;
}

// ---------- Conversations list ----------

let refreshTimer = 0;
function refreshConversations() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(() => loadConversations(false), 300);
}

const timeFormat = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });
const dateFormat = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric' });

function when(iso) {
  const d = new Date(iso);
  return d.toDateString() === new Date().toDateString() ? timeFormat.format(d) : dateFormat.format(d);
}

let listed = []; // the conversations shown, newest first

async function loadConversations(more) {
  if (!state.client) return;
  let page;
  try {
    page = await state.client.conversations({ before: more ? state.convNext : undefined });
  } catch (err) {
    if (!handleAuthError(err)) console.warn('turnpike: conversations', err);
    return;
  }
  listed = more ? listed.concat(page.conversations) : page.conversations;
  state.convNext = page.next_before;
  drawConversations();
}

function drawConversations() {
  const list = $('conv-list');
  const items = [...listed];
  if (state.conversation && !items.some((c) => c.conversation === state.conversation)) {
    items.unshift({ conversation: state.conversation, updated_at: null, messages: 0 });
  }
  list.replaceChildren(...items.map((c) => {
    const a = el('a', { href: `#c=${encodeURIComponent(c.conversation)}` });
    a.append(el('span', { class: 'conv-name' }, c.conversation));
    const n = c.messages === 1 ? '1 message' : `${c.messages} messages`;
    a.append(el('span', { class: 'conv-meta' }, c.updated_at ? `${n} · ${when(c.updated_at)}` : 'new'));
    const li = el('li');
    li.append(a);
    return li;
  }));
  markCurrent();
  $('conv-empty').hidden = items.length > 0;
  $('conv-more').hidden = state.convNext == null;
}

function markCurrent() {
  for (const a of $('conv-list').querySelectorAll('a')) {
    const name = decodeURIComponent(a.getAttribute('href').slice(3));
    if (name === state.conversation) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

function conversationFromHash() {
  const m = /^#c=(.+)$/.exec(location.hash);
  if (!m) return null;
  try {
    const name = decodeURIComponent(m[1]);
    return ID_RULE.test(name) ? name : null;
  } catch {
    return null;
  }
}

function route() {
  const name = conversationFromHash();
  if (name && name !== state.conversation && state.client) {
    // Not in a complete listing: it has no turn yet.
    const fresh = state.convNext == null && !listed.some((c) => c.conversation === name);
    openConversation(name, { fresh: fresh && routingFresh === name }).then(drawConversations);
  }
  routingFresh = null;
}

// routingFresh names a conversation just started with the form.
let routingFresh = null;

// ---------- Connection state ----------

function onState(s, info) {
  const conn = $('conn');
  let text;
  let detail = '';
  switch (s) {
    case 'open': text = 'Live'; break;
    case 'connecting': text = 'Connecting…'; break;
    case 'reconnecting':
      text = 'Reconnecting…';
      if (info.delay) {
        text = 'Reconnecting';
        detail = ` in ${Math.max(1, Math.round(info.delay / 1000))} s…`;
      }
      if (!navigator.onLine) [text, detail] = ['Offline', ': waiting for the network…'];
      if (info.unauthenticated) {
        // No token provider could replace the refused token.
        setTimeout(() => handleAuthError(new TurnpikeError(401, 'unauthenticated', 'token refused')), 0);
      }
      break;
    case 'closed': text = 'Disconnected'; break;
    default: text = ''; // idle: nothing to stream yet, nothing to report
  }
  conn.dataset.state = s;
  const shown = conn.firstElementChild;
  if (shown.textContent !== text) shown.textContent = text;
  if (shown.nextElementSibling.textContent !== detail) shown.nextElementSibling.textContent = detail;
  if (s === 'open' && state.waiting.length > 0) retryWaiting(); // the server is back
}

// ---------- Signing in and out ----------

// handleAuthError signs out on a token refused for good (turnpike.js's
// token provider, on a devstack, replaces refused tokens first). The draft
// and the unsent messages are kept for after signing in again.
function handleAuthError(err) {
  if (!(err instanceof TurnpikeError && err.status === 401)) return false;
  if (!state.client) return true; // signed out already
  saveDraft();
  signOut('Your sign-in was refused (expired, or signed with another secret). Sign in again: your unsent messages are kept.');
  return true;
}

function claims(token) {
  try {
    const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return JSON.parse(atob(part.padEnd(part.length + ((4 - (part.length % 4)) % 4), '=')));
  } catch {
    return {};
  }
}

function streamURL() {
  const template = localStorage.getItem(STREAM_KEY) || config.streamTemplate;
  return template.replaceAll('{host}', location.hostname);
}

// tokenProvider is turnpike.js's getToken on a devstack: a refused token
// (a devstack restarted with another secret) is replaced by a new one for
// the same user.
function tokenProvider(user) {
  if (!config.devTokens || !ID_RULE.test(user)) return undefined;
  return async () => {
    const token = await mintDevToken(user);
    sessionStorage.setItem(TOKEN_KEY, token);
    return token;
  };
}

async function startSession(token) {
  const c = claims(token);
  const client = connect({ streamURL: streamURL(), token, onState, getToken: tokenProvider(c.sub ?? '') });
  // Check the token before showing anything.
  try {
    await client.conversations({ limit: 1 });
  } catch (err) {
    client.close();
    const refused = err instanceof TurnpikeError && err.status === 401;
    showSignIn(refused ? 'That token was refused.' : `Could not reach the API: ${err.message}`);
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, client.token);
  state.client = client;
  state.user = c.sub ?? '';
  $('who-user').textContent = c.sub ?? '?';
  $('who-name').lastElementChild.textContent = ` · ${c.tenant ?? 'default'}`;
  $('who-name').title = `${c.sub ?? '?'} · tenant ${c.tenant ?? 'default'}`;
  $('who').hidden = false;
  $('signin').hidden = true;
  $('app').hidden = false;
  onState('idle', {});
  await loadConversations(false);
  const name = conversationFromHash();
  if (name) await openConversation(name);
  else $('new-name').focus();
  drawConversations();
}

function signOut(reason = '') {
  state.sub?.close();
  state.client?.close();
  clearTimeout(state.retryTimer);
  Object.assign(state, {
    client: null, sub: null, conversation: null, loading: false, buffered: [], sending: 0, waiting: [], retryTimer: 0,
  });
  state.epoch++;
  state.turns.clear();
  state.orphans.clear();
  listed = [];
  log.replaceChildren();
  sessionStorage.removeItem(TOKEN_KEY);
  $('who').hidden = true;
  $('app').hidden = true;
  setComposer(false);
  onState('idle', {});
  showSignIn(reason);
}

function showSignIn(error = '') {
  $('signin').hidden = false;
  $('dev-form').hidden = !config.devTokens;
  $('token-form').hidden = config.devTokens;
  $('signin-error').textContent = error;
  $('stream-url').value = localStorage.getItem(STREAM_KEY) ?? '';
  $('stream-url').placeholder = config.streamTemplate;
  (config.devTokens ? $('dev-user') : $('token-input')).focus();
}

async function devSignIn(event) {
  event.preventDefault();
  const user = $('dev-user').value.trim();
  if (!ID_RULE.test(user)) {
    $('signin-error').textContent = 'User names are 1 to 128 of: letters, digits, . _ : @ -';
    return;
  }
  saveStreamSetting();
  let token;
  try {
    token = await mintDevToken(user);
  } catch (err) {
    $('signin-error').textContent = err.message;
    return;
  }
  await startSession(token);
}

// mintDevToken asks the devstack for a token of user (POST /v1/dev/token).
async function mintDevToken(user) {
  let res;
  try {
    res = await fetch('/v1/dev/token', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ user }),
    });
  } catch (err) {
    throw new Error(`Could not reach the API: ${err.message}`);
  }
  const body = await res.json().catch(() => ({}));
  if (!res.ok || !body.token) throw new Error(body?.error?.message ?? `Sign-in failed (${res.status})`);
  return body.token;
}

async function tokenSignIn(event) {
  event.preventDefault();
  saveStreamSetting();
  await startSession($('token-input').value.trim());
}

function saveStreamSetting() {
  const v = $('stream-url').value.trim();
  if (v) localStorage.setItem(STREAM_KEY, v);
  else localStorage.removeItem(STREAM_KEY);
}

// ---------- Small screens ----------

function toggleNav(open) {
  document.body.classList.toggle('nav-open', open);
  $('nav-toggle').setAttribute('aria-expanded', String(open));
}

function closeNav() {
  if (document.body.classList.contains('nav-open')) toggleNav(false);
}

// ---------- Wiring ----------

function newConversation(event) {
  event.preventDefault();
  const input = $('new-name');
  const name = input.value.trim();
  if (!ID_RULE.test(name)) {
    input.setCustomValidity('Use 1 to 128 of: letters, digits, . _ : @ -');
    input.reportValidity();
    return;
  }
  input.value = '';
  routingFresh = name;
  location.hash = `c=${encodeURIComponent(name)}`;
  route(); // now, not at the hashchange event: the message box opens at once
  $('message').focus();
}

function init() {
  $('dev-form').addEventListener('submit', devSignIn);
  $('token-form').addEventListener('submit', tokenSignIn);
  $('sign-out').addEventListener('click', () => {
    location.hash = '';
    signOut();
  });
  $('new-form').addEventListener('submit', newConversation);
  $('new-name').addEventListener('input', (e) => e.target.setCustomValidity(''));
  $('composer').addEventListener('submit', send);
  $('message').addEventListener('input', saveDraft);
  $('message').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('older').addEventListener('click', loadOlder);
  $('conv-more').addEventListener('click', () => loadConversations(true));
  $('nav-toggle').addEventListener('click', () => toggleNav(!document.body.classList.contains('nav-open')));
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') closeNav();
  });
  window.addEventListener('hashchange', route);
  // After a resize (a phone turned, a keyboard shown) the newest message
  // stays in view, unless the reader had scrolled up.
  let stick = true;
  log.addEventListener('scroll', () => { stick = atBottom(); });
  new ResizeObserver(() => { if (stick) log.scrollTop = log.scrollHeight; }).observe(log);

  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) startSession(token);
  else showSignIn();
}

init();
