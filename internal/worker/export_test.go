package worker

// SetCountBeforeJoin makes w believe it read n as the requests topic's
// partition count before it joined, as if the count changed around its
// first join. Call it before Run.
func SetCountBeforeJoin(w *Worker, n int) { w.countBeforeJoin.Store(int64(n)) }
