package debugbuild

// Turnpike's test of its patch 9 (TURNPIKE_PATCHES.md): FerretDB's debug
// build follows its own ferretdb_debug tag, not the race detector, under
// which Turnpike's suite runs (go test -race): its leak tracking captured a
// stack and set a finalizer for every query and document iterator of every
// embedded FerretDB, several times the cost of the query.

import "testing"

func TestARaceBuildIsNoDebugBuild(t *testing.T) {
	if Enabled != tagged {
		t.Fatalf("debug build %v in a build where the ferretdb_debug tag is %v (the race detector must not turn it on)", Enabled, tagged)
	}
	if Stack() != nil && !tagged {
		t.Fatal("Stack captured a stack outside a ferretdb_debug build")
	}
}
