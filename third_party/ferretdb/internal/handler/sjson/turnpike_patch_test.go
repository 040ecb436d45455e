package sjson

// Turnpike's test of its patch 7 (decodeValue in place of a json.Decoder
// for every value; TURNPIKE_PATCHES.md): every type still reads back as it
// was written, and what the decoder refused is still refused.

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-dev/turnpike/third_party/ferretdb/internal/types"
	"github.com/turnpike-dev/turnpike/third_party/ferretdb/internal/util/must"
)

func TestEveryTypeReadsBackAsWritten(t *testing.T) {
	nested, err := types.NewDocument("k", "v", "n", int32(-7))
	if err != nil {
		t.Fatal(err)
	}
	arr, err := types.NewArray("a", int64(1), 2.5, false, nested)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := types.NewDocument(
		"_id", "acme/ann/c#000000000001",
		"text", "héllo \"quoted\" \\ \u2028 \U0001F600",
		"empty", "",
		"i32", int32(math.MinInt32),
		"i64", int64(math.MaxInt64),
		"double", 0.1,
		"bool", true,
		"at", time.UnixMilli(1764633600123).UTC(),
		"oid", types.ObjectID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
		"bin", types.Binary{Subtype: types.BinaryUUID, B: []byte{0, 1, 2, 255}},
		"ts", types.Timestamp(1<<40|3),
		"re", types.Regex{Pattern: "^a.c$", Options: "i"},
		"null", types.Null,
		"doc", nested,
		"emptyDoc", types.MakeDocument(0),
		"arr", arr,
		"emptyArr", types.MakeArray(0),
	)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(b)
	if err != nil {
		t.Fatalf("Unmarshal(%s): %v", b, err)
	}
	if !types.Identical(doc, got) {
		t.Fatalf("read back\n%v\nwant\n%v", got, doc)
	}
}

func TestAValueWithAnythingAfterItIsRefused(t *testing.T) {
	doc, err := types.NewDocument("s", "x", "n", int64(1))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	good := string(b)
	for name, bad := range map[string]string{
		"A second value after the document.": good + "{}",
		"White space after the document.":    good + " ",
		"A newline after the document.":      good + "\n",
		"A string where an int64 belongs.":   strings.Replace(good, `"n":1`, `"n":"1"`, 1),
		"A fraction where an int64 belongs.": strings.Replace(good, `"n":1`, `"n":1.5`, 1),
		"Two values where one belongs.":      strings.Replace(good, `"s":"x"`, `"s":"x" "y"`, 1),
		"Not JSON.":                          good[:len(good)-1],
	} {
		if good == bad {
			t.Fatalf("%s: the case did not change the document %s", name, good)
		}
		if _, err := Unmarshal([]byte(bad)); err == nil {
			t.Errorf("%s: Unmarshal(%s) succeeded", name, bad)
		}
	}
	if _, err := Unmarshal(b); err != nil {
		t.Fatalf("the unchanged document %s: %v", b, err)
	}
}

// BenchmarkUnmarshalTurn reads a document shaped like one of Turnpike's
// turns (the window read decodes several per run).
func BenchmarkUnmarshalTurn(b *testing.B) {
	assistant, err := types.NewDocument("text", strings.Repeat("w1 ", 50), "status", "complete", "agent", "assistant",
		"usage", must.NotFail(types.NewDocument("prompt", int64(120), "completion", int64(50), "total", int64(170))))
	if err != nil {
		b.Fatal(err)
	}
	doc, err := types.NewDocument("_id", "acme/ann/c#000000000007", "v", int32(2), "seq", int64(13), "request_id", "r-0123456789",
		"user", "m7 [[tokens:50]][[delay:20ms]]", "assistant", assistant, "at", time.UnixMilli(1764633600123).UTC(),
		"source", must.NotFail(types.NewDocument("topic", "turnpike.requests", "partition", int32(3), "offset", int64(12345))))
	if err != nil {
		b.Fatal(err)
	}
	data, err := Marshal(doc)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Unmarshal(data); err != nil {
			b.Fatal(err)
		}
	}
}
