package service_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The service binaries must not link the embedded stand-ins: kfake and
// FerretDB belong to cmd/devstack and tests only.
func TestServiceBinariesDoNotLinkTheEmbeddedServers(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"ingest", "worker", "pushgw"} {
		out, err := exec.Command("go", "list", "-deps", "../../cmd/"+cmd).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", cmd, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, banned := range []string{"github.com/twmb/franz-go/pkg/kfake", "github.com/turnpike-dev/turnpike/third_party/ferretdb", "github.com/turnpike-dev/turnpike/internal/embedded",
				"github.com/turnpike-dev/turnpike/internal/devstack", "github.com/turnpike-dev/turnpike/pkg/devstack", "github.com/turnpike-dev/turnpike/pkg/turnpiketest"} {
				if strings.HasPrefix(dep, banned) {
					t.Errorf("cmd/%s links %s", cmd, dep)
				}
			}
		}
	}
}
