package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// containerNamed returns the container named name of spec.
func containerNamed(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

// runScript runs a container's command and args (its shell script) on
// this machine, with the container's environment: literal values as
// given, values from Secrets and ConfigMaps from secrets. mongosh and
// docker-entrypoint.sh are stubs that log their calls and succeed. It
// returns the stderr, the stubs' calls and the exit error.
func runScript(t *testing.T, c corev1.Container, secrets map[string]string) (string, []string, error) {
	t.Helper()
	if len(c.Command) == 0 {
		t.Fatalf("container %s has no command", c.Name)
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "calls.log")
	for _, stub := range []string{"mongosh", "docker-entrypoint.sh", "mongod"} {
		// One line per call: the arguments' newlines become spaces.
		script := "#!/bin/sh\nprintf '%s\\n' \"" + stub + " $(printf '%s ' \"$@\" | tr '\\n' ' ')\" >> \"$STUB_LOG\"\nexit 0\n"
		if err := os.WriteFile(filepath.Join(dir, stub), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH"), "STUB_LOG=" + log}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		default:
			v, ok := secrets[e.Name]
			if !ok {
				t.Fatalf("container %s: no test value for %s", c.Name, e.Name)
			}
			env = append(env, e.Name+"="+v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	argv := append(append([]string(nil), c.Command...), c.Args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("container %s: the script did not end: %v", c.Name, ctx.Err())
	}
	var calls []string
	if b, rerr := os.ReadFile(log); rerr == nil {
		calls = strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	return stderr.String(), calls, err
}

// docs/deploy.md, "Secrets": mongod and the init Job exit on a CHANGE-ME
// password. Each build's scripts run here, with stubs for mongod's entry
// point and mongosh: on a placeholder they exit non-zero before calling
// either; with real passwords they go on to call them.
func TestMongoDBScriptsRefusePlaceholderPasswords(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	for _, dir := range []string{baseDir, devDir, prodDir} {
		objs := build(t, dir)
		containers := []corev1.Container{
			containerNamed(t, get[*appsv1.StatefulSet](t, objs, "mongodb").Spec.Template.Spec, "mongod"),
			containerNamed(t, get[*batchv1.Job](t, objs, "mongodb-init").Spec.Template.Spec, "init"),
		}
		// What each script hands over to with real passwords.
		starts := map[string]string{"mongod": "docker-entrypoint.sh mongod --replSet rs0", "init": "mongosh mongodb://mongodb-0.mongodb:27017/"}
		for _, tt := range []struct {
			name      string
			root, app string
			refused   bool
		}{
			{"The placeholders of the base are refused.", "CHANGE-ME", "CHANGE-ME", true},
			{"A root password starting with the placeholder is refused.", "CHANGE-ME-later", "app-7Hq2", true},
			{"Real passwords start MongoDB.", "root-9Xk4", "app-7Hq2", false},
		} {
			t.Run(dir+": "+tt.name, func(t *testing.T) {
				secrets := map[string]string{
					"MONGO_INITDB_ROOT_USERNAME": "root", "MONGO_INITDB_ROOT_PASSWORD": tt.root,
					"MONGO_APP_USERNAME": "turnpike", "MONGO_APP_PASSWORD": tt.app, "TURNPIKE_MONGO_DB": "turnpike",
				}
				for _, c := range containers {
					stderr, calls, err := runScript(t, c, secrets)
					switch {
					case tt.refused && err == nil:
						t.Errorf("%s: exit 0 with root password %q and app password %q; want it refused", c.Name, tt.root, tt.app)
					case tt.refused && len(calls) > 0:
						t.Errorf("%s: refused, but called %q first", c.Name, calls)
					case tt.refused && !strings.Contains(stderr, "placeholder"):
						t.Errorf("%s: stderr %q, want it to name the placeholder values", c.Name, stderr)
					case !tt.refused && err != nil:
						t.Errorf("%s: %v (stderr %q) with real passwords", c.Name, err, stderr)
					case !tt.refused && (len(calls) == 0 || !strings.HasPrefix(calls[len(calls)-1], starts[c.Name])):
						t.Errorf("%s: with real passwords, the calls %q; want the last to start with %q", c.Name, calls, starts[c.Name])
					}
				}
			})
		}
		// The init Job also refuses a placeholder app password, which
		// mongod does not see.
		t.Run(dir+": The init Job refuses a placeholder app password.", func(t *testing.T) {
			secrets := map[string]string{
				"MONGO_INITDB_ROOT_USERNAME": "root", "MONGO_INITDB_ROOT_PASSWORD": "root-9Xk4",
				"MONGO_APP_USERNAME": "turnpike", "MONGO_APP_PASSWORD": "CHANGE-ME", "TURNPIKE_MONGO_DB": "turnpike",
			}
			_, calls, err := runScript(t, containers[1], secrets)
			if err == nil || len(calls) > 0 {
				t.Errorf("init with a placeholder app password: err %v, calls %q; want a refusal before any call", err, calls)
			}
		})
	}
}
