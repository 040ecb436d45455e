package webui_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"

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

// filesAgent answers as the echo agent after saving, when the message
// asks for one, a chart ("chart": chart.png, a PNG, red on the first
// save, blue after) or a report ("report": report.csv, text/csv).
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
	}
	if err != nil {
		it, gen := adk.NewAsyncIteratorPair[*adk.AgentEvent]()
		gen.Send(&adk.AgentEvent{Err: err})
		gen.Close()
		return it
	}
	return a.Agent.Run(ctx, in, opts...)
}

// The demo page shows the conversation's artifacts: an image inline (its
// bytes fetched with the bearer token and shown through a blob: URL), any
// other type as a download link; it updates on artifact.saved (a new
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

	run(t, ctx, "open the page and sign in",
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: instrument})
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

	// An image: inline, decoded from a blob: URL (an <img src> to the
	// route could not send the token).
	imageShown := func(version int, width int) string {
		return fmt.Sprintf(`(() => { const li = document.querySelector('#artifact-list li[data-name="chart.png"]');
			const img = li?.querySelector('img');
			return !!img && li.dataset.kind === 'image' && li.dataset.version === '%d' && img.src.startsWith('blob:') && img.complete && img.naturalWidth === %d; })()`, version, width)
	}
	id1 := sendMessage(t, ctx, "draw me a chart")
	waitAnswer(t, ctx, id1, "complete")
	run(t, ctx, "the chart shows inline", waitJS(imageShown(1, 24)))
	if got := evalJS[string](t, ctx, `getComputedStyle(document.getElementById('artifacts')).display`); got == "none" {
		t.Error("the artifact view is not displayed")
	}
	// A non-image: a download link to a blob: URL holding the bytes.
	id2 := sendMessage(t, ctx, "write the report")
	waitAnswer(t, ctx, id2, "complete")
	link := `document.querySelector('#artifact-list li[data-name="report.csv"][data-kind="file"] a')`
	run(t, ctx, "the report shows as a link", waitJS(link+`?.href.startsWith('blob:') === true`))
	if got := evalJS[string](t, ctx, link+`.getAttribute('download')`); got != "report.csv" {
		t.Errorf("the report's link downloads as %q, want report.csv", got)
	}
	// The page's CSP keeps even its own scripts from reading a blob: URL
	// (connect-src); the size shown is the fetched blob's.
	if got, want := evalJS[string](t, ctx, link+`.textContent`), fmt.Sprintf("report.csv (version 1, %d B)", len("city,visits\nLyon,3\n")); got != want {
		t.Errorf("the report's link says %q, want %q", got, want)
	}
	if n := evalJS[int](t, ctx, `document.querySelectorAll('#artifact-list img').length`); n != 1 {
		t.Errorf("%d images shown, want the chart only", n)
	}
	// A new version replaces the one shown, on its artifact.saved.
	id3 := sendMessage(t, ctx, "the chart again, in blue")
	waitAnswer(t, ctx, id3, "complete")
	run(t, ctx, "version 2 of the chart replaces version 1", waitJS(imageShown(2, 24)))
	if n := evalJS[int](t, ctx, `document.querySelectorAll('#artifact-list li').length`); n != 2 {
		t.Errorf("%d artifacts shown, want chart.png and report.csv", n)
	}
	screenshot(t, ctx, artifacts, "artifacts.png")

	// After a reload they come from the list.
	run(t, ctx, "reload: the artifacts are listed again",
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS("#app")),
		waitJS(imageShown(2, 24)),
		waitJS(link+`?.href.startsWith('blob:') === true`),
	)
}
