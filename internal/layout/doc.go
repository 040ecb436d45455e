// Package layout has no code: its tests check where the repository's
// packages may reach (docs/style.md, "The public package is the
// implementation"), and that every test and mutant docs/guarantees.md
// cites exists.
package layout
