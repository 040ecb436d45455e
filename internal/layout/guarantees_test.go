package layout

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every test and mutant docs/guarantees.md cites exists: the map names the
// tests that defend each guarantee, and a test renamed or moved without the
// map following would leave a guarantee defended on paper only.
func TestTheGuaranteeMapCitesOnlyTestsAndMutantsThatExist(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "guarantees.md"))
	if err != nil {
		t.Fatal(err)
	}
	mutants, err := os.ReadFile(filepath.Join(root, ".ci", "mutants"))
	if err != nil {
		t.Fatal(err)
	}
	// A citation: a test file, then optionally ":" and test names separated
	// by ", " (each may carry a parenthesised remark). A bare file name is
	// in the directory of the row's previous citation.
	cite := regexp.MustCompile(`([A-Za-z0-9_./-]+_test\.go)(?::((?:Test|Fuzz|Benchmark|Example)\w+(?:(?: \([^)]*\))?, (?:Test|Fuzz|Benchmark|Example)\w+)*))?`)
	name := regexp.MustCompile(`(?:Test|Fuzz|Benchmark|Example)\w+`)
	mutantGroup := regexp.MustCompile("mutants? ((?:`[a-z0-9-]+`(?:, )?)+)")
	mutantName := regexp.MustCompile("`([a-z0-9-]+)`")
	sources := map[string]string{}
	var checked int
	for i, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| ---") || strings.HasPrefix(line, "| Guarantee") {
			continue
		}
		cols := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), " | ")
		if len(cols) != 4 {
			t.Errorf("guarantees.md:%d: a row of %d columns, want 4", i+1, len(cols))
			continue
		}
		defended := cols[2]
		dir := ""
		for _, m := range cite.FindAllStringSubmatch(defended, -1) {
			file := m[1]
			switch {
			case strings.Contains(file, "/"):
				dir = path.Dir(file)
			case dir != "":
				file = path.Join(dir, file)
			default:
				t.Errorf("guarantees.md:%d: %s cited without its directory", i+1, file)
				continue
			}
			src, ok := sources[file]
			if !ok {
				b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
				if err != nil {
					t.Errorf("guarantees.md:%d: %s does not exist", i+1, file)
					continue
				}
				src = string(b)
				sources[file] = src
			}
			for _, n := range name.FindAllString(m[2], -1) {
				checked++
				if !regexp.MustCompile(`(?m)^func ` + n + `\(`).MatchString(src) {
					t.Errorf("guarantees.md:%d: %s has no %s", i+1, file, n)
				}
			}
		}
		for _, g := range mutantGroup.FindAllStringSubmatch(defended, -1) {
			for _, mn := range mutantName.FindAllStringSubmatch(g[1], -1) {
				checked++
				if !strings.Contains(string(mutants), `"`+mn[1]+"|") {
					t.Errorf("guarantees.md:%d: .ci/mutants has no mutant %s", i+1, mn[1])
				}
			}
		}
	}
	if checked < 500 {
		t.Errorf("checked %d citations: the table's format changed under this test", checked)
	}
	t.Logf("%d cited tests and mutants exist", checked)
}

// The map's closing paragraph counts its rows by status; the counts follow
// the table.
func TestTheGuaranteeMapsCountsMatchItsRows(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "guarantees.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	count := func(status string) int {
		return len(regexp.MustCompile(`(?m)\| `+regexp.QuoteMeta(status)+` \|$`).FindAllString(text, -1))
	}
	d, w, g, p := count("defended"), count("weak"), count("GAP"), count("GAP (in progress)")
	want := fmt.Sprintf("At this commit, %d rows: %d defended, %d weak, %d GAP and %d GAP (in\nprogress).", d+w+g+p, d, w, g, p)
	if !strings.Contains(text, want) {
		t.Errorf("docs/guarantees.md does not say %q", want)
	}
}
