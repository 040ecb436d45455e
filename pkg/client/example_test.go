package client_test

import (
	"fmt"

	"github.com/turnpike-dev/turnpike/pkg/client"
)

// A FrameView decodes frames lightly into reused memory; with Conn.NextRaw
// reading into a reused buffer, a high-rate reader allocates nothing per
// frame. Its byte slices are only valid until the next Decode.
func ExampleFrameView() {
	var v client.FrameView
	for _, frame := range []string{
		`{"type":"subscribed","conversation":"c1"}`,
		`{"type":"token","conversation":"c1","request_id":"r-1","run_id":"u-1","seq":2,"ts":1767225600000000000,"delta":"w1 \"w2\" ","agent":"assistant","role":"assistant","cursor":"3-17"}`,
		`{"type":"run.completed","conversation":"c1","request_id":"r-1","run_id":"u-1","seq":3,"ts":1767225600000000001,"status":"complete","cursor":"3-18"}`,
	} {
		if err := v.Decode([]byte(frame)); err != nil {
			fmt.Println(err)
			continue
		}
		switch {
		case v.Type == client.FrameSubscribed:
			fmt.Printf("subscribed to %s\n", v.Conversation)
		case v.IsEvent():
			fmt.Printf("%s %s seq %d delta %q status %q\n", v.Type, v.RequestID, v.Seq, v.Delta, v.Status)
		}
	}
	// Output:
	// subscribed to c1
	// token r-1 seq 2 delta "w1 \"w2\" " status ""
	// run.completed r-1 seq 3 delta "" status "complete"
}
