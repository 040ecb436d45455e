// Package topic names Turnpike's Kafka topics and creates them at start.
//
// Every function is safe for concurrent use.
package topic
