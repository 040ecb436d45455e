package deploy

import (
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// manifestBinaries returns the binaries the manifests run from the
// Turnpike image, over every build.
func manifestBinaries(t *testing.T) []string {
	t.Helper()
	var bins []string
	for _, dir := range []string{baseDir, devDir, prodDir} {
		for _, p := range newModel(build(t, dir)).pods {
			if p.spec == nil {
				continue
			}
			for _, c := range p.spec.Containers {
				if len(c.Command) > 0 && strings.HasPrefix(c.Command[0], binDir) && strings.Contains(c.Image, "turnpike") {
					bins = append(bins, path.Base(c.Command[0]))
				}
			}
		}
	}
	slices.Sort(bins)
	return slices.Compact(bins)
}

func TestTheManifestsRunEveryServiceAndTheCLI(t *testing.T) {
	t.Parallel()
	if got, want := manifestBinaries(t), []string{"ingest", "pushgw", "turnpike", "worker"}; !slices.Equal(got, want) {
		t.Errorf("the manifests run %v, want %v", got, want)
	}
}

func TestDockerfileBuildsStaticBinariesOnDistrolessNonroot(t *testing.T) {
	t.Parallel()
	src := readRepoFile(t, "Dockerfile")
	global, stages, err := ParseDockerfile(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a final one", len(stages))
	}

	// The builder's Go is the one go.mod names.
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(readRepoFile(t, "go.mod"))
	if goVersion == nil {
		t.Fatal("go.mod has no go directive")
	}
	if !slices.ContainsFunc(global, func(in Instruction) bool { return in.Args == "GO_VERSION="+goVersion[1] }) {
		t.Errorf("want ARG GO_VERSION=%s (go.mod's go directive) before the first FROM, have %v", goVersion[1], global)
	}
	builder := stages[0]
	if !strings.HasPrefix(builder.Image, "golang:${GO_VERSION}") || builder.Name == "" {
		t.Errorf("first stage FROM %s AS %q: want golang:${GO_VERSION} with a name", builder.Image, builder.Name)
	}
	var builds []Instruction
	for _, in := range builder.Instructions {
		if in.Cmd == "RUN" && strings.Contains(in.Args, "go build") {
			builds = append(builds, in)
		}
	}
	if len(builds) != 1 {
		t.Fatalf("%d RUN go build in the build stage, want one", len(builds))
	}
	run := builds[0].Args
	for _, want := range []string{
		"CGO_ENABLED=0", "GOWORK=off", "-trimpath", `-ldflags="-s -w"`, "-o /out/",
		"--mount=type=cache,target=/go/pkg/mod", "--mount=type=cache,target=/root/.cache/go-build",
	} {
		if !strings.Contains(run, want) {
			t.Errorf("the go build step lacks %s:\n%s", want, run)
		}
	}
	for _, bin := range manifestBinaries(t) {
		if !slices.Contains(strings.Fields(run), "./cmd/"+bin) {
			t.Errorf("the manifests run %s%s, which the image does not build", binDir, bin)
		}
	}
	for _, st := range stages {
		for _, in := range st.Instructions {
			if in.Cmd == "RUN" && strings.Contains(in.Args, "go mod download") {
				t.Errorf("line %d: go mod download fetches every module of the build list (FerretDB's backends too); the cache mounts keep the modules", in.Line)
			}
		}
	}

	final := stages[len(stages)-1]
	if final.Image != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("final stage FROM %s, want gcr.io/distroless/static-debian12:nonroot", final.Image)
	}
	var user, copied string
	for _, in := range final.Instructions {
		switch in.Cmd {
		case "USER":
			user = in.Args
		case "COPY":
			if strings.HasPrefix(in.Args, "--from="+builder.Name+" ") {
				copied = in.Args
			}
		case "RUN":
			t.Errorf("line %d: RUN in the final stage: distroless has no shell", in.Line)
		case "ENTRYPOINT":
			t.Errorf("line %d: ENTRYPOINT: the manifests choose the binary with command", in.Line)
		}
	}
	if user != "65532:65532" && user != "nonroot" && user != "nonroot:nonroot" {
		t.Errorf("final USER %q, want distroless's nonroot (65532)", user)
	}
	if !strings.HasSuffix(copied, "/out/ "+binDir) {
		t.Errorf("final stage copies %q, want the build's /out/ into %s", copied, binDir)
	}
}

func TestDockerignoreLeavesOutWhatNoBinaryNeeds(t *testing.T) {
	t.Parallel()
	ignore, err := ParseDockerignore(readRepoFile(t, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path     string
		excluded bool
	}{
		{".git/config", true},
		{"data/kafka/segment", true},
		{"third_party/ferretdb/go.mod", true},
		{"deploy/k8s/base/ingest.yaml", true},
		{"go.work", true},
		{"pkg/worker/worker_test.go", true},
		{"go.mod", false},
		{"go.sum", false},
		{"cmd/ingest/main.go", false},
		{"internal/webui/static/index.html", false},
		{"third_party/other/file.go", false},
	}
	for _, tt := range tests {
		if got := ignore.Excludes(tt.path); got != tt.excluded {
			t.Errorf("Excludes(%s) = %v, want %v", tt.path, got, tt.excluded)
		}
	}
}

func TestDockerignoreMatchesAsDockerDoes(t *testing.T) {
	t.Parallel()
	d := Dockerignore{"a/b", "*.md", "**/*.tmp", "x/**/y"}
	tests := []struct {
		path string
		want bool
	}{
		{"a/b", true}, {"a/b/c/d", true}, {"a/bc", false}, {"a", false},
		{"README.md", true}, {"docs/README.md", false},
		{"t.tmp", true}, {"p/q/t.tmp", true},
		{"x/y", true}, {"x/1/2/y/z", true}, {"x/z", false},
	}
	for _, tt := range tests {
		if got := d.Excludes(tt.path); got != tt.want {
			t.Errorf("Excludes(%s) = %v, want %v", tt.path, got, tt.want)
		}
	}
	if _, err := ParseDockerignore("data\n!data/keep\n"); err == nil {
		t.Error("an exception was accepted; Excludes cannot honour it")
	}
}

// goList runs `go list` in dir with extra environment and returns its
// output lines.
func goList(t *testing.T, dir string, env []string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list %v in %s: %v\n%s", args, dir, err, stderr)
	}
	return strings.Fields(string(out))
}

// The image's build sees only what .dockerignore lets through, with
// GOWORK=off: the binaries must load from that alone (go list reads every
// go.mod, source file and embedded file that go build would).
func TestTheBuildContextHoldsEverythingTheBinariesNeed(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("copies the repository")
	}
	ignore, err := ParseDockerignore(readRepoFile(t, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.TempDir()
	err = filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repoRoot, p)
		if err != nil || rel == "." {
			return err
		}
		if ignore.Excludes(filepath.ToSlash(rel)) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(ctx, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(ctx, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ctx, "third_party", "ferretdb")); !os.IsNotExist(err) {
		t.Fatalf("the copied context holds third_party/ferretdb (%v)", err)
	}
	var pkgs []string
	for _, bin := range manifestBinaries(t) {
		pkgs = append(pkgs, "./cmd/"+bin)
	}
	deps := goList(t, ctx, []string{"GOWORK=off", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0"}, append([]string{"-deps"}, pkgs...)...)
	for _, dep := range deps {
		for _, banned := range []string{"k8s.io/", "sigs.k8s.io/", "github.com/turnpike-dev/turnpike/third_party/"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("the binaries depend on %s", dep)
			}
		}
	}
	if !slices.Contains(deps, "github.com/turnpike-dev/turnpike/pkg/ingest") {
		t.Errorf("go list -deps missed the services' own packages: %v", deps)
	}
}
