package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/pkg/client"
)

// oapiCodegen is the generator TestAClientGeneratedFromTheOpenAPIDocument
// runs (from the Go module proxy, through `go run`).
const oapiCodegen = "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2"

// generatedMain is the program built on the generated client: "post"
// posts a message and prints its request id, "history" prints the
// conversation's messages, one "role: content" a line.
const generatedMain = `package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
)

func main() {
	base, token, cmd := os.Args[1], os.Args[2], os.Args[3]
	auth := WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	})
	c, err := NewClientWithResponses(base, auth)
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	switch cmd {
	case "post":
		key := "generated-1"
		r, err := c.PostMessageWithResponse(ctx, "generated", &PostMessageParams{IdempotencyKey: &key}, PostMessageJSONRequestBody{Content: "hello from a generated client"})
		if err != nil {
			fail(err)
		}
		if r.JSON202 == nil {
			fail(fmt.Errorf("post: %d %s", r.StatusCode(), r.Body))
		}
		fmt.Println(r.JSON202.RequestId)
	case "history":
		limit := 10
		r, err := c.ListMessagesWithResponse(ctx, "generated", &ListMessagesParams{Limit: &limit})
		if err != nil {
			fail(err)
		}
		if r.JSON200 == nil {
			fail(fmt.Errorf("history: %d %s", r.StatusCode(), r.Body))
		}
		for _, m := range r.JSON200.Messages {
			fmt.Printf("%s: %s\n", m.Role, m.Content)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
`

// TestAClientGeneratedFromTheOpenAPIDocument generates a Go client from
// docs/openapi.yaml with oapi-codegen, builds it in a module of its own
// and uses it to post a message and read the turn from history on the
// running stack. It compiles a module: skipped under -short.
func TestAClientGeneratedFromTheOpenAPIDocument(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a generated module")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	spec, err := filepath.Abs(filepath.Join(specDir, "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goCmd := func(args ...string) []byte {
		t.Helper()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.Output()
		if err != nil {
			stderr := ""
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
		return out
	}
	for name, text := range map[string]string{
		"go.mod":  "module turnpike.test/generated\n\ngo 1.26.8\n",
		"main.go": generatedMain,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd("run", oapiCodegen, "-generate", "types,client", "-package", "main", "-o", "client.gen.go", spec)
	goCmd("mod", "tidy")
	goCmd("build", "-o", "generated", ".")

	st := startStack(t, "")
	c := st.client(t, "default", "gen")
	run := func(cmd string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, filepath.Join(dir, "generated"), "http://"+st.IngestAddr, c.Token, cmd).Output()
		if err != nil {
			stderr := ""
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("the generated client's %s: %v\n%s", cmd, err, stderr)
		}
		return strings.TrimSpace(string(out))
	}
	id := run("post")
	// The turn is in history once its run.completed is out.
	es, err := c.Events(ctx, "generated", client.EventsOptions{Follow: id})
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	for {
		ev, err := es.Next(ctx)
		if err != nil {
			t.Fatalf("following %s: %v", id, err)
		}
		if ev.Type == "run.completed" {
			break
		}
	}
	want := "user: hello from a generated client\nassistant: echo #1: hello from a generated client"
	if got := run("history"); got != want {
		t.Errorf("the generated client read\n%s\nwant\n%s", got, want)
	}
}
