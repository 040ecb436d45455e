package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// kubectl returns the kubectl binary to check the overlays with:
// $TURNPIKE_KUBECTL, else kubectl on PATH; "" when there is none.
func kubectl() string {
	if p := os.Getenv("TURNPIKE_KUBECTL"); p != "" {
		return p
	}
	p, err := exec.LookPath("kubectl")
	if err != nil {
		return ""
	}
	return p
}

// identities lists the objects as "kind namespace/name", sorted.
func identities(objs []Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, fmt.Sprintf("%s %s/%s", o.GVK.Kind, o.Value.GetNamespace(), o.Value.GetName()))
	}
	slices.Sort(out)
	return out
}

// Users apply the overlays with their kubectl, whose embedded kustomize is
// often older than the library the other tests build with: every
// kustomization must build with it to the same objects, and pass the checks.
func TestEachBuildWorksWithTheInstalledKubectl(t *testing.T) {
	t.Parallel()
	bin := kubectl()
	if bin == "" {
		t.Log("no kubectl on PATH (or TURNPIKE_KUBECTL): the overlays were checked with the kustomize library only")
		t.Skip("no kubectl installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if v, err := exec.CommandContext(ctx, bin, "version", "--client").CombinedOutput(); err == nil {
		t.Logf("%s: %s", bin, strings.Join(strings.Fields(string(v)), " "))
	}
	for _, dir := range []string{baseDir, devDir, prodDir} {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "kustomize", dir)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				msg := stderr.String()
				if len(msg) > 2000 {
					msg = msg[:2000] + "…"
				}
				t.Fatalf("%s kustomize %s: %v\n%s", bin, dir, err, msg)
			}
			objs, err := Decode("kubectl kustomize "+dir, out)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := identities(objs), identities(build(t, dir)); !slices.Equal(got, want) {
				t.Errorf("kubectl kustomize %s built\n  %s\nthe kustomize library\n  %s", dir, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			if err := Check(objs, checkOptions(t)); err != nil {
				t.Errorf("kubectl kustomize %s:\n%v", dir, err)
			}
		})
	}
}
