// Package layout has no code: its test checks where the repository's
// packages may reach (docs/style.md, "The public package is the
// implementation").
package layout
