package history

import "testing"

// The window and a List page read no more turns than can hold their
// messages: every turn holds two messages or more, so the last n messages
// lie in the newest ⌈n/2⌉ turns, and a page of n messages in ⌊n/2⌋+1 turns
// from the one holding its newest message (which may hold only one of
// them). Reading more would be correct but cost what BenchmarkWindow
// measures.
func TestTheWindowAndAPageReadOnlyTheTurnsThatHoldTheirMessages(t *testing.T) {
	t.Parallel()
	for n, want := range []int64{0, 1, 1, 2, 2, 3, 3, 4} {
		if got := windowTurns(n); got != want {
			t.Errorf("windowTurns(%d) = %d, want %d", n, got, want)
		}
	}
	for n, want := range []int64{1, 1, 2, 2, 3, 3, 4} {
		if got := spanTurns(int64(n)); got != want {
			t.Errorf("spanTurns(%d) = %d, want %d", n, got, want)
		}
	}
}

// A page asked before a seq past the newest message is the newest page;
// one asked before the newest message leaves it out.
func TestAListPageBeforeTheNewestMessageLeavesItOut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		before, lo, hi int64
	}{
		{before: 0, lo: 1, hi: 10},
		{before: 11, lo: 1, hi: 10},
		{before: 99, lo: 1, hi: 10},
		{before: 10, lo: 1, hi: 9},
		{before: 5, lo: 1, hi: 4},
	} {
		if lo, hi := listRange(10, tc.before, 20); lo != tc.lo || hi != tc.hi {
			t.Errorf("listRange(newest 10, before %d) = [%d, %d], want [%d, %d]", tc.before, lo, hi, tc.lo, tc.hi)
		}
	}
}

// A window of one message is the newest message alone.
func TestAWindowOfOneMessageIsTheNewest(t *testing.T) {
	t.Parallel()
	turns := []numbered{{seq: 1, t: Turn{User: "u1", Parts: []Part{{Agent: "a", Text: "a1"}}}}, {seq: 3, t: Turn{User: "u2", Parts: []Part{{Agent: "a", Text: "a2"}}}}}
	got := windowMessages(turns, 1)
	if len(got) != 1 || got[0].Seq != 4 {
		t.Fatalf("windowMessages(…, 1) = %+v, want the one message of seq 4", got)
	}
	if got := windowMessages(turns, 0); got == nil || len(got) != 0 {
		t.Fatalf("windowMessages(…, 0) = %#v, want empty, not nil", got)
	}
}

// Start skips the read by request id only for a record past the newest
// turn's in the same partition of the same topic: every other record (a
// redelivery, a record fenced later, one without a source, the first of
// another partition or topic after a move) may already be a committed turn
// that only the request id's index finds.
func TestOnlyARecordPastTheNewestTurnsSkipsTheReadByRequestID(t *testing.T) {
	t.Parallel()
	last := &Source{Topic: "requests", Partition: 3, Offset: 100}
	for _, tc := range []struct {
		name string
		src  *Source
		last *Source
		want bool
	}{
		{"A later record of the same partition follows.", &Source{Topic: "requests", Partition: 3, Offset: 101}, last, true},
		{"The same record does not follow (a redelivery).", &Source{Topic: "requests", Partition: 3, Offset: 100}, last, false},
		{"An earlier record does not follow.", &Source{Topic: "requests", Partition: 3, Offset: 99}, last, false},
		{"A record of another partition does not follow.", &Source{Topic: "requests", Partition: 4, Offset: 101}, last, false},
		{"A record of another topic does not follow.", &Source{Topic: "replayed", Partition: 3, Offset: 101}, last, false},
		{"A request without a source does not follow.", nil, last, false},
		{"Nothing follows a turn without a source.", &Source{Topic: "requests", Partition: 3, Offset: 101}, nil, false},
	} {
		if got := tc.src.follows(tc.last); got != tc.want {
			t.Errorf("%s follows = %v, want %v", tc.name, got, tc.want)
		}
	}
}
