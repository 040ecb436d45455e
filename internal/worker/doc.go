// Package worker consumes the requests topic in a consumer group and runs
// each request: it loads the history window, runs the eino agent, and hands
// the agent's events to the bridge, which streams tokens to the stream topic
// and commits the turn. A record's offset is committed only once its side
// effects are durable, so a crash re-delivers, and re-delivery is idempotent
// per request id.
//
// Ordering: all records of a conversation share a key and so a partition,
// its home (topic.Home); each partition is processed in topic order. A
// record a producer placed in another partition is copied to its home and
// committed, and runs there (home.go).
//
// Agents (agent.go, agentconfig.go, tools.go): the agent is one eino
// ChatModelAgent, or a supervisor with sub-agents, built from the agent
// configuration file (AgentConfig) with the built-in tools current_time and
// ask_user. An interrupted run (ask_user) is checkpointed in the history
// store; a request record with resume_of resumes it (resume.go), in the
// conversation's order like any request. compact.go condenses long windows
// into a stored summary (context compaction). AgentConfig and its
// functions are plain data and safe for concurrent use.
//
// Goroutines: Run owns everything it starts — per consumer-group
// generation, one goroutine that reads the requests topic's partition count
// and watches it, and one per assigned partition (all started through the
// generation, so none outlives it) plus the bridge's two per run — and waits for all
// of them before it returns. A Worker is used by one Run at a time.
package worker
