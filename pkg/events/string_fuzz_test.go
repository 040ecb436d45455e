package events

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzAppendString checks the hand-written string encoder against
// encoding/json: the output is always valid JSON, decodes to the input with
// each invalid UTF-8 byte replaced by U+FFFD, and is byte for byte what an
// encoding/json Encoder without HTML escaping writes.
func FuzzAppendString(f *testing.F) {
	for _, seed := range []string{
		"", "echo ", "hello world", `"quoted" \back\slash/`, "\n\r\t\b\f\x00\x01\x1f\x7f",
		"<script>&</script>", "\u2028\u2029", "é中😀\U0010FFFF\uFFFD", "\xff", "a\xe2\x82", "\xed\xa0\x80", "\xf4\x90\x80\x80",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		prefix := []byte("prefix:")
		out := appendString(append([]byte(nil), prefix...), s)
		if !bytes.HasPrefix(out, prefix) {
			t.Fatalf("appendString overwrote dst: %q", out)
		}
		out = out[len(prefix):]
		if !json.Valid(out) {
			t.Fatalf("appendString(%q) = %q, not valid JSON", s, out)
		}
		if !utf8.Valid(out) {
			t.Fatalf("appendString(%q) = %q, not valid UTF-8", s, out)
		}
		var got string
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("json.Unmarshal(%q): %v", out, err)
		}
		var want bytes.Buffer
		for i := 0; i < len(s); {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				want.WriteRune(utf8.RuneError)
			} else {
				want.WriteString(s[i : i+size])
			}
			i += size
		}
		if got != want.String() {
			t.Fatalf("appendString(%q) decodes to %q, want %q", s, got, want.String())
		}
		var std bytes.Buffer
		enc := json.NewEncoder(&std)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if std := bytes.TrimSuffix(std.Bytes(), []byte("\n")); !bytes.Equal(out, std) {
			t.Fatalf("appendString(%q) = %q, encoding/json writes %q", s, out, std)
		}
	})
}
