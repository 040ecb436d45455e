package webui_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/internal/testenv/stacktest"
	"github.com/turnpike-dev/turnpike/pkg/auth"
	"github.com/turnpike-dev/turnpike/pkg/client"
	"github.com/turnpike-dev/turnpike/pkg/devstack"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// The browser test drives the demo page in Debian's headless Chromium
// against an in-process devstack: sign in as a picked user, chat with
// streamed tokens, reload into history, survive a dropped WebSocket without
// duplicated text, and fit a 360 px screen. It saves screenshots to
// $TURNPIKE_ARTIFACTS (or a kept temporary directory, named in the log).

// instrument runs in every document before the page's scripts. It records
// the page's WebSockets and the frames it sends (so the test can drop one
// as a network failure would), every text an assistant message shows, and
// the connection states shown.
const instrument = `(() => {
  if (window.__tp) return;
  const tp = window.__tp = { sockets: [], sent: [], seen: {}, states: [] };
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) { super(...args); tp.sockets.push(this); }
    send(data) { tp.sent.push(String(data)); return super.send(data); }
  };
  const record = () => {
    for (const m of document.querySelectorAll('.turn[data-request-id] .msg-assistant .msg-text')) {
      const id = m.closest('.turn').dataset.requestId;
      const texts = tp.seen[id] ??= [];
      if (texts.at(-1) !== m.textContent) texts.push(m.textContent);
    }
    const conn = document.getElementById('conn');
    if (conn && tp.states.at(-1) !== conn.dataset.state) tp.states.push(conn.dataset.state);
  };
  new MutationObserver(record).observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
})()`

func TestBrowserChat(t *testing.T) {
	t.Parallel()
	stk := newStack(t)
	stk.gates = stacktest.NewGates() // the answers stopped and interrupted wait for it
	st := stk.start(t, t.Context(), "")
	checkDevstackServesThePage(t, st)
	chromium := findChromium(t)
	artifacts := artifactsDir(t)
	// The message the API refuses on purpose (below) logs its 400.
	ctx := newBrowser(t, chromium, "status of 400 (Bad Request)")
	base := st.IngestURL + "/"
	conv := testenv.Name(t, "chat")

	run(t, ctx, "instrument the page",
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: instrument})
			return err
		}),
		chromedp.EmulateViewport(1100, 720),
		chromedp.Navigate(base),
	)

	// Pick a user: the devstack mints the token.
	run(t, ctx, "sign in as a picked user",
		chromedp.WaitVisible(chromedp.CSS("#dev-user")),
		chromedp.SetValue(chromedp.CSS("#dev-user"), "alice"),
		chromedp.Click(chromedp.CSS("#dev-form button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS("#app")),
	)
	if who := text(t, ctx, "#who-name"); !strings.Contains(who, "alice") {
		t.Errorf("signed in as %q, want alice", who)
	}
	// Nothing streams before a conversation is open: no badge that looks
	// like an error.
	if v := evalJS[string](t, ctx, `(() => { const c = document.getElementById('conn'); return c.dataset.state + ' ' + getComputedStyle(c).visibility; })()`); v != "idle hidden" {
		t.Errorf("right after sign-in the connection badge is %q, want idle and hidden", v)
	}

	// Start a conversation and type a message: tokens stream in.
	run(t, ctx, "start a conversation",
		chromedp.SendKeys(chromedp.CSS("#new-name"), conv+kb.Enter),
		chromedp.WaitEnabled(chromedp.CSS("#message")),
		waitJS(`document.getElementById('conn').dataset.state === 'open'`),
	)
	const first = "hello from a real browser, one word at a time"
	id1 := sendMessage(t, ctx, first)
	want1 := "echo #1: " + first
	waitAnswer(t, ctx, id1, "complete")
	seen := seenTexts(t, ctx, id1)
	if got := seen[len(seen)-1]; got != want1 {
		t.Fatalf("answer %q, want %q", got, want1)
	}
	partial := 0
	for _, s := range seen {
		if !strings.HasPrefix(want1, s) {
			t.Errorf("the answer showed %q, which is not a prefix of %q", s, want1)
		}
		if s != "" && s != want1 {
			partial++
		}
	}
	if partial < 2 {
		t.Errorf("saw %d partial texts before the full answer (%q): want the tokens to stream in", partial, seen)
	}
	screenshot(t, ctx, artifacts, "chat-first-answer.png")

	// Reload: the conversation comes back from history.
	run(t, ctx, "reload into history",
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS("#app")),
		waitJS(`document.querySelectorAll('.turn .msg-assistant[data-status="complete"]').length === 1`),
	)
	if got := text(t, ctx, ".turn .msg-user .msg-text"); got != first {
		t.Errorf("after reload the user message is %q, want %q", got, first)
	}
	if got := text(t, ctx, ".turn .msg-assistant .msg-text"); got != want1 {
		t.Errorf("after reload the answer is %q, want %q", got, want1)
	}
	if got := text(t, ctx, `#conv-list a[aria-current="page"]`); !strings.Contains(got, conv) || !strings.Contains(got, "2 messages") {
		t.Errorf("the conversation list shows %q, want %s with 2 messages", got, conv)
	}

	// Drop the WebSocket mid-answer: the page resumes from its last cursor
	// and shows every word exactly once.
	run(t, ctx, "wait for the stream", waitJS(`document.getElementById('conn').dataset.state === 'open'`))
	id2 := sendMessage(t, ctx, "[[tokens:40]]")
	run(t, ctx, "wait for a partial answer", waitJS(fmt.Sprintf(
		`(document.querySelector('.turn[data-request-id=%q] .msg-assistant .msg-text')?.textContent ?? '').split(' ').length >= 6`, id2)))
	sockets := evalJS[int](t, ctx, `(() => { const s = window.__tp.sockets; s.at(-1).close(); return s.length; })()`)
	waitAnswer(t, ctx, id2, "complete")
	if n := evalJS[int](t, ctx, `window.__tp.sockets.length`); n <= sockets {
		t.Errorf("%d WebSockets after the drop, want a new one (had %d)", n, sockets)
	}
	resume := evalJS[string](t, ctx, `window.__tp.sent.filter((f) => f.includes('"subscribe"')).at(-1)`)
	if !strings.Contains(resume, `"since":"`) || strings.Contains(resume, `"since":"earliest"`) {
		t.Errorf("the resubscribe frame %s: want since the last cursor", resume)
	}
	if states := evalJS[[]string](t, ctx, `window.__tp.states`); !contains(states, "reconnecting") {
		t.Errorf("connection states shown %q: want reconnecting among them", states)
	}
	words := make([]string, 40)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", i+1)
	}
	want2 := strings.Join(words, " ")
	seen = seenTexts(t, ctx, id2)
	if got := strings.TrimSpace(seen[len(seen)-1]); got != want2 {
		t.Fatalf("after the drop the answer is\n%q\nwant\n%q", got, want2)
	}
	for _, s := range seen {
		if !strings.HasPrefix(want2, s) && !strings.HasPrefix(want2+" ", s) {
			t.Errorf("the answer showed %q at some point: duplicated or out-of-order text", s)
		}
	}
	stored := history(t, st, conv)
	if got := stored[len(stored)-1]; strings.TrimSpace(got) != want2 {
		t.Errorf("history holds %q, want the text the page showed", got)
	}

	// An answer that breaks off is marked incomplete and its notice shown;
	// a request with no reply says that nothing was kept.
	id3 := sendMessage(t, ctx, "[[fail-after:3]] this reply breaks off")
	waitAnswer(t, ctx, id3, "incomplete")
	if got := text(t, ctx, turnSel(id3)+" .msg-assistant .mark"); got != "incomplete" {
		t.Errorf("the broken-off answer is marked %q, want incomplete", got)
	}
	if n := evalJS[int](t, ctx, fmt.Sprintf(`document.querySelectorAll('%s .notice').length`, turnSel(id3))); n < 1 {
		t.Error("the notice of the failed run is not shown")
	}
	id4 := sendMessage(t, ctx, "[[empty]]")
	run(t, ctx, "wait for the discarded request", waitJS(fmt.Sprintf(`!!document.querySelector('%s .system')`, turnSel(id4))))
	if got := text(t, ctx, turnSel(id4)+" .system"); !strings.Contains(got, "Nothing was kept") {
		t.Errorf("the discarded request says %q, want that nothing was kept", got)
	}
	if got := evalJS[string](t, ctx, fmt.Sprintf(`document.querySelector('%s .msg-user').dataset.kept`, turnSel(id4))); got != "false" {
		t.Errorf("the discarded user message has data-kept %q, want false", got)
	}

	// Stop a streaming answer: the part shown so far is kept, marked cancelled.
	// It is held after five words until then.
	gate := stk.gates.Hold(conv, 5)
	id5 := sendMessage(t, ctx, "[[tokens:400]][[delay:30ms]]")
	run(t, ctx, "wait for a partial answer to stop", waitJS(fmt.Sprintf(
		`(document.querySelector('%s .msg-assistant .msg-text')?.textContent ?? '').split(' ').length >= 5`, turnSel(id5))))
	run(t, ctx, "press stop", chromedp.Click(chromedp.CSS(turnSel(id5)+" .cancel")))
	waitAnswer(t, ctx, id5, "cancelled")
	gate.Release()
	if got := text(t, ctx, turnSel(id5)+" .msg-assistant .mark"); got != "cancelled" {
		t.Errorf("the stopped answer is marked %q, want cancelled", got)
	}
	stopped := strings.TrimSpace(text(t, ctx, turnSel(id5)+" .msg-assistant .msg-text"))
	if !strings.HasPrefix(stopped, "w1 w2 w3") || strings.Contains(stopped, "w400") {
		t.Errorf("the stopped answer shows %q: want the beginning only", stopped)
	}
	if n := evalJS[int](t, ctx, fmt.Sprintf(`document.querySelectorAll('%s .cancel').length`, turnSel(id5))); n != 0 {
		t.Error("the stop button outlived its answer")
	}
	run(t, ctx, "let the conversation list catch up", waitJS(`document.querySelector('#conv-list a[aria-current="page"]').textContent.includes('8 messages')`))
	screenshot(t, ctx, artifacts, "chat-desktop.png")

	// Phone width: nothing overflows, the conversation list folds away.
	// After the reload, notices and requests that kept nothing are gone;
	// the incomplete mark stays.
	run(t, ctx, "narrow the viewport",
		chromedp.EmulateViewport(360, 740, chromedp.EmulateMobile),
		chromedp.Reload(),
		waitJS(`document.querySelectorAll('.turn .msg-assistant[data-status]').length === 4`),
	)
	if n := evalJS[int](t, ctx, `document.querySelectorAll('.notice, .system, [data-kept="false"]').length`); n != 0 {
		t.Errorf("%d notices or unkept messages after the reload, want none: they are not persisted", n)
	}
	if got := text(t, ctx, turnSel(id3)+" .msg-assistant .mark"); got != "incomplete" {
		t.Errorf("after the reload the broken-off answer is marked %q, want incomplete", got)
	}
	if w := evalJS[int](t, ctx, `document.documentElement.scrollWidth`); w > 360 {
		t.Errorf("the page is %d px wide at a 360 px viewport", w)
	}
	if !evalJS[bool](t, ctx, `getComputedStyle(document.getElementById('nav-toggle')).display !== 'none' && getComputedStyle(document.getElementById('sidebar')).display === 'none'`) {
		t.Error("at 360 px the conversation list should fold behind its button")
	}
	if !oneRow(t, ctx) {
		t.Error("at 360 px the header takes more than one row")
	}
	screenshot(t, ctx, artifacts, "chat-phone.png")

	// A shorter viewport (a phone's keyboard opening) keeps the newest
	// message in view.
	run(t, ctx, "shorten the viewport",
		chromedp.EmulateViewport(360, 420, chromedp.EmulateMobile),
		waitJS(`(() => { const l = document.getElementById('log'); return l.scrollHeight - l.scrollTop - l.clientHeight < 40; })()`),
	)
	run(t, ctx, "back to desktop", chromedp.EmulateViewport(1100, 720), waitJS(`document.getElementById('conn').dataset.state === 'open'`))

	// The stack restarts with another secret while a message is typed and
	// sent: the page keeps it and says why, then re-authenticates,
	// resubscribes from its cursor and sends it, without a reload.
	waitAnswer(t, ctx, sendMessage(t, ctx, "before the restart"), "complete") // the subscription has a cursor
	oldToken := evalJS[string](t, ctx, `window.__notReloaded = true, sessionStorage.getItem('turnpike.token')`)
	subscribes := evalJS[int](t, ctx, `window.__tp.sent.filter((f) => f.includes('"subscribe"')).length`)
	stk.stop(t)
	run(t, ctx, "see the connection lost", waitJS(`document.getElementById('conn').dataset.state === 'reconnecting'`))
	const typed = "typed while the server was down"
	run(t, ctx, "send while the server is down",
		chromedp.SendKeys(chromedp.CSS("#message"), typed+kb.Enter),
		waitJS(`[...document.querySelectorAll('.turn .system')].some((p) => p.textContent.startsWith('Not sent yet'))`),
	)
	if !evalJS[bool](t, ctx, `(() => { const l = document.getElementById('log'); return l.scrollHeight - l.scrollTop - l.clientHeight < 40; })()`) {
		t.Error("the message typed while the server is down is not scrolled into view")
	}
	if got := text(t, ctx, ".turn:last-child .msg-user .msg-text"); got != typed {
		t.Errorf("while the server is down the page shows %q, want the typed message", got)
	}
	if n := evalJS[int](t, ctx, `Object.keys(sessionStorage).filter((k) => k.startsWith('turnpike.outbox:')).length`); n != 1 {
		t.Errorf("%d outboxes kept while the server is down, want the typed message in one", n)
	}
	screenshot(t, ctx, artifacts, "chat-server-down.png")
	run(t, ctx, "phone size while reconnecting", chromedp.EmulateViewport(360, 740, chromedp.EmulateMobile))
	if !oneRow(t, ctx) {
		t.Error("at 360 px, reconnecting, the header takes more than one row")
	}
	if !evalJS[bool](t, ctx, `(() => { const n = document.getElementById('who-name'); return n.scrollWidth <= n.clientWidth; })()`) {
		t.Error("at 360 px, reconnecting, the user name is cut off")
	}
	if w := evalJS[int](t, ctx, `document.documentElement.scrollWidth`); w > 360 {
		t.Errorf("reconnecting, the page is %d px wide at a 360 px viewport", w)
	}
	screenshot(t, ctx, artifacts, "chat-phone-server-down.png")
	run(t, ctx, "desktop again", chromedp.EmulateViewport(1100, 720))
	st = stk.start(t, ctx, "another-secret-after-the-restart-0123456789")
	sent := fmt.Sprintf(`[...document.querySelectorAll('.turn[data-request-id]')].filter((t) => t.querySelector('.msg-user .msg-text')?.textContent === %q)`, typed)
	run(t, ctx, "wait for the typed message to be sent and answered",
		waitJS(sent+`.some((t) => t.querySelector('.msg-assistant')?.dataset.status === 'complete')`))
	if !evalJS[bool](t, ctx, `window.__notReloaded === true`) {
		t.Error("the page reloaded across the restart")
	}
	if n := evalJS[int](t, ctx, sent+`.length`); n != 1 {
		t.Errorf("the typed message shows %d times, want once", n)
	}
	if n := evalJS[int](t, ctx, `document.querySelectorAll('.turn .system').length`); n != 0 {
		t.Errorf("%d status lines left after the message was sent, want none", n)
	}
	// (chromedp's Enter also types a newline after the page sent the text.)
	if v := evalJS[string](t, ctx, `document.getElementById('message').value`); strings.TrimSpace(v) != "" {
		t.Errorf("the message box holds %q after the message was sent, want it empty", v)
	}
	if tok := evalJS[string](t, ctx, `sessionStorage.getItem('turnpike.token')`); tok == oldToken || tok == "" {
		t.Error("the page did not get a new token from the restarted devstack")
	}
	after := evalJS[[]string](t, ctx, fmt.Sprintf(`window.__tp.sent.filter((f) => f.includes('"subscribe"')).slice(%d)`, subscribes))
	if len(after) == 0 || !strings.Contains(after[len(after)-1], `"since":"1-`) {
		t.Errorf("subscribe frames after the restart %q: want a resume from the last cursor", after)
	}
	if n := evalJS[int](t, ctx, `Object.keys(sessionStorage).filter((k) => k.startsWith('turnpike.outbox:')).length`); n != 0 {
		t.Errorf("%d outboxes left after the message was accepted, want none", n)
	}
	stored = history(t, st, conv)
	if n := count(stored, typed); n != 1 {
		t.Errorf("history holds the typed message %d times, want once: %q", n, stored)
	}
	screenshot(t, ctx, artifacts, "chat-after-restart.png")

	// A newer message sent with "interrupt it" cancels the streaming answer,
	// which says why it stopped. It is held after three words until then.
	gate = stk.gates.Hold(conv, 3)
	id6 := sendMessage(t, ctx, "[[tokens:400]][[delay:30ms]]")
	run(t, ctx, "wait for a partial answer to interrupt", waitJS(fmt.Sprintf(
		`(document.querySelector('%s .msg-assistant .msg-text')?.textContent ?? '').split(' ').length >= 3`, turnSel(id6))))
	run(t, ctx, "choose interrupt", chromedp.SetValue(chromedp.CSS("#strategy"), "interrupt"))
	id7 := sendMessage(t, ctx, "never mind")
	waitAnswer(t, ctx, id6, "cancelled")
	gate.Release() // for id7, whose pauses pass the same gate
	waitAnswer(t, ctx, id7, "complete")
	if got := text(t, ctx, turnSel(id6)+" .system"); !strings.Contains(got, "Interrupted by your newer message") {
		t.Errorf("the interrupted answer says %q, want why it stopped", got)
	}

	// A message the API refuses (400: a NUL in it) is not kept: the page
	// says why, marks it not sent, drops it from the outbox and puts its
	// text back in the message box, which was emptied when it was sent.
	turns := evalJS[int](t, ctx, `document.querySelectorAll('.turn').length`)
	evalJS[bool](t, ctx, `document.getElementById('message').value = 'refused \u0000 here', document.getElementById('composer').requestSubmit(), true`)
	run(t, ctx, "see the refusal", waitJS(fmt.Sprintf(
		`document.querySelectorAll('.turn').length > %d && [...document.querySelectorAll('.turn .system')].some((p) => p.textContent.startsWith('Not sent: '))`, turns)))
	if got := evalJS[string](t, ctx, `document.getElementById('message').value`); got != "refused \x00 here" {
		t.Errorf("after a refusal the message box holds %q, want the refused text back", got)
	}
	if got := evalJS[string](t, ctx, `document.querySelector('.turn:last-child .msg-user').dataset.kept`); got != "false" {
		t.Errorf("the refused message has data-kept %q, want false", got)
	}
	if n := evalJS[int](t, ctx, `Object.keys(sessionStorage).filter((k) => k.startsWith('turnpike.outbox:')).length`); n != 0 {
		t.Errorf("%d outboxes left after a refusal, want none", n)
	}
	evalJS[bool](t, ctx, `document.getElementById('message').value = '', true`)

	// Text typed and not sent is a draft: a reload brings it back.
	const draft = "half a thought, not sent"
	run(t, ctx, "type a draft and reload",
		chromedp.SendKeys(chromedp.CSS("#message"), draft),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS("#app")),
		waitJS(`document.getElementById('message').value !== ''`),
	)
	if got := evalJS[string](t, ctx, `document.getElementById('message').value`); strings.TrimSpace(got) != draft {
		t.Errorf("after a reload the message box holds %q, want the draft %q", got, draft)
	}

	// turnpike.js on its own, against a fake socket and fetch.
	script, err := os.ReadFile(filepath.Join("testdata", "turnpike_test.js"))
	if err != nil {
		t.Fatal(err)
	}
	if failures := evalJS[[]string](t, ctx, string(script), chromedp.EvalAwaitPromise); len(failures) > 0 {
		t.Errorf("turnpike.js checks failed:\n  %s", strings.Join(failures, "\n  "))
	}
}

// checkDevstackServesThePage checks over plain HTTP (so also without a
// browser) what the page relies on in the devstack: its settings, dev
// tokens, and the conversation listing.
func checkDevstackServesThePage(t *testing.T, st *devstack.Stack) {
	t.Helper()
	ctx := testenv.Context(t, 20*time.Second)
	do := func(method, path, token, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, st.IngestURL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, string(b)
	}
	code, index := do(http.MethodGet, "/", "", "")
	_, port, _ := net.SplitHostPort(st.PushgwAddr)
	wantStream := fmt.Sprintf(`content="ws://{host}:%s/v1/stream"`, port)
	if code != http.StatusOK || !strings.Contains(index, wantStream) || !strings.Contains(index, `name="turnpike-dev-tokens" content="on"`) {
		t.Fatalf("GET / = %d; want the page with %s and dev tokens on:\n%s", code, wantStream, index)
	}
	code, body := do(http.MethodPost, "/v1/dev/token", "", `{"user":"zoe"}`)
	var tok struct{ Token, Tenant, User string }
	if err := json.Unmarshal([]byte(body), &tok); err != nil || code != http.StatusOK || tok.User != "zoe" || tok.Tenant != "default" {
		t.Fatalf("POST /v1/dev/token = %d %s", code, body)
	}
	if code, body := do(http.MethodGet, "/v1/conversations", tok.Token, ""); code != http.StatusOK || strings.TrimSpace(body) != `{"conversations":[],"next_before":null}` {
		t.Errorf("GET /v1/conversations of a new user = %d %s, want an empty list", code, body)
	}
	if code, body := do(http.MethodGet, "/nope", "", ""); code != http.StatusNotFound || !strings.Contains(body, `"not_found"`) {
		t.Errorf("GET /nope = %d %s, want the JSON 404", code, body)
	}
}

// findChromium returns Chromium's path, or skips the test loudly.
func findChromium(t *testing.T) string {
	t.Helper()
	candidates := []string{"chromium", "/usr/bin/chromium", "chromium-browser"}
	if p := os.Getenv("TURNPIKE_CHROMIUM"); p != "" {
		candidates = []string{p} // the one to use, or none
	}
	for _, p := range candidates {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	msg := fmt.Sprintf("no Chromium at %q (install Debian's chromium package, e.g. with .ci/chromium, or set TURNPIKE_CHROMIUM)", candidates)
	if inCI() {
		t.Fatalf("CI=true and %s: in CI a missing browser fails the run", msg)
	}
	msg = "!!! SKIPPING THE BROWSER TEST of the demo page: " + msg
	t.Log(msg)
	announce(msg)
	t.Skip(msg)
	return ""
}

// inCI reports whether the tests run in CI (CI=true, as CI services set it).
func inCI() bool {
	ci, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && ci
}

// announce shows msg to the developer even though go test hides a passing
// package's output unless -v is given: on the terminal when there is one,
// else on stderr (which -v and a failing run show).
func announce(msg string) {
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		fmt.Fprintln(tty, msg)
		tty.Close()
		return
	}
	fmt.Fprintln(os.Stderr, msg)
}

// artifactsDir is where the screenshots go: $TURNPIKE_ARTIFACTS, or a new
// directory under the system's temporary directory that is kept after the
// test (the log names it).
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("TURNPIKE_ARTIFACTS")
	if dir == "" {
		d, err := os.MkdirTemp("", "turnpike-webui-")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshots go to %s (kept; set TURNPIKE_ARTIFACTS to choose)", d)
		return d
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// newBrowser starts headless Chromium with a fresh profile. The page's
// console errors and uncaught exceptions fail the test, but for a dropped
// WebSocket and messages containing one of tolerated.
func newBrowser(t *testing.T, path string, tolerated ...string) context.Context {
	t.Helper()
	// One deadline for the browser and every step of a test: only a hang
	// detector. TestBrowserChat's steps (a stack restart among them) take
	// about 20 s on 2 quiet cores and ran past 60 s at a load average of 20.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), // containers have a small /dev/shm
		chromedp.UserDataDir(t.TempDir()),
	)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	var mu sync.Mutex
	var problems []string
	go func() {
		for m, err := range chromedp.Console(bctx) {
			if err != nil {
				return
			}
			t.Logf("console %s: %s", m.Type, m.Text)
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				mu.Lock()
				problems = append(problems, string(m.Type)+": "+m.Text)
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range problems {
			// The dropped socket, and the requests refused while the stack
			// restarts, are logged by the browser itself; nothing else may be.
			if !strings.Contains(p, "WebSocket") && !strings.Contains(p, "net::ERR_CONNECTION_REFUSED") &&
				!strings.Contains(p, "status of 401 (Unauthorized)") &&
				!slices.ContainsFunc(tolerated, func(s string) bool { return strings.Contains(p, s) }) {
				t.Errorf("the page logged %s", p)
			}
		}
	})
	return bctx
}

func run(t *testing.T, ctx context.Context, step string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", step, err)
	}
}

func waitJS(cond string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingTimeout(20*time.Second), chromedp.WithPollingInterval(10*time.Millisecond))
}

func evalJS[T any](t *testing.T, ctx context.Context, expr string, opts ...chromedp.EvaluateOption) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
	if err != nil {
		t.Fatalf("evaluate %.80s: %v", expr, err)
	}
	return v
}

func text(t *testing.T, ctx context.Context, css string) string {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(css)))
	if err != nil {
		t.Fatalf("text of %s: %v", css, err)
	}
	return v
}

// sendMessage types content and presses Enter; it returns the request id
// the page got for it.
func sendMessage(t *testing.T, ctx context.Context, content string) string {
	t.Helper()
	before := evalJS[int](t, ctx, `document.querySelectorAll('.turn[data-request-id]').length`)
	run(t, ctx, "send "+content,
		chromedp.SendKeys(chromedp.CSS("#message"), content+kb.Enter),
		waitJS(fmt.Sprintf(`document.querySelectorAll('.turn[data-request-id]').length > %d`, before)),
	)
	return evalJS[string](t, ctx, `[...document.querySelectorAll('.turn[data-request-id]')].at(-1).dataset.requestId`)
}

// turnSel selects the turn of a request.
func turnSel(requestID string) string { return fmt.Sprintf(`.turn[data-request-id="%s"]`, requestID) }

func waitAnswer(t *testing.T, ctx context.Context, requestID, status string) {
	t.Helper()
	run(t, ctx, "wait for the answer of "+requestID,
		waitJS(fmt.Sprintf(`document.querySelector('.turn[data-request-id=%q] .msg-assistant')?.dataset.status === %q`, requestID, status)))
}

func seenTexts(t *testing.T, ctx context.Context, requestID string) []string {
	t.Helper()
	seen := evalJS[[]string](t, ctx, fmt.Sprintf(`window.__tp.seen[%q] ?? []`, requestID))
	if len(seen) == 0 {
		t.Fatalf("no answer text seen for %s", requestID)
	}
	return seen
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// oneRow reports whether the header's visible parts sit on one row.
func oneRow(t *testing.T, ctx context.Context) bool {
	t.Helper()
	return evalJS[bool](t, ctx, `(() => {
  const parts = [...document.querySelector('.topbar').children].filter((e) => e.offsetParent !== null);
  const mid = (e) => { const r = e.getBoundingClientRect(); return r.top + r.height / 2; };
  return parts.length > 2 && parts.every((e) => Math.abs(mid(e) - mid(parts[0])) < 8);
})()`)
}

func count(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// history returns the contents of alice's conversation conv, oldest first.
func history(t *testing.T, st *devstack.Stack, conv string) []string {
	t.Helper()
	tok, err := auth.Mint(st.AuthSecret, auth.DefaultTenant, "alice", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := &client.Client{BaseURL: st.IngestURL, Token: tok}
	p, err := c.History(testenv.Context(t, 10*time.Second), conv, 0, 0)
	if err != nil {
		t.Fatalf("history of %s: %v", conv, err)
	}
	out := make([]string, len(p.Messages))
	for i, m := range p.Messages {
		out[i] = m.Content
	}
	return out
}

// startStack runs the devstack on random loopback ports with a 30 ms
// per-token echo delay, and returns once it is ready.
func startStack(t *testing.T) *devstack.Stack {
	t.Helper()
	return newStack(t).start(t, t.Context(), "")
}

// stack is a devstack that a test can stop and start again: on the same
// ingest and gateway addresses and data directory (the page does not move),
// with its kept secret or another one.
type stack struct {
	cfg                devstack.Config
	ingestAddr, gwAddr string
	running            *devstack.Stack
	// gates, if set, runs the agent on the echo model through them
	// (stacktest.Gates): a test holds an answer mid-stream while it acts.
	gates *stacktest.Gates
	// opts are more worker options (an agent of the test's).
	opts []worker.Option
}

func newStack(t *testing.T) *stack {
	t.Helper()
	cfg := stacktest.Config(t, "webui")
	cfg.Worker.EchoDelay = 30 * time.Millisecond
	cfg.Worker.Partitions = 2
	return &stack{cfg: cfg}
}

// start runs the stack (with secret as TURNPIKE_AUTH_SECRET, if set) and
// returns once it is ready. Listening again on the addresses of a stack
// that stopped is bounded by ctx.
func (s *stack) start(t *testing.T, ctx context.Context, secret string) *devstack.Stack {
	t.Helper()
	cfg := s.cfg
	cfg.AuthSecret = secret
	cfg.IngestListener, cfg.PushgwListener = listenOn(t, ctx, s.ingestAddr), listenOn(t, ctx, s.gwAddr)
	s.ingestAddr, s.gwAddr = cfg.IngestListener.Addr().String(), cfg.PushgwListener.Addr().String()
	var opts []worker.Option
	if s.gates != nil {
		opts = append(opts, s.gates.Agent(cfg.Worker))
	}
	opts = append(opts, s.opts...)
	s.running = stacktest.Start(t, cfg, opts...)
	return s.running
}

// stop stops the stack, if it runs, and waits until it has.
func (s *stack) stop(t *testing.T) {
	t.Helper()
	if s.running == nil {
		return
	}
	if err := s.running.Close(); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("devstack: %v", err)
	}
	s.running = nil
}

// listenOn listens on addr, or on a random loopback port when addr is "".
// The stack that held addr has stopped and closed its listeners, but the
// port, a random one of the ephemeral range, may be taken meanwhile (an
// outgoing connection's local port) until that connection ends: listenOn
// tries again every 50 ms until ctx ends (the test's hang detector), not
// for a guessed time.
func listenOn(t *testing.T, ctx context.Context, addr string) net.Listener {
	t.Helper()
	if addr == "" {
		return listen(t)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			return ln
		}
		select {
		case <-ctx.Done():
			t.Fatalf("listen again on %s: %v (%v)", addr, err, ctx.Err())
		case <-tick.C:
		}
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
