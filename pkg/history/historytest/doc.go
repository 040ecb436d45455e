// Package historytest is the conformance suite of history.Store: every
// implementation runs the same tests (history's own MemoryStore and
// MongoStore tests call Run).
//
// Run is safe to call from several tests at once; every subtest uses its
// own random tenant, so stores handed out by newStore may share one backing
// database.
package historytest
