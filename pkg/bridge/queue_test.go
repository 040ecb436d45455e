package bridge

import (
	"strconv"
	"testing"
	"testing/synctest"
)

// The queue holds at most max items: the push of one more waits until the
// consumer takes, and then goes through without another take. In a synctest
// bubble, synctest.Wait returns once the pushing goroutine is blocked or done.
func TestItemQueueHoldsAtMostMaxItemsAndATakeMakesRoomForAWaitingPush(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const max = 3
		q := newItemQueue(max)
		quit := make(chan struct{})
		defer close(quit) // lets a push still waiting when the test fails return
		for i := range max {
			if !q.push(item{text: strconv.Itoa(i)}, quit) {
				t.Fatalf("push %d of %d refused", i+1, max)
			}
		}
		pushed := make(chan bool, 1)
		go func() { pushed <- q.push(item{text: "over"}, quit) }()
		synctest.Wait()
		select {
		case <-pushed:
			t.Fatalf("a push into a queue holding %d of %d items went through", max, max)
		default:
		}

		items, closed := q.take(nil)
		if len(items) != max || closed {
			t.Fatalf("took %d items (closed %v), want the %d pushed", len(items), closed, max)
		}
		synctest.Wait()
		select {
		case ok := <-pushed:
			if !ok {
				t.Fatal("the waiting push was refused")
			}
		default:
			t.Fatal("a take emptied the queue and the waiting push still waits")
		}
		q.close()
		items, closed = q.take(items)
		if len(items) != 1 || items[0].text != "over" || !closed {
			t.Fatalf("took %+v (closed %v), want the waiting push's item and the queue closed", items, closed)
		}
	})
}

// A push waiting for room gives up once quit is closed.
func TestItemQueuePushGivesUpOnQuit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := newItemQueue(1)
		quit := make(chan struct{})
		if !q.push(item{}, quit) {
			t.Fatal("the first push was refused")
		}
		pushed := make(chan bool, 1)
		go func() { pushed <- q.push(item{}, quit) }()
		synctest.Wait()
		close(quit)
		if <-pushed {
			t.Fatal("a push into a full queue went through after quit")
		}
	})
}
