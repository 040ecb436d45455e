package webui_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/cloudwego/eino/adk"

	"github.com/turnpike-dev/turnpike/internal/testenv"
	"github.com/turnpike-dev/turnpike/pkg/echo"
	"github.com/turnpike-dev/turnpike/pkg/worker"
)

// chartPNG is a real PNG image, 24x16 pixels of one color.
func chartPNG(t *testing.T, c color.RGBA) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 24, 16))
	for i := 0; i < len(img.Pix); i += 4 {
		img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = c.R, c.G, c.B, c.A
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// diagramSVG is an SVG that runs a script where it is rendered as a
// document: the page must never show it in its own origin.
const diagramSVG = `<svg xmlns="http://www.w3.org/2000/svg" width="24" height="16">` +
	`<script>window.__svgRan = true</script><rect width="24" height="16" fill="green"/></svg>`

// filesAgent answers as the echo agent after saving, when the message
// asks for one, a chart ("chart": chart.png, a PNG, red on the first
// save, blue after), a report ("report": report.csv, text/csv) or a
// diagram ("diagram": diagram.svg, image/svg+xml).
type filesAgent struct {
	adk.Agent
	red, blue []byte
}

func (a filesAgent) Run(ctx context.Context, in *adk.AgentInput, opts ...adk.AgentRunOption) *adk.AsyncIterator[*adk.AgentEvent] {
	q := in.Messages[len(in.Messages)-1].Content
	arts := worker.ArtifactsFromContext(ctx)
	var err error
	switch {
	case strings.Contains(q, "chart"):
		data := a.red
		if strings.Contains(q, "again") {
			data = a.blue
		}
		err = arts.Save(ctx, "chart.png", "image/png", data)
	case strings.Contains(q, "report"):
		err = arts.Save(ctx, "report.csv", "text/csv", []byte("city,visits\nLyon,3\n"))
	case strings.Contains(q, "diagram"):
		err = arts.Save(ctx, "diagram.svg", "image/svg+xml", []byte(diagramSVG))
	}
	if err != nil {
		it, gen := adk.NewAsyncIteratorPair[*adk.AgentEvent]()
		gen.Send(&adk.AgentEvent{Err: err})
		gen.Close()
		return it
	}
	return a.Agent.Run(ctx, in, opts...)
}

// recordBlobs keeps every Blob the page turns into a blob: URL, with its
// type, so that a test can tell what a link or an image would hand the
// browser (the page's CSP keeps scripts from fetching a blob: URL).
const recordBlobs = `(() => {
  if (window.__blobs) return;
  const blobs = window.__blobs = [];
  const native = URL.createObjectURL;
  URL.createObjectURL = function (b) { const url = native.call(URL, b); blobs.push({ url, type: b.type, blob: b }); return url; };
})()`

// artifactRoute is the label of the artifact content route in ingest's
// turnpike_ingest_http_requests_total.
const artifactRoute = `route="GET /v1/conversations/{conversation}/artifacts/{name}"`

// artifactGETs is how many GETs of an artifact's content the stack's
// ingest has answered (every status), from its /metrics.
func artifactGETs(t *testing.T, ingestURL string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ingestURL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "turnpike_ingest_http_requests_total{") || !strings.Contains(line, artifactRoute) {
			continue
		}
		f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		n += int(f)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// The demo page shows the conversation's artifacts: a raster image inline
// (its bytes fetched with the bearer token and shown through a blob: URL
// of its image type), any other type, SVG included, as a download link
// whose bytes are fetched only on its click and handed over as
// application/octet-stream (a blob: URL is of the page's origin and keeps
// none of the route's sandbox CSP); it updates on artifact.saved (a new
// version replaces the one shown) and lists them again after a reload.
func TestBrowserShowsArtifacts(t *testing.T) {
	t.Parallel()
	stk := newStack(t)
	red, blue := chartPNG(t, color.RGBA{R: 220, A: 255}), chartPNG(t, color.RGBA{B: 220, A: 255})
	m, err := echo.New(echo.Config{Delay: stk.cfg.Worker.EchoDelay})
	if err != nil {
		t.Fatal(err)
	}
	stk.opts = append(stk.opts, worker.WithAgentFactory(func(ctx context.Context, _ worker.Request) (adk.Agent, error) {
		a, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{Name: "assistant", Description: "Echoes.", Model: m})
		return filesAgent{Agent: a, red: red, blue: blue}, err
	}))
	st := stk.start(t, t.Context(), "")
	chromium := findChromium(t)
	artifacts := artifactsDir(t)
	ctx := newBrowser(t, chromium)
	conv := testenv.Name(t, "files")
	gets := func(want int, when string) {
		t.Helper()
		if got := artifactGETs(t, st.IngestURL); got != want {
			t.Errorf("%s: ingest answered %d GETs of artifact content, want %d", when, got, want)
		}
	}

	run(t, ctx, "open the page and sign in",
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			for _, src := range []string{instrument, recordBlobs} {
				if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: src}); err != nil {
					return err
				}
			}
			// A clicked link's download goes nowhere: the test reads the
			// blob the page made (recordBlobs).
			_, err := chromedp.CallBrowser(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{Behavior: browser.SetDownloadBehaviorBehaviorDeny})
			return err
		}),
		chromedp.EmulateViewport(1100, 720),
		chromedp.Navigate(st.IngestURL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#dev-user")),
		chromedp.SetValue(chromedp.CSS("#dev-user"), "alice"),
		chromedp.Click(chromedp.CSS("#dev-form button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS("#app")),
		chromedp.SendKeys(chromedp.CSS("#new-name"), conv+kb.Enter),
		chromedp.WaitEnabled(chromedp.CSS("#message")),
		waitJS(`document.getElementById('conn').dataset.state === 'open'`),
	)
	if v := evalJS[bool](t, ctx, `document.getElementById('artifacts').hidden`); !v {
		t.Error("the artifact view shows before any artifact")
	}
	// blobOf is the type and text of the blob behind the blob: URL that
	// expr (an image's src, a link's href) holds.
	blobOf := func(expr string) (typ, text string) {
		t.Helper()
		v := evalJS[[]string](t, ctx, `(async () => { const url = `+expr+`;
			const b = window.__blobs.find((r) => r.url === url);
			return b ? [b.type, await b.blob.text()] : ['none: ' + url, ''];
		})()`, chromedp.EvalAwaitPromise)
		return v[0], v[1]
	}

	// An image: inline, decoded from a blob: URL (an <img src> to the
	// route could not send the token) of its own raster type.
	imageShown := func(version int, width int) string {
		return fmt.Sprintf(`(() => { const li = document.querySelector('#artifact-list li[data-name="chart.png"]');
			const img = li?.querySelector('img');
			return !!img && li.dataset.kind === 'image' && li.dataset.version === '%d' && img.src.startsWith('blob:') && img.complete && img.naturalWidth === %d; })()`, version, width)
	}
	chartImg := `document.querySelector('#artifact-list li[data-name="chart.png"] img').src`
	id1 := sendMessage(t, ctx, "draw me a chart")
	waitAnswer(t, ctx, id1, "complete")
	run(t, ctx, "the chart shows inline", waitJS(imageShown(1, 24)))
	if got := evalJS[string](t, ctx, `getComputedStyle(document.getElementById('artifacts')).display`); got == "none" {
		t.Error("the artifact view is not displayed")
	}
	if typ, _ := blobOf(chartImg); typ != "image/png" {
		t.Errorf("the chart's blob is typed %q, want image/png", typ)
	}
	gets(1, "the chart shown")

	// A non-image: a download link, its bytes not fetched until clicked.
	const report = "city,visits\nLyon,3\n"
	id2 := sendMessage(t, ctx, "write the report")
	waitAnswer(t, ctx, id2, "complete")
	link := func(name string) string {
		return `document.querySelector('#artifact-list li[data-name="` + name + `"][data-kind="file"] a')`
	}
	run(t, ctx, "the report shows as a link", waitJS(link("report.csv")+` !== null`))
	gets(1, "the report's link shown, not clicked")
	if got := evalJS[string](t, ctx, link("report.csv")+`.getAttribute('download') ?? ''`); got != "report.csv" {
		t.Errorf("the report's link downloads as %q, want report.csv", got)
	}
	// The size shown is the one the listing or the event gave.
	if got, want := evalJS[string](t, ctx, link("report.csv")+`.textContent`), fmt.Sprintf("report.csv (version 1, %d B)", len(report)); got != want {
		t.Errorf("the report's link says %q, want %q", got, want)
	}
	run(t, ctx, "click the report: its bytes are fetched into an octet-stream blob",
		chromedp.Click(chromedp.CSS(`#artifact-list li[data-name="report.csv"] a`)),
		waitJS(link("report.csv")+`.href.startsWith('blob:')`),
	)
	gets(2, "the report's link clicked")
	if typ, text := blobOf(link("report.csv") + `.href`); typ != "application/octet-stream" || text != report {
		t.Errorf("the report's link holds a blob typed %q with %q, want application/octet-stream with %q", typ, text, report)
	}

	// An SVG is a document (it can run scripts): a link too, never inline.
	id3 := sendMessage(t, ctx, "draw the diagram")
	waitAnswer(t, ctx, id3, "complete")
	diagram := `document.querySelector('#artifact-list li[data-name="diagram.svg"]')`
	run(t, ctx, "the diagram shows", waitJS(diagram+` !== null`))
	if kind, imgs := evalJS[string](t, ctx, diagram+`.dataset.kind`), evalJS[int](t, ctx, diagram+`.querySelectorAll('img').length`); kind != "file" || imgs != 0 {
		t.Fatalf("the SVG shows as kind %q with %d images, want a file link", kind, imgs)
	}
	gets(2, "the diagram's link shown, not clicked")
	run(t, ctx, "click the diagram",
		chromedp.Click(chromedp.CSS(`#artifact-list li[data-name="diagram.svg"] a`)),
		waitJS(link("diagram.svg")+`.href.startsWith('blob:')`),
	)
	gets(3, "the diagram's link clicked")
	if typ, text := blobOf(link("diagram.svg") + `.href`); typ != "application/octet-stream" || text != diagramSVG {
		t.Errorf("the diagram's link holds a blob typed %q with %q, want application/octet-stream with the SVG", typ, text)
	}
	if evalJS[bool](t, ctx, `window.__svgRan === true`) {
		t.Error("the SVG's script ran in the page")
	}
	if n := evalJS[int](t, ctx, `document.querySelectorAll('#artifact-list img').length`); n != 1 {
		t.Errorf("%d images shown, want the chart only", n)
	}

	// A new version replaces the one shown, on its artifact.saved.
	id4 := sendMessage(t, ctx, "the chart again, in blue")
	waitAnswer(t, ctx, id4, "complete")
	run(t, ctx, "version 2 of the chart replaces version 1", waitJS(imageShown(2, 24)))
	if n := evalJS[int](t, ctx, `document.querySelectorAll('#artifact-list li').length`); n != 3 {
		t.Errorf("%d artifacts shown, want chart.png, diagram.svg and report.csv", n)
	}
	gets(4, "version 2 of the chart shown")
	screenshot(t, ctx, artifacts, "artifacts.png")

	// After a reload they come from the list: the image's bytes are
	// fetched again, the files' are not until clicked.
	run(t, ctx, "reload: the artifacts are listed again",
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS("#app")),
		waitJS(imageShown(2, 24)),
		waitJS(link("report.csv")+` !== null && `+link("diagram.svg")+` !== null`),
	)
	gets(5, "reloaded")
	if evalJS[bool](t, ctx, link("report.csv")+`.href.startsWith('blob:') || `+link("diagram.svg")+`.href.startsWith('blob:')`) {
		t.Error("a file's bytes were fetched before its link was clicked")
	}
	run(t, ctx, "click the report again",
		chromedp.Click(chromedp.CSS(`#artifact-list li[data-name="report.csv"] a`)),
		waitJS(link("report.csv")+`.href.startsWith('blob:')`),
	)
	gets(6, "the report clicked after the reload")
}
